#!/usr/bin/env bash
# vm.userspace_cgroup2, one VM boot: the userspace backend on a cgroup v2 machine (the guest mounts
# cgroup2 with the cpu controller). Two config tenants with 6 and 2 GPUs (one class); one CPU hog
# in the big tenant against three in the small one, all pinned to CPU 1, each tenant's hogs in a
# group of their own (/big, /small, placed there as an owner would), assigned with
# `zernel-scheduler tenant assign`. The backend leaves them there and gives /big and /small the
# tenants' cpu.weight (CPU time over 10 s from /proc is printed; the big tenant must get more than
# the small one, which by nice alone would get 3x more). SIGTERM puts the weights back, the hogs
# never leave their groups, and no /sys/fs/cgroup/zernel is ever made.
# shellcheck source=tests/vm/host-lib.sh
. "$(dirname "$(realpath "$0")")/host-lib.sh"
need_bin zernel-scheduler
run_guest <<'GUEST'
. /zernel/guest-lib.sh
cat > /tmp/t.toml <<TOML
[multi_tenant]
enabled = true
[telemetry]
metrics_port = 19095
[[tenants]]
id = "big"
gpus = 6
class = "training"
[[tenants]]
id = "small"
gpus = 2
class = "training"
TOML
mkdir /sys/fs/cgroup/big /sys/fs/cgroup/small
export ZERNEL_USERSPACE_JOURNAL=/tmp/run/userspace.journal
zernel-scheduler --config /tmp/t.toml --backend userspace --control-socket /tmp/z.sock > /tmp/d.log 2>&1 &
d=$!
wait_path /tmp/z.sock 1000
b1=$(hog); s1=$(hog); s2=$(hog); s3=$(hog)
echo $b1 > /sys/fs/cgroup/big/cgroup.procs
for p in $s1 $s2 $s3; do echo $p > /sys/fs/cgroup/small/cgroup.procs; done
before=$(cat /proc/$b1/cgroup); before_s=$(cat /proc/$s2/cgroup)
for p in $b1; do zernel-scheduler tenant assign --socket /tmp/z.sock --pid $p --tenant big >/dev/null || bad "assign $p"; done
for p in $s1 $s2 $s3; do zernel-scheduler tenant assign --socket /tmp/z.sock --pid $p --tenant small >/dev/null || bad "assign $p"; done
# The tenants' weights as the daemon computes them (JSON keys are sorted: cgroup_weight before id).
tw() { zernel-scheduler tenant list --json --socket /tmp/z.sock |
  awk -F': ' -v id="\"$1\"" '/"cgroup_weight"/ {w = $2; sub(/,$/, "", w)} $0 ~ "\"id\": " id {print w}'; }
want_b=$(tw big); want_s=$(tw small)
i=0
while [ "$(cat /sys/fs/cgroup/small/cpu.weight)" != "$want_s" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
gb=$(cgroup_of $b1); gs=$(cgroup_of $s1)
echo "@@ groups: big $gb, small $gs"
[ "$gb" = /big ] && ok "big's hog stays in /big" || bad "big's hog is in '$gb'"
[ "$gs" = /small ] && ok "small's hogs stay in /small" || bad "small's hog is in '$gs'"
wb=$(cat /sys/fs/cgroup/big/cpu.weight); ws=$(cat /sys/fs/cgroup/small/cpu.weight)
echo "@@ cpu.weight: /big $wb (tenant $want_b), /small $ws (tenant $want_s)"
[ -n "$want_b" ] && [ "$wb" = "$want_b" ] && ok "/big cpu.weight $wb" || bad "/big cpu.weight '$wb', want '$want_b'"
[ -n "$want_s" ] && [ "$ws" = "$want_s" ] && ok "/small cpu.weight $ws" || bad "/small cpu.weight '$ws', want '$want_s'"
big0=$(sum_ticks $b1); small0=$(sum_ticks $s1 $s2 $s3)
sleep 10
big1=$(sum_ticks $b1); small1=$(sum_ticks $s1 $s2 $s3)
big=$((big1 - big0)); small=$((small1 - small0))
echo "@@ tenant cpu ticks over 10 s on CPU 1: big (1 process) $big, small (3 processes) $small"
# Reported, not checked: under TCG this kernel gives about 1.5:1 for cpu.weight 150:50 also with
# groups made by hand (no daemon), so the VM cannot judge the ratio. The host's integration test
# (cgroup v1, cpu.shares) checks it: 3.0:1 there.
[ $big -gt $small ] && ok "the big tenant got more CPU than the small one with 3x its processes" \
  || bad "big tenant $big ticks <= small tenant $small ticks"
kill -TERM $d; wait $d || bad "daemon exit $?"
[ "$(cat /proc/$b1/cgroup)" = "$before" ] && ok "SIGTERM: hogs still in their cgroup" || bad "after SIGTERM: $(cat /proc/$b1/cgroup)"
[ "$(cat /proc/$s2/cgroup)" = "$before_s" ] || bad "after SIGTERM small's hog: $(cat /proc/$s2/cgroup)"
wb=$(cat /sys/fs/cgroup/big/cpu.weight); ws=$(cat /sys/fs/cgroup/small/cpu.weight)
[ "$wb" = 100 ] && [ "$ws" = 100 ] && ok "SIGTERM: cpu.weight back to 100" || bad "after SIGTERM cpu.weight $wb/$ws"
n=$(awk '{print $19}' /proc/$b1/stat)
[ "$n" = 0 ] && ok "SIGTERM: nice back to 0" || bad "after SIGTERM nice $n"
[ ! -e /sys/fs/cgroup/zernel ] && ok "no /sys/fs/cgroup/zernel was made" || bad "/sys/fs/cgroup/zernel exists"
[ ! -e /tmp/run/userspace.journal ] || bad "journal left behind"
kill $b1 $s1 $s2 $s3
grep -qiE "error|warn" /tmp/d.log && echo "@@ log: $(grep -iE 'error|warn' /tmp/d.log | head -3)"
finish
GUEST
