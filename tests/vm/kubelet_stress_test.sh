#!/usr/bin/env bash
# vm.kubelet_stress, one VM boot: a kubelet-shaped node (1,023 cgroups, 909 with a cpu.max quota,
# pods with processes) under the daemon with --backend sched_ext, then a minute of stress-ng (cpu,
# fork, affinity, switch, futex, yield) and pod churn (pods with limits made and removed, tasks
# moved between containers, limits resized) beside a training job and a capped pod: no ejection,
# no stall, the cap held, the daemon alive. The guest side is kubelet_guest.sh (its header has the
# tree, the load and the checks); results are its "@@" lines. stress-ng is Debian's
# (scripts/setup.sh), added to the guest with its libraries. KUBE_PODS, KUBE_STRESS_SECS, KUBE_BACKEND,
# KUBE_MAX_WAKE_MS, KUBE_MAX_P90_MS, KUBE_CHURN_KEEP, KUBE_BEAT_US, KUBE_BPFSTATS and KUBE_SYNC_KICKS
# are passed on to the guest; with KUBE_BPFSTATS=1 bpftool (the build's) goes with them.
# shellcheck source=tests/vm/host-lib.sh
. "$(dirname "$(realpath "$0")")/host-lib.sh"
need_bin zernel-scheduler
need_bin zernel-scx-probe -DZERNEL_BPF=ON
stress=$(command -v stress-ng) || { echo "$test_name: no stress-ng (scripts/setup.sh installs it)" >&2; exit 1; }
case ${KUBE_SYNC_KICKS:-1} in
  0 | 1) ;;
  *) echo "$test_name: KUBE_SYNC_KICKS must be 0 or 1" >&2; exit 2 ;;
esac
case ${KUBE_BEAT_US:-97000} in
  '' | *[!0-9]* | ?????????* | ? | ?? | ???)
    echo "$test_name: KUBE_BEAT_US must be a period in us from 1000 to 99999999" >&2; exit 2 ;;
esac
guest_env=()
for v in KUBE_PODS KUBE_STRESS_SECS KUBE_MAX_WAKE_MS KUBE_MAX_P90_MS KUBE_CHURN_KEEP KUBE_BACKEND \
  KUBE_BEAT_US KUBE_BPFSTATS KUBE_SYNC_KICKS; do
  [ -z "${!v:-}" ] || guest_env+=("$v=${!v}")
done
# Without -icount: with QEMU counting instructions the verifier's run at each attach and the
# stress took 25 host seconds per guest second (a boot did not reach the stress in 6 minutes), so
# the guest's clock is the host's, and the checks allow for its stalls (kubelet_guest.sh).
export ZERNEL_VM_TIMEOUT=${ZERNEL_VM_TIMEOUT:-360}
extra=()
if [ "${KUBE_BPFSTATS:-0}" != 0 ]; then
  [ -x "$build/_deps/bpf/bin/bpftool" ] || { echo "$test_name: no $build/_deps/bpf/bin/bpftool (KUBE_BPFSTATS)" >&2; exit 1; }
  extra=(--add "$build/_deps/bpf/bin/bpftool")
fi
exec "$here/run-in-vm.sh" --add "$here/kubelet_guest.sh" --add "$stress" --add "$build/lib" "${extra[@]}" -- \
  env "${guest_env[@]}" sh "$here/kubelet_guest.sh"
