/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Empty programs on the hooks the probes could use for futex waits and context switches, one
 * per build (-DZERNEL_ALT=N), for bench/tax_alternatives.sh: what the hook itself costs the
 * tasks of the machine, whatever the program does.
 *   1 tracepoint syscalls:sys_enter_futex   (main before issue 21)
 *   2 raw tracepoint sys_enter              (every syscall's raw tracepoint)
 *   3 BTF tracepoint sched_switch           (the probes' zernel_switch hook)
 *   4 fentry on futex_wait                  (refused on the development host: EPERM)
 */
#include <vmlinux.h> // first: the kernel's types, which libbpf's headers use

#include <bpf/bpf_helpers.h>

char _license[] SEC("license") = "GPL";

#if ZERNEL_ALT == 1
SEC("tracepoint/syscalls/sys_enter_futex")
#elif ZERNEL_ALT == 2
SEC("raw_tp/sys_enter")
#elif ZERNEL_ALT == 3
SEC("tp_btf/sched_switch")
#elif ZERNEL_ALT == 4
SEC("fentry/futex_wait")
#else
#error "ZERNEL_ALT must be 1..4"
#endif
int zernel_alt(void *ctx)
{
	return 0;
}
