# Sourced by every integration test (tests/integration/*_test.sh), right after `set -uo pipefail`:
#   . "$(dirname "$0")/lib.sh"
# Gives BIN (the build's bin/, from ctest's ZERNEL_BIN), SRC (the source tree, ZERNEL_SOURCE_DIR),
# the pass/fail counters, check, skip, summary, wait_for, find_cpu_cgroup and a test daemon
# (start_daemon, stop_daemon, need_probes).
BIN=${ZERNEL_BIN:-build/bin}
SRC=${ZERNEL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
failures=0
passed=0
pass() { passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# check DESCRIPTION CONDITION: CONDITION is eval'ed; when false, a failure named DESCRIPTION.
check() { if eval "$2"; then pass; else fail "$1"; fi; }
# summary: the counts, last; returns 0 only without failures (use it as the script's last line).
summary() {
  echo "$passed passed, $failures failed"
  [[ $failures -eq 0 ]]
}
# skip REASON: this machine cannot run the test. Exits 77, which ctest reports as skipped
# (SKIP_RETURN_CODE), never as passed; with failures already counted it is a failure (exit 1).
skip() {
  echo "SKIP: $*"
  summary || exit 1
  exit 77
}
# need_emulated_gpu: skips unless zernel-workload and the emulated GPU's libraries are built.
need_emulated_gpu() {
  [[ -x $BIN/zernel-workload && -f $BIN/../lib/fake/libnvidia-ml.so.1 &&
    -f $BIN/../lib/fake/libcuda.so.1 ]] || skip "zernel-workload or the emulated GPU is not built"
}
# free_port: a TCP port on 127.0.0.1 that nothing listens on (the kernel's pick for port 0).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# wait_for SECONDS CONDITION...: polls the eval'ed CONDITION every 0.1 s for up to SECONDS.
wait_for() {
  local limit=$1
  shift
  for _ in $(seq $((limit * 10))); do
    eval "$*" && return 0
    sleep 0.1
  done
  return 1
}
# find_cpu_cgroup: the cpu hierarchy, as the userspace backend finds it: cgroup2 with the cpu
# controller, else v1 "cpu". Sets cgdir (its mount), cgver (v2 or v1) and weight_file
# (cpu.weight or cpu.shares); skips the test when no cpu hierarchy is mounted.
find_cpu_cgroup() {
  local mnt rest fstype
  cgdir="" cgver=""
  while read -r _ _ _ _ mnt _ rest; do
    fstype=${rest#*- }
    fstype=${fstype%% *}
    if [[ $fstype == cgroup2 ]] && grep -qw cpu "$mnt/cgroup.controllers" 2>/dev/null; then
      cgdir=$mnt cgver=v2
      break
    fi
    if [[ $fstype == cgroup && -z $cgdir && ${rest##* } =~ (^|,)cpu(,|$) ]]; then
      cgdir=$mnt cgver=v1
    fi
  done < /proc/self/mountinfo
  [[ -n $cgdir ]] || skip "no cpu cgroup hierarchy is mounted"
  weight_file=cpu.shares
  [[ $cgver == v2 ]] && weight_file=cpu.weight
}
# A test's own daemon. start_daemon ARGS...: runs "$BIN/zernel-scheduler" --config
# "$tmp/config.toml" ARGS... in the background (stdout and stderr in $tmp/daemon.log, its pid in
# daemon_pid) and waits up to ${daemon_wait:-10} s (probes loading on a busy machine take
# seconds) for /metrics on 127.0.0.1:$port, the metrics_port the test wrote into the config
# (free_port). Counts "daemon serves /metrics" as a check; when it does not serve, prints the
# log's tail and returns 1. The test's cleanup kills $daemon_pid if it is still set.
start_daemon() {
  "$BIN/zernel-scheduler" --config "$tmp/config.toml" "$@" > "$tmp/daemon.log" 2>&1 &
  daemon_pid=$!
  if wait_for "${daemon_wait:-10}" "curl -sf http://127.0.0.1:$port/metrics > /dev/null"; then
    pass
    return 0
  fi
  fail "daemon serves /metrics"
  echo "--- daemon log"
  tail -n 30 "$tmp/daemon.log"
  return 1
}
# stop_daemon: SIGTERM to $daemon_pid and wait for it; its exit status in daemon_rc.
stop_daemon() {
  kill -TERM "$daemon_pid"
  wait "$daemon_pid"
  daemon_rc=$?
  daemon_pid=""
}
# need_probes: skips (stopping the daemon) when this build has no BPF probes
# (-DZERNEL_BPF=OFF); a build with them must have loaded them (a check).
need_probes() {
  if grep -q 'probes are not in this build' "$tmp/daemon.log"; then
    stop_daemon
    skip "this build has no BPF probes (-DZERNEL_BPF=OFF)"
  fi
  check "the probes are loaded" "! grep -q 'probes are off' $tmp/daemon.log"
}
