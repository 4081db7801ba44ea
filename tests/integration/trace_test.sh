#!/usr/bin/env bash
# `zernel-scheduler trace` end to end: the daemon in observe mode (emulated GPU, a private control
# socket and settings journal) with a real zernel-workload job (2 ranks x 1 DataLoader worker);
# `trace --seconds 3 --output X.json --svg X.svg` must write a Chrome trace with tracks for each
# rank's main thread and its worker, GpuCompute spans on the ranks, DataLoading spans on each rank
# that waited for a batch by the workload's truth log (one at least), DataLoading on the workers,
# decisions, the realtime clock, and an SVG that is well-formed XML. Then: --clock monotonic; a
# client that hangs up midway leaves nothing running (the next trace is not "busy"); bad input
# (--seconds 0 or 601, a symlink or FIFO as output, a directory that does not exist, no daemon)
# fails with a message and a non-zero exit, leaving no temporary file. Needs root (control
# socket, probes).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
export ZERNEL_FAKE_GPU_SHM="/zernel-trace-test-$$"
export ZERNEL_SETTINGS_JOURNAL="$tmp/run/settings.journal"
sock="$tmp/run/ctl.sock"
daemon_pid=""
wl_pid=""
cleanup() {
  [[ -n $wl_pid ]] && kill -TERM "$wl_pid" 2>/dev/null && wait "$wl_pid" 2>/dev/null
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  rm -rf "$tmp"
  rm -f "/dev/shm${ZERNEL_FAKE_GPU_SHM}"
}
trap cleanup EXIT
Z() { "$BIN/zernel-scheduler" "$@"; }

need_emulated_gpu
[[ $(id -u) -eq 0 ]] || skip "needs root (the control socket accepts only uid 0; BPF probes)"
if ! mountpoint -q /sys/kernel/tracing; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
fi

# No daemon yet: a clear error, exit 1, and no file left behind.
Z trace --seconds 1 --output "$tmp/none.json" --socket "$tmp/run/nothing.sock" > "$tmp/nod.out" 2>&1
rc=$?
check "no daemon: exit 1 (got $rc)" "[[ $rc -eq 1 ]]"
check "no daemon: says it cannot reach it" "grep -q 'cannot reach the daemon at $tmp/run/nothing.sock' $tmp/nod.out"
check "no daemon: no output or temporary file" "[[ -z \$(ls -A $tmp | grep none) ]]"

port=$(free_port)
printf '[telemetry]\nmetrics_port = %s\n' "$port" > "$tmp/config.toml"
start_daemon --backend observe --emulated-gpu --control-socket "$sock" || { summary; exit; }
wait_for 10 "[[ -S $sock ]]"
check "daemon listens on its control socket" "[[ -S $sock ]]"

# Steps of 40 ms GPU, 10 ms NCCL and 10 ms optimizer, and a worker that needs 200 ms of CPU a
# batch: each rank waits about 140 ms a step for its data, also when a busy machine stretches the
# ranks' own CPU work (with 60 ms a batch, as fast as a rank consumes, a rank found its batch
# ready and never waited, in CI), so every phase shows within 3 s.
"$BIN/zernel-workload" --emulated-gpu --ranks 2 --workers 1 --steps 200 --data-ms 200 \
  --gpu-ms 40 --nccl-ms 10 --optimizer-ms 10 --truth-log "$tmp/truth.jsonl" \
  > "$tmp/workload.json" 2> "$tmp/workload.err" &
wl_pid=$!
# Discovery finds the ranks once they hold a GPU context (gpu_poll_interval_ms).
wait_for 10 "Z status --json --socket $sock 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin); sys.exit(0 if sum(1 for t in s[\"tasks\"] if t.get(\"gpu_id\") is not None) >= 2 else 1)'"
sleep 1

Z trace --seconds 3 --output "$tmp/X.json" --svg "$tmp/X.svg" --socket "$sock" > "$tmp/trace.out" 2>&1
rc=$?
cat "$tmp/trace.out"
check "trace exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
check "trace reports what it wrote" "grep -q 'phase spans' $tmp/trace.out && grep -q 'X.svg' $tmp/trace.out"
check "no temporary files left" "[[ -z \$(ls -A $tmp | grep '^\\.X') ]]"

wl_children=$(pgrep -P "$wl_pid" | tr '\n' ' ')
python3 - "$tmp/X.json" "$wl_children" "$tmp/truth.jsonl" <<'PY' && pass || fail "the trace's tracks, spans and decisions"
import json, sys, time
doc = json.load(open(sys.argv[1]))
ranks = [int(p) for p in sys.argv[2].split()]
# The truth (zernel-workload --truth-log, CLOCK_MONOTONIC): each rank's DataLoading waits of at
# least 20 ms inside the recording.
t0, t1 = doc["otherData"]["start_monotonic_ns"], doc["otherData"]["end_monotonic_ns"]
truth = {}
for line in open(sys.argv[3]):
    r = json.loads(line)
    truth.setdefault(r["pid"], []).append((r["t_ns"], r["phase"]))
def long_waits(pid):
    rows = sorted(truth.get(pid, [])) + [(t1, None)]
    return sum(1 for (a, ph), (b, _) in zip(rows, rows[1:])
               if ph == "DataLoading" and min(b, t1) - max(a, t0) >= 20e6)
ev = doc["traceEvents"]
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
spans = {}
for e in ev:
    if e["ph"] == "X":
        assert e["dur"] > 0, e
        spans.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["dur"], e["name"]))
for key, v in spans.items():
    assert key in names, ("a span on an unnamed track", key)
    v.sort()
    for a, b in zip(v, v[1:]):
        assert a[0] + a[1] <= b[0] + 0.01, ("overlapping spans", key, a, b)
# Each rank: a main-thread track with GpuCompute and DataLoading spans.
rank_pids = [p for p in ranks if (p, p) in spans]
assert len(rank_pids) >= 2, ("rank main threads with spans", ranks, sorted(spans))
rank_phases = {p: {s[2] for s in spans[(p, p)]} for p in rank_pids}
assert all("GpuCompute" in ph for ph in rank_phases.values()), rank_phases
# The ranks step together through the collective: a rank whose worker is behind waits for its
# batch (DataLoading), its peer then waits for it in NcclCollective and may find its own batch
# ready every step. So DataLoading is required where the truth has it, on one rank at least.
waited = [p for p in rank_pids if long_waits(p)]
assert waited, ("no rank waited 20 ms for a batch in the truth", {p: truth.get(p, [])[:4] for p in rank_pids})
assert all("DataLoading" in rank_phases[p] for p in waited), (rank_phases, {p: long_waits(p) for p in rank_pids})
# The workers: processes whose parent is a rank, DataLoading on their own track.
worker_spans = [k for k in spans if k[0] not in ranks and any(s[2] == "DataLoading" for s in spans[k])]
assert worker_spans, ("no worker track with DataLoading", sorted(spans), procs)
# Decisions: instant events on main threads.
assert any(e["ph"] == "i" and e["cat"] == "decision" for e in ev), "no decision"
# Realtime microseconds, within the last minute.
ts = [e["ts"] for e in ev if e["ph"] == "X"]
now_us = time.time() * 1e6
assert all(now_us - 120e6 < t < now_us for t in ts), (min(ts), max(ts), now_us)
assert "REALTIME" in doc["otherData"]["clock"], doc["otherData"]
assert doc["otherData"]["dropped_phase_changes"] == 0, doc["otherData"]
print("trace: %d tracks, %d spans, ranks %s (waits of 20 ms or more for a batch: %s), worker tracks %s" % (len(spans), sum(map(len, spans.values())), rank_pids, [long_waits(p) for p in rank_pids], worker_spans))
PY
check "the SVG is well-formed XML" \
  "python3 -c 'import sys, xml.dom.minidom; d = xml.dom.minidom.parse(sys.argv[1]); assert d.documentElement.tagName == \"svg\"' $tmp/X.svg"
check "the SVG draws GpuCompute and DataLoading spans" \
  "grep -q '<title>GpuCompute' $tmp/X.svg && grep -q '<title>DataLoading' $tmp/X.svg"

# Beside a PyTorch profiler trace: tools/trace_merge.py puts both on one time line. A Kineto-style
# trace (newer PyTorch: ts relative to baseTimeNanoseconds) with one op 5 us after the first span.
python3 - "$tmp/X.json" "$tmp/kineto.json" <<'PY'
import json, sys
z = json.load(open(sys.argv[1]))
first = min(e["ts"] for e in z["traceEvents"] if e["ph"] == "X" and e.get("cat") == "phase")
# Epoch microseconds as a double are exact to 0.25 us only: the base is built from whole
# microseconds (exact), the op's offset from first's fraction.
base_ns = int(first) * 1000 - 1_000_000_000
op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
      "ts": (first - int(first)) + 1_000_000 + 5, "dur": 1}
json.dump({"schemaVersion": 1, "baseTimeNanoseconds": base_ns, "traceEvents": [op]}, open(sys.argv[2], "w"))
PY
python3 "$SRC/tools/trace_merge.py" "$tmp/X.json" "$tmp/kineto.json" -o "$tmp/merged.json" > "$tmp/merge.out" 2>&1
rc=$?
check "trace_merge.py exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
python3 - "$tmp/merged.json" <<'PY' && pass || fail "the merged trace puts both on one time line"
import json, sys
m = json.load(open(sys.argv[1]))
op = [e for e in m["traceEvents"] if e.get("name") == "aten::mm"][0]
first = min(e["ts"] for e in m["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "phase")
assert abs(op["ts"] - first - 5) < 0.01, (op["ts"], first)
assert "baseTimeNanoseconds" in m
PY

# The monotonic clock: stamps close to this machine's CLOCK_MONOTONIC.
Z trace --seconds 1 --clock monotonic --output "$tmp/M.json" --socket "$sock" > /dev/null 2>&1
rc=$?
check "trace --clock monotonic exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
python3 - "$tmp/M.json" <<'PY' && pass || fail "monotonic time stamps"
import json, sys, time
doc = json.load(open(sys.argv[1]))
ts = [e["ts"] for e in doc["traceEvents"] if e["ph"] == "X"]
now = time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6
assert ts and all(now - 60e6 < t < now for t in ts), (ts[:3], now)
PY
python3 "$SRC/tools/trace_merge.py" "$tmp/M.json" "$tmp/kineto.json" -o "$tmp/m2.json" > /dev/null 2>&1
check "trace_merge.py refuses a trace without --clock realtime (exit 2)" "[[ \$? -eq 2 ]]"

# A client interrupted midway (SIGINT): it removes its temporary file, and the daemon drops the
# recording; the next trace is not "busy".
timeout --preserve-status -s INT 1 "$BIN/zernel-scheduler" trace --seconds 30 --output "$tmp/gone.json" --socket "$sock" > /dev/null 2>&1
rc=$?
check "an interrupted trace exits 130 (got $rc)" "[[ $rc -eq 130 ]]"
sleep 0.5
check "an interrupted trace leaves no file" "[[ -z \$(ls -A $tmp | grep gone) ]]"
Z trace --seconds 1 --svg "$tmp/after.svg" --socket "$sock" > "$tmp/after.out" 2>&1
rc=$?
check "a trace after a hung-up one is not busy (exit $rc)" "[[ $rc -eq 0 ]] && ! grep -q busy $tmp/after.out"
check "the daemon logged the dropped recording" "grep -q 'trace dropped: its client has gone' $tmp/daemon.log"
# A second trace while one records: refused as busy, and the first still completes.
Z trace --seconds 2 --output "$tmp/first.json" --socket "$sock" > /dev/null 2>&1 &
first=$!
sleep 0.5
Z trace --seconds 1 --output "$tmp/second.json" --socket "$sock" > "$tmp/second.out" 2>&1
rc=$?
check "a concurrent trace exits 1 as busy (got $rc)" "[[ $rc -eq 1 ]] && grep -q 'busy: another trace' $tmp/second.out"
wait "$first"
rc=$?
check "the first trace completes (exit $rc)" "[[ $rc -eq 0 && -s $tmp/first.json ]]"

# Bad input.
bad() {  # bad DESCRIPTION EXPECTED-RC EXPECTED-MESSAGE ARGS...
  local what=$1 want_rc=$2 msg=$3
  shift 3
  Z trace "$@" --socket "$sock" > "$tmp/bad.out" 2>&1
  local rc=$?
  if [[ $rc -eq $want_rc ]] && grep -q -- "$msg" "$tmp/bad.out"; then
    pass
  else
    fail "$what: exit $rc (want $want_rc), output: $(cat "$tmp/bad.out")"
  fi
}
bad "--seconds 0" 2 "seconds" --seconds 0 --output "$tmp/b.json"
bad "--seconds 601" 2 "seconds" --seconds 601 --output "$tmp/b.json"
bad "--seconds x" 2 "seconds" --seconds x --output "$tmp/b.json"
bad "no output" 2 "nothing to write" --seconds 1
bad "--clock bogus" 2 "clock" --seconds 1 --clock bogus --output "$tmp/b.json"
ln -s "$tmp/target.json" "$tmp/link.json"
bad "a symlink as output" 1 "symbolic link" --seconds 1 --output "$tmp/link.json"
check "the symlink's target was not created" "[[ ! -e $tmp/target.json ]]"
mkfifo "$tmp/fifo.json"
bad "a FIFO as output" 1 "not a regular file" --seconds 1 --output "$tmp/fifo.json"
bad "a FIFO as --svg" 1 "not a regular file" --seconds 1 --svg "$tmp/fifo.json"
bad "a missing directory" 1 "cannot create a file next to" --seconds 1 --output "$tmp/no/such/dir/x.json"
bad "the same file twice" 2 "same file" --seconds 1 --output "$tmp/s.json" --svg "$tmp/s.json"
check "bad input left no temporary file" "[[ -z \$(ls -A $tmp | grep '^\\.b\\.json\\|^\\.s\\.json') ]]"

# A daemon that stops while a trace records tells its client so.
Z trace --seconds 30 --output "$tmp/stop.json" --socket "$sock" > "$tmp/stop.out" 2>&1 &
stopper=$!
sleep 0.5
kill -TERM "$wl_pid" 2>/dev/null
wait "$wl_pid" 2>/dev/null
wl_pid=""
stop_daemon
check "daemon exits 0 on SIGTERM (got $daemon_rc)" "[[ $daemon_rc -eq 0 ]]"
wait "$stopper"
rc=$?
check "a trace cut short by the daemon's stop exits 1 with the reason (got $rc)" \
  "[[ $rc -eq 1 ]] && grep -q 'the daemon is stopping' $tmp/stop.out && [[ ! -e $tmp/stop.json ]]"

# Keep the picture for docs when asked (ZERNEL_TRACE_SVG_OUT=path).
[[ -n ${ZERNEL_TRACE_SVG_OUT:-} && -s $tmp/X.svg ]] && cp "$tmp/X.svg" "$ZERNEL_TRACE_SVG_OUT"

if [[ $failures -ne 0 ]]; then
  echo "--- daemon log"; tail -50 "$tmp/daemon.log"
  echo "--- workload"; tail -5 "$tmp/workload.err"
fi
summary
