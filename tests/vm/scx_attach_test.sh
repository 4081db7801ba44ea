#!/usr/bin/env bash
# vm.scx_attach, one VM boot: (a) the zernel scheduler attaches (the verifier accepts it; state
# enabled, root/ops zernel, full and partial switch) and detaches cleanly; the kernel's ejections
# (scx_bpf_error, sysrq-S) are reported with their kind and restart advice; (c) a decision that
# changes every 10 ms makes only its own process's threads re-read it; (d) kill -9 of the
# driver returns every task to the default scheduler within 2 s. The guest side is scx_guest.sh;
# results are its "@@" lines. Needs build/bin/zernel-scx-driver (-DZERNEL_BPF=ON).
# docs/sched-ext.md has the figures.
# shellcheck source=tests/vm/host-lib.sh
. "$(dirname "$(realpath "$0")")/host-lib.sh"
need_bin zernel-scx-driver -DZERNEL_BPF=ON
exec "$here/run-in-vm.sh" --add "$here/scx_guest.sh" -- \
  sh "$here/scx_guest.sh" attach decision_scope eject_fail kill9
