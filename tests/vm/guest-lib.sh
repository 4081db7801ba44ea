# shellcheck shell=dash
# shellcheck disable=SC2034 # SX and fails are the sourcing script's
# The guest side's shared helpers (busybox sh), in every VM that run-in-vm.sh boots as
# /zernel/guest-lib.sh; a guest script starts with `. /zernel/guest-lib.sh`. The VM itself (mounts,
# cgroup controllers, PATH with build/bin first, root) is guest-init.sh's and run-in-vm.sh's.
#
# Results are "@@ " lines on stdout, which the host tests and benchmarks grep; `fails` counts the
# failed checks and `finish` exits with it.
SX=/sys/kernel/sched_ext
fails=0

# r MSG: a result line.  ok MSG / bad MSG: a passed / failed check (bad counts it).
r() { echo "@@ $*"; }
ok() { r "PASS $*"; }
bad() { fails=$((fails + 1)); r "FAIL $*"; }
# finish: the closing line and the exit status, the number of failed checks.
finish() {
  r "done: $fails failed"
  exit $fails
}

# state: the sched_ext state (enabled, disabled, ...), empty without sched_ext.
state() { cat $SX/state 2> /dev/null; }
# uptime_cs: CLOCK_BOOTTIME in centiseconds (busybox date has no %N).
uptime_cs() { awk '{ split($1, a, "."); print a[1] * 100 + a[2] }' /proc/uptime; }
# wait_state WANT TIMEOUT_CS: polls every 20 ms until the state is WANT; prints the wait in ms,
# or fails after TIMEOUT_CS centiseconds.
wait_state() {
  _t0=$(uptime_cs)
  while [ "$(state)" != "$1" ]; do
    [ $(($(uptime_cs) - _t0)) -gt "$2" ] && return 1
    usleep 20000
  done
  echo $((($(uptime_cs) - _t0) * 10))
}
# wait_path PATH TIMEOUT_CS: polls every 20 ms until PATH exists (a socket, a file).
wait_path() {
  _t0=$(uptime_cs)
  while [ ! -e "$1" ]; do
    [ $(($(uptime_cs) - _t0)) -gt "$2" ] && return 1
    usleep 20000
  done
}

# ticks PID: CPU time in 10 ms units, from the scheduler's own run time (/proc/PID/schedstat,
# ns; utime + stime are sampled at ticks and, with more vCPUs than host cores, add up to more
# than the wall time).
ticks() { awk '{ printf "%d\n", $1 / 10000000 }' "/proc/$1/schedstat"; }
# stat_ticks PID: utime + stime from /proc/PID/stat (clock ticks).
stat_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# sum_ticks PID...: stat_ticks summed over the PIDs.
sum_ticks() {
  _t=0
  for _p in "$@"; do _t=$((_t + $(stat_ticks "$_p"))); done
  echo $_t
}
# hog [CPU]: starts a shell busy loop pinned to CPU (1) in the background; prints its pid.
hog() { taskset -c "${1:-1}" sh -c 'while :; do :; done' > /dev/null 2>&1 & echo $!; }
# cgroup_of PID: the process's cgroup v2 path (/job1).
cgroup_of() { sed -n 's/^0:://p' "/proc/$1/cgroup"; }

# bpf_progs [all]: "NAME CALLS NS" per loaded struct_ops program (the sched_ext scheduler's
# callbacks; with "all", every loaded program: the daemon's probes too), from the kernel's BPF
# run-time statistics (kernel.bpf_stats_enabled on, bpftool in PATH).
bpf_progs() {
  bpftool prog show 2> /dev/null | awk -v all="${1:-}" '$2 == "struct_ops" || all != "" {
    n = ""; c = 0; t = 0
    for (i = 1; i < NF; i++) { if ($i == "name") n = $(i + 1); if ($i == "run_time_ns") t = $(i + 1)
      if ($i == "run_cnt") c = $(i + 1) }
    if (n != "") print n, c, t }'
}
# bpf_progs_delta WHO BEFORE AFTER: "@@ WHO NAME N ns/call M calls" for each program that ran
# between two bpf_progs files.
bpf_progs_delta() {
  awk -v who="$1" 'NR == FNR { c[$1] = $2; t[$1] = $3; next }
    $2 > c[$1] { printf "@@ %s %s %d ns/call %d calls\n", who, $1, ($3 - t[$1]) / ($2 - c[$1]),
      $2 - c[$1] }' "$2" "$3"
}
