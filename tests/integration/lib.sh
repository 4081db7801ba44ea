# Sourced by every integration test (tests/integration/*_test.sh) and benchmark script (bench/),
# right after `set -uo pipefail`:
#   . "$(dirname "$0")/lib.sh"        (bench/: . "$(dirname "$0")/../tests/integration/lib.sh")
# Gives BIN (the build's bin/, from ctest's ZERNEL_BIN), SRC (the source tree, ZERNEL_SOURCE_DIR),
# tmp (the script's own directory: its cleanup removes it), the pass/fail counters, check, skip,
# summary, wait_for, metric, find_cpu_cgroup and the test daemon (start_daemon, stop_daemon,
# need_probes).
#
# Nothing of the machine's: every path a daemon or the CLI would take by default is moved under
# $tmp/run by the environment (the control socket, the settings and userspace journals, the
# delay-accounting holders, the runtime tenants' state file, the config), so a daemon started by
# any means, and the CLI talking to it, never reads or writes /run/zernel, /var/lib/zernel or
# /etc/zernel; start_daemon also refuses a config that names them or port 9093. (A machine where
# a daemon once kept a runtime tenant in /var/lib/zernel/runtime-tenants.json had it restored
# into monitoring_test's daemon, which then saw three tenants.)
BIN=${ZERNEL_BIN:-build/bin}
SRC=${ZERNEL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
tmp=$(mktemp -d)
mkdir -m 0700 "$tmp/run"
export ZERNEL_SCHEDULER_CONFIG="$tmp/config.toml"
export ZERNEL_SCHEDULER_SOCKET="$tmp/run/scheduler.sock"
export ZERNEL_SETTINGS_JOURNAL="$tmp/run/settings.journal"
export ZERNEL_USERSPACE_JOURNAL="$tmp/run/userspace.journal"
export ZERNEL_DELAYACCT_HOLDERS="$tmp/run/delayacct.holders"
export ZERNEL_RUNTIME_STATE="$tmp/run/runtime-tenants.json"
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
# metric NAME: the value of the series NAME (exactly as printed, labels included) in the /metrics
# of the daemon on 127.0.0.1:$port; empty when the series is absent or the daemon does not answer.
metric() {
  curl -sf -m 2 "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m {print $2}'
}
# metric_or NAME DEFAULT: metric NAME, or DEFAULT when it gives nothing.
metric_or() {
  local v
  v=$(metric "$1")
  echo "${v:-$2}"
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
# launch_daemon ARGS...: the test's own daemon, "$BIN/zernel-scheduler" --config $daemon_config
# ARGS... in the background: stdout and stderr in $daemon_log, its pid in daemon_pid. Waits up
# to ${daemon_wait:-10} s (probes loading on a busy machine take seconds) for /metrics on the
# config's metrics_address and metrics_port, and for the control socket when ARGS name one
# (--control-socket PATH); returns 1 at once when the daemon exits. The test's cleanup kills
# $daemon_pid if it is still set. Set for one call, before the name:
#   daemon_config  the config (default $tmp/config.toml)
#   daemon_log     the log (default $tmp/daemon.log)
#   daemon_prefix  words run before the binary (prlimit, setpriv, env ...)
#   daemon_wait    seconds to wait (default 10)
# Refused (returns 1, nothing started): a config whose runtime_state_file lies outside $tmp (the
# machine's runtime tenants) or whose metrics_port is 9093 (the machine's daemon's).
launch_daemon() {
  local config=${daemon_config:-$tmp/config.toml} log=${daemon_log:-$tmp/daemon.log}
  local -a prefix
  read -r -a prefix <<< "${daemon_prefix:-}"
  local dump state mport maddr sock="" a prev=""
  if ! dump=$("$BIN/zernel-scheduler" --config "$config" --dump-config 2>&1); then
    echo "launch_daemon: $config: $dump" | tee "$log"
    return 1
  fi
  state=$(sed -n 's/^runtime_state_file = "\(.*\)"$/\1/p' <<< "$dump")
  mport=$(sed -n 's/^metrics_port = //p' <<< "$dump")
  maddr=$(sed -n 's/^metrics_address = "\(.*\)"$/\1/p' <<< "$dump")
  if [[ -n $state && $state != "$tmp"/* ]] || [[ $mport == 9093 ]]; then
    echo "launch_daemon: $config uses the machine's runtime state ($state) or port ($mport)" |
      tee "$log"
    return 1
  fi
  [[ -z $maddr || $maddr == 0.0.0.0 ]] && maddr=127.0.0.1
  [[ $maddr == *:* ]] && maddr="[$maddr]"
  for a in "$@"; do
    [[ $prev == --control-socket ]] && sock=$a
    [[ $a == --control-socket=* ]] && sock=${a#*=}
    prev=$a
  done
  "${prefix[@]}" "$BIN/zernel-scheduler" --config "$config" "$@" > "$log" 2>&1 &
  daemon_pid=$!
  wait_for "${daemon_wait:-10}" \
    "! kill -0 $daemon_pid 2>/dev/null || { curl -sf -m 1 -o /dev/null http://$maddr:$mport/metrics && [[ -z '$sock' || -S '$sock' ]]; }" &&
    kill -0 "$daemon_pid" 2>/dev/null
}
# start_daemon ARGS...: launch_daemon, counted as the check "daemon serves /metrics"; when it
# does not serve, prints the log's tail and returns 1.
start_daemon() {
  if launch_daemon "$@"; then
    pass
    return 0
  fi
  fail "daemon serves /metrics"
  echo "--- daemon log (${daemon_log:-$tmp/daemon.log})"
  tail -n 30 "${daemon_log:-$tmp/daemon.log}"
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
