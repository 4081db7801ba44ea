#!/usr/bin/env bash
# The daemon in observe mode on the real /proc, with the emulated GPU, next to zernel-workload:
# it finds the job's processes, serves /metrics and /status, writes the phase log, restores
# kernel.task_delayacct and exits 0 on SIGTERM.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
export ZERNEL_FAKE_GPU_SHM="/zernel-daemon-test-$$"
daemon_pid=""
cleanup() {
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  rm -rf "$tmp"
  rm -f "/dev/shm${ZERNEL_FAKE_GPU_SHM}"
}
trap cleanup EXIT

need_emulated_gpu

port=$(free_port)
cat > "$tmp/config.toml" <<TOML
[general]
phase_eval_interval_ms = 100
gpu_poll_interval_ms = 200

[telemetry]
metrics_port = $port
TOML

acct_before=$(cat /proc/sys/kernel/task_delayacct 2>/dev/null || echo missing)

start_daemon --backend observe --emulated-gpu --control-socket "$tmp/ctl.sock" \
  --phase-log "$tmp/phases.jsonl" || { summary; exit; }

# A second daemon on the same port fails at start with a clear message.
"$BIN/zernel-scheduler" --config "$tmp/config.toml" --backend observe \
  --control-socket "$tmp/ctl2.sock" > "$tmp/second.log" 2>&1
rc=$?
check "second daemon on a used port exits 1 (got $rc)" "[[ $rc -eq 1 ]]"
check "second daemon names the port" "grep -q 'cannot listen on 127.0.0.1:$port' $tmp/second.log"

"$BIN/zernel-workload" --emulated-gpu --ranks 2 --workers 1 --steps 4 --data-ms 300 --gpu-ms 600 \
  --nccl-ms 200 --optimizer-ms 300 --truth-log "$tmp/truth.jsonl" > "$tmp/workload.json" 2>&1 &
wl=$!
# /status is refreshed every push_interval_ms (1 s): wait until it lists the job's four
# processes (two ranks, two workers), for up to 20 s while the job runs.
for _ in $(seq 40); do
  sleep 0.5
  curl -sf "http://127.0.0.1:$port/status" > "$tmp/status.json" || continue
  n=$(python3 -c 'import json,sys; print(sum(t["comm"].startswith("zernel-workload") for t in json.load(open(sys.argv[1]))["tasks"]))' "$tmp/status.json")
  [[ $n -ge 4 ]] && break
done
curl -sf "http://127.0.0.1:$port/metrics" > "$tmp/metrics.txt"
wait $wl
check "workload finished" "grep -q '\"steps\"' $tmp/workload.json"

python3 - "$tmp/status.json" "$tmp/truth.jsonl" <<'PY' && pass || fail "/status lists the workload's processes"
import json, sys
status = json.load(open(sys.argv[1]))
truth_pids = {json.loads(l)["pid"] for l in open(sys.argv[2])}
tracked = {t["pid"]: t for t in status["tasks"]}
assert status["backend"] == "observe", status["backend"]
found = truth_pids & set(tracked)
# Both ranks (GPU owners, listed by the emulated NVML) and their workers (descendants).
assert len(found) >= 4, (sorted(truth_pids), sorted(tracked))
for pid in found:
    t = tracked[pid]
    assert t["comm"].startswith("zernel-workload"), t
    assert t["ml"] is True
    assert set(t["phase_time_ms"]) == {"DataLoading", "GpuCompute", "NcclCollective", "OptimizerStep", "Unknown"}
assert any(tracked[p]["gpu_id"] is not None for p in found)
PY
check "metrics name the tracked tasks" "grep -qE '^zernel_scheduler_tasks\{type=\"ml\"\} [4-9]' $tmp/metrics.txt"
check "metrics keep the seed names" "grep -q '^zernel_scheduler_phase_time_pct{phase=\"gpu_compute\"}' $tmp/metrics.txt"

kill -TERM "$daemon_pid"
start=$(date +%s%N)
wait "$daemon_pid"
rc=$?
daemon_pid=""
ms=$(( ($(date +%s%N) - start) / 1000000 ))
check "SIGTERM exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
check "SIGTERM stops within 2 s (took $ms ms)" "[[ $ms -lt 2000 ]]"
check "task_delayacct restored" "[[ \$(cat /proc/sys/kernel/task_delayacct 2>/dev/null || echo missing) == $acct_before ]]"
check "the port is released" "! curl -sf http://127.0.0.1:$port/metrics > /dev/null"
python3 - "$tmp/phases.jsonl" <<'PY' && pass || fail "phase log is JSON lines with committed GpuCompute"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows, "empty phase log"
for r in rows:
    assert set(r) == {"t_ns", "pid", "phase"}, r
assert any(r["phase"] == "GpuCompute" for r in rows), rows
PY

# An unprivileged daemon in observe mode starts when root's settings journal directory is closed
# to it (as /run/zernel is, mode 0700): it can change no machine-wide setting, so it runs without
# the journal and says so.
if [[ $(id -u) -eq 0 ]] && command -v setpriv > /dev/null; then
  mkdir -m 0700 "$tmp/run"
  echo "zernel-settings-journal 1" > "$tmp/run/settings.journal"
  chmod 0755 "$tmp"
  install -d -o 65534 "$tmp/nobody"
  ZERNEL_SETTINGS_JOURNAL="$tmp/run/settings.journal" setpriv --reuid=65534 --regid=65534 \
    --clear-groups "$BIN/zernel-scheduler" --config "$tmp/config.toml" --backend observe \
    --control-socket "$tmp/nobody/ctl.sock" > "$tmp/nobody.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/metrics" > /dev/null && break
    sleep 0.1
  done
  check "unprivileged: the daemon runs although root's journal directory is closed to it" \
    "curl -sf http://127.0.0.1:$port/metrics > /dev/null"
  check "unprivileged: it says crash recovery is off for this user" \
    "grep -q 'no crash recovery of machine-wide settings for this user' $tmp/nobody.log"
  kill -TERM "$daemon_pid"
  wait "$daemon_pid"
  rc=$?
  daemon_pid=""
  check "unprivileged: SIGTERM exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
  [[ $failures -ne 0 ]] && { echo "--- unprivileged daemon log"; cat "$tmp/nobody.log"; }
fi

if [[ $failures -ne 0 ]]; then
  echo "--- daemon log"; cat "$tmp/daemon.log"
fi
summary
