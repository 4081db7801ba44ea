#!/usr/bin/env bash
# vm.daemon_tenants, one VM boot: two tenants declared in the config with 6 and 2 GPUs share a CPU
# 3:1 as tenants under the daemon's sched_ext backend, whatever the number of busy processes each
# has: one CPU hog in the 6-GPU tenant against three in the 2-GPU tenant, all pinned to CPU 1,
# assigned with `zernel-scheduler tenant assign`; CPU time per tenant over 10 s from /proc.
# shellcheck source=tests/vm/host-lib.sh
. "$(dirname "$(realpath "$0")")/host-lib.sh"
need_bin zernel-scheduler
run_guest <<'GUEST'
. /zernel/guest-lib.sh
cat > /tmp/t.toml <<TOML
[multi_tenant]
enabled = true
[telemetry]
metrics_port = 19094
[[tenants]]
id = "big"
gpus = 6
class = "training"
[[tenants]]
id = "small"
gpus = 2
class = "training"
TOML
zernel-scheduler --config /tmp/t.toml --backend sched_ext --control-socket /tmp/z.sock > /tmp/d.log 2>&1 &
d=$!
wait_state enabled 3000 > /dev/null
wait_path /tmp/z.sock 100
b1=$(hog); s1=$(hog); s2=$(hog); s3=$(hog)
for p in $b1; do zernel-scheduler tenant assign --socket /tmp/z.sock --pid $p --tenant big >/dev/null || bad "assign $p"; done
for p in $s1 $s2 $s3; do zernel-scheduler tenant assign --socket /tmp/z.sock --pid $p --tenant small >/dev/null || bad "assign $p"; done
sleep 2  # a few ticks: decisions written
big0=$(sum_ticks $b1); small0=$(sum_ticks $s1 $s2 $s3)
sleep 10
big1=$(sum_ticks $b1); small1=$(sum_ticks $s1 $s2 $s3)
big=$((big1 - big0)); small=$((small1 - small0))
echo "@@ tenant cpu ticks over 10 s on CPU 1: big (1 process) $big, small (3 processes) $small"
if [ $small -gt 0 ]; then
  # ratio * 100 within 15 % of 300
  r=$((big * 100 / small))
  if [ $r -ge 255 ] && [ $r -le 345 ]; then ok "tenant shares 6:2 GPUs -> ${r}/100 (want 300 +- 15 %)"
  else bad "tenant ratio ${r}/100, want 300 +- 15 %"; fi
else
  bad "the small tenant got no CPU"
fi
kill $b1 $s1 $s2 $s3
kill -TERM $d; wait $d || bad "daemon exit $?"
[ "$(state)" = disabled ] || bad "state after exit"
grep -qi "error" /tmp/d.log && echo "@@ log: $(grep -i error /tmp/d.log | head -3)"
finish
GUEST
