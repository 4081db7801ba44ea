#!/usr/bin/env bash
# vm.userspace_containment, one VM boot (cgroup v2, issue 10): under --backend userspace a tenant's
# process stays in the cgroup its owner placed it in, with that group's limits.
#   - /job1 has memory.max 32 MiB. A shell in it is assigned to a tenant (`tenant assign`); its
#     child then allocates 64 MiB and must be OOM-killed in /job1 (memory.events oom_kill), the
#     shell still in /job1 all along. /job1's cpu.weight is the tenant's weight (as `tenant list`
#     gives it) while the daemon runs and the original 100 after SIGTERM.
#   - /job2 holds a process a [[tenants]] rule matches by cgroup path: it stays matched at every
#     one of 20 polls of `status` over 4 s (the backend used to move it to /zernel/tenant-N, where
#     the rule no longer matched: dropped, moved back, re-added).
# Before this change (processes moved to /sys/fs/cgroup/zernel/tenant-N) the allocation succeeded
# outside /job1 (oom_kill 0) and the matched process flapped.
# shellcheck source=tests/vm/host-lib.sh
. "$(dirname "$(realpath "$0")")/host-lib.sh"
need_bin zernel-scheduler
run_guest <<'GUEST'
. /zernel/guest-lib.sh
cg=/sys/fs/cgroup
echo +memory > $cg/cgroup.subtree_control || bad "enable +memory"
mkdir $cg/job1 $cg/job2
echo $((32 * 1024 * 1024)) > $cg/job1/memory.max || bad "memory.max"
[ -e $cg/job1/memory.swap.max ] && echo 0 > $cg/job1/memory.swap.max
w0=$(cat $cg/job1/cpu.weight)
cat > /tmp/t.toml <<TOML
[multi_tenant]
enabled = true
[telemetry]
metrics_port = 19096
[[tenants]]
id = "big"
gpus = 6
class = "training"
[[tenants]]
id = "byjob"
gpus = 2
class = "training"
[tenants.match]
cgroup = ["/job2"]
TOML
export ZERNEL_USERSPACE_JOURNAL=/tmp/run/userspace.journal
zernel-scheduler --config /tmp/t.toml --backend userspace --control-socket /tmp/z.sock > /tmp/d.log 2>&1 &
d=$!
wait_path /tmp/z.sock 1000
# The job: a shell that puts itself in /job1 and, on /tmp/go, runs a child that allocates 64 MiB
# (dd's buffer) beyond memory.max.
sh -c 'echo $$ > /sys/fs/cgroup/job1/cgroup.procs
       while [ ! -e /tmp/go ]; do sleep 0.1; done
       dd if=/dev/zero of=/dev/null bs=64M count=1 2>/tmp/dd.err; echo $? > /tmp/dd.rc
       while :; do sleep 1; done' &
job=$!
sleep 1000 &
m=$!
echo $m > $cg/job2/cgroup.procs
i=0
while [ "$(cgroup_of $job)" != /job1 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
zernel-scheduler tenant assign --socket /tmp/z.sock --pid $job --tenant big >/dev/null || bad "assign $job"
# The tenant's weight as the daemon computes it (JSON keys are sorted: cgroup_weight before id).
want=$(zernel-scheduler tenant list --json --socket /tmp/z.sock |
  awk -F': ' '/"cgroup_weight"/ {w = $2; sub(/,$/, "", w)} /"id": "big"/ {print w}')
i=0
while [ "$(cat $cg/job1/cpu.weight)" != "$want" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
w1=$(cat $cg/job1/cpu.weight)
echo "@@ /job1 cpu.weight: $w0 before, $w1 with the daemon (tenant big: $want)"
[ -n "$want" ] && [ "$w1" = "$want" ] && [ "$w1" != "$w0" ] && ok "/job1 carries the tenant weight $want" \
  || bad "/job1 cpu.weight '$w1', want the tenant's '$want'"
grep -q "pid $job (tenant weight [0-9]*): cpu.weight [0-9]* on its cgroup /job1" /tmp/d.log \
  && ok "the daemon says /job1 carries the tenant" || bad "no log line for pid $job's share"
# The cgroup-matched process, polled 20 times from the tick that first shows it in its tenant
# (discovery finds it at a tick, up to a GPU poll after it moved to /job2), and the job's group
# at each poll.
tenant_of_m() {
  zernel-scheduler status --json --socket /tmp/z.sock | grep -A3 "\"pid\": $m," |
    sed -n 's/.*"tenant": "\{0,1\}\([^",]*\)"\{0,1\},*/\1/p'
}
i=0
while [ "$(tenant_of_m)" != byjob ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
seen=""; away=0
for i in $(seq 20); do
  t=$(tenant_of_m)
  seen="$seen ${t:-absent}"
  [ "$(cgroup_of $job)" = /job1 ] || away=$((away + 1))
  [ "$(cgroup_of $m)" = /job2 ] || away=$((away + 1))
  sleep 0.2
done
echo "@@ tenant of the /job2 process at 20 polls:$seen"
[ -z "$(echo $seen | tr ' ' '\n' | grep -v '^byjob$')" ] && ok "the cgroup-matched process stayed byjob's at every poll" \
  || bad "the cgroup-matched process flapped:$seen"
[ $away = 0 ] && ok "the processes never left /job1 and /job2" || bad "away from their groups at $away polls"
oom0=$(sed -n 's/^oom_kill //p' $cg/job1/memory.events)
touch /tmp/go
i=0
while [ ! -e /tmp/dd.rc ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
oom1=$(sed -n 's/^oom_kill //p' $cg/job1/memory.events)
echo "@@ /job1 memory.events oom_kill: $oom0 before the allocation, $oom1 after; dd exit $(cat /tmp/dd.rc 2>/dev/null)"
[ "${oom1:-0}" -gt "${oom0:-0}" ] && ok "the 64 MiB allocation was OOM-killed in /job1 (memory.max 32 MiB)" \
  || bad "no OOM kill in /job1 (oom_kill $oom0 -> $oom1): memory.max did not apply"
[ "$(cgroup_of $job)" = /job1 ] && ok "the job is still in /job1" \
  || bad "the job is in $(cgroup_of $job)"
kill -TERM $d; wait $d || bad "daemon exit $?"
w2=$(cat $cg/job1/cpu.weight)
echo "@@ /job1 cpu.weight after SIGTERM: $w2"
[ "$w2" = "$w0" ] && ok "SIGTERM: /job1 cpu.weight back to $w0" || bad "after SIGTERM /job1 cpu.weight $w2, want $w0"
[ "$(cgroup_of $job)" = /job1 ] || bad "after SIGTERM the job left /job1"
[ ! -e /sys/fs/cgroup/zernel ] && ok "no /sys/fs/cgroup/zernel" || bad "/sys/fs/cgroup/zernel exists"
[ ! -e /tmp/run/userspace.journal ] || bad "journal left behind"
kill $job $m 2>/dev/null
grep -qiE "error|warn" /tmp/d.log && echo "@@ log: $(grep -iE 'error|warn' /tmp/d.log | head -3)"
finish
GUEST
