/* SPDX-License-Identifier: GPL-2.0 */
/*
 * decision.bpf.h: the daemon's per-process decisions, and each thread's cached copy of its own.
 *
 * The daemon decides per process (tgid) and writes struct zernel_decision (intf.h) into
 * zernel_decisions: a weight (priority), a time slice (phase), a latency target, whether a
 * wakeup may preempt, a preferred CPU and NUMA node, a tenant, the phase. Every thread of the
 * process looks the decision up by p->tgid, so every thread follows it. A task with no decision
 * is scheduled like any other task, with the weight of its nice value (task.bpf.h). The map is
 * sized by the loader from max_tracked_tasks and allocates entries as they are written
 * (BPF_F_NO_PREALLOC).
 *
 * THE CACHE. A thread keeps a copy of its process's decision in its task storage (task_ctx:
 * weight, tenant_weight, slice_ns, latency_ns, preferred_cpu, preferred_node, tenant, phase,
 * flags), with the generation of its process's slot it was read at
 * (zernel_decision_slot_gen[tgid % ZERNEL_DECISION_SLOTS]). The loader increments a process's slot
 * after every write or delete of its decision, and task_ctx_get, which every hot callback uses to
 * find the thread's storage, sees a generation that differs and reads zernel_decisions once
 * (task_refresh): clamped, the node of the preferred CPU resolved, and, for a runnable thread,
 * its node and weight in the share hierarchy changed at once (task_account). Between writes that
 * is no hash lookup at all; after one, one per thread of that process, and of the processes that
 * share its slot by chance (1 in 4,096 for any other). With one generation for the whole machine
 * (before issue 24), every changed decision made every thread of the node look once: 5 lookups
 * per change by undecided threads in the VM check decision_scope, none since.
 *
 * Slices: a thread runs for its process's slice_ns (the phase's slice: 3 ms for an optimizer
 * step, 20 ms for GPU compute), clamped to 100 us .. 1 s; 20 ms without a decision.
 *
 * Known weakness: a task's first slice after a decision is written runs with the values of its
 * last enqueue (the copy is refreshed at its next scheduling event).
 *
 * Races accepted:
 * - The loader may replace a decision while a thread copies it into its cache: the copy may mix
 *   the old and new decision of the same process until the slot's increment that follows the
 *   write makes the thread copy it again (at its next scheduling event).
 * - The generation is read before the lookup, so a write racing with a refresh leaves the thread
 *   with an older generation than the value it saw: it looks once more, never too few.
 */
#ifndef ZERNEL_SCHED_DECISION_BPF_H
#define ZERNEL_SCHED_DECISION_BPF_H

#include "common.bpf.h"
#include "share.bpf.h"
#include "task.bpf.h"

/*
 * The decision generations (intf.h), one per slot of processes: the loader increments a process's
 * slot after every write or delete of its decision. A thread re-reads its process's decision only
 * when its slot's generation moved. Every callback reads it: the values every CPU writes at each
 * dispatch or wakeup (the LLCs' fronts, the root node) are kept off .bss, in sections of their own.
 */
u32 zernel_decision_slot_gen[ZERNEL_DECISION_SLOTS];

/* The contract's decision map (intf.h). max_entries is set by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, ZERNEL_MAX_TASKS);
	__type(key, u32);
	__type(value, struct zernel_decision);
} zernel_decisions SEC(".maps");

/*
 * Re-reads the process's decision into the thread's cache (the one hash lookup, done only when
 * the loader changed some decision since this thread last looked). Every caller runs for a
 * runnable thread, so its contribution follows the new decision at once.
 */
static __noinline void task_refresh(struct task_struct *p, struct task_ctx *tctx, u64 gen)
{
	u32 tgid = p->tgid;
	struct zernel_decision *d = bpf_map_lookup_elem(&zernel_decisions, &tgid);
	s32 pcpu, node;
	u64 tw;

	/* Counted from the second look on: the first (a new thread, or each thread at attach) is due. */
	if (tctx->decision_gen != ~0ULL) {
		stat_inc(ZERNEL_STAT_DECISION_LOOKUP);
		if (!d)
			stat_inc(ZERNEL_STAT_DECISION_LOOKUP_NONE);
	}
	tctx->decision_gen = gen;
	tctx->applied_phase = ZERNEL_NO_PHASE; /* phase_follow applies the thread's phase again */
	if (!d) {
		tctx->weight = 0;
		tctx->tenant_weight = ZERNEL_TENANT_WEIGHT_DFL;
		tctx->slice_ns = SLICE_DFL_NS;
		tctx->latency_ns = 0;
		tctx->preferred_cpu = ZERNEL_NO_CPU;
		tctx->preferred_node = ZERNEL_NO_CPU;
		tctx->tenant = ZERNEL_NO_TENANT;
		tctx->phase = ZERNEL_NO_PHASE;
		tctx->flags = 0;
	} else {
		tctx->weight = clamp_u64(d->weight, ZERNEL_WEIGHT_MIN, ZERNEL_WEIGHT_MAX);
		tw = d->tenant_weight ? d->tenant_weight : ZERNEL_TENANT_WEIGHT_DFL;
		tctx->tenant_weight =
			clamp_u64(tw, ZERNEL_TENANT_WEIGHT_MIN, ZERNEL_TENANT_WEIGHT_MAX);
		tctx->slice_ns = d->slice_ns ? clamp_u64(d->slice_ns, SLICE_MIN_NS, SLICE_MAX_NS) :
					       SLICE_DFL_NS;
		tctx->latency_ns = (u64)d->latency_target_us * 1000;
		pcpu = d->preferred_cpu;
		node = d->preferred_node;
		if (pcpu < 0 || pcpu >= nr_cpus || pcpu >= ZERNEL_MAX_CPUS)
			pcpu = ZERNEL_NO_CPU;
		else if (node < 0)
			node = cpu_node[pcpu & (ZERNEL_MAX_CPUS - 1)];
		if (node < 0 || node >= nr_nodes || node >= ZERNEL_MAX_NODES)
			node = ZERNEL_NO_CPU;
		tctx->preferred_cpu = pcpu;
		tctx->preferred_node = node;
		tctx->tenant = d->tenant < ZERNEL_MAX_TENANTS ? d->tenant : ZERNEL_NO_TENANT;
		tctx->phase = phase_index(d->phase);
		tctx->flags = d->flags;
	}
	if (tctx->joined)
		task_account(p, tctx);
}

/* The thread's storage with its decision cache up to date: one lookup on the hot paths. */
static __always_inline struct task_ctx *task_ctx_get(struct task_struct *p)
{
	struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);
	u64 gen;

	if (!tctx)
		return NULL;
	gen = *(volatile u32 *)&zernel_decision_slot_gen[p->tgid & (ZERNEL_DECISION_SLOTS - 1)];
	if (tctx->decision_gen != gen)
		task_refresh(p, tctx, gen);
	return tctx;
}

#endif /* ZERNEL_SCHED_DECISION_BPF_H */
