#!/usr/bin/env bash
# vm.scx_churn, one VM boot: (e) SCX_CHURN_SECS (60) seconds of short-lived processes (16 in
# flight, 8 threads each) beside decided tasks that preempt, belong to tenants and hog: no
# ejection; prints how many processes and threads were created. The guest side is
# scx_guest.sh; results are its "@@" lines. Needs build/bin/zernel-scx-driver (-DZERNEL_BPF=ON).
# docs/sched-ext.md has the figures.
# shellcheck source=tests/vm/host-lib.sh
. "$(dirname "$(realpath "$0")")/host-lib.sh"
need_bin zernel-scx-driver -DZERNEL_BPF=ON
exec "$here/run-in-vm.sh" --add "$here/scx_guest.sh" -- sh "$here/scx_guest.sh" churn
