#!/usr/bin/env bash
# Tenants from the kubelet's pod-resources API ([kubernetes], docs/kubernetes.md), end to end:
# zernel-pod-resources-server speaks the real protocol (gRPC on a unix socket) from a JSON file,
# sleeping processes sit in cgroups named as the kubelet names them (systemd driver) with the
# environment a container runtime gives them, and the daemon (observe backend, multi_tenant on)
# is asked with `tenant list`. Pods appear, change and vanish; malformed answers (a bad name, too
# many pods, an answer past max_message_bytes), a kubelet that never answers and the socket going
# away and coming back are each logged once while the daemon keeps ticking and serving /metrics.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

[[ $(id -u) -eq 0 ]] || skip "needs root (cgroups, and the control socket accepts only uid 0)"
[[ -x $BIN/zernel-pod-resources-server ]] || skip "zernel-pod-resources-server is not built"
cg2=$(awk '$9 == "cgroup2" && $4 == "/" { print $5; exit }' /proc/self/mountinfo)
[[ -n $cg2 && -w $cg2 ]] || skip "no writable cgroup v2 hierarchy"

chmod 755 "$tmp"
sock="$tmp/ctl.sock"
kubelet="$tmp/kubelet.sock"
pods="$tmp/pods.json"
port=$(free_port)
daemon_pid=""
server_pid=""
sleepers=()
made=()  # cgroup directories this test made, innermost last
top="$cg2/kubepods.slice"
uid1=$(cat /proc/sys/kernel/random/uuid)
uid2=$(cat /proc/sys/kernel/random/uuid)
uid3=$(cat /proc/sys/kernel/random/uuid)

cleanup() {
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  [[ -n $server_pid ]] && kill -KILL "$server_pid" 2>/dev/null
  for p in "${sleepers[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  for ((i = ${#made[@]} - 1; i >= 0; i--)); do rmdir "${made[i]}" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
export ZERNEL_SETTINGS_JOURNAL="$tmp/settings.journal"
export ZERNEL_USERSPACE_JOURNAL="$tmp/userspace.journal"
export ZERNEL_DELAYACCT_HOLDERS="$tmp/delayacct.holders"
Z() { "$BIN/zernel-scheduler" "$@"; }

mkcg() {  # mkcg DIR: makes it, remembered for the cleanup
  [[ -d $1 ]] && return
  mkdir "$1" && made+=("$1")
}

# pod_process UID HOSTNAME VISIBLE_DEVICES: a sleeper in the pod's container cgroup, with the
# environment the runtime and the device plugin give a container.
pod_process() {
  local pod="$top/kubepods-pod${1//-/_}.slice"
  mkcg "$top"
  mkcg "$pod"
  mkcg "$pod/cri-containerd-${1:0:8}.scope"
  env -i HOSTNAME="$2" NVIDIA_VISIBLE_DEVICES="$3" sleep 600 &
  sleepers+=($!)
  echo $! > "$pod/cri-containerd-${1:0:8}.scope/cgroup.procs"
}

write_pods() {  # write_pods JSON: replaces the server's file at once
  printf '%s\n' "$1" > "$pods.new" && mv "$pods.new" "$pods"
}

pod() {  # pod NAMESPACE NAME RESOURCE IDS...: one pod's JSON
  local ns=$1 name=$2 res=$3
  shift 3
  local ids
  ids=$(printf '"%s",' "$@")
  printf '{"name":"%s","namespace":"%s","containers":[{"name":"main","devices":[{"resource_name":"%s","device_ids":[%s]}]}]}' \
    "$name" "$ns" "$res" "${ids%,}"
}

alloc='"allocatable":[{"resource_name":"nvidia.com/gpu","device_ids":["GPU-a","GPU-b","GPU-c","GPU-r::0","GPU-r::1","GPU-r::2","GPU-r::3"]}]'

start_server() {
  "$BIN/zernel-pod-resources-server" --socket "$kubelet" --pods "$pods" >> "$tmp/server.log" 2>&1 &
  server_pid=$!
  wait_for 5 "[[ -S $kubelet ]]" || fail "pod-resources server did not create its socket"
}

list() { Z tenant list --socket "$sock" 2>&1; }
# row ID: the tenant's line of `tenant list`
row() { list | awk -v id="$1" '$1 == id'; }
count_log() { grep -c -- "$1" "$tmp/daemon.log"; }

cat > "$tmp/config.toml" <<TOML
[general]
phase_eval_interval_ms = 50
gpu_poll_interval_ms = 100

[telemetry]
metrics_port = $port

[multi_tenant]
enabled = true
runtime_state_file = ""

[kubernetes]
enabled = true
pod_resources_socket = "$kubelet"
refresh_ms = 200
timeout_ms = 150
max_pods = 100
max_message_bytes = 1048576
namespace_classes = { serving = "inference" }

[[tenants]]
id = "k8s:team-c:dup"
gpus = 1
TOML

write_pods "{\"pods\":[$(pod team-a train-0 nvidia.com/gpu GPU-a GPU-b),$(pod serving infer-0 nvidia.com/gpu GPU-r::1),$(pod team-c dup nvidia.com/gpu GPU-c),$(pod team-a cpu-only example.com/nic eth1)],$alloc}"
pod_process "$uid1" train-0 GPU-a,GPU-b
pod_process "$uid2" infer-0 GPU-r
start_server

start_daemon --backend observe --control-socket "$sock"

# --- pods appear -----------------------------------------------------------------------------
wait_for 10 "row k8s:team-a:train-0 | grep -q kubelet" || fail "train-0 never became a tenant"
wait_for 5 "row k8s:team-a:train-0 | awk '{exit !(\$6 == 1)}'" ||
  fail "train-0's process is not in its tenant: $(row k8s:team-a:train-0)"
list > "$tmp/list1.txt"
check "train-0: 2 GPUs, class training, from the kubelet" \
  "grep -qE '^k8s:team-a:train-0 +2.000 +training .* kubelet$' $tmp/list1.txt"
wait_for 5 "row k8s:serving:infer-0 | awk '{exit !(\$6 == 1)}'" || fail "infer-0's process not placed"
check "infer-0: a quarter GPU (1 of 4 replicas), class inference from namespace_classes" \
  "grep -qE '^k8s:serving:infer-0 +0.250 +inference ' $tmp/list1.txt"
check "a pod without GPUs is no tenant" "! grep -q cpu-only $tmp/list1.txt"
check "the file's tenant of the same id wins" "grep -qE '^k8s:team-c:dup +1 .* config$' $tmp/list1.txt"
check "the conflict is logged once" "[[ \$(count_log 'k8s:team-c:dup\" is defined by the configuration') -eq 1 ]]"
Z tenant remove --id k8s:team-a:train-0 --socket "$sock" > "$tmp/remove.txt" 2>&1
check "tenant remove of a kubelet tenant is refused (exit 1)" "[[ $? -eq 1 ]]"
check "... saying why" "grep -q 'comes from the kubelet' $tmp/remove.txt"
check "connection logged" "grep -q 'kubernetes: pod-resources: connected to $kubelet' $tmp/daemon.log"

# --- pods change and vanish ------------------------------------------------------------------
pod_process "$uid3" train-1 GPU-c
write_pods "{\"pods\":[$(pod team-a train-0 nvidia.com/gpu GPU-a GPU-b GPU-c),$(pod team-a train-1 nvidia.com/mig-3g.40gb MIG-x)],$alloc}"
wait_for 5 "row k8s:team-a:train-0 | grep -qE ' 3.000 '" || fail "train-0 did not get its third GPU: $(row k8s:team-a:train-0)"
wait_for 5 "[[ -z \$(row k8s:serving:infer-0) ]]" || fail "infer-0 did not vanish with its pod"
wait_for 5 "row k8s:team-a:train-1 | awk '{exit !(\$2 == \"0.429\" && \$6 == 1)}'" ||
  fail "train-1 (3/7 of a MIG GPU, one process) did not appear: $(row k8s:team-a:train-1)"
list > "$tmp/list2.txt"
check "changes logged" "grep -q 'kubernetes: 2 tenant(s) from the kubelet (1 new, 1 gone)' $tmp/daemon.log"

# --- malformed answers: refused, logged once, the last good tenants stay -----------------------
good="{\"pods\":[$(pod team-a train-0 nvidia.com/gpu GPU-a GPU-b GPU-c),$(pod team-a train-1 nvidia.com/mig-3g.40gb MIG-x)],$alloc}"
malformed() {  # malformed NAME JSON LOG_TEXT RECOVERIES_SO_FAR
  printf '%s\n' "$3" > "$tmp/pattern"
  write_pods "$2"
  wait_for 5 "grep -qFf $tmp/pattern $tmp/daemon.log" || fail "$1: not logged ($3)"
  sleep 1  # five refreshes
  check "$1: logged once" "[[ \$(grep -cFf $tmp/pattern $tmp/daemon.log) -eq 1 ]]"
  check "$1: the last good tenants stay" "row k8s:team-a:train-0 | grep -q ' 3.000 '"
  check "$1: /metrics still answers" "curl -sf -m 2 http://127.0.0.1:$port/metrics > /dev/null"
  write_pods "$good"
  wait_for 5 "[[ \$(grep -c 'answers again' $tmp/daemon.log) -ge $4 ]]" || fail "$1: recovery not logged"
}
malformed "a name that is no Kubernetes name" \
  "{\"pods\":[$(pod team-a 'Bad Name' nvidia.com/gpu GPU-a)]}" 'name "Bad Name" is not a Kubernetes name' 1
malformed "too many pods" '{"extra_pods": 500}' 'List answered 500 pods, more than [kubernetes] max_pods (100)' 2
malformed "an answer past max_message_bytes" '{"pad_bytes": 2000000}' 'RESOURCE_EXHAUSTED' 3
malformed "a garbage device id" \
  "{\"pods\":[$(pod team-a x nvidia.com/gpu 'GPU a')]}" 'device id "GPU a" is not a device id' 4

# --- a kubelet that never answers: the loop does not wait for it --------------------------------
ticks() { curl -sf -m 2 "http://127.0.0.1:$port/metrics" | awk '/^zernel_scheduler_decision_latency_seconds_count/ {print $2}'; }
write_pods '{"behaviour": "hang"}'
wait_for 5 "grep -q DEADLINE_EXCEEDED $tmp/daemon.log" || fail "a hanging kubelet was not logged"
t0=$(ticks)
sleep 2.5
t1=$(ticks)
check "ticking while the kubelet hangs ($t0 -> $t1 ticks in 2.5 s)" "[[ -n '$t0' && -n '$t1' ]] && (( ${t1%.*} - ${t0%.*} >= 10 ))"
check "the hang logged once" "[[ \$(count_log DEADLINE_EXCEEDED) -eq 1 ]]"
write_pods "$good"
wait_for 5 "[[ \$(grep -c 'answers again' $tmp/daemon.log) -ge 5 ]]" || fail "recovery after the hang not logged"

# --- the socket goes away and comes back ---------------------------------------------------------
kill -TERM "$server_pid"
wait "$server_pid" 2>/dev/null
server_pid=""
wait_for 5 "grep -q '$kubelet: No such file or directory' $tmp/daemon.log" || fail "socket gone not logged"
sleep 1
check "socket gone: logged once" "[[ \$(count_log '$kubelet: No such file or directory') -eq 1 ]]"
check "socket gone: the tenants stay" "row k8s:team-a:train-1 | grep -q kubelet"
check "socket gone: the file's tenant stays" "row k8s:team-c:dup | grep -q config"
write_pods "{\"pods\":[$(pod team-a train-0 nvidia.com/gpu GPU-a)],$alloc}"
start_server
wait_for 5 "[[ \$(grep -c 'answers again' $tmp/daemon.log) -ge 6 ]]" || fail "the socket's return not logged"
wait_for 5 "[[ -z \$(row k8s:team-a:train-1) ]]" || fail "the returned kubelet's answer was not used"
check "after the return: train-0 has 1 GPU" "row k8s:team-a:train-0 | grep -qE ' 1.000 '"

# --- the daemon stops cleanly --------------------------------------------------------------------
kill -TERM "$daemon_pid"
wait "$daemon_pid"
rc=$?
daemon_pid=""
check "daemon exits 0 on SIGTERM" "[[ $rc -eq 0 ]]"
check "no errors logged" "! grep -E '\\[(error|critical)\\]' $tmp/daemon.log"
[[ $failures -eq 0 ]] || { echo "--- daemon log"; cat "$tmp/daemon.log"; echo "--- server log"; tail -20 "$tmp/server.log"; }
summary
