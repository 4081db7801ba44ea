#!/usr/bin/env bash
# The capabilities the Kubernetes overlays give the container are enough for their backend, and
# SYS_NICE is needed for userspace: the daemon runs as root with only an overlay's capabilities in
# its bounding set (setpriv, as the container runtime would leave it), next to a synthetic
# training job of another user (nobody) on the emulated GPU.
#   observe:   tracks the job's four processes, exits 0 on SIGTERM
#   userspace: also raises the priority of the job's ranks (nice < 0), exits 0
#   userspace without SYS_NICE: refuses to start, naming CAP_SYS_NICE
#   observe and userspace: the GPU sync uprobes attach (on Linux 6.18 they need SYS_ADMIN)
# (sched-ext needs a kernel with sched_ext: the VM tests; not here.)
set -uo pipefail
. "$(dirname "$0")/lib.sh"
chmod 755 "$tmp"
daemon=""
cleanup() {
  [[ -n $daemon ]] && kill "$daemon" 2> /dev/null && wait "$daemon" 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
[[ $(id -u) -eq 0 ]] || skip "needs root (a root daemon with a reduced bounding set, a job as nobody)"
command -v setpriv > /dev/null || skip "no setpriv (util-linux)"
K=${KUBECTL:-kubectl}
command -v "$K" > /dev/null || skip "no kubectl to render the overlays (scripts/setup.sh)"
python3 -c 'import yaml' 2> /dev/null || skip "python3-yaml is not installed"
need_emulated_gpu

# overlay_caps OVERLAY: the container's added capabilities, as setpriv's list (-all,+bpf,...).
overlay_caps() {
  "$K" kustomize "$SRC/deploy/kubernetes/overlays/$1" 2> /dev/null | python3 -c '
import sys, yaml
for d in yaml.safe_load_all(sys.stdin):
    if d and d["kind"] == "DaemonSet":
        sc = d["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]
        assert sc["drop"] == ["ALL"]
        print("-all" + "".join(",+" + c.lower() for c in sc["add"]))'
}

ml_tasks() { python3 -c 'import json,sys; print(sum(t["ml"] for t in json.load(open(sys.argv[1]))["tasks"]))' "$1" 2> /dev/null || echo 0; }
# run_with CAPS BACKEND NAME: the daemon with CAPS next to the job; leaves $tmp/NAME.{log,status,nice}
# ($tmp/NAME.ml: the most ML processes /status listed) and the daemon's exit status in $tmp/NAME.rc.
run_with() {
  local caps=$1 backend=$2 name=$3 port wl
  port=$(free_port)
  printf '[general]\nphase_eval_interval_ms = 100\ngpu_poll_interval_ms = 200\n[telemetry]\nmetrics_port = %s\n' \
    "$port" > "$tmp/$name.toml"
  ZERNEL_USERSPACE_JOURNAL="$tmp/$name.journal" ZERNEL_SETTINGS_JOURNAL="$tmp/$name.settings" \
    ZERNEL_DELAYACCT_HOLDERS="$tmp/$name.holders" \
    setpriv --bounding-set "$caps" "$BIN/zernel-scheduler" --config "$tmp/$name.toml" \
    --backend "$backend" --emulated-gpu --control-socket "$tmp/$name.sock" > "$tmp/$name.log" 2>&1 &
  daemon=$!
  if ! wait_for 10 "curl -sf http://127.0.0.1:$port/metrics > /dev/null || ! kill -0 $daemon 2> /dev/null"; then
    echo "the daemon neither served /metrics nor exited in 10 s"
  fi
  echo 0 > "$tmp/$name.ml"
  : > "$tmp/$name.nice"
  if kill -0 "$daemon" 2> /dev/null; then
    (cd "$tmp" && exec setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/zernel-workload" \
      --emulated-gpu --ranks 2 --workers 1 --steps 4 --data-ms 300 --gpu-ms 600 --nccl-ms 200 \
      --optimizer-ms 300 > "$tmp/$name.workload" 2>&1) &
    wl=$!
    # While the job runs: the most ML processes /status listed, and the job's nice values.
    while kill -0 "$wl" 2> /dev/null; do
      sleep 0.25
      if curl -sf "http://127.0.0.1:$port/status" > "$tmp/$name.status" 2> /dev/null; then
        n=$(ml_tasks "$tmp/$name.status")
        ((n > $(cat "$tmp/$name.ml"))) && echo "$n" > "$tmp/$name.ml"
      fi
      ps -o ni= -u 65534 -C zernel-workload 2> /dev/null | tr -d ' ' >> "$tmp/$name.nice"
    done
    wait "$wl"
    kill -TERM "$daemon" 2> /dev/null
  fi
  wait "$daemon"
  echo $? > "$tmp/$name.rc"
  daemon=""
}

observe_caps=$(overlay_caps observe)
userspace_caps=$(overlay_caps userspace)
check "the observe overlay's capabilities render ($observe_caps)" "[[ -n '$observe_caps' ]]"
check "the userspace overlay's capabilities render ($userspace_caps)" "[[ '$userspace_caps' == *sys_nice* ]]"

run_with "$observe_caps" observe observe
check "observe with its overlay's capabilities: the job's 4 processes tracked (got $(cat "$tmp/observe.ml"))" \
  "(( \$(cat $tmp/observe.ml) >= 4 ))"
check "observe with its overlay's capabilities: exit 0 on SIGTERM" "[[ \$(cat $tmp/observe.rc) == 0 ]]"
check "observe changed no nice value of the job" "! grep -qv '^0$' $tmp/observe.nice"

run_with "$userspace_caps" userspace userspace
check "userspace with its overlay's capabilities: the job's 4 processes tracked (got $(cat "$tmp/userspace.ml"))" \
  "(( \$(cat $tmp/userspace.ml) >= 4 ))"
check "userspace with its overlay's capabilities: the job's ranks got a raised priority (nice < 0)" \
  "grep -q '^-' $tmp/userspace.nice"
check "userspace with its overlay's capabilities: exit 0 on SIGTERM" "[[ \$(cat $tmp/userspace.rc) == 0 ]]"

run_with "${userspace_caps//,+sys_nice/}" userspace no-nice
check "userspace without SYS_NICE: refuses to start (exit 1)" "[[ \$(cat $tmp/no-nice.rc) == 1 ]]"
check "userspace without SYS_NICE: the error names CAP_SYS_NICE" "grep -q 'needs root with CAP_SYS_NICE' $tmp/no-nice.log"

# The GPU sync uprobes (and with them the GPU rules of phases from events) attach with the
# overlays' capabilities: on Linux 6.18 BPF + PERFMON were not enough (EACCES), hence SYS_ADMIN.
for name in observe userspace; do
  check "$name: the GPU sync probes attached with the overlay's capabilities" \
    "grep -q 'GPU sync probes attached' $tmp/$name.log && ! grep -q 'failed to create uprobe' $tmp/$name.log"
done

summary
