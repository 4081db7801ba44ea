/* SPDX-License-Identifier: GPL-2.0 */
/*
 * compat.bpf.h: what differs between the kernels the scheduler runs on (6.12 .. 7.x), where the
 * scx headers do not hide it, and the checks of the kernel's ABI that intf.h mirrors.
 *
 * KERNEL COMPATIBILITY. Built against the 7.3 vmlinux.h and the scx headers of the same tree,
 * relocated with CO-RE. Kfuncs that were renamed or added go through scx/compat.bpf.h (declared
 * __weak, chosen with bpf_ksym_exists(): scx_bpf_dispatch* -> scx_bpf_dsq_insert* in 6.13,
 * scx_bpf_consume -> scx_bpf_dsq_move_to_local, the 6.19 argument-struct variants of
 * select_cpu_and / dsq_insert_vtime, scx_bpf_now falling back to bpf_ktime_get_ns,
 * scx_bpf_dsq_peek from 7.1 with an iterator before, scx_bpf_task_set_slice from 6.19 with a
 * direct write before); the SCX_*
 * enum values are rodata read from the running kernel's BTF by the loader (SCX_ENUM_INIT); the
 * loader drops ops the kernel lacks at open with a warning (cgroup_set_bandwidth came in 6.17:
 * before it cpu.max is not enforced, and the daemon says so, see docs/sched-ext.md). Only ops and
 * kfuncs of 6.12 are required. What this object does itself:
 *   - the victim search reads another CPU's current task (cpu_current, below): 6.18+ gives it as
 *     a trusted RCU pointer (scx_bpf_cpu_curr); before, only scx_bpf_cpu_rq(cpu)->curr, an
 *     untrusted pointer that task storage refuses ("R2 type=untrusted_ptr_"), so the task's
 *     storage is reached through a reference taken by its pid (zernel_weight_of_pid);
 *   - the cgroup ops need CONFIG_EXT_GROUP_SCHED; without it every thread counts in the root
 *     node. ops.init_task reads args->cgroup and ops.cgroup_init args->bw_quota_us only where the
 *     kernel has them (bpf_core_field_exists);
 *   - the timer callbacks that walk a DSQ take the RCU read lock themselves (the 6.16 verifier
 *     wants it for the DSQ iterator; 7.x implies it);
 *   - per-node idle masks (6.15+, SCX_OPS_BUILTIN_IDLE_PER_NODE) are not used: node preference
 *     uses our own node cpumasks (cpu_choice.bpf.h).
 * Linux 7.x logs that ops.cpu_release is deprecated in favour of SCX_ENQ_IMMED; it works on
 * 6.12 .. 7.3. Tested on 7.3.4, 6.16.3 and a 6.12.118 built by hand (docs/sched-ext.md, "Kernel
 * compatibility"; tests/vm/build-kernel-6.12.sh).
 */
#ifndef ZERNEL_SCHED_COMPAT_BPF_H
#define ZERNEL_SCHED_COMPAT_BPF_H

#include "common.bpf.h"
#include "task.bpf.h"

/* The kernel's exit kinds, exit code bits and UEI lengths are ABI; intf.h mirrors them for the
 * loader, and every one is checked here against vmlinux.h. */
#define ZERNEL_ASSERT_EXIT_KIND(NAME, value) \
	_Static_assert((int)ZERNEL_EXIT_##NAME == (int)SCX_EXIT_##NAME, "exit kind " #NAME);
ZERNEL_EXIT_KINDS(ZERNEL_ASSERT_EXIT_KIND)
#undef ZERNEL_ASSERT_EXIT_KIND
_Static_assert(ZERNEL_ECODE_RSN_HOTPLUG == (u64)SCX_ECODE_RSN_HOTPLUG, "exit code bit");
_Static_assert(ZERNEL_ECODE_RSN_CGROUP_OFFLINE == (u64)SCX_ECODE_RSN_CGROUP_OFFLINE,
	       "exit code bit");
_Static_assert(ZERNEL_ECODE_ACT_RESTART == (u64)SCX_ECODE_ACT_RESTART, "exit code bit");
_Static_assert((int)ZERNEL_UEI_REASON_LEN == (int)UEI_REASON_LEN, "UEI reason length");
_Static_assert((int)ZERNEL_UEI_MSG_LEN == (int)UEI_MSG_LEN, "UEI message length");

#define ZERNEL_MAX_RT_PRIO 100 /* the kernel's MAX_RT_PRIO: priorities below are RT or deadline */
#define ZERNEL_SCHED_EXT   7   /* the SCHED_EXT policy */

/* False for a CPU running none of ours (idle, a higher class, not SCHED_EXT in a partial switch) */
static __always_inline bool runs_ours(const struct task_struct *curr)
{
	return curr && curr->pid && curr->prio >= ZERNEL_MAX_RT_PRIO &&
	       (!switch_partial || curr->policy == ZERNEL_SCHED_EXT);
}

/*
 * The weight of the thread of pid (else nice_w, its nice weight), through a reference taken by
 * pid: before 6.18 (cpu_current). A global function, verified once on its own: inlined into
 * the victim search's CPU loop, the reference taken and released in each iteration made the
 * 6.12 verifier walk over its limit of a million instructions.
 */
__noinline u64 zernel_weight_of_pid(s32 pid, u64 nice_w)
{
	struct task_struct *t = bpf_task_from_pid(pid);
	struct task_ctx *tctx;
	u64 w = nice_w;

	if (!t)
		return w;
	tctx = bpf_task_storage_get(&zernel_task_ctx, t, 0, 0);
	if (tctx)
		w = task_weight(t, tctx);
	bpf_task_release(t);
	return w;
}

/*
 * The victim search's view of what cpu runs, read from its current task when the search runs
 * (nothing is written for it on the hot paths): false when the CPU runs none of ours (idle; a
 * real-time or deadline task, or one boosted to such a priority, below MAX_RT_PRIO; in a partial
 * switch, any task whose policy is not SCHED_EXT); else the task's weight and the slice it has
 * left. That is p->scx.slice as the kernel last brought it up to date (update_curr_scx, at
 * least every tick), so it is up to a tick more than the truth, and 0 once the slice is over
 * (the CPU reschedules at its next tick). Unlocked and racy, as a per-CPU record written in
 * ops.running would be: the CPU may switch the next moment.
 */
static __always_inline bool cpu_current(s32 cpu, u64 *weight, u64 *slice_left)
{
	struct task_struct *curr;
	struct task_ctx *tctx;
	struct rq *rq;

	if (bpf_ksym_exists(scx_bpf_cpu_curr)) {
		curr = scx_bpf_cpu_curr(cpu); /* 6.18+: an RCU pointer, task storage takes it */
		if (!runs_ours(curr))
			return false;
		tctx = bpf_task_storage_get(&zernel_task_ctx, curr, 0, 0);
		*weight = tctx ? task_weight(curr, tctx) : nice_weight(curr);
		*slice_left = curr->scx.slice;
		return true;
	}
	/*
	 * Before 6.18 only scx_bpf_cpu_rq() gives it, and rq->curr is an untrusted pointer: fields
	 * read (as probe reads), but task storage refuses it. The task's storage is reached
	 * through a reference taken by its pid (NULL when it has just exited: its nice weight).
	 */
	rq = scx_bpf_cpu_rq(cpu);
	curr = rq ? rq->curr : NULL;
	if (!runs_ours(curr))
		return false;
	*weight = zernel_weight_of_pid(curr->pid, nice_weight(curr));
	*slice_left = curr->scx.slice;
	return true;
}

#endif /* ZERNEL_SCHED_COMPAT_BPF_H */
