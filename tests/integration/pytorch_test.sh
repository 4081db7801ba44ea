#!/usr/bin/env bash
# A real framework under the daemon: tools/torch_job.py (Debian's python3-torch: an MLP trained with
# AdamW, a DataLoader with 2 worker processes doing real CPU work, GPU work through the emulated
# libcuda by ctypes, ~160 ms steps) next to `zernel-scheduler --backend observe --emulated-gpu
# --phase-log`. Checks
#   * discovery: the main process is tracked as an ML process with a GPU (/status), each of its 2
#     workers is tracked as an ML process without a GPU context of its own (a child of the main
#     process; with no tenants configured the only role that tracks such a process is
#     dataloader_worker), and the daemon treats them as workers: they are committed DataLoading
#     at some point (only a worker's CPU work reads as DataLoading);
#   * accuracy: bench/phase_accuracy.py scores the phase log against the job's truth log (the
#     figures are printed whatever the outcome): the main process's GpuCompute and
#     OptimizerStep, the whole main process, and every phase of the workers must reach
#     $min_accuracy of their time (the periodic detector: 0 % for the first two, 9-12 % for the
#     main process, 5-23 % for an idle worker). The main process's DataLoading is printed, not
#     required: the truth starts it when next() is called, and the DataLoader's own Python work
#     (sending the next index, the shared-memory handshake) runs before its first wait, the
#     first event that shows it (docs/probes.md, "Phases from events").
#   * per thread (issue 22): the job runs its helper threads (--helpers: a reader, a checkpoint
#     writer, a logger, a metrics exporter, an NCCL-like proxy) and the daemon logs every thread
#     (--phase-log-threads); bench/phase_accuracy.py --threads must find every role in its score,
#     the main thread scored as the process is, and the figures the current rules meet (the
#     main thread's GpuCompute and OptimizerStep, the workers, and every thread that is not
#     the rank's driver, the helpers and the NCCL-like proxy, boosted <= 5 % of its time: the
#     rank rules apply to the threads that sync, docs/probes.md). A second, shorter job with
#     pin_memory=True (an emulated pin-memory thread on the CPU build; the main thread then
#     waits for batches in a futex) is scored per thread too: its main thread's OptimizerStep,
#     the workers, the helpers and the pin-memory thread not boosted; the main thread's and the
#     pin-memory thread's DataLoading printed (issue 22 items 1 and 6: a pin-memory thread is
#     no driver, so it has no phase; the main thread's futex waits of 10 ms or more are its
#     DataLoading, shorter ones are not seen: 51-79 % in three runs of this job, whose batches
#     are mostly ready, 94-99 % in bench/detection.sh --job pytorch, where every step waits).
# Needs root (BPF probes, /proc/PID/syscall), the emulated GPU and python3-torch; SKIP without.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

# See above. Measured with phases from events: GpuCompute 91 %, OptimizerStep 100 %, the main
# process 88 %, workers 98 %; most of what GpuCompute misses is the first step, before discovery
# has found the job.
min_accuracy=0.8
steps=30
pin_steps=12
# A thread of the rank that is not its driver (a helper, the NCCL-like proxy, the pin-memory
# thread): at most this share of its time in a boosted phase.
max_boosted=0.05

export ZERNEL_FAKE_GPU_SHM="/zernel-pytorch-test-$$"
daemon_pid=""
job_pid=""
cleanup() {
  [[ -n $job_pid ]] && kill -TERM "$job_pid" 2>/dev/null && wait "$job_pid" 2>/dev/null
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  rm -rf "$tmp"
  rm -f "/dev/shm${ZERNEL_FAKE_GPU_SHM}"
}
trap cleanup EXIT

# The interpreter that has torch: python3 on PATH, else Debian's own (a pyenv or venv python3 on
# PATH does not see Debian's dist-packages).
py=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" > /dev/null && "$p" -c 'import torch' 2> /dev/null; then py=$p; break; fi
done
[[ -n $py ]] || skip "python3-torch is not installed (apt-get install python3-torch; scripts/setup.sh does)"
need_emulated_gpu
[[ $(id -u) -eq 0 ]] || skip "needs root (BPF probes, /proc/PID/syscall)"
if ! mountpoint -q /sys/kernel/tracing; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
fi

port=$(free_port)
printf '[telemetry]\nmetrics_port = %s\n' "$port" > "$tmp/config.toml"
sock="$tmp/run/ctl.sock"
start_daemon --backend observe --emulated-gpu --control-socket "$sock" \
  --phase-log "$tmp/phases.jsonl" --phase-log-threads || { summary; exit; }
need_probes

"$py" "$SRC/tools/torch_job.py" --libcuda "$BIN/../lib/fake/libcuda.so.1" --steps "$steps" \
  --helpers --truth-log "$tmp/truth.jsonl" --profile "$tmp/torch.json" \
  --profile-after "$tmp/profile.go" > "$tmp/job.json" 2> "$tmp/job.err" &
job_pid=$!

# Discovery, while the job runs (one poller, 60 s of wall time): its pids from the truth log (the
# main process is the one that goes through GpuCompute, after it has made its context), then
# /status until all three are seen as they should be.
"$py" - "$tmp/truth.jsonl" "http://127.0.0.1:$port/status" 60 > "$tmp/discovery.txt" <<'PY'
import json, sys, time, urllib.request
truth_path, url, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])

def attempt():
    rows = [json.loads(l) for l in open(truth_path) if l.strip()]
    main = {r["pid"] for r in rows if r["phase"] == "GpuCompute"}
    if len(main) != 1:
        return False, "the main process has not reached its first GPU step"
    main = main.pop()
    workers = sorted({r["pid"] for r in rows} - {main})
    tasks = {t["pid"]: t for t in json.load(urllib.request.urlopen(url, timeout=2))["tasks"]}
    m = tasks.get(main)
    if len(workers) != 2:
        return False, f"the truth log names {len(workers)} workers, not 2"
    if not m or not m["ml"] or m["gpu_id"] is None:
        return False, f"main process {main} is not tracked as an ML process with a GPU: {m}"
    for w in workers:
        t = tasks.get(w)
        ppid = int(open(f"/proc/{w}/stat").read().rsplit(")", 1)[1].split()[1])
        if not t or not t["ml"] or ppid != main:
            return False, f"worker {w} (parent {ppid}) is not tracked as an ML child of {main}: {t}"
    return True, (f"main process {main} ({m['comm']}, GPU {m['gpu_id']}), DataLoader workers "
                  + ", ".join(f"{w} ({tasks[w]['comm']})" for w in workers))

deadline = time.monotonic() + limit
while True:
    try:
        ok, why = attempt()
        if ok:
            print(why)
            sys.exit(0)
    except (OSError, ValueError, KeyError) as e:
        why = f"{type(e).__name__}: {e}"
    if time.monotonic() > deadline:
        print(f"after {limit:g} s: {why}")
        sys.exit(1)
    time.sleep(0.2)
PY
rc=$?
cat "$tmp/discovery.txt"
if [[ $rc -eq 0 ]]; then
  pass
else
  fail "the daemon tracks the main process (ML, with a GPU) and its 2 workers (ML, its children)"
  echo "--- truth log so far"; head -n 20 "$tmp/truth.jsonl"
  echo "--- /status"; curl -s "http://127.0.0.1:$port/status"; echo
fi

# A zernel trace and the job's own PyTorch profiler trace over the same seconds: the job profiles
# three steps from the first that starts once profile.go exists, a second into the trace.
"$BIN/zernel-scheduler" trace --seconds 6 --output "$tmp/zernel.json" --socket "$sock" \
  > "$tmp/trace.out" 2>&1 &
trace_pid=$!
sleep 1
touch "$tmp/profile.go"
wait "$trace_pid"
rc=$?
check "zernel-scheduler trace beside the job exits 0 (got $rc)" "[[ $rc -eq 0 ]]"

wait "$job_pid"
rc=$?
job_pid=""
check "the PyTorch job finished (exit $rc)" "[[ $rc -eq 0 ]] && grep -q '\"steps\": $steps' $tmp/job.json"
cat "$tmp/job.json"

# The second job, pin_memory=True, under the same daemon.
"$py" "$SRC/tools/torch_job.py" --libcuda "$BIN/../lib/fake/libcuda.so.1" --steps "$pin_steps" \
  --helpers --pin-memory --truth-log "$tmp/truth-pin.jsonl" > "$tmp/job-pin.json" 2> "$tmp/job-pin.err" &
job_pid=$!
wait "$job_pid"
rc=$?
job_pid=""
check "the pin_memory=True job finished (exit $rc)" \
  "[[ $rc -eq 0 ]] && grep -q '\"pin_memory\": true' $tmp/job-pin.json"
cat "$tmp/job-pin.json"
sleep 0.3
stop_daemon
check "daemon exits 0 on SIGTERM (got $daemon_rc)" "[[ $daemon_rc -eq 0 ]]"

# The daemon handled the workers as DataLoader workers: each was committed DataLoading.
"$py" - "$tmp/truth.jsonl" "$tmp/phases.jsonl" <<'PY' && pass || fail "each worker is committed DataLoading at least once"
import json, sys
truth = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
main = {r["pid"] for r in truth if r["phase"] == "GpuCompute"}
workers = {r["pid"] for r in truth} - main
seen = {json.loads(l)["pid"] for l in open(sys.argv[2])
        if l.strip() and json.loads(l)["phase"] == "DataLoading"}
assert len(workers) == 2 and workers <= seen, (workers, seen)
PY

# Beside the PyTorch trace. Debian's torch (no Kineto) stamps its trace from the profiler's start,
# so trace_merge.py refuses it without the start time, and with it puts both on one time line:
# each AdamW step the profiler saw lies inside an OptimizerStep span of the job's main thread in
# the zernel trace (within 2 ms: the profiler starts its clock just after start_us is read), and
# --pytorch-pid files the ops under the job's own process.
start_us=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["profile"]["start_us"])' "$tmp/job.json" 2> /dev/null)
check "the job profiled three steps (profile.start_us: ${start_us:-none})" "[[ -n '$start_us' && -s $tmp/torch.json ]]"
python3 "$SRC/tools/trace_merge.py" "$tmp/zernel.json" "$tmp/torch.json" -o "$tmp/bad.json" > "$tmp/merge.out" 2>&1
rc=$?
check "trace_merge.py refuses a trace stamped from the profiler's start without --pytorch-start-us (exit 2, got $rc)" \
  "[[ $rc -eq 2 ]] && grep -q 'pytorch-start-us' $tmp/merge.out"
job_main=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$tmp/job.json" 2> /dev/null)
python3 "$SRC/tools/trace_merge.py" "$tmp/zernel.json" "$tmp/torch.json" --pytorch-start-us "${start_us:-0}" \
  --pytorch-pid "${job_main:-1}" -o "$tmp/merged.json" >> "$tmp/merge.out" 2>&1
rc=$?
check "trace_merge.py --pytorch-start-us exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
"$py" - "$tmp/merged.json" "$tmp/job.json" <<'PY' && pass || fail "the PyTorch trace's AdamW steps lie inside the main thread's OptimizerStep spans"
import json, sys
m = json.load(open(sys.argv[1]))
main = json.load(open(sys.argv[2]))["pid"]
ev = m["traceEvents"]
opt = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("ph") == "X" and e.get("cat") == "phase"
             and e.get("pid") == main and e.get("tid") == main and e.get("name") == "OptimizerStep")
steps = [e for e in ev if e.get("ph") == "X" and str(e.get("name", "")).startswith("Optimizer.step#")]
assert len(steps) == 3, ("AdamW steps in the PyTorch trace", len(steps))
assert all(s["pid"] == main for s in steps), ("--pytorch-pid: the ops under the job's pid", [s["pid"] for s in steps])
assert opt, "no OptimizerStep span of the main thread in the zernel trace"
for s in steps:
    mid = s["ts"] + s["dur"] / 2
    assert any(a - 2000 <= mid <= b + 2000 for a, b in opt), ("no OptimizerStep span around", s["ts"], opt[:8])
print("beside PyTorch: %d AdamW steps, each inside an OptimizerStep span of pid %d (of %d)" % (len(steps), main, len(opt)))
PY

python3 "$SRC/bench/phase_accuracy.py" "$tmp/truth.jsonl" "$tmp/phases.jsonl" --label pytorch \
  --require "rank.GpuCompute=$min_accuracy,rank.OptimizerStep=$min_accuracy,rank.accuracy=$min_accuracy,worker.phase_accuracy=$min_accuracy" \
  > "$tmp/score.txt" 2> "$tmp/score.err"
rc=$?
cat "$tmp/score.txt" "$tmp/score.err"
check "main process (GpuCompute, OptimizerStep, overall) and every worker phase right >= $min_accuracy of the time" \
  "[[ $rc -eq 0 ]]"

# Per thread. Both jobs: every role scored, no helper of the rank and not its NCCL-like proxy
# boosted (the "other" threads of the worker processes follow the worker rules: not required).
per_thread() {  # per_thread NAME TRUTH REQUIRE: the score's figures, then its checks
  python3 "$SRC/bench/phase_accuracy.py" "$2" "$tmp/phases.jsonl" --threads --label "$1" \
    --require "$3,$(printf '%s.boosted=%s,' reader "$max_boosted" checkpoint "$max_boosted" \
      logger "$max_boosted" metrics "$max_boosted")nccl_proxy.boosted=$max_boosted" \
    > "$tmp/$1.txt" 2> "$tmp/$1.err"
  local rc=$?
  cat "$tmp/$1.txt" "$tmp/$1.err"
  check "$1: per-thread thresholds met (exit $rc)" "[[ $rc -eq 0 ]]"
}
per_thread threads "$tmp/truth.jsonl" \
  "main.GpuCompute=$min_accuracy,main.OptimizerStep=$min_accuracy,worker.phase_accuracy=$min_accuracy"
per_thread threads-pin "$tmp/truth-pin.jsonl" \
  "main.OptimizerStep=$min_accuracy,pin_memory.boosted=$max_boosted,worker.phase_accuracy=$min_accuracy"
# The plumbing: each role is in the score, each helper scored over most of the main thread's life
# (it starts after the first batch and ends before the main thread's last line), the main
# thread's per-thread figure is the process's (the same lines: tid == pid), the daemon logged
# no line with a phase for a helper's tid (they are no drivers), and the figures for the record.
"$py" - "$tmp/threads.txt" "$tmp/score.txt" "$tmp/threads-pin.txt" "$tmp/phases.jsonl" <<'PY' && pass || fail "the per-thread score covers every role, as the daemon logged them"
import json, sys
last = lambda p: json.loads(open(p).read().splitlines()[-1])
t, proc, pin = last(sys.argv[1]), last(sys.argv[2]), last(sys.argv[3])
logged_phase = {r.get("tid") for r in map(json.loads, filter(str.strip, open(sys.argv[4])))
                if r.get("phase") != "Unknown"}
for o, extra in ((t, set()), (pin, {"pin_memory"})):
    roles = o["roles"]
    want = {"main", "worker", "nccl_proxy", "helper", "reader", "checkpoint", "logger", "metrics"} | extra
    assert want <= set(roles), sorted(roles)
    main_s = roles["main"]["truth_s"]
    for th in o["threads"]:
        if th["role"] in ("reader", "checkpoint", "logger", "metrics", "nccl_proxy", "pin_memory"):
            assert th["truth_s"] >= 0.5 * main_s, th
    helpers = {th["tid"] for th in o["threads"]
               if th["role"] in ("reader", "checkpoint", "logger", "metrics", "nccl_proxy")}
    assert not helpers & logged_phase, sorted(helpers & logged_phase)
assert abs(t["roles"]["main"]["accuracy_pct"] - proc["roles"]["rank"]["accuracy_pct"]) < 0.01, (t["roles"]["main"], proc["roles"]["rank"])
for name, o in (("pin_memory off", t), ("pin_memory on", pin)):
    r = o["roles"]
    print(f"{name}: main {r['main']['accuracy_pct']} % (DataLoading "
          f"{r['main']['phases'].get('DataLoading', {}).get('accuracy_pct')} %), pin-memory "
          f"DataLoading {r.get('pin_memory', {}).get('phases', {}).get('DataLoading', {}).get('accuracy_pct')} %, "
          "boosted: "
          + ", ".join(f"{k} {r[k]['boosted_pct']} %" for k in
                      ("reader", "checkpoint", "logger", "metrics", "nccl_proxy", "pin_memory", "other")
                      if k in r))
PY

if [[ $failures -ne 0 ]]; then
  echo "--- daemon log"; tail -n 30 "$tmp/daemon.log"
  echo "--- job"; cat "$tmp/job.err" "$tmp/job-pin.err"
fi
summary
