#!/usr/bin/env bash
# Runs build/bin/zernel-workload as a user would: a short job on the emulated GPU, its summary, its
# truth log and its clean-up; a stop by SIGTERM; the noise mode; and the usage errors.
# Needs the emulated GPU (<bin>/../lib/fake/libcuda.so.1): without it, the job checks are skipped
# (exit 77, which ctest reports as skipped).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN_DIR=${ZERNEL_BIN:-build/bin}
BIN=$BIN_DIR/zernel-workload
FAKE_LIB=${ZERNEL_FAKE_LIB_DIR:-$BIN_DIR/../lib/fake}/libcuda.so.1
# The emulated GPU's state segment: our own, so parallel tests do not share devices.
export ZERNEL_FAKE_GPU_SHM=/zernel-fake-gpu-workload-test-$$
bg_pid=""
cleanup() {
  [[ -n $bg_pid ]] && kill -KILL "$bg_pid" 2>/dev/null
  rm -rf "$tmp" "/dev/shm$ZERNEL_FAKE_GPU_SHM"
}
trap cleanup EXIT
finish() {
  summary
  exit
}

# expect CODE PATTERN -- CMD...: exit status CODE and combined output matching PATTERN (grep -E).
expect() {
  local code=$1 pattern=$2; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [[ $rc -ne $code ]]; then fail "$* -> exit $rc, wanted $code. Output: $out"; return; fi
  if ! grep -qE -- "$pattern" <<<"$out"; then fail "$* -> output lacks /$pattern/: $out"; return; fi
  pass
}

if [[ ! -x $BIN ]]; then
  fail "$BIN is not built"
  finish
fi

# Usage errors: exit 2 and a message that names the flag.
expect 2 'steps' -- "$BIN" --steps 0
expect 2 'steps' -- "$BIN" --steps -3
expect 2 'steps' -- "$BIN" --steps many
expect 2 'ranks' -- "$BIN" --ranks 0
expect 2 'workers' -- "$BIN" --workers -1
expect 2 'data-ms' -- "$BIN" --data-ms -5
expect 2 'gpu-ms' -- "$BIN" --gpu-ms soon
expect 2 'warmup-steps' -- "$BIN" --steps 3 --warmup-steps 3
expect 2 'not expected|unknown' -- "$BIN" --bogus
expect 2 'threads' -- "$BIN" noise --threads 0
expect 2 'seconds' -- "$BIN" noise --seconds -1
expect 2 'not of noise' -- "$BIN" --ranks 2 noise --seconds 1
expect 0 'truth-log' -- "$BIN" --help
expect 0 '^zernel-workload [0-9]+\.[0-9]+\.[0-9]+' -- "$BIN" --version

# The noise mode: CPU hogs for a time, or until SIGTERM; one JSON line either way.
"$BIN" noise --threads 2 --seconds 0.5 > "$tmp/noise.json" 2> "$tmp/noise.err" \
  && pass || fail "noise exited non-zero: $(cat "$tmp/noise.err")"
python3 - "$tmp/noise.json" <<'PY' && pass || fail "noise summary: $(cat "$tmp/noise.json")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
s = json.loads(lines[0])
assert s["mode"] == "noise" and s["threads"] == 2 and s["interrupted"] is False, s
assert 0.45 <= s["elapsed_s"] < 5 and s["iterations"] > 0 and s["cpu_s"] > 0, s
PY
"$BIN" noise --threads 1 > "$tmp/noise2.json" 2>&1 &
bg_pid=$!
sleep 0.5
kill -TERM "$bg_pid"
wait "$bg_pid"; rc=$?; bg_pid=""
[[ $rc -eq 0 ]] && grep -q '"interrupted":true' "$tmp/noise2.json" && pass \
  || fail "noise stopped by SIGTERM: exit $rc, $(cat "$tmp/noise2.json")"

if [[ ! -f $FAKE_LIB ]]; then
  skip "the emulated GPU ($FAKE_LIB) is not built; the job checks need it"
fi

# Without the emulated GPU and without a driver: a clear error naming --emulated-gpu.
if ! ldconfig -p 2>/dev/null | grep 'libcuda\.so\.1 ' >/dev/null; then
  expect 1 'emulated-gpu' -- "$BIN" --steps 1
fi
expect 1 'ZERNEL_FAKE_LIB_DIR' -- env ZERNEL_FAKE_LIB_DIR="$tmp/nowhere" "$BIN" --emulated-gpu --steps 1

# A short job: 2 ranks x 2 workers, 4 steps of short phases.
mkdir -p "$tmp/data"
shm_before=$(ls /dev/shm | grep -c '^nccl-zernel-workload-')
start_ns=$(python3 -c 'import time; print(time.monotonic_ns())')
"$BIN" --emulated-gpu --ranks 2 --workers 2 --steps 4 --data-ms 40 --gpu-ms 60 --nccl-ms 40 \
  --optimizer-ms 30 --batch-kib 256 --data-dir "$tmp/data" --truth-log "$tmp/truth.jsonl" \
  > "$tmp/job.json" 2> "$tmp/job.err" &
job_pid=$!
wait $job_pid; rc=$?
end_ns=$(python3 -c 'import time; print(time.monotonic_ns())')
[[ $rc -eq 0 ]] && pass || fail "job exited $rc: $(cat "$tmp/job.err")"

python3 - "$tmp/job.json" <<'PY' && pass || fail "job summary: $(cat "$tmp/job.json")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
s = json.loads(lines[0])
assert s["steps"] == 4 and s["steps_total"] == 8, s
assert s["steps_per_s"] > 0 and s["interrupted"] is False, s
# A step is at least its GPU, all-reduce and optimizer time (60 + 40 + 30 ms).
assert 120 <= s["step_p50_ms"] <= s["step_p99_ms"], s
PY

python3 - "$tmp/truth.jsonl" "$job_pid" "$start_ns" "$end_ns" <<'PY' && pass || fail "truth log (above)"
import collections, json, sys
path, launcher, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
names = {"DataLoading", "GpuCompute", "NcclCollective", "OptimizerStep", "Unknown"}
by_pid = collections.defaultdict(list)
for n, line in enumerate(open(path), 1):
    rec = json.loads(line)
    assert set(rec) == {"t_ns", "pid", "tid", "phase", "role"}, f"line {n}: {line}"
    assert rec["phase"] in names, f"line {n}: {line}"
    # Without --helpers every line is a process's own (its main thread's).
    assert rec["tid"] == rec["pid"] and rec["role"] in ("main", "worker"), f"line {n}: {line}"
    assert start <= rec["t_ns"] <= end, f"line {n}: t_ns outside the run: {line}"
    by_pid[rec["pid"]].append((rec["t_ns"], rec["phase"]))
assert launcher not in by_pid, "the launcher is not an ML process: it must not be in the log"
assert len(by_pid) == 6, f"want 2 ranks + 4 workers, got pids {sorted(by_pid)}"
ranks, workers = [], []
for pid, recs in by_pid.items():
    times = [t for t, _ in recs]
    assert times == sorted(times), f"pid {pid}: time goes backwards"
    phases = [p for _, p in recs]
    assert phases[0] == "Unknown" and phases[-1] == "Unknown", f"pid {pid}: {phases}"
    assert all(a != b for a, b in zip(phases, phases[1:])), f"pid {pid}: repeated phase {phases}"
    (ranks if "GpuCompute" in phases else workers).append((pid, phases))
assert len(ranks) == 2 and len(workers) == 4, f"ranks {ranks} workers {workers}"
for pid, phases in ranks:
    # Every step goes GpuCompute -> NcclCollective -> OptimizerStep; the first batch is awaited.
    assert phases.count("GpuCompute") == 4, f"rank {pid}: {phases}"
    assert phases.count("OptimizerStep") == 4 and phases.count("NcclCollective") == 4, phases
    assert "DataLoading" in phases, f"rank {pid} never waited for data: {phases}"
    core = [p for p in phases if p in ("GpuCompute", "NcclCollective", "OptimizerStep")]
    assert core == ["GpuCompute", "NcclCollective", "OptimizerStep"] * 4, f"rank {pid}: {phases}"
for pid, phases in workers:
    assert set(phases) == {"DataLoading", "Unknown"}, f"worker {pid}: {phases}"
PY

shm_after=$(ls /dev/shm | grep -c '^nccl-zernel-workload-')
[[ ! -e /dev/shm/nccl-zernel-workload-$job_pid && $shm_after -le $shm_before ]] && pass \
  || fail "/dev/shm/nccl-zernel-workload-$job_pid left behind"
[[ -z $(ls -A "$tmp/data") ]] && pass || fail "dataset left behind: $(ls -A "$tmp/data")"

# --workers 0: each rank loads its own batches, DataLoading in every step.
"$BIN" --emulated-gpu --ranks 1 --workers 0 --steps 3 --data-ms 20 --gpu-ms 20 --nccl-ms 10 \
  --optimizer-ms 10 --batch-kib 64 --data-dir "$tmp/data" --truth-log "$tmp/truth0.jsonl" \
  > "$tmp/job0.json" 2>&1 && pass || fail "--workers 0 job: $(cat "$tmp/job0.json")"
python3 - "$tmp/truth0.jsonl" <<'PY' && pass || fail "--workers 0 truth log: $(cat "$tmp/truth0.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len({r["pid"] for r in recs}) == 1
assert [r["phase"] for r in recs].count("DataLoading") == 3
PY

# --helpers --pin-memory: each rank's helper threads and pin-memory thread, each with its own
# truth lines (tid, role): the helpers Unknown from start to exit, the NCCL-like proxy
# NcclCollective once per step, the pin-memory thread DataLoading once per batch; the summary
# counts what they did (checkpoints every 10 steps, each 8 MiB hashed by the reader), their files
# are removed with the dataset.
"$BIN" --emulated-gpu --ranks 2 --workers 1 --steps 12 --data-ms 10 --gpu-ms 20 --nccl-ms 10 \
  --optimizer-ms 5 --batch-kib 64 --data-dir "$tmp/data" --truth-log "$tmp/truth_h.jsonl" \
  --helpers --pin-memory > "$tmp/job_h.json" 2> "$tmp/job_h.err" && pass ||
  fail "--helpers --pin-memory job: $(cat "$tmp/job_h.json" "$tmp/job_h.err")"
python3 - "$tmp/truth_h.jsonl" "$tmp/job_h.json" <<'PY' && pass || fail "--helpers --pin-memory: truth and summary (above)"
import collections, json, sys
by_tid = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    by_tid[(r["pid"], r["tid"], r["role"])].append(r["phase"])
roles = collections.Counter(role for _, _, role in by_tid)
want = {"main": 2, "worker": 2, "pin_memory": 2, "nccl_proxy": 2, "reader": 2, "checkpoint": 2,
        "logger": 2, "metrics": 2}
assert dict(roles) == want, dict(roles)
mains = {pid for pid, tid, role in by_tid if role == "main"}
for (pid, tid, role), phases in by_tid.items():
    assert (tid == pid) == (role in ("main", "worker")), (pid, tid, role)
    assert role == "worker" or pid in mains, (pid, tid, role)
    assert phases[0] == "Unknown" and phases[-1] == "Unknown", (role, phases)
    if role in ("reader", "checkpoint", "logger", "metrics"):
        assert phases == ["Unknown", "Unknown"], (role, phases)  # start and exit
    if role == "nccl_proxy":
        assert phases.count("NcclCollective") == 12 and set(phases) == {"Unknown", "NcclCollective"}, phases
    if role == "pin_memory":
        assert phases.count("DataLoading") >= 1 and set(phases) == {"Unknown", "DataLoading"}, phases
s = json.loads(open(sys.argv[2]).read().splitlines()[-1])
h = s["helpers"]
assert s["steps"] == 12 and s["pinned"] == 24, s
assert h["checkpoints"] == 2 and h["hashed_bytes"] == 2 * 8 * 1024 * 1024, h
assert h["collectives"] == 24 and h["scrapes"] >= 12 and h["log_flushes"] >= 0, h
PY
[[ -z $(ls -A "$tmp/data") ]] && pass || fail "dataset or helper files left behind: $(ls -AR "$tmp/data")"
expect 2 'pin-memory needs DataLoader workers' -- "$BIN" --emulated-gpu --workers 0 --pin-memory --steps 1

# Stopped by SIGTERM mid-run: exit 0, a summary marked interrupted, every process gone, no segment.
# With the helper and pin-memory threads, which stop with their rank.
"$BIN" --emulated-gpu --ranks 2 --workers 1 --steps 1000 --data-ms 20 --gpu-ms 100 --nccl-ms 50 \
  --optimizer-ms 20 --batch-kib 64 --data-dir "$tmp/data" --truth-log "$tmp/truth_stop.jsonl" \
  --helpers --pin-memory > "$tmp/stop.json" 2> "$tmp/stop.err" &
bg_pid=$!
for _ in $(seq 100); do
  grep -q GpuCompute "$tmp/truth_stop.jsonl" 2>/dev/null && break
  sleep 0.1
done
kill -TERM "$bg_pid"
wait "$bg_pid"; rc=$?; stopped_pid=$bg_pid; bg_pid=""
[[ $rc -eq 0 ]] && grep -q '"interrupted":true' "$tmp/stop.json" && pass \
  || fail "stop by SIGTERM: exit $rc, $(cat "$tmp/stop.json" "$tmp/stop.err")"
sleep 0.2
left=""
for pid in $(python3 -c 'import json,sys; print(" ".join({str(json.loads(l)["pid"]) for l in open(sys.argv[1])}))' "$tmp/truth_stop.jsonl"); do
  kill -0 "$pid" 2>/dev/null && left="$left $pid"
done
[[ -z $left ]] && pass || fail "processes left after SIGTERM:$left"
[[ ! -e /dev/shm/nccl-zernel-workload-$stopped_pid ]] && pass || fail "segment left after SIGTERM"
[[ -z $(ls -A "$tmp/data") ]] && pass || fail "dataset left after SIGTERM"
# --launch-cpu-ms: host CPU time between the launches, inside the GPU part (its truth GpuCompute).
# 4 steps of 20 ms of device time with 60 ms of CPU each: at least 60 ms a step and 240 ms of CPU
# (the rank's own, --workers 0 with 5 ms of decoding); without the option a step takes ~25 ms.
python3 - "$BIN" "$tmp" <<'PY' && pass || fail "--launch-cpu-ms (above)"
import json, resource, subprocess, sys
out = subprocess.run([sys.argv[1], "--emulated-gpu", "--ranks", "1", "--workers", "0", "--steps", "4",
                      "--data-ms", "5", "--gpu-ms", "20", "--launch-cpu-ms", "60", "--nccl-ms", "0",
                      "--optimizer-ms", "0", "--batch-kib", "64", "--data-dir", sys.argv[2] + "/data"],
                     capture_output=True, text=True, check=True).stdout
s = json.loads(out.strip().splitlines()[-1])
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu_ms = (ru.ru_utime + ru.ru_stime) * 1000
assert s["steps"] == 4 and s["step_mean_ms"] >= 60, s
assert cpu_ms >= 240, f"CPU {cpu_ms:.0f} ms < 240 ms: {s}"
PY

python3 - "$tmp/truth_stop.jsonl" <<'PY' && pass || fail "truth log after SIGTERM"
import collections, json, sys
last = collections.OrderedDict()
for l in open(sys.argv[1]):
    r = json.loads(l)
    last[(r["pid"], r["tid"], r["role"])] = r["phase"]
assert all(p == "Unknown" for p in last.values()), last
assert {role for _, _, role in last} == {"main", "worker", "pin_memory", "nccl_proxy", "reader",
                                         "checkpoint", "logger", "metrics"}, last
PY

finish
