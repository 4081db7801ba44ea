#!/usr/bin/env python3
"""Time-weighted phase accuracy and reaction time of a phase detector.

    bench/phase_accuracy.py TRUTH.jsonl PHASES.jsonl [--require KEY=VALUE,...] [--threads]
                            [--min-phase-ms MS] [--label TEXT] [--quiet]

TRUTH.jsonl is a truth log (zernel-workload --truth-log, tools/torch_job.py --truth-log) and
PHASES.jsonl the scheduler's --phase-log; both are JSON lines {"t_ns", "pid", "phase"} on
CLOCK_MONOTONIC. Every process of the truth log is scored from its first line to its last (its
exit): before a process's first line in the phase log, the scheduler holds it as Unknown.

  * accuracy: the share of the truth's time in which the committed phase equals the true one,
    per true phase and over all phases (Unknown included: a worker's idle time is Unknown).
  * reaction: for every true change (all truth lines but a process's first and last), the time
    from the change to the first phase-log line that shows the new phase; 0 when the committed
    phase already is the new one at the change. A change whose phase is not shown before the
    next true change is "missed" and has no reaction time. p50, p99 (nearest rank) and max over
    the changes not missed; "already" counts the changes with reaction 0 (a detector stuck in
    one phase is "already" right whenever the truth comes back to it: read p50 with it).

Figures are given per process, per role and in total. A process whose truth has any phase other
than DataLoading and Unknown is a rank's main process ("rank"), the others are DataLoader workers
("worker"). Phase-log lines carrying "tid" (per-thread lines of an event-driven detector) are
scored only when tid == pid (the process's own line); --threads scores every line under its tid
instead (for a truth log that has per-thread lines too).

Prints a table (one row per process, role and the total) and, last, one JSON line with the figures.
--require takes comma-separated thresholds, each KEY=VALUE, optionally prefixed by a role
("rank.accuracy=0.95"):
  accuracy=F         overall accuracy at least F (a fraction, 0..1)
  phase_accuracy=F   every true phase with at least --min-phase-ms of truth at least F
  PHASE=F            that phase (DataLoading, GpuCompute, ...) at least F, when it has truth
  p50_ms=X, p99_ms=X, max_ms=X   reaction percentiles at most X ms
  missed=N           at most N changes missed
Exit status: 0, or 1 when a threshold is missed (each miss is named on stderr), 2 on bad input.
"""
import argparse
import json
import math
import sys
from collections import defaultdict

PHASES = ("DataLoading", "GpuCompute", "NcclCollective", "OptimizerStep", "Unknown")
ROLES = ("rank", "worker")
KEYS = ("accuracy", "phase_accuracy", "p50_ms", "p99_ms", "max_ms", "missed")


class InputError(Exception):
    pass


def load(path, threads):
    """{key: [(t_ns, phase), ...]} sorted by time, keyed by pid (or tid with --threads)."""
    rows = defaultdict(list)
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None
    with f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                o = json.loads(line)
                t, pid, phase = o["t_ns"], o["pid"], o["phase"]
            except (ValueError, KeyError, TypeError) as e:
                raise InputError(f"{path}:{n}: not a phase line ({e}): {line[:80]}") from None
            if not isinstance(t, int) or not isinstance(pid, int) or t < 0 or pid <= 0:
                raise InputError(f"{path}:{n}: t_ns and pid must be positive integers: {line[:80]}")
            if phase not in PHASES:
                raise InputError(f"{path}:{n}: unknown phase {phase!r}"
                                 f" (valid: {', '.join(PHASES)})")
            tid = o.get("tid")
            if tid is not None and not isinstance(tid, int):
                raise InputError(f"{path}:{n}: tid must be an integer: {line[:80]}")
            if threads and tid is not None:
                key = tid
            elif tid is None or tid == pid:
                key = pid
            else:
                continue  # another thread's line: not the process's phase
            rows[key].append((t, phase))
    for v in rows.values():
        v.sort(key=lambda c: c[0])  # stable: equal stamps keep their order in the file
    return rows


def nearest_rank(sorted_values, q):
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


class Tally:
    def __init__(self):
        self.truth_ns = defaultdict(int)  # per true phase
        self.right_ns = defaultdict(int)
        self.reactions_ns = []
        self.changes = 0
        self.missed = 0
        self.already = 0  # changes whose phase was committed already (reaction 0)

    def add(self, other):
        for p, v in other.truth_ns.items():
            self.truth_ns[p] += v
        for p, v in other.right_ns.items():
            self.right_ns[p] += v
        self.reactions_ns += other.reactions_ns
        self.changes += other.changes
        self.missed += other.missed
        self.already += other.already

    def figures(self):
        total = sum(self.truth_ns.values())
        right = sum(self.right_ns.values())
        r = sorted(self.reactions_ns)

        def ms(v):
            return None if v is None else round(v / 1e6, 3)

        return {
            "accuracy_pct": round(100.0 * right / total, 2) if total else None,
            "truth_s": round(total / 1e9, 3),
            "phases": {p: {"truth_s": round(self.truth_ns[p] / 1e9, 3),
                           "accuracy_pct": round(100.0 * self.right_ns[p] / self.truth_ns[p], 2)}
                       for p in PHASES if self.truth_ns[p] > 0},
            "reaction_ms": {"p50": ms(nearest_rank(r, 0.50)), "p99": ms(nearest_rank(r, 0.99)),
                            "max": ms(r[-1] if r else None), "changes": self.changes,
                            "already": self.already, "missed": self.missed},
        }


def score_process(truth, detected):
    """Tally of one process: truth and detected are sorted [(t_ns, phase)]."""
    tally = Tally()
    det = detected

    def committed_at(t):
        # The committed phase is a step function: the last detected line with stamp <= t,
        # Unknown before the first one.
        lo, hi = 0, len(det)
        while lo < hi:
            mid = (lo + hi) // 2
            if det[mid][0] <= t:
                lo = mid + 1
            else:
                hi = mid
        return det[lo - 1][1] if lo > 0 else "Unknown"

    for k in range(len(truth) - 1):
        t0, phase = truth[k]
        t1 = truth[k + 1][0]
        if t1 <= t0:
            continue
        tally.truth_ns[phase] += t1 - t0
        # Time-weighted agreement: walk the detected changes inside [t0, t1).
        cur_t, cur_p = t0, committed_at(t0)
        for dt, dp in det:
            if dt <= t0:
                continue
            if dt >= t1:
                break
            if cur_p == phase:
                tally.right_ns[phase] += dt - cur_t
            cur_t, cur_p = dt, dp
        if cur_p == phase:
            tally.right_ns[phase] += t1 - cur_t
        # Reaction: not for the process's first line (its start).
        if k == 0:
            continue
        tally.changes += 1
        if committed_at(t0) == phase:
            tally.reactions_ns.append(0)
            tally.already += 1
            continue
        first = next((dt for dt, dp in det if t0 < dt < t1 and dp == phase), None)
        if first is None:
            tally.missed += 1
        else:
            tally.reactions_ns.append(first - t0)
    return tally


def parse_require(text):
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"--require: {item!r} is not KEY=VALUE")
        role, dot, name = key.rpartition(".")
        if dot and role not in ROLES:
            raise InputError(f"--require: unknown role {role!r} in {item!r} (valid: rank, worker)")
        if name not in KEYS and name not in PHASES:
            raise InputError(f"--require: unknown key {name!r} "
                             f"(valid: {', '.join(KEYS + PHASES)})")
        try:
            v = float(value)
        except ValueError:
            raise InputError(f"--require: {item!r}: {value!r} is not a number") from None
        if (name in ("accuracy", "phase_accuracy") or name in PHASES) and not 0.0 <= v <= 1.0:
            raise InputError(f"--require: {item!r}: accuracy is a fraction between 0 and 1")
        if v < 0 or math.isnan(v):
            raise InputError(f"--require: {item!r}: must not be negative")
        out.append((role or None, name, v))
    return out


def check(req, fig, min_phase_s):
    """The misses of `fig` (a figures() dict) against one requirement, as sentences."""
    _, name, v = req
    r = fig["reaction_ms"]
    if name == "accuracy":
        a = fig["accuracy_pct"]
        return [] if a is not None and a >= 100 * v else [f"accuracy {a} % < {100 * v:g} %"]
    if name == "phase_accuracy":
        return [f"{p} accuracy {f['accuracy_pct']} % < {100 * v:g} %"
                for p, f in fig["phases"].items()
                if f["truth_s"] >= min_phase_s and f["accuracy_pct"] < 100 * v]
    if name in PHASES:
        f = fig["phases"].get(name)
        if f is None or f["truth_s"] < min_phase_s:
            return []
        return [] if f["accuracy_pct"] >= 100 * v else [
            f"{name} accuracy {f['accuracy_pct']} % < {100 * v:g} %"]
    if name == "missed":
        return [] if r["missed"] <= v else [f"{r['missed']} changes missed > {v:g}"]
    key = name[:-3]  # p50, p99, max
    got = r[key]
    if got is None:
        return [f"reaction {key}: no change was reacted to"]
    return [] if got <= v else [f"reaction {key} {got} ms > {v:g} ms"]


def fmt(v, unit=""):
    return "-" if v is None else f"{v:.1f}{unit}"


def row(name, fig):
    cells = [f"{name:<14}", f"{fig['truth_s']:>7.1f}", f"{fmt(fig['accuracy_pct'], '%'):>7}"]
    for p in PHASES:
        f = fig["phases"].get(p)
        cells.append(f"{fmt(f['accuracy_pct'] if f else None, '%'):>7}")
    r = fig["reaction_ms"]
    cells += [f"{fmt(r['p50']):>7}", f"{fmt(r['p99']):>7}", f"{fmt(r['max']):>7}",
              f"{r['changes']:>6}", f"{r['already']:>6}", f"{r['missed']:>6}"]
    return " ".join(cells)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("truth", help="truth log (JSON lines)")
    ap.add_argument("detected", help="the scheduler's --phase-log (JSON lines)")
    ap.add_argument("--require", default="",
                    help="thresholds, e.g. accuracy=0.95,p99_ms=2,worker.phase_accuracy=0.9")
    ap.add_argument("--threads", action="store_true",
                    help="score per-thread lines (\"tid\") under their tid, not ignore them")
    ap.add_argument("--min-phase-ms", type=float, default=100.0,
                    help="phase_accuracy ignores phases with less truth time than this (100)")
    ap.add_argument("--label", default="", help="added to the JSON line as \"label\"")
    ap.add_argument("--quiet", action="store_true", help="only the JSON line")
    a = ap.parse_args()
    try:
        reqs = parse_require(a.require)
        truth = load(a.truth, a.threads)
        det = load(a.detected, a.threads)
    except InputError as e:
        print(f"phase_accuracy.py: {e}", file=sys.stderr)
        return 2
    truth = {k: v for k, v in truth.items() if len(v) >= 2}
    if not truth:
        print(f"phase_accuracy.py: {a.truth}: no process with at least two lines", file=sys.stderr)
        return 2

    total = Tally()
    by_role = {r: Tally() for r in ROLES}
    procs = []
    for pid, changes in sorted(truth.items()):
        tally = score_process(changes, det.get(pid, []))
        role = "rank" if any(p not in ("DataLoading", "Unknown") for _, p in changes) else "worker"
        by_role[role].add(tally)
        total.add(tally)
        procs.append((pid, role, tally.figures()))

    out = total.figures()
    out["roles"] = {r: by_role[r].figures() for r in ROLES if by_role[r].truth_ns}
    out["processes"] = [{"pid": pid, "role": role, **fig} for pid, role, fig in procs]
    if a.label:
        out = {"label": a.label, **out}

    if not a.quiet:
        head = (f"{'process':<14} {'truth_s':>7} {'acc':>7} " +
                " ".join(f"{p[:7]:>7}" for p in PHASES) +
                f" {'p50_ms':>7} {'p99_ms':>7} {'max_ms':>7} {'chg':>6} {'at_0':>6} {'missed':>6}")
        print(head)
        for pid, role, fig in procs:
            print(row(f"{pid} {role}", fig))
        for r, fig in out["roles"].items():
            print(row(r, fig))
        print(row("all", out))
    print(json.dumps(out, separators=(",", ":")))

    misses = []
    for req in reqs:
        role = req[0]
        fig = out if role is None else out["roles"].get(role)
        label = "all" if role is None else role
        if fig is None:
            misses.append(f"{label}: no process of this role in the truth log")
            continue
        misses += [f"{label}: {m}" for m in check(req, fig, a.min_phase_ms / 1e3)]
    for m in misses:
        print(f"phase_accuracy.py: below target: {m}", file=sys.stderr)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
