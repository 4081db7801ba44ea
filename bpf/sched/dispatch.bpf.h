/* SPDX-License-Identifier: GPL-2.0 */
/*
 * dispatch.bpf.h: whether the thread whose slice ended keeps its CPU (keep_prev).
 *
 * ops.dispatch runs before the kernel charges and re-queues the previous task (ops.stopping and
 * ops.enqueue come after it), so a plain "take the head of the queue" makes two busy tasks on one
 * CPU alternate whatever their weights. ops.dispatch therefore serves, in order: the rescue DSQ
 * while the starvation scan has flagged it (rescue.bpf.h); the release of threads parked by
 * cpu.max when a tick's refill thawed their cgroup (cpu_max.bpf.h); prev, when keep_prev lets it
 * keep the CPU for another slice; else the head of its LLC's queue, whose key moves that LLC's
 * front (vtime.bpf.h), unless another LLC's queue is further behind (llc.bpf.h, BALANCE).
 *
 * keep_prev charges prev up to now, applies a phase it changed to while running (phase.bpf.h),
 * and compares its key with its rival's: the first queued task that may run on this CPU (not the
 * head: one pinned to another CPU is no rival; rival_of). prev keeps the CPU when its key is not
 * behind.
 *
 * CREDIT BOUND. A thread that keeps its CPU has its credit bounded against its rival, when that
 * rival may not run on every CPU: its vtime is at most one default slice of its own service behind
 * the rival's. A thread whose share is more than the one CPU it can use (a tenant's lone busy
 * thread) falls behind without end; unbounded, that credit would keep a thread that can only run
 * on its CPU (a per-CPU kworker, a pinned worker) waiting for the starvation rescue. Bounded, the
 * two share that CPU by their shares, as on a per-CPU run queue. Not against a rival that may run
 * anywhere: another CPU takes it in key order, and prev's credit is what keeps a group entitled to
 * one CPU per thread on its CPUs (vtime.bpf.h, "Known weakness").
 *
 * Known weakness: keep_prev looks at the first ZERNEL_RIVAL_SCAN (16) queued tasks for one that
 * may run on its CPU; with more tasks pinned elsewhere ahead of them, prev keeps the CPU for
 * another slice.
 */
#ifndef ZERNEL_SCHED_DISPATCH_BPF_H
#define ZERNEL_SCHED_DISPATCH_BPF_H

#include "common.bpf.h"
#include "cpu_max.bpf.h"
#include "decision.bpf.h"
#include "llc.bpf.h"
#include "phase.bpf.h"
#include "share.bpf.h"
#include "task.bpf.h"
#include "vtime.bpf.h"

enum {
	ZERNEL_RIVAL_SCAN = 16, /* queued tasks keep_prev looks at for a rival */
};

/*
 * prev's rival on cpu: the first queued task that may run there, and in *head the key of the
 * queue's first task (the front's bound in keep_prev). Tasks that cannot (threads
 * pinned to other CPUs) are not rivals: comparing with the head alone let such a task push prev
 * off its CPU in favour of whatever came next, a thread with a later key, and a group entitled to
 * one CPU per thread lost a slice each time (3 % to 10 % of its share on 4 CPUs). The walk stops
 * after ZERNEL_RIVAL_SCAN tasks; none found by then counts as no rival. Sets its key and, for a
 * rival that may not run on every CPU, its vtime (else 0: no credit bound, see keep_prev).
 */
static bool rival_of(s32 cpu, u32 llc, u64 *key, u64 *vtime, u64 *head)
{
	struct task_struct *p;
	struct task_ctx *rc;
	u32 n = 0;

	bpf_for_each(scx_dsq, p, llc_dsq(llc), 0) {
		if (++n > ZERNEL_RIVAL_SCAN)
			break;
		if (n == 1)
			*head = p->scx.dsq_vtime;
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		*key = p->scx.dsq_vtime;
		*vtime = 0;
		if (p->nr_cpus_allowed < nr_cpus) {
			rc = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);
			*vtime = rc ? rc->pub.vtime : *key;
		}
		return true;
	}
	return false;
}

/*
 * prev, still runnable at the end of its slice, keeps the CPU for another slice when a kick for
 * its phase change ended the slice (phase_kick_take), or when its key
 * (vtime charged up to now, plus its request) is not behind its rival's (rival_of), its vtime
 * lifted to the credit bound below the rival's (CREDIT BOUND above), and when the head of the
 * other LLC's queue that this dispatch compares with is not behind it by more than its request
 * (llc.bpf.h, BALANCE).
 */
static bool keep_prev(struct task_struct *prev, s32 cpu, u32 llc, u32 other)
{
	struct task_ctx *tctx = task_ctx_get(prev);
	u64 key, share, req, rkey, rvtime, floor, head;
	struct zernel_phase_thread *st;

	if (!tctx)
		return false;
	/* Settle the charge so far, as if it had stopped and started again. */
	account_run(prev, tctx);
	if (task_throttled(tctx))
		return false;
	/*
	 * Its slice ended, or a kick for its phase change ended it (the phase timer's or the
	 * probes'): a phase it changed to while running applies now, as ops.enqueue would apply it.
	 * A kicked thread runs on with its new phase's slice, without a comparison with the queue:
	 * the kick, not its slice, ended its run. Compared, a thread that lost to the queue's head
	 * was put back first by ops.enqueue all the same, but only after this dispatch had moved
	 * that head to the CPU's local DSQ, where it ran next, whatever woke meanwhile: one more
	 * hog slice on the CPU per kick cost the protection bench's job 2-9 % of its steps.
	 */
	if (phase_follow(prev, tctx, false, &st))
		task_account(prev, tctx);
	if (phase_kick_take(tctx, st)) {
		scx_bpf_task_set_slice(prev, tctx->slice_ns);
		return true;
	}
	share = task_share(prev, tctx);
	lag_settle(tctx, share);
	req = vtime_for(task_request(tctx), share);
	key = tctx->pub.vtime + req;
	head = key; /* an empty queue sets no head: the front follows prev */
	if (rival_of(cpu, llc, &rkey, &rvtime, &head)) {
		if (time_before(rkey, key))
			return false;
		/*
		 * Credit bound while running, against a rival that may not run everywhere: prev's
		 * vtime at most one default slice of its own service behind the rival's. Vtimes,
		 * not keys: a key holds the rival's request, ten slices of prev's service when
		 * prev's share is ten times the rival's. Bounded against every rival, the host's
		 * noise wore down the credit of a group entitled to one CPU per thread (0.89 of
		 * its share instead of 1.0).
		 */
		floor = rvtime - vtime_for(SLICE_DFL_NS, share);
		if (rvtime && time_before(tctx->pub.vtime, floor)) {
			tctx->pub.vtime = floor;
			key = floor + req;
		}
	}
	if (nr_llcs > 1 && llc_behind(other, key, req))
		return false;
	/* The front follows prev while it runs alone, never past the head of the queue. */
	front_advance(front_of(llc), time_before(head, key) ? head : key);
	scx_bpf_task_set_slice(prev, tctx->slice_ns);
	return true;
}

#endif /* ZERNEL_SCHED_DISPATCH_BPF_H */
