#!/usr/bin/env bash
# vm.scx_weights, one VM boot: (b) decision weights 3000:1000 share one CPU 3:1 within 15 % over 10
# s; two tenants of cpu.weight 300:100 with 1 and 3 processes share it 3:1; the starvation bound
# rescues a task of weight 110 beside one of 29104. The guest side is scx_guest.sh; results are its
# "@@" lines. Needs build/bin/zernel-scx-driver (-DZERNEL_BPF=ON). docs/sched-ext.md has the
# figures.
# shellcheck source=tests/vm/host-lib.sh
. "$(dirname "$(realpath "$0")")/host-lib.sh"
need_bin zernel-scx-driver -DZERNEL_BPF=ON
exec "$here/run-in-vm.sh" --add "$here/scx_guest.sh" -- sh "$here/scx_guest.sh" weights
