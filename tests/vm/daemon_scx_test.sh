#!/usr/bin/env bash
# vm.daemon_scx, one VM boot: the daemon itself with --backend sched_ext. It attaches our
# scheduler (state enabled, root/ops zernel); when an administrator ends it (sysrq-S) the daemon
# reports the exit, keeps running in observe mode and does not reload it (the exit does not ask
# for a restart); a second daemon reattaches, and kill -9 of it returns the machine to the
# default scheduler within 2 s with every task still running.
set -euo pipefail
here=$(dirname "$(realpath "$0")")
build=$(realpath -m "${ZERNEL_BUILD_DIR:-$here/../../build}")
[ -x "$build/bin/zernel-scheduler" ] || { echo "vm.daemon_scx: no zernel-scheduler" >&2; exit 1; }
guest=$(mktemp --suffix=.sh)
trap 'rm -f "$guest"' EXIT
cat > "$guest" <<'GUEST'
#!/bin/sh
# Runs inside the VM as root with build/bin on PATH.
fails=0
ok() { echo "@@ PASS $*"; }
bad() { echo "@@ FAIL $*"; fails=$((fails + 1)); }
state() { cat /sys/kernel/sched_ext/state 2>/dev/null; }
wait_state() {  # wait_state WANT TENTHS; sets waited (tenths of a second, polls of 100 ms)
  waited=0
  while [ "$(state)" != "$1" ] && [ $waited -lt "$2" ]; do sleep 0.1; waited=$((waited + 1)); done
  [ "$(state)" = "$1" ]
}
printf '[telemetry]\nmetrics_port = 19093\n' > /tmp/z.toml
sleep 1000 & hog=$!

zernel-scheduler --config /tmp/z.toml --backend sched_ext --control-socket '' > /tmp/d1.log 2>&1 &
d=$!
if wait_state enabled 100 && grep -q zernel /sys/kernel/sched_ext/root/ops; then
  ok "daemon attached our scheduler (ops $(cat /sys/kernel/sched_ext/root/ops))"
else
  bad "daemon did not attach: state=$(state) $(cat /tmp/d1.log)"
fi
echo 1 > /proc/sys/kernel/sysrq
echo S > /proc/sysrq-trigger
wait_state disabled 50 || bad "sysrq-S: state $(state)"
sleep 1.5
if kill -0 $d 2>/dev/null && grep -q 'the kernel ended the scheduler' /tmp/d1.log &&
   grep -q 'observing only from now on' /tmp/d1.log && [ "$(state)" = disabled ]; then
  ok "after sysrq-S the daemon observes and does not reload: $(grep -o 'ended the scheduler: [^(]*' /tmp/d1.log | head -1)"
else
  bad "after sysrq-S: alive=$(kill -0 $d 2>/dev/null && echo yes || echo no) state=$(state) log: $(cat /tmp/d1.log)"
fi
kill -TERM $d; wait $d; rc=$?
[ $rc -eq 0 ] && ok "SIGTERM after the ejection: exit 0" || bad "SIGTERM rc=$rc"

zernel-scheduler --config /tmp/z.toml --backend sched_ext --control-socket '' > /tmp/d2.log 2>&1 &
d=$!
wait_state enabled 100 || bad "second daemon did not attach: $(cat /tmp/d2.log)"
kill -9 $d
if wait_state disabled 20; then
  ms=$((waited * 100))  # busybox date has no %N: count the 100 ms polls
  if kill -0 $hog 2>/dev/null; then ok "kill -9 of the daemon: default scheduler within ${ms} ms (100 ms polls), tasks alive"
  else bad "kill -9: a task died"; fi
else
  bad "kill -9: state $(state) after 2 s"
fi
kill $hog 2>/dev/null
echo "@@ done: $fails failed"
exit $fails
GUEST
chmod +x "$guest"
exec "$here/run-in-vm.sh" --add "$guest" -- sh "$guest"
