/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rescue.bpf.h: the starvation bound: no thread waits in a queue much longer than starve_ns.
 *
 * A BPF timer scans the LLCs' queues every ZERNEL_STARVE_SCAN_US (100 ms, starve_scan); a thread
 * queued for longer than starve_ns (default 1 s = 50 default slices, see intf.h) is moved to a
 * FIFO rescue DSQ that ops.dispatch serves before the LLCs' queues. Honest weighting in the
 * policy's range (a priority -5 hog beside a priority +10 hog on one CPU) makes waits of about
 * 0.6 s, so the bound does not distort normal weights; it exists for what weighting cannot bound
 * (a tenant with thousands of busy threads, extreme weights) and keeps every wait far below the
 * kernel's 30 s watchdog, which would eject us. The VM test (vm.scx_weights) gives a weight of 110
 * beside one of 29,104 on one CPU and counts the rescues.
 *
 * COST. The rescue DSQ is looked at only while the scan says it may hold tasks (rescue_pending):
 * a DSQ lookup per dispatch is a cost every context switch would pay.
 *
 * Known weakness: the scan is O(queued tasks) every 100 ms.
 *
 * Race accepted: rescue_pending is cleared by a dispatch that found the rescue DSQ empty; a
 * rescue racing with that is served when the next scan (100 ms) sets it again.
 *
 * The scan's timer also carries the tests' injected error (inject_error_after_ns): it ends the
 * scheduler with scx_bpf_error() that long after ops.init, to exercise the ejection path.
 */
#ifndef ZERNEL_SCHED_RESCUE_BPF_H
#define ZERNEL_SCHED_RESCUE_BPF_H

#include "common.bpf.h"
#include "task.bpf.h"

/*
 * Non-zero while the rescue DSQ may hold tasks: the scan's count of them, cleared by ops.dispatch
 * when it finds the DSQ empty. (A count, not a flag: clang shrinks a 0/1 static to one byte,
 * which the kernel's BTF check then rejects.)
 */
static u64 rescue_pending;
static u64 init_at; /* ns: when ops.init ran */

/* Moves tasks queued longer than starve_ns to the rescue DSQ (zernel_timers slot
 * ZERNEL_TIMER_STARVE). */
static int starve_scan(void *map, int *key, struct bpf_timer *timer)
{
	struct task_struct *p;
	u64 now = now_ns();
	s32 nr_rescued;
	u32 llc;

	/*
	 * The DSQ iterator visits only the tasks queued when it started: bounded. Timer callbacks
	 * run in an RCU read-side section only on newer kernels (before 6.17 the verifier wants it
	 * explicit).
	 */
	bpf_rcu_read_lock();
	bpf_for(llc, 0, nr_llcs) {
		bpf_for_each(scx_dsq, p, llc_dsq(llc), 0) {
			struct task_ctx *tctx;
			u64 queued_at;

			tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);
			if (!tctx)
				continue;
			queued_at = tctx->pub.queued_at;
			if (!queued_at || time_delta(now, queued_at) <= starve_ns)
				continue;
			if (scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, ZERNEL_DSQ_RESCUE, 0))
				stat_inc(ZERNEL_STAT_STARVE_RESCUE);
		}
	}
	bpf_rcu_read_unlock();
	/* Set after the moves, and again while anything waits there (see ops.dispatch). */
	nr_rescued = scx_bpf_dsq_nr_queued(ZERNEL_DSQ_RESCUE);
	if (nr_rescued > 0)
		rescue_pending = nr_rescued;
	if (inject_error_after_ns && time_delta(now, init_at) > inject_error_after_ns) {
		scx_bpf_error("injected error (test), %llu ms after init",
			      time_delta(now, init_at) / 1000000);
		return 0;
	}
	bpf_timer_start(timer, (u64)ZERNEL_STARVE_SCAN_US * 1000, 0);
	return 0;
}

#endif /* ZERNEL_SCHED_RESCUE_BPF_H */
