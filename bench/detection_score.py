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
and a threshold is missed (overall, or with --roles for either role).
--roles adds the totals of the two roles: a process whose truth has any phase besides DataLoading
and Unknown is a rank's main process ("rank"), the others are DataLoader workers ("worker").
--detail prints every scored interval: its phase, length, and when the scheduler first committed
that phase after the interval's start ("late_ms"; "-" when not within the interval).
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
    ap.add_argument("--roles", action="store_true", help="also print totals per role")
    ap.add_argument("--detail", action="store_true", help="print every scored interval")
    ap.add_argument("--require", action="store_true",
                    help="exit 1 unless detected >= 90%% and disagreement <= 5%%")
    a = ap.parse_args()

    truth = load(a.truth)
    det = load(a.detected)
    window = (a.stability + 1) * a.tick_ms * 1e6
    total_iv = hit_iv = 0
    scored_ns = wrong_ns = 0
    by_role = defaultdict(lambda: [0, 0, 0, 0])  # intervals, hits, scored ns, wrong ns
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
            ok = phase_at(d, probe) == phase
            if ok:
                hit += 1
            if a.detail:
                first = next((t for t, p in d if start <= t < end and p == phase), None)
                if phase_at(d, start) == phase:
                    first = start
                late = f"{(first - start) / 1e6:.0f}" if first is not None else "-"
                print(f"  {pid:>8} {phase:<15} {(end - start) / 1e6:>7.0f} ms  late_ms {late:>5}"
                      f"  {'ok' if ok else 'MISS (' + phase_at(d, probe) + ')'}")
            # Disagreement, sampled every millisecond after the grace window.
            t = probe
            step = 1_000_000
            while t < end:
                p_scored += step
                if phase_at(d, t) != phase:
                    p_wrong += step
                t += step
        role = "rank" if any(p not in ("DataLoading", "Unknown") for _, p in changes) else "worker"
        r = by_role[role]
        r[0] += iv; r[1] += hit; r[2] += p_scored; r[3] += p_wrong
        total_iv += iv
        hit_iv += hit
        scored_ns += p_scored
        wrong_ns += p_wrong
        pct = 100.0 * hit / iv if iv else 100.0
        dis = 100.0 * p_wrong / p_scored if p_scored else 0.0
        print(f"{pid:>8} {iv:>9} {pct:>7.1f}% {p_scored / 1e9:>8.1f} {dis:>7.1f}%")
    def figures(iv, hit, scored, wrong):
        return {"intervals": iv, "detected_pct": round(100.0 * hit / iv if iv else 0.0, 1),
                "disagreement_pct": round(100.0 * wrong / scored if scored else 0.0, 1),
                "scored_s": round(scored / 1e9, 1)}

    def below(iv, hit, scored, wrong):  # on the exact figures, not the rounded ones
        return iv == 0 or 100.0 * hit < 90.0 * iv or 100.0 * wrong > 5.0 * scored

    missed = False
    if a.roles:
        for role in ("rank", "worker"):
            f = figures(*by_role[role])
            missed = missed or below(*by_role[role])
            print(f"{role:>8} {f['intervals']:>9} {f['detected_pct']:>7.1f}% {f['scored_s']:>8.1f}"
                  f" {f['disagreement_pct']:>7.1f}%")
    total = figures(total_iv, hit_iv, scored_ns, wrong_ns)
    if a.roles:
        total["roles"] = {role: figures(*by_role[role]) for role in ("rank", "worker")}
    print(json.dumps(total))
    if a.require and (missed or below(total_iv, hit_iv, scored_ns, wrong_ns)):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
