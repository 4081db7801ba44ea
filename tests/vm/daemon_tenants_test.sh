#!/usr/bin/env bash
# vm.daemon_tenants, one VM boot: two tenants declared in the config with 6 and 2 GPUs share a CPU
# 3:1 as tenants under the daemon's sched_ext backend, whatever the number of busy processes each
# has: one CPU hog in the 6-GPU tenant against three in the 2-GPU tenant, all pinned to CPU 1,
# assigned with `zernel-scheduler tenant assign`; CPU time per tenant over 10 s from /proc.
set -euo pipefail
here=$(dirname "$(realpath "$0")")
build=$(realpath -m "${ZERNEL_BUILD_DIR:-$here/../../build}")
[ -x "$build/bin/zernel-scheduler" ] || { echo "vm.daemon_tenants: no zernel-scheduler" >&2; exit 1; }
guest=$(mktemp --suffix=.sh)
trap 'rm -f "$guest"' EXIT
cat > "$guest" <<'GUEST'
#!/bin/sh
fails=0
ok() { echo "@@ PASS $*"; }
bad() { echo "@@ FAIL $*"; fails=$((fails + 1)); }
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
i=0
while [ "$(cat /sys/kernel/sched_ext/state)" != enabled ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
[ -S /tmp/z.sock ] || sleep 1
hog() { taskset -c 1 sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!; }
b1=$(hog); s1=$(hog); s2=$(hog); s3=$(hog)
for p in $b1; do zernel-scheduler tenant assign --socket /tmp/z.sock --pid $p --tenant big >/dev/null || bad "assign $p"; done
for p in $s1 $s2 $s3; do zernel-scheduler tenant assign --socket /tmp/z.sock --pid $p --tenant small >/dev/null || bad "assign $p"; done
sleep 2  # a few ticks: decisions written
cpu() { awk '{print $14 + $15}' /proc/$1/stat; }
sum() { t=0; for p in "$@"; do t=$((t + $(cpu $p))); done; echo $t; }
big0=$(sum $b1); small0=$(sum $s1 $s2 $s3)
sleep 10
big1=$(sum $b1); small1=$(sum $s1 $s2 $s3)
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
[ "$(cat /sys/kernel/sched_ext/state)" = disabled ] || bad "state after exit"
grep -qi "error" /tmp/d.log && echo "@@ log: $(grep -i error /tmp/d.log | head -3)"
echo "@@ done: $fails failed"
exit $fails
GUEST
chmod +x "$guest"
exec "$here/run-in-vm.sh" --add "$guest" -- sh "$guest"
