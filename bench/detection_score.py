#!/usr/bin/env python3
"""Scores the scheduler's --phase-log against zernel-workload's --truth-log.

For every process in the truth log (each rank's main process and each DataLoader worker):
  * a true phase interval counts as detected when the scheduler committed that phase within
    `window` of the interval's start (stability_count + 1 ticks) and still holds it then;
  * outside those windows (the first `window` of every true interval is the scheduler's grace
    time), the share of time where the committed phase differs from the truth is the
    disagreement.
Only intervals at least --min-ms long are scored (the requirement is about phases >= 600 ms).
Prints a table per process and one JSON line with the totals; exits 1 when --require is given
and a threshold is missed.
"""
import argparse
import bisect
import json
import sys
from collections import defaultdict


def load(path):
    rows = defaultdict(list)
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            o = json.loads(line)
            rows[o["pid"]].append((o["t_ns"], o["phase"]))
    for v in rows.values():
        v.sort()
    return rows


def phase_at(changes, t, default="Unknown"):
    i = bisect.bisect_right([c[0] for c in changes], t) - 1
    return changes[i][1] if i >= 0 else default


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("truth")
    ap.add_argument("detected")
    ap.add_argument("--tick-ms", type=float, default=100.0)
    ap.add_argument("--stability", type=int, default=3)
    ap.add_argument("--min-ms", type=float, default=600.0)
    ap.add_argument("--require", action="store_true",
                    help="exit 1 unless detected >= 90%% and disagreement <= 5%%")
    a = ap.parse_args()

    truth = load(a.truth)
    det = load(a.detected)
    window = (a.stability + 1) * a.tick_ms * 1e6
    total_iv = hit_iv = 0
    scored_ns = wrong_ns = 0
    print(f"{'pid':>8} {'intervals':>9} {'detected':>8} {'scored_s':>8} {'disagree':>8}")
    for pid, changes in sorted(truth.items()):
        d = det.get(pid, [])
        iv = hit = 0
        p_scored = p_wrong = 0
        for k, (start, phase) in enumerate(changes):
            end = changes[k + 1][0] if k + 1 < len(changes) else None
            if end is None:
                break  # the process's last state lasts until it exits: not an interval
            if end - start < a.min_ms * 1e6:
                continue
            iv += 1
            probe = start + window
            if phase_at(d, probe) == phase:
                hit += 1
            # Disagreement, sampled every millisecond after the grace window.
            t = probe
            step = 1_000_000
            while t < end:
                p_scored += step
                if phase_at(d, t) != phase:
                    p_wrong += step
                t += step
        total_iv += iv
        hit_iv += hit
        scored_ns += p_scored
        wrong_ns += p_wrong
        pct = 100.0 * hit / iv if iv else 100.0
        dis = 100.0 * p_wrong / p_scored if p_scored else 0.0
        print(f"{pid:>8} {iv:>9} {pct:>7.1f}% {p_scored / 1e9:>8.1f} {dis:>7.1f}%")
    detected_pct = 100.0 * hit_iv / total_iv if total_iv else 0.0
    disagree_pct = 100.0 * wrong_ns / scored_ns if scored_ns else 0.0
    print(json.dumps({"intervals": total_iv, "detected_pct": round(detected_pct, 1),
                      "disagreement_pct": round(disagree_pct, 1),
                      "scored_s": round(scored_ns / 1e9, 1)}))
    if a.require and (total_iv == 0 or detected_pct < 90.0 or disagree_pct > 5.0):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
