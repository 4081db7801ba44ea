#!/usr/bin/env bash
# vm.scx_sharing, one VM boot: the zernel sched_ext scheduler under a real node's conditions
# (late arrivals, cgroup cpu.weight and cpu.max, tenants beside untenanted cgroups, more threads
# than CPUs, a tenant's class, a SCHED_FIFO task). The guest side is scx_guest.sh "sharing";
# results are its "@@" lines; docs/sched-ext.md has the figures. Extra files for the guest (an
# older driver to compare, SCX_DRIVER=...) may be given as --add PATH arguments.
# shellcheck source=tests/vm/host-lib.sh
. "$(dirname "$(realpath "$0")")/host-lib.sh"
need_bin zernel-scx-driver -DZERNEL_BPF=ON
# Twelve cases of 10-50 s each: 4-5 min on a calm host, more on a busy one (run-in-vm's default
# limit is 300 s).
export ZERNEL_VM_TIMEOUT=${ZERNEL_VM_TIMEOUT:-660}
exec "$here/run-in-vm.sh" --add "$here/scx_guest.sh" "$@" -- sh "$here/scx_guest.sh" sharing
