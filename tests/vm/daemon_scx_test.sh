#!/usr/bin/env bash
# vm.daemon_scx, one VM boot: the daemon itself with --backend sched_ext. It attaches our
# scheduler (state enabled, root/ops zernel); when an administrator ends it (sysrq-S) the daemon
# reports the exit, keeps running in observe mode and does not reload it (the exit does not ask
# for a restart); a second daemon reattaches, and kill -9 of it returns the machine to the
# default scheduler within 2 s with every task still running.
# shellcheck source=tests/vm/host-lib.sh
. "$(dirname "$(realpath "$0")")/host-lib.sh"
need_bin zernel-scheduler
run_guest <<'GUEST'
. /zernel/guest-lib.sh
printf '[telemetry]\nmetrics_port = 19093\n' > /tmp/z.toml
sleep 1000 & hog=$!

zernel-scheduler --config /tmp/z.toml --backend sched_ext --control-socket '' > /tmp/d1.log 2>&1 &
d=$!
# 30 s, as scx_guest.sh's start_driver: under TCG on a busy host an attach has taken 20 s.
if wait_state enabled 3000 > /dev/null && grep -q zernel /sys/kernel/sched_ext/root/ops; then
  ok "daemon attached our scheduler (ops $(cat /sys/kernel/sched_ext/root/ops))"
else
  bad "daemon did not attach: state=$(state) $(cat /tmp/d1.log)"
fi
echo 1 > /proc/sys/kernel/sysrq
echo S > /proc/sysrq-trigger
wait_state disabled 1000 > /dev/null || bad "sysrq-S: state $(state)"
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
wait_state enabled 3000 > /dev/null || bad "second daemon did not attach: $(cat /tmp/d2.log)"
kill -9 $d
if ms=$(wait_state disabled 200); then
  if kill -0 $hog 2>/dev/null; then ok "kill -9 of the daemon: default scheduler within ${ms} ms (20 ms polls), tasks alive"
  else bad "kill -9: a task died"; fi
else
  bad "kill -9: state $(state) after 2 s"
fi
kill $hog 2>/dev/null
finish
GUEST
