/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vtime.bpf.h: virtual time: the charge for run time, the queue key, and the bound on lag.
 *
 * CHARGE. Each thread has a virtual time (pub.vtime). When it has run `used` ns it is charged
 *
 *	vtime += used / share(t)		(FP_ONE fixed point: a share of 1 is the machine)
 *
 * with its share from share.bpf.h, and runnable threads wait in their LLC's DSQ ordered by their
 * key (one DSQ on a machine of one LLC; the queues of several are kept even by llc.bpf.h), so over
 * time every busy thread gets CPU in proportion to its share. Run time is the growth
 * of p->se.sum_exec_runtime since the last charge (charge_run), which the kernel brings up to
 * date before ops.stopping, ops.tick and ops.dispatch (update_curr_scx): no clock read, and no
 * start mark in ops.running (the sum grows only while the thread runs, so its value at the last
 * charge, or at ops.enable, is its value when this run started). A single charge covers at most
 * ZERNEL_USED_MAX_NS (1 s). The same charge goes to the cgroup's cpu.max quota (cpu_max.bpf.h)
 * and to the per-phase run-time counters.
 *
 * ORDER WITHIN THE QUEUE. The queue key is vtime plus a virtual request, as in EEVDF:
 *
 *	key = vtime + request / share(t)
 *	request = latency target if set, else its burst (the longer of its average run between
 *		  sleeps and its current run) within [SLICE_MIN_NS, slice]
 *
 * An offset per thread does not change the long-run shares (those come from the charges), but
 * it puts a latency-critical thread (50 us target) ahead of a throughput thread (20 ms slice) of
 * equal vtime, and a thread that runs 50 us per wakeup (a kernel thread, the daemon) ahead of
 * one that runs its whole slice. The burst, not the slice: share(t) is the share at the moment
 * of the enqueue, and a transient there (a nice -20 kernel worker runnable in the same cgroup:
 * the root's own group weighed 91,800 for a moment, not 2,048) divided a 20 ms slice into a
 * request of 5.4 s of virtual time, which the front takes a second of the machine to reach: the
 * daemon and rcu_preempt each waited 1.06 s so, rescued by the starvation bound (traced in the
 * VM beside hogs, issue 24 item 6; kernel threads no longer enter that sum: share.bpf.h, ROOT
 * GROUP). A 100 us burst's request is 200 times shorter. A thread put back at the end of its
 * slice has run the slice: its request is the slice, as before.
 *
 * LAG. vtime_now, the front of an LLC's queue (llc_fronts), is the largest queue key at the head
 * of that queue when one of its CPUs took a task from it (ops.dispatch), or that one kept
 * (keep_prev, dispatch.bpf.h), so it follows a thread that runs alone, but never past the head of
 * a queue that holds tasks: a thread of a tiny share (a weight-1 pod's, alone on its CPU) moves
 * its key seconds per ms it runs, and the front that followed it left every queued key seconds
 * behind; each thread that woke was then lifted only to its credit floor below that front, behind
 * every queued one, and a 100 ms heartbeat beside stress-ng waited 1.03 s at worst (p90 370 ms;
 * EEVDF 11 ms and 1.9 ms; vm.kubelet_stress, docs/benchmarks.md). With several LLCs each
 * front also follows the others' when they are ahead (llc.bpf.h), so the fronts are about one.
 * Every wakeup bounds the thread's key, by the front of its LLC, to
 *
 *	vtime_now - credit  <=  key  <=  vtime_now + lead
 *
 * credit = one default slice (20 ms) of its own service, lead = two of its own slices (one is
 * what any thread leads by after a slice taken from the head of the queue; the second covers the
 * overrun to the tick that ends it). In service time: a sleeper gains at most 20 ms of CPU ahead
 * of the threads that ran, and a thread that ran alone on an idle CPU, or was rescued, is at most
 * two slices ahead of newcomers, which start at vtime_now (ops.enable). A thread that never
 * sleeps is kept near vtime_now by keep_prev while it runs alone, and by the queue order once it
 * competes. So a job that trained alone for an hour competes fairly from the first slice after
 * neighbours arrive. The bound is not applied when a runnable thread is put back: vtime_now can
 * run ahead of a group's keys (a CPU that cannot run the head of the queue takes a later task,
 * whose key then sets vtime_now), and lifting the group's keys there would shift shares.
 *
 * Where the bound is computed: a wakeup notes the front and the thread's vtime (task_wakes), and
 * the bound is worked out where the key is first compared with others' (lag_settle): in ops.enqueue
 * when the thread is queued at its wakeup; when ops.select_cpu gave it an idle CPU, at its put-back,
 * its slice's end (keep_prev) or an owed cut; never, when it sleeps again first (a pipe's
 * ping-pong: no share computed and no bound for a key nobody compares). Worked out later, it moves
 * the vtime by what it would have moved it at the wakeup (with the share and request of the
 * moment), the run since charged on top. Bounding against the front of the later moment instead
 * would bound a put-back thread (one woken on an idle CPU, then preempted) against a front that
 * moved on meanwhile: the shift of shares above.
 * keep_prev has a bound of its own, on credit against a pinned rival (dispatch.bpf.h).
 *
 * Worked example: a thread of share 0.25 (a quarter of the machine) sleeps 10 s while the others
 * run and vtime_now advances. It wakes with its old vtime far behind; its key is lifted to
 * vtime_now - 20 ms / 0.25 = vtime_now - 80 ms of virtual time: ahead of every queued thread by
 * 20 ms of its own CPU at most, not by 10 s.
 *
 * Known weaknesses: vtime is per thread: a group entitled to exactly as many CPUs as it has busy
 * threads keeps them only while its threads' credit lasts; host noise on its CPUs wears a bounded
 * credit down, which is why keep_prev's credit bound applies only against pinned rivals. And the
 * front is the largest key taken: a CPU that takes a lone task of a tiny share (whose request over
 * its share is seconds of virtual time) moves it seconds ahead of the busy threads' keys, and a
 * waking thread lifted to the front less its credit then waits behind all of them; the threads of a
 * cgroup whose cpu.max keeps them from their share never catch up and go first in every period (a
 * 100 ms heartbeat beside a capped pod waited 10-20 ms whenever it woke in that burst, at its
 * median in a third of the runs of vm.kubelet_stress: docs/benchmarks.md, "Where the heartbeat's
 * waits come from"). A share-weighted zero-lag point in place of the front was built and measured,
 * and was no better: against a true mean, the credit of a tiny share (20 ms of its service is
 * minutes of virtual time) puts its every wakeup first (docs/benchmarks.md, "The zero-lag point,
 * built and measured").
 *
 * Race accepted: a front is updated without atomics (as in scx_simple): a lost update only
 * lowers the sleeper credit floor for a moment.
 */
#ifndef ZERNEL_SCHED_VTIME_BPF_H
#define ZERNEL_SCHED_VTIME_BPF_H

#include "common.bpf.h"
#include "cpu_max.bpf.h"
#include "share.bpf.h"
#include "task.bpf.h"

enum {
	ZERNEL_USED_MAX_NS = 1000000000, /* a single charge covers at most 1 s of run time */
};

/* The front of an LLC's queue (vtime_now of LAG). */
static __always_inline u64 *front_of(u32 llc)
{
	return &llc_state(llc)->vtime_now;
}

/* The front moves forward only (LAG). Racy, as in scx_simple: a lost update lowers it a moment. */
static __always_inline void front_advance(u64 *front, u64 key)
{
	if (time_before(*front, key))
		*front = key;
}

/* Virtual time for ns of run time at a share: ns * FP_ONE / share. */
static __always_inline u64 vtime_for(u64 ns, u64 share)
{
	if (ns > ZERNEL_USED_MAX_NS)
		ns = ZERNEL_USED_MAX_NS;
	return ns * FP_ONE / (share ? share : 1);
}

/*
 * The request that sets the queue position (ORDER WITHIN THE QUEUE): the latency target; else
 * what the thread runs before it sleeps, the longer of its average burst and the current one,
 * between SLICE_MIN_NS and its slice.
 */
static __always_inline u64 task_request(const struct task_ctx *tctx)
{
	const struct zernel_task_ctx *tc = &tctx->pub;
	u64 b = tc->avg_burst_ns > tc->burst_ns ? tc->avg_burst_ns : tc->burst_ns;

	if (tctx->latency_ns)
		return tctx->latency_ns;
	/* Inline, not clamp_u64: no BPF-to-BPF call on every enqueue. */
	if (b < SLICE_MIN_NS)
		b = SLICE_MIN_NS;
	return b < tctx->slice_ns ? b : tctx->slice_ns;
}

/*
 * Lag bound, on queue keys (vtime + request), for a wakeup: a thread's key is put within one
 * default slice of its own service below vtime_now (the credit of a sleeper) and two of its own
 * slices above it (the lead of a thread that ran alone, on an idle CPU, or was rescued: one
 * slice is what any thread leads by after a slice taken from the head of the queue, the second
 * covers the overrun to the tick that ends it). Not when a runnable thread is put back: under
 * contention keys stay near the front by themselves, and vtime_now, the largest key a CPU took
 * in order, can run ahead of a group's keys (a CPU that cannot run the head takes a later task),
 * so a bound there would shift shares. See LAG above.
 *
 * front and vtime are the front and the thread's vtime at its wakeup (task_wakes), so that a
 * bound applied later (lag_settle) moves the vtime by what it would have at the wakeup, the run
 * charged since kept; share and request are those of the moment it is applied.
 */
static __always_inline void clamp_lag(struct task_ctx *tctx, u64 share, u64 front, u64 vtime)
{
	/* One division for the request where it is the slice, the credit's where that is the default. */
	u64 slice = vtime_for(tctx->slice_ns, share), r = task_request(tctx);
	u64 req = r == tctx->slice_ns ? slice : vtime_for(r, share);
	u64 credit = tctx->slice_ns == SLICE_DFL_NS ? slice : vtime_for(SLICE_DFL_NS, share);
	u64 lo = front - credit, hi = front + 2 * slice;
	u64 key = vtime + req;

	if (time_before(key, lo)) {
		tctx->pub.vtime += lo - key;
	} else if (time_after(key, hi)) {
		tctx->pub.vtime -= key - hi;
		stat_inc(ZERNEL_STAT_LAG_CLAMP);
	}
}

/*
 * A waking thread: counts the wakeup, joins its node's runnable weight, and notes the front of
 * the queue of cpu's LLC (its previous CPU's in ops.select_cpu: the fronts of the LLCs stay within
 * about a slice of each other, llc.bpf.h) and its vtime, for the lag bound it owes (lag_settle).
 * Called from ops.select_cpu and, for wakeups that skip it (one allowed CPU, migration disabled),
 * from ops.enqueue: the work of ops.runnable, without the cost of a separate callback on every
 * wakeup. Returns the node it joined (task_account).
 */
static __always_inline struct znode *task_wakes(struct task_struct *p, struct task_ctx *tctx,
						bool ttwu, s32 cpu)
{
	if (ttwu) /* not a new task's first placement (SCX_WAKE_FORK) */
		tctx->pub.wakeups++;
	tctx->wakeup_counted = 1;
	tctx->lag_due = 1;
	tctx->wake_front = *front_of(llc_of(cpu));
	tctx->wake_vtime = tctx->pub.vtime;
	return task_account(p, tctx);
}

/*
 * The lag bound a wakeup owes (LAG above), applied where the thread's key is first compared with
 * others' after the wakeup: ops.enqueue (queued at the wakeup, or put back after a run that
 * ops.select_cpu gave an idle CPU), keep_prev (its slice ended, ops.dispatch) and the owed cut
 * (ops.tick). It moves the vtime as the bound at the wakeup would have (clamp_lag: the front and
 * vtime of the wakeup). A thread that ops.select_cpu puts on an idle CPU and that goes back to
 * sleep after its run (most wakeups of a pipe's ping-pong) is never compared, and pays no share
 * and no bound.
 */
static __always_inline void lag_settle(struct task_ctx *tctx, u64 share)
{
	if (!tctx->lag_due)
		return;
	tctx->lag_due = 0;
	clamp_lag(tctx, share, tctx->wake_front, tctx->wake_vtime);
}

/*
 * Charges the run time since the last charge: the growth of p->se.sum_exec_runtime, which the
 * kernel brings up to date (update_curr_scx) before each caller (ops.stopping, ops.tick,
 * ops.dispatch for prev), so no clock read. The sum grows only while the thread runs, so the
 * value at the last charge (or at ops.enable) is the value at the start of this run: ops.running
 * writes nothing for it.
 */
static __always_inline void charge_run(struct task_struct *p, struct task_ctx *tctx, u64 share)
{
	struct zernel_task_ctx *tc = &tctx->pub;
	u64 sum = p->se.sum_exec_runtime, used;

	used = time_delta(sum, tctx->charged_sum_ns);
	tctx->charged_sum_ns = sum;
	tc->vtime += vtime_for(used, share);
	if (tctx->limited && nr_quotas)
		zernel_quota_charge(tctx->cgroup_node, used);
	tc->runtime_ns += used;
	tc->burst_ns += used;
	if (tctx->phase < ZERNEL_PHASE_NR)
		stat_add(ZERNEL_STAT_RUN_NS_PHASE + tctx->phase, used);
	else
		stat_add(ZERNEL_STAT_RUN_NS_UNDECIDED, used);
}

static __always_inline void account_run(struct task_struct *p, struct task_ctx *tctx)
{
	charge_run(p, tctx, task_share(p, tctx));
}

#endif /* ZERNEL_SCHED_VTIME_BPF_H */
