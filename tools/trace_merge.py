#!/usr/bin/env python3
"""Merge a `zernel-scheduler trace` file with a PyTorch profiler (Kineto) trace into one
Chrome trace-event file, on one time line, for Perfetto or chrome://tracing (docs/trace.md).

    tools/trace_merge.py zernel.json pytorch.pt.trace.json -o merged.json

The zernel trace must be written with --clock realtime (the default): its "ts" are microseconds
since the Unix epoch. A Kineto trace either stamps the same way (older PyTorch) or stamps
relative to "baseTimeNanoseconds" (newer PyTorch: epoch ns = baseTimeNanoseconds + ts * 1000).
The merged file keeps the PyTorch trace's top-level fields and time base, and shifts the zernel
events onto it. Files may be gzip-compressed (.gz). Exit 2 with a message on bad input.
"""
import argparse
import gzip
import json
import sys


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
    a = ap.parse_args()
    z = load(a.zernel)
    t = load(a.pytorch)
    clock = str(z.get("otherData", {}).get("clock", ""))
    if "REALTIME" not in clock:
        die(f"{a.zernel}: not written with --clock realtime (clock: {clock or '?'})")
    base_ns = t.get("baseTimeNanoseconds", 0)
    if not isinstance(base_ns, int) or base_ns < 0:
        die(f"{a.pytorch}: \"baseTimeNanoseconds\" is not a non-negative integer")
    # The whole microseconds first (exact: epoch microseconds as doubles are exact integers),
    # then the rest: base_ns / 1000.0 as one double would be off by up to 0.25 us.
    whole_us, rest_ns = divmod(base_ns, 1000)
    merged = dict(t)
    events = list(t["traceEvents"])
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
