#!/usr/bin/env bash
# The userspace backend on real processes: the daemon (--backend userspace --emulated-gpu) renices
# the threads of a zernel-workload job and leaves an untracked process alone; a process assigned
# to a config tenant stays in the cgroup it was placed in (a private group of its own here), and
# that group carries the tenant's weight (cpu.shares / cpu.weight); SIGTERM puts every nice,
# affinity and weight back; after kill -9 the values stay changed and the next start restores
# them from the journal and says so in its log.
# A private journal (ZERNEL_USERSPACE_JOURNAL) and private cgroups keep it apart from a daemon
# that may run on this machine.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
export ZERNEL_FAKE_GPU_SHM="/zernel-userspace-test-$$"
export ZERNEL_USERSPACE_JOURNAL="$tmp/run/userspace.journal"
daemon_pid=""
pids=()
cleanup() {
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  # The private groups (their members were killed and reaped above).
  if [[ -n ${grp:-} && -d $grp ]]; then
    for g in "$grp"/*/; do rmdir "$g" 2>/dev/null; done
    rmdir "$grp" 2>/dev/null
  fi
  rm -rf "$tmp"
  rm -f "/dev/shm${ZERNEL_FAKE_GPU_SHM}"
}
trap cleanup EXIT

[[ $(id -u) -eq 0 ]] || skip "needs root (nice below 0, cgroups, the control socket)"
need_emulated_gpu
find_cpu_cgroup
cpu_path() {  # the cpu cgroup path of pid $1
  if [[ $cgver == v2 ]]; then sed -n 's/^0:://p' "/proc/$1/cgroup"
  else awk -F: '$2 ~ /(^|,)cpu(,|$)/ {print $3}' "/proc/$1/cgroup"; fi
}
# Private groups the test places processes in, as an owner (systemd, kubelet) would.
grp="$cgdir/zernel-us-test-$$"
mkdir "$grp" 2>/dev/null || skip "cannot create a cgroup under $cgdir"
[[ $cgver == v2 ]] && echo +cpu > "$grp/cgroup.subtree_control" 2>/dev/null
for g in member big small; do mkdir "$grp/$g" || skip "cannot create $grp/$g"; done
[[ -f $grp/member/$weight_file ]] || skip "no $weight_file in $grp/member"
weight_before=$(cat "$grp/member/$weight_file")

port=$(free_port)
cat > "$tmp/config.toml" <<TOML
[general]
phase_eval_interval_ms = 100
gpu_poll_interval_ms = 200

[telemetry]
metrics_port = $port

[multi_tenant]
enabled = true
runtime_state_file = "$tmp/lib/runtime-tenants.json"

[[tenants]]
id = "big"
gpus = 6
class = "training"

[[tenants]]
id = "small"
gpus = 2
class = "training"
TOML
# Both of one class, so that their weights stand 6:2 = 3:1 whatever the class factor.

# The job runs at nice 3 so that "restored" is distinguishable from "reset to 0".
nice -n 3 "$BIN/zernel-workload" --emulated-gpu --ranks 1 --workers 1 --steps 100000 \
  --data-ms 40 --gpu-ms 60 --nccl-ms 0 --optimizer-ms 10 > "$tmp/workload.json" 2>&1 &
wl=$!
pids+=("$wl")
sleep 300 &
untracked=$!
pids+=("$untracked")
nice -n 1 sleep 300 &
member=$!
pids+=("$member")
echo "$member" > "$grp/member/cgroup.procs"
member_cg_before=$(cpu_path "$member")
untracked_cg_before=$(cpu_path "$untracked")

# The job's processes (the launcher and its descendants) and all their threads.
job_tids() {
  local p
  for p in $wl $(pgrep -P "$wl") $(for c in $(pgrep -P "$wl"); do pgrep -P "$c"; done); do
    ls "/proc/$p/task" 2>/dev/null
  done
}
nice_of() { awk '{print $19}' "/proc/$1/stat" 2>/dev/null; }
# "tid nice affinity" for every thread of the job, sorted.
job_state() {
  local t
  for t in $(job_tids); do
    echo "$t $(awk '{print $19}' "/proc/$t/stat" 2>/dev/null) $(taskset -pc "$t" 2>/dev/null | sed 's/.*: //')"
  done | sort -n
}
any_job_thread_reniced() {
  local t n
  for t in $(job_tids); do
    n=$(awk '{print $19}' "/proc/$t/stat" 2>/dev/null) || continue
    [[ -n $n && $n != 3 ]] && return 0
  done
  return 1
}
all_job_threads_at() {
  local t n
  for t in $(job_tids); do
    n=$(awk '{print $19}' "/proc/$t/stat" 2>/dev/null) || continue
    [[ -z $n || $n == "$1" ]] || return 1
  done
  return 0
}
wait_for 10 "[[ \$(job_tids | wc -l) -ge 3 ]]"
# shellcheck disable=SC2034 # used inside the check strings
state_before=$(job_state)
check "the job's threads start at nice 3" "all_job_threads_at 3"

start_run() {  # extra arguments: --emulated-gpu or nothing; lib.sh's launch_daemon
  daemon_log=$tmp/daemon$runs.log launch_daemon --backend userspace "$@" \
    --control-socket "$tmp/ctl.sock"
}
assign_member() {
  "$BIN/zernel-scheduler" tenant assign --pid "$member" --tenant big --socket "$tmp/ctl.sock" \
    > "$tmp/assign$runs.txt" 2>&1
}
# The tenant's weight on the scale of the hierarchy's file, from the daemon's tenant list.
expect_weight() {
  "$BIN/zernel-scheduler" tenant list --json --socket "$tmp/ctl.sock" | python3 -c '
import json, sys
doc = json.load(sys.stdin)
for t in doc if isinstance(doc, list) else doc.get("tenants", []):
    if t["id"] == sys.argv[1]:
        w = t["cgroup_weight"]
        print(w if sys.argv[2] == "v2" else max(2, w * 1024 // 100))' "$1" "$cgver"
}
carries_weight() { [[ $(cat "$grp/member/$weight_file") == "$(expect_weight big)" ]]; }

# ---- run 1: changes while it runs, all back after SIGTERM ----
runs=1
start_run --emulated-gpu
check "daemon 1 says it enforces with the userspace backend" \
  "grep -q 'enforcement backend: userspace' $tmp/daemon1.log"
check "the job's threads are reniced while the daemon runs" "wait_for 20 any_job_thread_reniced"
assign_member
rc=$?
check "tenant assign exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
check "the assigned process's own group carries the tenant's $weight_file" \
  "wait_for 10 carries_weight"
echo "member group $weight_file: $(cat "$grp/member/$weight_file") (was $weight_before; tenant big: $(expect_weight big))"
check "the assigned process stays in its cgroup" "[[ \$(cpu_path $member) == '$member_cg_before' ]]"
check "the daemon says the group carries the tenant's weight" \
  "grep -q 'pid $member (tenant weight [0-9]*): $weight_file [0-9]* on its cgroup' $tmp/daemon1.log"
check "the untracked process keeps nice 0" "[[ \$(nice_of $untracked) == 0 ]]"
check "the untracked process keeps its cgroup" "[[ \$(cpu_path $untracked) == '$untracked_cg_before' ]]"
check "the journal exists while the daemon runs" "[[ -s $ZERNEL_USERSPACE_JOURNAL ]]"

# The tenant's share is the group's, whatever its process count: one CPU hog in "big" (6 GPUs)
# against three in "small" (2 GPUs), all on one CPU, share it 3:1 (by nice alone: 1:3).
if [[ $(nproc) -ge 2 ]]; then
  hogs=()
  for _ in 1 2 3 4; do
    taskset -c 1 sh -c 'while :; do :; done' > /dev/null 2>&1 &
    hogs+=("$!")
  done
  h1=${hogs[0]} h2=${hogs[1]} h3=${hogs[2]} h4=${hogs[3]}
  pids+=("$h1" "$h2" "$h3" "$h4")
  "$BIN/zernel-scheduler" tenant assign --pid "$h1" --tenant big --socket "$tmp/ctl.sock" \
    > /dev/null || fail "tenant assign of hog $h1"
  for h in $h2 $h3 $h4; do
    "$BIN/zernel-scheduler" tenant assign --pid "$h" --tenant small --socket "$tmp/ctl.sock" \
      > /dev/null || fail "tenant assign of hog $h"
  done
  # Each tenant's hogs in a group of their own (placed there by the test, as by an owner).
  echo "$h1" > "$grp/big/cgroup.procs"
  for h in $h2 $h3 $h4; do echo "$h" > "$grp/small/cgroup.procs"; done
  groups_weighted() {
    [[ $(cat "$grp/big/$weight_file") == "$(expect_weight big)" &&
      $(cat "$grp/small/$weight_file") == "$(expect_weight small)" ]]
  }
  check "the hogs' groups carry their tenants' weights" "wait_for 10 groups_weighted"
  echo "hog groups: big $(cat "$grp/big/$weight_file"), small $(cat "$grp/small/$weight_file")"
  ticks() { local t=0 h; for h in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$h/stat"))); done; echo $t; }
  b0=$(ticks "$h1"); s0=$(ticks "$h2" "$h3" "$h4")
  sleep 6
  b1=$(ticks "$h1"); s1=$(ticks "$h2" "$h3" "$h4")
  big=$((b1 - b0)) small=$((s1 - s0))
  ratio=$((small > 0 ? big * 100 / small : 0))
  echo "tenant CPU on one CPU over 6 s: big (1 hog) $big ticks, small (3 hogs) $small ticks, ratio $ratio/100"
  check "tenants with 6 and 2 GPUs share a CPU about 3:1 (got $ratio/100, want 220..400)" \
    "[[ $ratio -ge 220 && $ratio -le 400 ]]"
  kill -KILL "$h1" "$h2" "$h3" "$h4" 2>/dev/null
  wait "$h1" "$h2" "$h3" "$h4" 2>/dev/null  # reaped: no zombie keeps a group busy
fi

kill -TERM "$daemon_pid"
wait "$daemon_pid"
rc=$?
daemon_pid=""
check "daemon 1 exits 0 on SIGTERM (got $rc)" "[[ $rc -eq 0 ]]"
check "after SIGTERM every job thread is back at nice 3" "all_job_threads_at 3"
check "after SIGTERM the job's nice and affinity are as before" "[[ \"\$(job_state)\" == \"\$state_before\" ]]"
check "after SIGTERM the assigned process is back at nice 1" "[[ \$(nice_of $member) == 1 ]]"
check "after SIGTERM the assigned process is still in its cgroup" \
  "[[ \$(cpu_path $member) == '$member_cg_before' ]]"
check "after SIGTERM its group's $weight_file is back at $weight_before" \
  "[[ \$(cat $grp/member/$weight_file) == $weight_before ]]"
check "after SIGTERM the journal is removed" "[[ ! -e $ZERNEL_USERSPACE_JOURNAL ]]"
check "daemon 1 logs the restore" "grep -q 'restored the original nice and affinity of' $tmp/daemon1.log"

# ---- run 2: kill -9 leaves the values changed ----
runs=2
rm -f "$tmp/ctl.sock"
start_run --emulated-gpu
check "daemon 2 renices the job again" "wait_for 20 any_job_thread_reniced"
assign_member
check "daemon 2 gives the assigned process's group the tenant's weight again" \
  "wait_for 10 carries_weight"
kill -KILL "$daemon_pid"
wait "$daemon_pid" 2>/dev/null
daemon_pid=""
check "after kill -9 the job stays reniced" "any_job_thread_reniced"
check "after kill -9 the assigned process's group keeps the tenant's weight" \
  "[[ \$(cat $grp/member/$weight_file) != $weight_before ]]"
check "after kill -9 the journal is left behind" "[[ -s $ZERNEL_USERSPACE_JOURNAL ]]"

# ---- run 3: the next start restores from the journal. Without --emulated-gpu it finds no GPU
# process, so what we see afterwards is the restore alone. The runtime state file would assign
# the member to its tenant again (and renice it): that is runtime_state_test's; here it goes.
runs=3
rm -f "$tmp/ctl.sock" "$tmp/lib/runtime-tenants.json"
start_run
check "daemon 3 says it restored from the journal" \
  "wait_for 10 \"grep -q 'zernel-scheduler pid [0-9]* did not stop cleanly; restored' $tmp/daemon3.log\""
check "daemon 3 restored the job's threads to nice 3" "all_job_threads_at 3"
check "daemon 3 restored the job's nice and affinity" "[[ \"\$(job_state)\" == \"\$state_before\" ]]"
check "daemon 3 restored the assigned process's nice" "[[ \$(nice_of $member) == 1 ]]"
check "daemon 3 restored the assigned process's group weight" \
  "[[ \$(cat $grp/member/$weight_file) == $weight_before ]]"
check "the assigned process never left its cgroup" \
  "[[ \$(cpu_path $member) == '$member_cg_before' ]]"
kill -TERM "$daemon_pid"
wait "$daemon_pid"
rc=$?
daemon_pid=""
check "daemon 3 exits 0 on SIGTERM (got $rc)" "[[ $rc -eq 0 ]]"
check "no journal is left" "[[ ! -e $ZERNEL_USERSPACE_JOURNAL ]]"

# A second daemon against a live daemon's journal refuses to start.
runs=4
rm -f "$tmp/ctl.sock"
start_run --emulated-gpu
wait_for 20 any_job_thread_reniced
"$BIN/zernel-scheduler" --config "$tmp/config.toml" --backend userspace --control-socket \
  "$tmp/ctl2.sock" > "$tmp/second.log" 2>&1
rc=$?
check "a second userspace daemon on the same journal exits 1 (got $rc)" "[[ $rc -eq 1 ]]"
check "it names the running daemon" "grep -q 'belongs to a running zernel-scheduler (pid $daemon_pid)' $tmp/second.log"
kill -TERM "$daemon_pid"
wait "$daemon_pid"
daemon_pid=""
check "the job is restored again" "all_job_threads_at 3"

if [[ $failures -ne 0 ]]; then
  for f in "$tmp"/daemon*.log "$tmp/second.log"; do echo "== $f"; tail -n 20 "$f"; done
fi
summary
