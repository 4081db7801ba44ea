#!/usr/bin/env bash
# Following processes on a node's shape, by the kernel's process events (docs/architecture.md,
# daemon/daemon_sampling.cpp): the daemon (observe backend, emulated GPU of 8 devices) beside 200
# processes it does not follow and a loop that runs short commands back to back (a node's probes,
# exec health checks, shell loops), then a training job of 2 ranks with 2 DataLoader workers
# each and helper threads in each rank (a reader, a checkpoint writer, a logger, a metrics
# exporter, an NCCL-like proxy), another tenant's inference server on the GPU, and a process of
# a third tenant that maps libcuda but has no context on this node's GPUs. Read from /metrics
# (zernel_scheduler_discovery_runs_total, zernel_scheduler_tasks,
# zernel_scheduler_probe_events_total):
#  1. the job and the inference server are followed within 3 s of their start, ranks and
#     workers, by events, not by rescans (at most the start's listing of /proc and the 30-s
#     safety net's);
#  2. the process that maps libcuda is not followed, and its 30,000 calls of cuStreamSynchronize
#     (bench_tax) reach no probe: the sync probes count the followed processes' syncs only
#     (issue 21: uprobes in the followed processes, not on the library file for every process);
#  3. NVML's process list is read at every tick (10 a second) while the job's new processes are
#     young (a new rank is followed at its first GPU context), and only at the 500-ms poll ticks
#     once they are older than 30 s: the short commands beside never hold it at every tick. Other
#     processes of the node in their first 30 s (older than 100 ms: a build beside the test, CI's
#     idle lane) rightly hold it too; the test samples them from /proc while it measures, and
#     where it saw one the quiet node's figure is not checked (the message says so);
#  4. the job's exit drops its processes within 1 s, and the server's then.
# Root (the process events need CAP_NET_ADMIN); skips without the emulated GPU, and when the
# daemon could not open the process events.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
export ZERNEL_FAKE_GPU_SHM="/zernel-discovery-test-$$" ZERNEL_FAKE_GPU_COUNT=8
daemon_pid="" job_pid="" server_pid="" loop_pid=""
sleepers=()
cleanup() {
  [[ -n $job_pid ]] && kill -TERM "$job_pid" 2>/dev/null && wait "$job_pid" 2>/dev/null
  [[ -n $server_pid ]] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  [[ -n $loop_pid ]] && kill "$loop_pid" 2>/dev/null
  [[ ${#sleepers[@]} -gt 0 ]] && kill "${sleepers[@]}" 2>/dev/null
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$tmp"
  rm -f "/dev/shm${ZERNEL_FAKE_GPU_SHM}"
}
trap cleanup EXIT
[[ $(id -u) -eq 0 ]] || skip "needs root (the kernel's process events)"
need_emulated_gpu
[[ -x $BIN/bench_tax ]] || skip "bench_tax is not built (-DZERNEL_BUILD_BENCH=ON)"

port=$(free_port)
cat > "$tmp/config.toml" <<TOML
[telemetry]
metrics_port = $port
[multi_tenant]
enabled = true
runtime_state_file = "$tmp/run/runtime-tenants.json"
[[tenants]]
id = "jobs"
gpus = 8
class = "training"
[tenants.match]
comm = ["zernel-workload"]
TOML
runs() { metric_or "zernel_scheduler_discovery_runs_total{kind=\"$1\"}" 0; }
tasks() { metric_or 'zernel_scheduler_tasks{type="total"}' -1; }
syncs() { metric_or 'zernel_scheduler_probe_events_total{kind="sync_enter"}' 0; }
# pause SECONDS: waits in bash itself. A `sleep` would be a new process that lives longer than
# 100 ms, which holds NVML's list at every tick for as long as it lives (what item 2 measures).
mkfifo "$tmp/pause"
exec {pause_fd}<> "$tmp/pause"
pause() { read -r -t "$1" -u "$pause_fd" _ || true; }

# The node: 200 processes nobody follows, and short commands run back to back.
ln -s "$(command -v sleep)" "$tmp/other"
for _ in $(seq 200); do "$tmp/other" 3600 & sleepers+=($!); done
(while :; do /bin/true; sleep 0.05; done) &
loop_pid=$!
start_daemon --backend observe --emulated-gpu || exit 1
if grep -q 'discovery lists /proc every' "$tmp/daemon.log"; then
  skip "the daemon could not open the kernel's process events: $(grep -m1 'discovery lists' "$tmp/daemon.log")"
fi
pause 2
check "nothing of the node is followed ($(tasks) tasks)" "[[ \$(tasks) == 0 ]]"
scans0=$(runs proc_scan)

# 1. The job: 2 ranks x (1 + 2 workers) and its launcher, 7 processes, with helper threads in
# every rank; another tenant's inference server, one process on the GPU (a name no tenant
# matches: the default tenant's). 8 processes to follow.
mkdir -p "$tmp/data"
ln -s "$BIN/zernel-workload" "$tmp/infer-server"
t_job=$(date +%s.%N)
"$BIN/zernel-workload" --emulated-gpu --ranks 2 --workers 2 --helpers --steps 1000000 \
  --data-ms 5 --gpu-ms 200 --nccl-ms 10 --optimizer-ms 5 --batch-kib 16 --prefetch-factor 1 \
  --data-dir "$tmp/data" > "$tmp/job.out" 2>&1 &
job_pid=$!
"$tmp/infer-server" --emulated-gpu --ranks 1 --workers 0 --steps 1000000 --data-ms 1 \
  --gpu-ms 20 --nccl-ms 0 --optimizer-ms 1 --batch-kib 16 --data-dir "$tmp/data" \
  > "$tmp/server.out" 2>&1 &
server_pid=$!
for _ in $(seq 60); do
  [[ $(tasks) == 8 ]] && break
  pause 0.05
done
t_followed=$(date +%s.%N)
ms=$(python3 -c "print(int(1000 * ($t_followed - $t_job)))")
check "the job's 7 processes and the server are followed within 3 s of their start ($(tasks) after $ms ms)" \
  "[[ \$(tasks) == 8 && $ms -lt 3000 ]]"
updates=$(runs proc_update)
check "found by the events' updates ($updates), not by listings of /proc ($scans0 at start, $(runs proc_scan) now)" \
  "[[ $updates -ge 1 && \$(runs proc_scan) -le \$((scans0 + 1)) ]]"

# 2. A third tenant's process that maps the same libcuda, with a context on GPUs of its own
# (its own emulated segment: not on this node's NVML), makes 30,000 syncs: none reaches a
# probe, and it is not followed. /metrics holds the counters of the last publish tick (1 s), so
# the window runs from a read before it starts to a read 2.5 s after it ends, and allows the
# followed job's and server's own syncs in it (about 100 a second here).
mkfifo "$tmp/go"
ZERNEL_FAKE_GPU_SHM="/zernel-discovery-other-$$" "$BIN/bench_tax" --rounds 3 --wait-go \
  < "$tmp/go" > "$tmp/tax.out" 2> "$tmp/tax.err" &
tax_pid=$!
exec {go_fd}> "$tmp/go"
for _ in $(seq 100); do
  grep -q '^ready' "$tmp/tax.out" 2>/dev/null && break
  pause 0.05
done
pause 1
check "a process that maps libcuda off this node's GPUs is not followed ($(tasks) tasks)" \
  "[[ \$(tasks) == 8 ]]"
s0=$(syncs)
t0=$EPOCHREALTIME
echo go >&"$go_fd"
exec {go_fd}>&-
wait "$tax_pid"
tax_rc=$?
pause 2.5
t1=$EPOCHREALTIME
s1=$(syncs)
rm -f "/dev/shm/zernel-discovery-other-$$"
sync_ns=$(python3 -c "import json; print(json.loads(open('$tmp/tax.out').read().splitlines()[-1])['cuda_sync_ns'])" 2>/dev/null)
window=$(python3 -c "print(round($t1 - $t0 + 1, 2))")
echo "bench_tax beside the followed job: rc $tax_rc, cuStreamSynchronize ${sync_ns:-?} ns a call; probe syncs counted in its ${window}-s window $((s1 - s0))"
check "bench_tax ran its 30,000 syncs (rc $tax_rc, $(head -1 "$tmp/tax.err" 2>/dev/null))" \
  "[[ $tax_rc -eq 0 && -n '$sync_ns' ]]"
check "its syncs reach no probe: $((s1 - s0)) sync entries counted in a ${window}-s window, the followed processes' (at most 300 a second allowed)" \
  "python3 -c 'import sys; sys.exit(0 if $((s1 - s0)) <= 300 * $window else 1)'"
check "and the followed processes' syncs do ($((s1 - s0)) in that window)" "[[ $((s1 - s0)) -gt 0 ]]"

# 3. NVML's list: every tick while the job is young, every poll tick once it is 30 s old.
# rate SECONDS: nvml_list reads a second over SECONDS, in $per_s. Not in a $(...): its subshell
# would be a process that lives SECONDS.
rate() {
  local a b
  a=$(runs nvml_list)
  pause "$1"
  b=$(runs nvml_list)
  per_s=$(python3 -c "print(round(($b - $a) / $1, 1))")
}
rate 5
young=$per_s
check "NVML's list at every tick while the job's processes are young ($young a second)" \
  "python3 -c 'import sys; sys.exit(0 if $young >= 7 else 1)'"
left=$(python3 -c "print(max(0.0, 32 - ($(date +%s.%N) - $t_job)))")
pause "$left"
# young_others: sets $young_seen to a process of the node aged 0.1-30 s that is no kernel thread
# ("PID COMM", empty: none), from /proc with bash's builtins only (no process of the test's own
# while it measures).
hz=$(getconf CLK_TCK)
young_others() {
  local f line rest up now age
  local -a fld
  young_seen=""
  read -r up _ < /proc/uptime
  now=$(( (10#${up%.*} * 100 + 10#${up#*.}) * hz / 100 ))
  for f in /proc/[0-9]*/stat; do
    { read -r line < "$f"; } 2> /dev/null || continue
    rest=${line##*) }
    read -r -a fld <<< "$rest"
    [[ ${fld[1]} == 0 || ${fld[1]} == 2 ]] && continue  # kthreadd and its kernel threads
    age=$((now - fld[19]))
    if ((age * 10 >= hz && age < 30 * hz)); then
      young_seen="${line%% (*} ${line#*(}"
      young_seen=${young_seen%%)*}
      return
    fi
  done
}
# The window after 32 s, 8 s long, the node's young processes sampled every 0.5 s. On a quiet
# node the list runs at the poll ticks only (2 a second; 3 allowed); where another young process
# was seen (a build beside the test, CI's idle lane), every tick may read it and only the
# quiet node's figure is not checked: the message says which case ran.
a=$(runs nvml_list)
t0=$EPOCHREALTIME
samples=0
busy=0
seen=""
while elapsed_us=$((${EPOCHREALTIME/./} - ${t0/./})); ((elapsed_us < 8000000)); do
  young_others
  samples=$((samples + 1))
  if [[ -n $young_seen ]]; then
    busy=$((busy + 1))
    seen=$young_seen
  fi
  pause 0.5
done
t1=$EPOCHREALTIME
b=$(runs nvml_list)
old=$(python3 -c "print(round(($b - $a) / ($t1 - $t0), 1))")
bound=3
((busy > 0)) && bound=10.5
others="$busy of $samples samples saw another young process${seen:+, e.g. $seen}"
check "NVML's list at the poll ticks once the job is 30 s old, beside the short commands ($old a second; allowed $bound: $others)" \
  "python3 -c 'import sys; sys.exit(0 if $old <= $bound else 1)'"
scans=$(runs proc_scan)
echo "NVML list reads a second: $young while the job is young, $old after 32 s ($others); /proc listings $scans0 at start, $(runs proc_scan) now; event updates $(runs proc_update)"
check "at most the safety net's listing of /proc since the start's ($scans0 then, $scans now)" \
  "[[ $scans -le \$((scans0 + 2)) ]]"
check "the job and the server are still followed ($(tasks))" "[[ \$(tasks) == 8 ]]"

# 4. The job ends: its processes are dropped at their exit events; then the server's.
kill -TERM "$job_pid"
wait "$job_pid" 2>/dev/null
job_pid=""
for _ in $(seq 20); do
  [[ $(tasks) == 1 ]] && break
  pause 0.05
done
check "the job's processes are dropped within 1 s of its exit ($(tasks) left: the server)" \
  "[[ \$(tasks) == 1 ]]"
kill -TERM "$server_pid"
wait "$server_pid" 2>/dev/null
server_pid=""
for _ in $(seq 20); do
  [[ $(tasks) == 0 ]] && break
  pause 0.05
done
check "the server is dropped within 1 s of its exit ($(tasks) left)" "[[ \$(tasks) == 0 ]]"
check "the daemon is still running" "kill -0 $daemon_pid"
stop_daemon
check "the daemon exits 0 on SIGTERM (rc $daemon_rc)" "[[ $daemon_rc -eq 0 ]]"
summary
