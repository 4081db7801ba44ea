/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Empty programs on the hooks the probes could use for futex waits and context switches, one
 * per build (-DZERNEL_ALT=N), for bench/tax_alternatives.sh: what the hook itself costs the
 * tasks of the machine, whatever the program does.
 *   1 tracepoint syscalls:sys_enter_futex   (main before issue 21)
 *   2 raw tracepoint sys_enter              (every syscall's raw tracepoint)
 *   3 BTF tracepoint sched_switch           (the probes' zernel_switch hook)
 *   4 fentry on futex_wait                  (refused on the development host: EPERM)
 *   5 BTF tracepoint sched_switch with the probes' first test: prev's and next's tgid in a
 *     bitmap in .bss (as zernel_follow of bpf/probes/rules.bpf.h; nothing set here), where zernel_switch
 *     leaves for every task nobody follows: against 3, the probes' own work for such a task
 *   6 a perf_event program on one process's own software context-switch events (attached by
 *     bench/switch_event.cpp to a sleeping process): what every other task pays at its switches
 *     for the perf hooks that such a per-thread event switches on, with no program on them
 */
#include <vmlinux.h> // first: the kernel's types, which libbpf's headers use

#include <bpf/bpf_helpers.h>

char _license[] SEC("license") = "GPL";

#if ZERNEL_ALT == 5
#include <bpf/bpf_tracing.h>

#include "probes.h" /* the bitmap's size, as zernel_follow's */

__u64 alt_follow[ZERNEL_FOLLOW_WORDS];

static __always_inline bool alt_followed(__u32 tgid)
{
	__u32 bit = tgid & ZERNEL_FOLLOW_MASK;

	return alt_follow[bit / 64] & (1ULL << (bit % 64));
}

SEC("tp_btf/sched_switch")
int BPF_PROG(zernel_alt, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	if (alt_followed(prev->tgid))
		return 1;
	return alt_followed(next->tgid) ? 2 : 0;
}
#elif ZERNEL_ALT == 6
SEC("perf_event")
int zernel_alt(void *ctx)
{
	return 0;
}
#else
#if ZERNEL_ALT == 1
SEC("tracepoint/syscalls/sys_enter_futex")
#elif ZERNEL_ALT == 2
SEC("raw_tp/sys_enter")
#elif ZERNEL_ALT == 3
SEC("tp_btf/sched_switch")
#elif ZERNEL_ALT == 4
SEC("fentry/futex_wait")
#else
#error "ZERNEL_ALT must be 1..6"
#endif
int zernel_alt(void *ctx)
{
	return 0;
}
#endif
