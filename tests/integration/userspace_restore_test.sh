#!/usr/bin/env bash
# Restore without holes (issue 10): a userspace-backend daemon renices the threads of a tenant
# process and writes the cpu.shares/cpu.weight of another tenant process's own cgroup; the process
# then starts threads after the daemon's last tick (they inherit the changed nice at clone) and the
# daemon is killed with SIGKILL. Then
#   1. `zernel-scheduler restore` puts every thread (old and new) back at its original nice and
#      affinity and the cgroup's weight back at its original, and lists what it did;
#   2. the same again, restored this time by the next start of a daemon with --backend observe;
#   3. `zernel-scheduler restore` refuses while the daemon that owns the journal runs.
# Ticks are 2 s apart, so that the threads started right before the kill -9 are never seen.
# A private journal (ZERNEL_USERSPACE_JOURNAL) and a private cgroup keep it apart from a daemon
# that may run on this machine.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
export ZERNEL_USERSPACE_JOURNAL="$tmp/run/userspace.journal"
export ZERNEL_SETTINGS_JOURNAL="$tmp/run/settings.journal"
daemon_pid=""
pids=()
cgdir=""
grp=""
cleanup() {
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [[ -n $grp && -d $grp ]]; then
    if [[ -d $grp/job ]]; then
      # Whatever a failed run left in the group.
      while read -r x; do kill -KILL "$x" 2>/dev/null; done < "$grp/job/cgroup.procs"
      sleep 0.2
      rmdir "$grp/job" 2>/dev/null
    fi
    rmdir "$grp" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

[[ $(id -u) -eq 0 ]] || skip "needs root (nice below 0, cgroups, the control socket)"
command -v python3 > /dev/null || skip "needs python3 (the threaded test process)"
find_cpu_cgroup
grp="$cgdir/zernel-restore-test-$$"
mkdir "$grp" 2>/dev/null || skip "cannot create a cgroup under $cgdir"
[[ $cgver == v2 ]] && echo +cpu > "$grp/cgroup.subtree_control" 2>/dev/null
mkdir "$grp/job" || skip "cannot create $grp/job"
[[ -f $grp/job/$weight_file ]] || skip "no $weight_file in $grp/job"
weight_before=$(cat "$grp/job/$weight_file")
cpu_path() {
  if [[ $cgver == v2 ]]; then sed -n 's/^0:://p' "/proc/$1/cgroup"
  else awk -F: '$2 ~ /(^|,)cpu(,|$)/ {print $3}' "/proc/$1/cgroup"; fi
}

port=$(free_port)
cat > "$tmp/config.toml" <<TOML
[general]
phase_eval_interval_ms = 2000
gpu_poll_interval_ms = 2000

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

# A process that starts one more thread on each SIGUSR1 (they sleep), in $q. Started at nice 2, so
# that "restored" is told apart from "reset to 0".
threaded() {
  nice -n 2 python3 -c '
import signal, threading, time
def spawn(*_):
    threading.Thread(target=lambda: time.sleep(1e6), daemon=True).start()
signal.signal(signal.SIGUSR1, spawn)
spawn()
while True:
    time.sleep(1)
' > /dev/null 2>&1 &
  q=$!
  pids+=("$q")
}
nthreads() { ls "/proc/$1/task" 2>/dev/null | wc -l; }
# "tid nice affinity" of every thread.
thread_state() {
  local t
  for t in $(ls "/proc/$1/task" | sort -n); do
    echo "$t $(awk '{print $19}' "/proc/$1/task/$t/stat") $(taskset -pc "$t" 2>/dev/null | sed 's/.*: //')"
  done
}
all_threads_at() {  # pid nice
  local t
  for t in $(ls "/proc/$1/task"); do
    [[ $(awk '{print $19}' "/proc/$1/task/$t/stat") == "$2" ]] || return 1
  done
}
all_threads_below() {  # pid nice
  local t
  for t in $(ls "/proc/$1/task"); do
    (($(awk '{print $19}' "/proc/$1/task/$t/stat") < $2)) || return 1
  done
}
start_run() {  # log name, backend: lib.sh's launch_daemon
  rm -f "$tmp/ctl.sock"
  daemon_log=$tmp/$1.log launch_daemon --backend "$2" --control-socket "$tmp/ctl.sock"
}
assign() {
  "$BIN/zernel-scheduler" tenant assign --pid "$1" --tenant big --socket "$tmp/ctl.sock" > /dev/null
}

# One round: a daemon changes things, threads are born after its last tick, kill -9.
# Sets q (the threaded process in the root group: its tenant share goes by nice) and p (a process
# alone in its own cgroup: its tenant share goes to that group's weight).
crash_round() {  # name
  threaded
  sleep 1000 &
  p=$!
  pids+=("$p")
  echo "$p" > "$grp/job/cgroup.procs"
  wait_for 10 "[[ \$(nthreads $q) -ge 2 ]]"
  q_before=$(thread_state "$q")
  p_path=$(cpu_path "$p")
  start_run "$1" userspace
  assign "$q" || fail "$1: tenant assign $q"
  assign "$p" || fail "$1: tenant assign $p"
  check "$1: the threads of the process in the root group are reniced (below 2)" \
    "wait_for 10 'all_threads_below $q 2'"
  check "$1: its cgroup's $weight_file is the tenant's (was $weight_before, got $(cat "$grp/job/$weight_file"))" \
    "wait_for 10 '[[ \$(cat $grp/job/$weight_file) != $weight_before ]]'"
  check "$1: the process stays in its own cgroup ($p_path)" "[[ \$(cpu_path $p) == '$p_path' ]]"
  check "$1: the daemon says the root-group process goes by nice" \
    "grep -q 'pid $q (tenant weight [0-9]*): nice shift' $tmp/$1.log"
  check "$1: the daemon says the other carries its weight in its cgroup" \
    "grep -q 'pid $p (tenant weight [0-9]*): $weight_file [0-9]* on its cgroup' $tmp/$1.log"
  "$BIN/zernel-scheduler" status --json --socket "$tmp/ctl.sock" > "$tmp/$1.status.json"
  check "$1: /status says how each carries its tenant's weight" \
    "grep -q '\"tenant_share\": \"nice shift .*root cgroup' $tmp/$1.status.json &&
     grep -q '\"tenant_share\": \"$weight_file [0-9]* on its cgroup /zernel-restore-test-$$/job' $tmp/$1.status.json"
  # Right after a tick: two threads the daemon will never see (it ticks every 2 s).
  local n0
  n0=$(nthreads "$q")
  kill -USR1 "$q"
  wait_for 2 "[[ \$(nthreads $q) -ge $((n0 + 1)) ]]"
  kill -USR1 "$q"
  wait_for 2 "[[ \$(nthreads $q) -ge $((n0 + 2)) ]]"
  kill -KILL "$daemon_pid"
  wait "$daemon_pid" 2> /dev/null
  daemon_pid=""
  check "$1: $((n0 + 2)) threads after two were born past the last tick (got $(nthreads "$q"))" \
    "[[ \$(nthreads $q) -eq $((n0 + 2)) ]]"
  check "$1: the new threads inherited the changed nice" "all_threads_below $q 2"
  check "$1: after kill -9 the journal is left behind" "[[ -s $ZERNEL_USERSPACE_JOURNAL ]]"
  check "$1: after kill -9 the cgroup keeps the tenant's $weight_file" \
    "[[ \$(cat $grp/job/$weight_file) != $weight_before ]]"
}
restored() {  # name
  check "$1: every thread (old and new) is back at nice 2" "all_threads_at $q 2"
  local now
  now=$(thread_state "$q")
  check "$1: the old threads' nice and affinity are as before" \
    "[[ \$(comm -23 <(echo \"\$q_before\" | sort) <(echo \"\$now\" | sort) | wc -l) -eq 0 ]]"
  check "$1: the new threads have the process's original affinity" \
    "[[ \$(thread_state $q | awk '{print \$3}' | sort -u | wc -l) -eq 1 ]]"
  check "$1: the cgroup's $weight_file is back at $weight_before (got $(cat "$grp/job/$weight_file"))" \
    "[[ \$(cat $grp/job/$weight_file) == $weight_before ]]"
  check "$1: the process is still in its own cgroup" "[[ \$(cpu_path $p) == '$p_path' ]]"
  check "$1: the journal is gone" "[[ ! -e $ZERNEL_USERSPACE_JOURNAL ]]"
  kill -KILL "$q" "$p" 2> /dev/null
  wait "$q" "$p" 2> /dev/null
}

# ---- 1: restore by hand ----
crash_round crash1
"$BIN/zernel-scheduler" restore > "$tmp/restore.out" 2>&1
rc=$?
cat "$tmp/restore.out"
check "restore exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
check "restore lists the process with its threads born after the last journal write" \
  "grep -q 'pid $q (python3): nice/affinity of [0-9]* thread(s) restored (2 born after' $tmp/restore.out"
check "restore lists the cgroup" \
  "grep -q 'cgroup $grp/job: $weight_file [0-9]* -> $weight_before (the original)' $tmp/restore.out"
check "restore prints a summary" "grep -q '^restored 2 process(es)' $tmp/restore.out"
restored restore
"$BIN/zernel-scheduler" restore > "$tmp/restore2.out" 2>&1
check "a second restore finds nothing (exit $?)" "grep -q 'nothing to restore' $tmp/restore2.out"

# ---- 2: the next start, with --backend observe ----
crash_round crash2
start_run observe observe
check "an observe daemon's start restores the journal and says so" \
  "grep -q 'userspace journal: zernel-scheduler pid [0-9]* did not stop cleanly; restored 2 process(es)' $tmp/observe.log"
check "it lists the threads born after the last journal write" \
  "grep -q 'pid $q (python3): nice/affinity of [0-9]* thread(s) restored (2 born after' $tmp/observe.log"
restored observe
kill -TERM "$daemon_pid"
wait "$daemon_pid"
daemon_pid=""

# ---- 3: restore refuses while the owner runs ----
start_run live userspace
threaded
assign "$q"
wait_for 10 "[[ -s $ZERNEL_USERSPACE_JOURNAL ]]"
"$BIN/zernel-scheduler" restore > "$tmp/refused.out" 2>&1
rc=$?
check "restore refuses while the daemon runs (exit $rc)" "[[ $rc -eq 1 ]]"
check "it names the running daemon" \
  "grep -q 'belongs to a running zernel-scheduler (pid $daemon_pid)' $tmp/refused.out"
kill -TERM "$daemon_pid"
wait "$daemon_pid"
daemon_pid=""
check "SIGTERM restores the live daemon's changes" "all_threads_at $q 2"

if [[ $failures -ne 0 ]]; then
  for f in "$tmp"/*.log; do echo "== $f"; tail -n 25 "$f"; done
fi
summary
