#!/usr/bin/env python3
"""Time-weighted phase accuracy and reaction time of a phase detector, per process or per thread.

    bench/phase_accuracy.py TRUTH.jsonl PHASES.jsonl [--require KEY=VALUE,...] [--threads]
                            [--min-phase-ms MS] [--label TEXT] [--quiet]

TRUTH.jsonl is a truth log (zernel-workload --truth-log, tools/torch_job.py --truth-log) and
PHASES.jsonl the scheduler's --phase-log (with --phase-log-threads for per-thread lines); both are
JSON lines {"t_ns", "pid", "phase"} on CLOCK_MONOTONIC, optionally with "tid" (the thread) and, in
a truth log, "role" (what the thread is). Every process (or thread) of the truth log is scored from
its first line to its last (its exit): before its first line in the phase log, the scheduler holds
it as Unknown.

  * accuracy: the share of the truth's time in which the committed phase equals the true one,
    per true phase and over all phases (Unknown included: a worker's idle time is Unknown, and a
    helper thread's whole life is: it does no phase's work).
  * boosted: the share of the time the truth says Unknown (no phase) in which the committed phase
    was a boosted one, DataLoading, NcclCollective or OptimizerStep (those whose priority and
    preemption a thread should not get for nothing). For a helper thread that is the share of its
    life spent boosted.
  * reaction: for every true change (all truth lines but a first and a last), the time from the
    change to the first phase-log line that shows the new phase; 0 when the committed phase
    already is the new one at the change. A change whose phase is not shown before the next true
    change is "missed" and has no reaction time. p50, p99 (nearest rank) and max over the changes
    not missed; "already" counts the changes with reaction 0 (a detector stuck in one phase is
    "already" right whenever the truth comes back to it: read p50 with it).

Per process (default): a phase-log or truth line with "tid" counts only when tid == pid (the
process's own line: its main thread's). A process's role is its main thread's truth "role" ("main"
gives "rank"), else a process whose truth has any phase other than DataLoading and Unknown is a
rank's main process ("rank"), the others are DataLoader workers ("worker").

Per thread (--threads): every line is scored under its tid (a line without one under its pid). A
thread's role is its truth "role": main (the thread that launches and synchronises), worker (a
DataLoader worker process's thread), pin_memory, nccl_proxy (threads that do a phase's work by
what they do), or a helper with no phase: reader, logger, checkpoint, metrics, other. Without a
"role", tid == pid gives main or worker as above, another thread "other". The role "helper" adds up
every helper role. Threads that the phase log names in a scored process but the truth does not are
listed under "unnamed_threads", with the time they were logged in a boosted phase up to the end of
their process's truth (an upper bound: the log does not say when a thread exited).

Prints a table (one row per process or thread, role and the total) and, last, one JSON line with
the figures. --require takes comma-separated thresholds, each KEY=VALUE, optionally prefixed by a
role ("rank.accuracy=0.95", "helper.boosted=0.05"):
  accuracy=F         overall accuracy at least F (a fraction, 0..1)
  phase_accuracy=F   every true phase with at least --min-phase-ms of truth at least F
  PHASE=F            that phase (DataLoading, GpuCompute, ...) at least F, when it has truth
  boosted=F          boosted share at most F (a fraction), when there is Unknown truth
  p50_ms=X, p99_ms=X, max_ms=X   reaction percentiles at most X ms
  missed=N           at most N changes missed
A requirement on a role the truth log has no process or thread of is a miss. Exit status: 0, or 1
when a threshold is missed (each miss is named on stderr), 2 on bad input.
"""
import argparse
import json
import math
import sys
from collections import defaultdict

PHASES = ("DataLoading", "GpuCompute", "NcclCollective", "OptimizerStep", "Unknown")
BOOSTED = ("DataLoading", "NcclCollective", "OptimizerStep")
PROCESS_ROLES = ("rank", "worker")
PHASE_THREAD_ROLES = ("main", "worker", "pin_memory", "nccl_proxy")
HELPER_ROLES = ("reader", "logger", "checkpoint", "metrics", "other")
THREAD_ROLES = PHASE_THREAD_ROLES + HELPER_ROLES
ROLES = PROCESS_ROLES + tuple(r for r in THREAD_ROLES if r != "worker") + ("helper",)
KEYS = ("accuracy", "phase_accuracy", "boosted", "p50_ms", "p99_ms", "max_ms", "missed")


class InputError(Exception):
    pass


class Log:
    """One log: {key: [(t_ns, phase), ...]} sorted by time, keyed by pid (or by tid with
    threads), with each key's process, truth role ("" when the lines carry none) and whether it is
    a process's own line (tid == pid, or no tid)."""

    def __init__(self):
        self.rows = defaultdict(list)
        self.pid_of = {}
        self.role_of = {}


def load(path, threads):
    log = Log()
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
            if tid is not None and (not isinstance(tid, int) or tid <= 0):
                raise InputError(f"{path}:{n}: tid must be a positive integer: {line[:80]}")
            role = o.get("role", "")
            if role and role not in THREAD_ROLES:
                raise InputError(f"{path}:{n}: unknown role {role!r}"
                                 f" (valid: {', '.join(THREAD_ROLES)})")
            if threads and tid is not None:
                key = tid
            elif tid is None or tid == pid:
                key = pid
            else:
                continue  # another thread's line: not the process's phase
            if log.pid_of.setdefault(key, pid) != pid:
                raise InputError(f"{path}:{n}: thread {key} also appears under pid"
                                 f" {log.pid_of[key]}: {line[:80]}")
            if role:
                log.role_of.setdefault(key, role)
            log.rows[key].append((t, phase))
    for v in log.rows.values():
        v.sort(key=lambda c: c[0])  # stable: equal stamps keep their order in the file
    return log


def nearest_rank(sorted_values, q):
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


class Tally:
    def __init__(self):
        self.truth_ns = defaultdict(int)  # per true phase
        self.right_ns = defaultdict(int)
        self.boosted_ns = 0  # time the truth says Unknown and the detector a boosted phase
        self.reactions_ns = []
        self.changes = 0
        self.missed = 0
        self.already = 0  # changes whose phase was committed already (reaction 0)
        self.count = 0  # processes or threads added up

    def add(self, other):
        for p, v in other.truth_ns.items():
            self.truth_ns[p] += v
        for p, v in other.right_ns.items():
            self.right_ns[p] += v
        self.boosted_ns += other.boosted_ns
        self.reactions_ns += other.reactions_ns
        self.changes += other.changes
        self.missed += other.missed
        self.already += other.already
        self.count += max(1, other.count)

    def figures(self):
        total = sum(self.truth_ns.values())
        right = sum(self.right_ns.values())
        unknown = self.truth_ns["Unknown"]
        r = sorted(self.reactions_ns)

        def ms(v):
            return None if v is None else round(v / 1e6, 3)

        return {
            "accuracy_pct": round(100.0 * right / total, 2) if total else None,
            "truth_s": round(total / 1e9, 3),
            "boosted_pct": round(100.0 * self.boosted_ns / unknown, 2) if unknown else None,
            "boosted_s": round(self.boosted_ns / 1e9, 3),
            "phases": {p: {"truth_s": round(self.truth_ns[p] / 1e9, 3),
                           "accuracy_pct": round(100.0 * self.right_ns[p] / self.truth_ns[p], 2)}
                       for p in PHASES if self.truth_ns[p] > 0},
            "reaction_ms": {"p50": ms(nearest_rank(r, 0.50)), "p99": ms(nearest_rank(r, 0.99)),
                            "max": ms(r[-1] if r else None), "changes": self.changes,
                            "already": self.already, "missed": self.missed},
        }


def committed_at(det, t):
    """The committed phase is a step function: the last detected line with stamp <= t, Unknown
    before the first one."""
    lo, hi = 0, len(det)
    while lo < hi:
        mid = (lo + hi) // 2
        if det[mid][0] <= t:
            lo = mid + 1
        else:
            hi = mid
    return det[lo - 1][1] if lo > 0 else "Unknown"


def spans(det, t0, t1):
    """The detected phases over [t0, t1): [(start, end, phase), ...]."""
    out = []
    cur_t, cur_p = t0, committed_at(det, t0)
    for dt, dp in det:
        if dt <= t0:
            continue
        if dt >= t1:
            break
        out.append((cur_t, dt, cur_p))
        cur_t, cur_p = dt, dp
    out.append((cur_t, t1, cur_p))
    return out


def score(truth, det):
    """Tally of one process or thread: truth and det are sorted [(t_ns, phase)]."""
    tally = Tally()
    for k in range(len(truth) - 1):
        t0, phase = truth[k]
        t1 = truth[k + 1][0]
        if t1 <= t0:
            continue
        tally.truth_ns[phase] += t1 - t0
        for a, b, p in spans(det, t0, t1):
            if p == phase:
                tally.right_ns[phase] += b - a
            elif phase == "Unknown" and p in BOOSTED:
                tally.boosted_ns += b - a
        # Reaction: not for the first line (the start).
        if k == 0:
            continue
        tally.changes += 1
        if committed_at(det, t0) == phase:
            tally.reactions_ns.append(0)
            tally.already += 1
            continue
        first = next((dt for dt, dp in det if t0 < dt < t1 and dp == phase), None)
        if first is None:
            tally.missed += 1
        else:
            tally.reactions_ns.append(first - t0)
    return tally


def inferred_role(changes, own, threads):
    """The role of a key whose truth lines carry none."""
    rank_like = any(p not in ("DataLoading", "Unknown") for _, p in changes)
    if not threads:
        return "rank" if rank_like else "worker"
    if not own:
        return "other"
    return "main" if rank_like else "worker"


def parse_require(text):
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"--require: {item!r} is not KEY=VALUE")
        role, dot, name = key.rpartition(".")
        if dot and role not in ROLES:
            raise InputError(f"--require: unknown role {role!r} in {item!r}"
                             f" (valid: {', '.join(ROLES)})")
        if name not in KEYS and name not in PHASES:
            raise InputError(f"--require: unknown key {name!r} "
                             f"(valid: {', '.join(KEYS + PHASES)})")
        try:
            v = float(value)
        except ValueError:
            raise InputError(f"--require: {item!r}: {value!r} is not a number") from None
        if (name in ("accuracy", "phase_accuracy", "boosted") or name in PHASES) and \
                not 0.0 <= v <= 1.0:
            raise InputError(f"--require: {item!r}: a share is a fraction between 0 and 1")
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
    if name == "boosted":
        b = fig["boosted_pct"]
        return [] if b is None or b <= 100 * v else [f"boosted {b} % > {100 * v:g} %"]
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
    cells = [f"{name:<22}", f"{fig['truth_s']:>7.1f}", f"{fmt(fig['accuracy_pct'], '%'):>7}"]
    for p in PHASES:
        f = fig["phases"].get(p)
        cells.append(f"{fmt(f['accuracy_pct'] if f else None, '%'):>7}")
    cells.append(f"{fmt(fig['boosted_pct'], '%'):>7}")
    r = fig["reaction_ms"]
    cells += [f"{fmt(r['p50']):>7}", f"{fmt(r['p99']):>7}", f"{fmt(r['max']):>7}",
              f"{r['changes']:>6}", f"{r['already']:>6}", f"{r['missed']:>6}"]
    return " ".join(cells)


def unnamed_threads(truth, det):
    """Threads the phase log names in a scored process that the truth does not: their boosted
    time from their first line to the end of their process's truth."""
    ends = {}
    for key, changes in truth.rows.items():
        pid = truth.pid_of[key]
        ends[pid] = max(ends.get(pid, 0), changes[-1][0])
    out = []
    for key, changes in sorted(det.rows.items()):
        pid = det.pid_of[key]
        if key in truth.rows or key == pid or pid not in ends or changes[0][0] >= ends[pid]:
            continue
        boosted = sum(b - a for a, b, p in spans(changes, changes[0][0], ends[pid])
                      if p in BOOSTED)
        out.append({"tid": key, "pid": pid, "lines": len(changes),
                    "boosted_s_at_most": round(boosted / 1e9, 3)})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("truth", help="truth log (JSON lines)")
    ap.add_argument("detected", help="the scheduler's --phase-log (JSON lines)")
    ap.add_argument("--require", default="",
                    help="thresholds, e.g. accuracy=0.95,p99_ms=2,helper.boosted=0.05")
    ap.add_argument("--threads", action="store_true",
                    help="score per thread (\"tid\" lines under their tid), by thread role")
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
    scored = {k: v for k, v in truth.rows.items() if len(v) >= 2}
    if not scored:
        print(f"phase_accuracy.py: {a.truth}: no process with at least two lines", file=sys.stderr)
        return 2

    total = Tally()
    by_role = defaultdict(Tally)
    items = []
    for key, changes in sorted(scored.items()):
        pid = truth.pid_of[key]
        tally = score(changes, det.rows.get(key, []))
        role = truth.role_of.get(key, "")
        if not a.threads:
            role = "rank" if role == "main" else role
            if role not in PROCESS_ROLES:
                role = inferred_role(changes, True, False)
        elif not role:
            role = inferred_role(changes, key == pid, True)
        by_role[role].add(tally)
        if a.threads and role in HELPER_ROLES:
            by_role["helper"].add(tally)
        total.add(tally)
        items.append((key, pid, role, tally.figures()))

    out = total.figures()
    order = ["helper"] + list(HELPER_ROLES) if a.threads else []
    order = (list(PROCESS_ROLES) if not a.threads else list(PHASE_THREAD_ROLES)) + order
    out["roles"] = {r: dict(by_role[r].figures(), count=by_role[r].count)
                    for r in order if by_role[r].truth_ns}
    if a.threads:
        out["threads"] = [{"tid": key, "pid": pid, "role": role, **fig}
                          for key, pid, role, fig in items]
        out["unnamed_threads"] = unnamed_threads(truth, det)
    else:
        out["processes"] = [{"pid": pid, "role": role, **fig} for _, pid, role, fig in items]
    if a.label:
        out = {"label": a.label, **out}

    if not a.quiet:
        what = "thread" if a.threads else "process"
        head = (f"{what:<22} {'truth_s':>7} {'acc':>7} " +
                " ".join(f"{p[:7]:>7}" for p in PHASES) + f" {'boosted':>7}" +
                f" {'p50_ms':>7} {'p99_ms':>7} {'max_ms':>7} {'chg':>6} {'at_0':>6} {'missed':>6}")
        print(head)
        for key, pid, role, fig in items:
            print(row(f"{key} {role}" if not a.threads or key == pid else
                      f"{pid}/{key} {role}", fig))
        for r, fig in out["roles"].items():
            print(row(f"{r} ({fig['count']})", fig))
        print(row("all", out))
        for u in out.get("unnamed_threads", []):
            print(f"not in the truth: thread {u['pid']}/{u['tid']}, {u['lines']} lines, boosted"
                  f" at most {u['boosted_s_at_most']} s")
    print(json.dumps(out, separators=(",", ":")))

    misses = []
    for req in reqs:
        role = req[0]
        fig = out if role is None else out["roles"].get(role)
        label = "all" if role is None else role
        if fig is None:
            misses.append(f"{label}: no {'thread' if a.threads else 'process'} of this role"
                          " in the truth log")
            continue
        misses += [f"{label}: {m}" for m in check(req, fig, a.min_phase_ms / 1e3)]
    for m in misses:
        print(f"phase_accuracy.py: below target: {m}", file=sys.stderr)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
