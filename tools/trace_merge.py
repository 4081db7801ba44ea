#!/usr/bin/env python3
"""Merge a `zernel-scheduler trace` file with a PyTorch profiler (Kineto) trace into one
Chrome trace-event file, on one time line, for Perfetto or chrome://tracing (docs/trace.md).

    tools/trace_merge.py zernel.json pytorch.pt.trace.json -o merged.json
    tools/trace_merge.py zernel.json torch.json --pytorch-start-us 1764650000123456 -o merged.json

The zernel trace must be written with --clock realtime (the default): its "ts" are microseconds
since the Unix epoch. A Kineto trace either stamps the same way (older PyTorch) or stamps
relative to "baseTimeNanoseconds" (newer PyTorch: epoch ns = baseTimeNanoseconds + ts * 1000).
A PyTorch built without Kineto (Debian's 1.13) exports a bare list stamped from the profiler's
start, with no time base in the file: --pytorch-start-us gives it (the wall clock when profiling
began, e.g. time.time_ns() // 1000 read just before entering torch.profiler.profile), and
--pytorch-pid files its events, which it puts under a process named "CPU functions", under the
job's pid.
The merged file keeps the PyTorch trace's top-level fields and time base, and shifts the zernel
events onto it. Files may be gzip-compressed (.gz). Exit 2 with a message on bad input.
"""
import argparse
import gzip
import json
import sys

# Stamps below this many microseconds (about 1973) cannot be epoch time: they count from the
# profiler's start.
EPOCH_US_MIN = 100_000_000_000_000


def die(msg):
    print(f"trace_merge: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{path}: {e}")
    if isinstance(doc, list):  # the bare array form of the format
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        die(f"{path}: not a Chrome trace (no \"traceEvents\" array)")
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("zernel", help="the zernel-scheduler trace (--clock realtime)")
    ap.add_argument("pytorch", help="the PyTorch profiler trace (export_chrome_trace)")
    ap.add_argument("-o", "--output", required=True, help="the merged trace")
    ap.add_argument("--pytorch-start-us", type=int, default=None, metavar="US",
                    help="for a PyTorch trace stamped from the profiler's start (no Kineto): the "
                         "wall clock, microseconds since the epoch, when profiling began")
    ap.add_argument("--pytorch-pid", type=int, default=None, metavar="PID",
                    help="file the PyTorch events whose pid is not a number (a trace without "
                         "Kineto: \"CPU functions\") under this process")
    a = ap.parse_args()
    if a.pytorch_pid is not None and a.pytorch_pid <= 0:
        die(f"--pytorch-pid {a.pytorch_pid}: not a process id")
    if a.pytorch_start_us is not None and a.pytorch_start_us < EPOCH_US_MIN:
        die(f"--pytorch-start-us {a.pytorch_start_us}: not microseconds since the epoch")
    z = load(a.zernel)
    t = load(a.pytorch)
    clock = str(z.get("otherData", {}).get("clock", ""))
    if "REALTIME" not in clock:
        die(f"{a.zernel}: not written with --clock realtime (clock: {clock or '?'})")
    base_ns = t.get("baseTimeNanoseconds", 0)
    if not isinstance(base_ns, int) or base_ns < 0:
        die(f"{a.pytorch}: \"baseTimeNanoseconds\" is not a non-negative integer")
    stamps = [e["ts"] for e in t["traceEvents"]
              if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    relative = not base_ns and stamps and max(stamps) < EPOCH_US_MIN
    if a.pytorch_start_us is not None:
        if base_ns or not relative:
            die(f"{a.pytorch}: has its own time base; --pytorch-start-us is for traces stamped "
                "from the profiler's start")
        base_ns = a.pytorch_start_us * 1000
        t = dict(t, baseTimeNanoseconds=base_ns)
    elif relative:
        die(f"{a.pytorch}: stamped from the profiler's start (a PyTorch without Kineto), with no "
            "time base: give --pytorch-start-us, the wall clock when profiling began")
    # The whole microseconds first (exact: epoch microseconds as doubles are exact integers),
    # then the rest: base_ns / 1000.0 as one double would be off by up to 0.25 us.
    whole_us, rest_ns = divmod(base_ns, 1000)
    merged = dict(t)
    events = list(t["traceEvents"])
    if a.pytorch_pid is not None:
        events = [dict(e, pid=a.pytorch_pid)
                  if isinstance(e, dict) and "pid" in e and not isinstance(e["pid"], int) else e
                  for e in events]
    for e in z["traceEvents"]:
        if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)):
            e = dict(e, ts=(e["ts"] - whole_us) - rest_ns / 1000.0)
        events.append(e)
    merged["traceEvents"] = events
    try:
        with open(a.output, "w", encoding="utf-8") as f:
            json.dump(merged, f)
    except OSError as e:
        die(f"{a.output}: {e}")
    print(f"{a.output}: {len(t['traceEvents'])} PyTorch + {len(z['traceEvents'])} zernel events"
          f" (zernel shifted by {base_ns // 1000} us)")


if __name__ == "__main__":
    main()
