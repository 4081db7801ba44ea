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
 * OWED. Without a decided thread waiting, a CPU hog without a decision (it has run
 * ZERNEL_OWED_HOG_US, 100 ms, since it last slept, or its runs between sleeps are that long on
 * average) that has run 3 ms of its slice also ends it at a tick for the head of its LLC's queue
 * when that head woke (it slept: queued_woken), may run on the hog's CPU and has a key before the
 * hog's (its vtime charged up to the tick plus its request: the comparison ops.dispatch makes at
 * the end of a slice, keep_prev), as EEVDF preempts for a woken task of an earlier deadline. Not
 * for a head put back at the end of its own run: hogs that compete take turns of a whole slice, 20
 * ms as under scx_simple, and do not cut each other every tick. Not a thread that sleeps now and
 * then: it leaves the CPU by itself. In the micro-benchmark's messaging load (80 tasks on 8 vCPUs,
 * senders that write for a while, receivers that wake for them), cutting any run of 3 ms for a
 * woken head of an earlier key cost 2.5-3 % (149 cuts in a 0.5 s round, with a wait of 3 ms asked
 * of the head): a cut sender holds up the receivers it feeds. With "ran 20 ms since it last slept"
 * as the hog's mark, 68-113 cuts a round and 2-3 %; with 100 ms, 0-3 cuts and no cost that the
 * benchmark sees (docs/benchmarks.md, "A woken thread ends a hog's slice").
 *
 * Why the cut: with 20 ms slices and no preemption for a task without a decision, a thread that
 * woke beside CPU hogs waited for a hog's slice to end: one that wakes every 20 ms beside three
 * hogs on its CPU had a wakeup p90 of 22.3 ms (EEVDF preempts for it). Now it waits for the
 * running hog's first 3 ms and the next tick: p90 1.9 ms (vm.scx_sharing). It does not shorten
 * waits behind threads that are no hogs by this mark: the heartbeat of vm.kubelet_stress waits
 * behind credited busy threads (a capped pod's, stress-ng's yield and affinity threads, the
 * followed job's), and its p90 stays 16-19 ms. Counted as owed_cut.
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
 * of its LLC's count and of its slice; only for a task that has run 3 ms of its slice (a CPU
 * hog's ticks after its first 3 ms; never for a task that sleeps within 3 ms), a peek at its
 * LLC's queue, when that holds a task the head's storage, and when the head woke the task's
 * storage and its charge up to now.
 *
 * Known weaknesses: a decided thread that waits in a queue it cannot leave for this CPU (pinned
 * elsewhere in the LLC) still makes this CPU's task yield: the dispatch that follows gives it
 * back its CPU when it leads (keep_prev), at the cost of that dispatch, once a tick. A thread
 * released from the throttled DSQ (cpu.max, release_parked) goes back to its queue without
 * ops.enqueue and is not counted while it waits there. OWED looks at the head of the queue only:
 * a head pinned to another CPU hides an owed thread behind it until the head leaves. A thread
 * with a decision is never cut so: its phase's slice is its policy's. A busy thread that sleeps
 * within every 100 ms of its run (a messaging sender, a CPU-bound loop with a short sleep) is no
 * hog by this mark: a thread woken behind it waits, as before, for it to sleep or for its slice's
 * end (20 ms at most).
 */
#ifndef ZERNEL_SCHED_YIELD_BPF_H
#define ZERNEL_SCHED_YIELD_BPF_H

#include "common.bpf.h"
#include "compat.bpf.h"
#include "task.bpf.h"
#include "vtime.bpf.h"

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

/* p has run YIELD_RUN_NS of a default slice (a task without a decision has one). */
static __always_inline bool yield_ran(const struct task_struct *p)
{
	return p->scx.slice && p->scx.slice + YIELD_RUN_NS <= SLICE_DFL_NS;
}

/*
 * ops.tick, p ran YIELD_RUN_NS (yield_ran): a decided thread waits in the queue of p's LLC (the
 * caller checks that p has no decision).
 */
static __always_inline bool yield_due(struct task_struct *p)
{
	return llc_state(task_llc(p))->decided_waiting > 0;
}

/*
 * ops.tick, p ran YIELD_RUN_NS: the head of its LLC's queue when the head woke and may run on
 * p's CPU (OWED above); else NULL.
 */
static __always_inline struct task_struct *owed_candidate(struct task_struct *p)
{
	struct task_struct *head = __COMPAT_scx_bpf_dsq_peek(llc_dsq(task_llc(p)));
	struct task_ctx *hc;

	if (!head || !bpf_cpumask_test_cpu(scx_bpf_task_cpu(p), head->cpus_ptr))
		return NULL;
	hc = bpf_task_storage_get(&zernel_task_ctx, head, 0, 0);
	return hc && hc->queued_woken ? head : NULL;
}

/*
 * p, which ran YIELD_RUN_NS, is a CPU hog (OWED_HOG_NS) and head (owed_candidate) has a key before
 * p's (OWED above). Charges p's run so far, as ops.dispatch would.
 */
static __always_inline bool owed_cut_due(struct task_struct *p, struct task_ctx *tctx,
					 struct task_struct *head)
{
	u64 share = task_share(p, tctx);

	charge_run(p, tctx, share);
	if (tctx->pub.burst_ns < OWED_HOG_NS && tctx->pub.avg_burst_ns < OWED_HOG_NS)
		return false;
	lag_settle(tctx, share);
	return time_before(head->scx.dsq_vtime,
			   tctx->pub.vtime + vtime_for(task_request(tctx), share));
}

#endif /* ZERNEL_SCHED_YIELD_BPF_H */
