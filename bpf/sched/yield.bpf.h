/* SPDX-License-Identifier: GPL-2.0 */
/*
 * yield.bpf.h: the rest of the node yields to a decided thread that waits.
 *
 * YIELD. A task without a decision (the rest of the node) runs in 20 ms slices, as under
 * scx_simple. While a thread of a decided process waits in its LLC's queue, such a task that has
 * run ZERNEL_YIELD_RUN_US (3 ms, EEVDF's base slice on a node of 8 CPUs or more) of its slice
 * ends it at the next tick (ops.tick: about 4 ms at HZ=250), and ops.dispatch then serves the
 * queue in key order (keep_prev, dispatch.bpf.h). Why: a rank spinning in a GPU sync needs a CPU
 * to see its GPU finish, and it needs it without waking, so no preemption helps it; it waits
 * for a slice to end somewhere. With 20 ms slices for everyone beside it, a job whose ranks spin
 * had a step p99 of 1.27 times EEVDF's (issue 24 item 6). With 3 ms slices for every task without
 * a decision at all times (the first fix) the messaging load of the micro-benchmark, which has no
 * decided thread waiting, paid 7 % at 8 vCPUs against scx_simple (docs/benchmarks.md, "Slices of
 * the rest of the node"): the cut is only needed while a decided thread waits.
 *
 * COUNTING. llc_front.decided_waiting counts the decided threads that ops.enqueue put in that
 * LLC's queue and that have not run since (task_ctx.decided_queued says in which LLC's count a
 * thread is). ops.running takes a thread out of the count; so does ops.disable (a thread that
 * leaves sched_ext while queued). A thread put back in a queue while counted (dequeued for a
 * property change, then enqueued) is not counted twice. ops.running looks the thread up only when
 * its tgid slot counts a queued decided thread or a followed one (running_slots, task.bpf.h), so
 * a thread of a process without a decision costs it one load, no task-storage lookup.
 *
 * COST. ops.enqueue of a decided thread into an LLC's queue: two atomic adds (the LLC's count on
 * that LLC's own line, the tgid slot), and two more when it runs. ops.tick of any task: one load
 * of its LLC's count; only when it is not zero and the task has run 3 ms of its slice, the task's
 * storage. Nothing else for the rest of the node.
 *
 * Known weaknesses: a decided thread that waits in a queue it cannot leave for this CPU (pinned
 * elsewhere in the LLC) still makes this CPU's task yield: the dispatch that follows gives it
 * back its CPU when it leads (keep_prev), at the cost of that dispatch, once a tick. A thread
 * released from the throttled DSQ (cpu.max, release_parked) goes back to its queue without
 * ops.enqueue and is not counted while it waits there.
 */
#ifndef ZERNEL_SCHED_YIELD_BPF_H
#define ZERNEL_SCHED_YIELD_BPF_H

#include "common.bpf.h"
#include "task.bpf.h"

/* ops.enqueue put a thread in llc's queue: counted there if it is a decided process's. */
static __always_inline void yield_queued(const struct task_struct *p, struct task_ctx *tctx,
					 u32 llc)
{
	if (!tctx->weight || tctx->decided_queued)
		return;
	llc &= ZERNEL_MAX_LLCS - 1;
	__sync_fetch_and_add(&llc_state(llc)->decided_waiting, 1);
	__sync_fetch_and_add(running_slot(p), 1);
	tctx->decided_queued = (u8)(llc + 1);
}

/* The thread runs (or leaves sched_ext): out of the count it is in, if any. */
static __always_inline void yield_unqueued(const struct task_struct *p, struct task_ctx *tctx)
{
	if (!tctx->decided_queued)
		return;
	__sync_fetch_and_sub(&llc_state(tctx->decided_queued - 1)->decided_waiting, 1);
	__sync_fetch_and_sub(running_slot(p), 1);
	tctx->decided_queued = 0;
}

/*
 * ops.tick: a decided thread waits in the queue of p's LLC and p has run YIELD_RUN_NS of a
 * default slice (a task without a decision has one; the caller checks that p has no decision).
 */
static __always_inline bool yield_due(struct task_struct *p)
{
	return llc_state(task_llc(p))->decided_waiting > 0 && p->scx.slice &&
	       p->scx.slice + YIELD_RUN_NS <= SLICE_DFL_NS;
}

#endif /* ZERNEL_SCHED_YIELD_BPF_H */
