#!/usr/bin/env bash
# The daemon's own CPU use beside a node's processes (docs/benchmarks.md, "The daemon's own CPU").
#
#   bench/daemon_cpu.sh [--tracked N] [--untracked M] [--seconds S] [--matched-share F]
#                       [--workers W] [--detector events|periodic]        (root; uses build/bin)
#
# --tracked N (default 1,000) processes the daemon follows, shaped like a GPU node's: training
# jobs of 8 ranks through the emulated GPU (8 GPUs; each rank a GPU context, W DataLoader worker
# processes, default 7, and the job's launcher), one rank per 8 processes, which makes them
# tracked as a real node's are (NVML lists the ranks, the workers descend from them, a tenant's
# rule names the jobs, launchers included); and a share F (default 0.1) of `sleep` processes a
# tenant's rule matches by name (a pod's other processes). The jobs run slow steps (400 ms of GPU
# time per rank, the 8 GPUs shared by all ranks, 5 ms of decoding per batch), so they keep
# changing phase without loading the machine. --matched-share 1 gives the old benchmark: N
# name-matched sleeps and no job.
# --untracked M (default 0) `sleep` processes beside them that nothing matches.
# The daemon runs in observe mode at the default 100 ms tick with its own state and journal
# paths; after it tracks what it should (at most 120 s) and 10 s more (the second look at the
# new processes' descriptors, 5 s after their fork, is start-up, not the steady state), its CPU
# time (utime + stime from /proc/PID/stat) is read over S seconds (default 30; 120 includes the
# safety net's scan that re-reads every process's descriptors, every 4th 30-s scan with NVML).
# One JSON line: the counts, the daemon's CPU, the share of one core, and the machine's load
# average before and after.
# The daemon inherits the environment: ZERNEL_TEST_NO_TASK_ITER=1 makes it read the tenants' CPU
# time from /proc instead of the BPF task iterator, for a comparison in one build.
#   bench/daemon_cpu.sh --tracked 1000 --seconds 120
#   bench/daemon_cpu.sh --tracked 0 --untracked 2000 --seconds 120
set -euo pipefail
tracked=1000 untracked=0 secs=30 share=0.1 workers=7 detector=events
while [[ $# -gt 0 ]]; do
  case $1 in
    --tracked) tracked=$2 ;;
    --untracked) untracked=$2 ;;
    --seconds) secs=$2 ;;
    --matched-share) share=$2 ;;
    --workers) workers=$2 ;;
    --detector) detector=$2 ;;
    *) echo "usage: $0 [--tracked N] [--untracked M] [--seconds S] [--matched-share F] [--workers W] [--detector events|periodic]" >&2; exit 2 ;;
  esac
  shift 2
done
[[ $(id -u) -eq 0 ]] || { echo "daemon_cpu.sh: run as root (the daemon's probes and process events)" >&2; exit 2; }
bin=${ZERNEL_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build/bin}
# tmp, the daemon's paths under it (journals, runtime state, control socket), launch_daemon, metric.
export ZERNEL_BIN=$bin
. "$(dirname "$0")/../tests/integration/lib.sh"
export ZERNEL_FAKE_GPU_SHM="/zernel-daemon-cpu-$$" ZERNEL_FAKE_GPU_COUNT=8
pids=()
jobs_pids=()
cleanup() {
  [[ -n ${dpid:-} ]] && kill "$dpid" 2>/dev/null
  [[ ${#jobs_pids[@]} -gt 0 ]] && kill -TERM "${jobs_pids[@]}" 2>/dev/null
  [[ ${#pids[@]} -gt 0 ]] && kill "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$tmp"
  rm -f "/dev/shm$ZERNEL_FAKE_GPU_SHM"
}
trap cleanup EXIT

# The composition: ranks of 8-rank jobs (each rank 1 + W processes, each job one launcher), the
# rest name-matched sleeps.
read -r ranks njobs sleeps < <(python3 - "$tracked" "$share" "$workers" <<'PY'
import math, sys
n, share, w = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
gpu = round(n * (1 - share))
ranks = gpu // (w + 1)
jobs = math.ceil(ranks / 8)
while ranks > 0 and ranks * (w + 1) + jobs > gpu:
    ranks -= 1
    jobs = math.ceil(ranks / 8)
print(ranks, jobs, n - ranks * (w + 1) - jobs)
PY
)
port=$(free_port)
cat > "$tmp/c.toml" <<TOML
[general]
max_tracked_tasks = 65536
[phase_detection]
mode = "$detector"
[multi_tenant]
enabled = true
# builds from before ZERNEL_RUNTIME_STATE (lib.sh) read it from here
runtime_state_file = "$tmp/run/runtime-tenants.json"
[telemetry]
metrics_port = $port
[[tenants]]
id = "jobs"
gpus = 8
class = "training"
[tenants.match]
comm = ["zernel-workload"]
[[tenants]]
id = "bench"
gpus = 1
class = "background"
[tenants.match]
comm = ["zsleep"]
TOML
ln -s "$(command -v sleep)" "$tmp/zsleep"
ln -s "$(command -v sleep)" "$tmp/usleep"
for _ in $(seq "$sleeps"); do "$tmp/zsleep" 3600 & pids+=($!); done
for _ in $(seq "$untracked"); do "$tmp/usleep" 3600 & pids+=($!); done
daemon_config=$tmp/c.toml daemon_log=$tmp/d.log launch_daemon --backend observe --emulated-gpu \
  --control-socket '' || { echo "daemon_cpu: the daemon did not start:"; cat "$tmp/d.log"; exit 1; }
dpid=$daemon_pid
left=$ranks
for j in $(seq "$njobs"); do
  r=$((left < 8 ? left : 8))
  left=$((left - r))
  mkdir -p "$tmp/data$j"
  "$bin/zernel-workload" --emulated-gpu --ranks "$r" --workers "$workers" --steps 1000000 \
    --data-ms 5 --gpu-ms 400 --nccl-ms 20 --optimizer-ms 5 --batch-kib 16 --prefetch-factor 1 \
    --data-dir "$tmp/data$j" > "$tmp/job$j.out" 2>&1 &
  jobs_pids+=($!)
done
# Until the daemon tracks what it should (ranks reach their GPU contexts one after another).
for _ in $(seq 240); do
  n=$(metric 'zernel_scheduler_tasks{type="total"}' || true)
  [[ -n $n && ${n%.*} -ge $tracked ]] && break
  sleep 0.5
done
sleep 10
load0=$(cut -d' ' -f1-3 /proc/loadavg)
read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$dpid/stat")
t0=$(date +%s.%N)
# The window without a process of ours alive in it: a `sleep` would be a program started within
# the daemon's NVML window (it reads NVML's list every tick while a process forked or exec'd in the
# last 30 s lives, as a new rank would), which no node's steady state has. A read with a timeout on
# a FIFO nobody writes waits in bash itself.
mkfifo "$tmp/pause"
exec {pause_fd}<>"$tmp/pause"
read -r -t "$secs" -u "$pause_fd" _ || true
exec {pause_fd}>&-
read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$dpid/stat")
t1=$(date +%s.%N)
load1=$(cut -d' ' -f1-3 /proc/loadavg)
n=$(metric 'zernel_scheduler_tasks{type="total"}' || echo 0)
hz=$(getconf CLK_TCK)
python3 - "$u0" "$s0" "$u1" "$s1" "$t0" "$t1" "$hz" "${n:-0}" "$tracked" "$untracked" \
  "$ranks" "$njobs" "$sleeps" "$load0" "$load1" "$detector" <<'PY'
import json, sys
u0, s0, u1, s1 = map(int, sys.argv[1:5]); t0, t1 = map(float, sys.argv[5:7]); hz = int(sys.argv[7])
cpu = ((u1 - u0) + (s1 - s0)) / hz
wall = t1 - t0
print(json.dumps({"tracked_wanted": int(sys.argv[9]), "tracked": int(float(sys.argv[8])),
                  "untracked": int(sys.argv[10]), "ranks": int(sys.argv[11]),
                  "jobs": int(sys.argv[12]), "matched_sleeps": int(sys.argv[13]),
                  "detector": sys.argv[16], "wall_s": round(wall, 1), "cpu_s": round(cpu, 2),
                  "cpu_pct_of_one_core": round(100 * cpu / wall, 2),
                  "user_s": round((u1 - u0) / hz, 2), "sys_s": round((s1 - s0) / hz, 2),
                  "load_before": sys.argv[14], "load_after": sys.argv[15]}))
PY
