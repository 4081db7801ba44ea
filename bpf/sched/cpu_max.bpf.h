/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cpu_max.bpf.h: cgroups' cpu.max, a cap on their run time per period.
 *
 * ops.cgroup_set_bandwidth (and ops.cgroup_init) give each cgroup its quota and period
 * (node_set_quota), kept in its node; nr_quotas counts the nodes with one: while it is 0 none of
 * this costs anything (no ops.tick work, no throttle checks). There is no table of limited
 * cgroups and no limit on their number but the node map's (ZERNEL_MAX_NODES_MAP): a kubelet's
 * tree has a quota on most of its pods and containers. Run time is charged to the quota of the
 * thread's cgroup and of each ancestor with one (zernel_quota_charge, from the charge of
 * vtime.bpf.h), also for a tenant's thread: its tenant decides its share, its cgroup still caps
 * it. A cgroup that spent its quota is throttled:
 *   - ops.enqueue parks its threads in ZERNEL_DSQ_THROTTLED, a FIFO, with their queue key;
 *   - a running one loses its slice at the next tick (ops.tick);
 *   - ops.select_cpu does not put one on an idle CPU: it leaves it to ops.enqueue.
 * SCX_OPS_ENQ_LAST makes the kernel hand a task whose slice ended with nothing else to run to
 * ops.enqueue, where it is parked (otherwise the kernel runs it on with a new slice, and a lone
 * limited task on a machine with idle CPUs would never be throttled).
 *
 * Periods are refilled lazily, by whoever looks at a node after its period ended (a charge, a
 * throttle test: node_refill): quota_used_ns -= quota per period that ended. An overrun is debt
 * the next period pays, so the long-run rate is the quota exactly; idle periods earn no credit;
 * burst is not implemented. The arithmetic follows the clock, not the refiller: a late look
 * refills every period that ended, at the period boundaries. What a late look does delay is the
 * release of parked threads (release_parked, which tests each parked thread's cgroup and so
 * refills it): every ZERNEL_RELEASE_NS (5 ms) while threads are parked, from ops.tick of a busy
 * CPU, or from a BPF timer when no CPU is busy. The timer is a soft one, whose callbacks came up
 * to 90 ms late in the VM (docs/sched-ext.md, "Measured"), so the tick comes first when it can.
 * Whichever comes first claims the step by a compare-and-swap of release_due_ns.
 *
 * Worked example: cpu.max "20000 100000" (20 ms per 100 ms) on a cgroup with one busy thread. It
 * runs 20 ms, plus up to a tick before the tick that finds the quota spent cuts its slice, say
 * 24 ms: throttled, parked until the period ends; the next period starts with 4 ms of debt and
 * allows 16 ms. Over time, 20 % of a CPU (19-20 % measured in the VM).
 *
 * Known weaknesses: enforced at tick granularity, with the overrun paid back by the next period
 * (tasks already in a queue when their cgroup throttles run their slice: that too is
 * debt); cpu.max.burst is ignored; ancestors more than ZERNEL_MAX_LEVELS up are not charged; a
 * release scan walks every parked thread (each a walk up its cgroup's ancestors).
 *
 * Races accepted: quota bookkeeping (quota_used_ns) is atomic, and one refill per period end is
 * claimed by a compare-and-swap of period_end_ns; the throttled flag is not atomic with them: a
 * refill racing with a charge may thaw a cgroup one release step early or late.
 */
#ifndef ZERNEL_SCHED_CPU_MAX_BPF_H
#define ZERNEL_SCHED_CPU_MAX_BPF_H

#include "common.bpf.h"
#include "node.bpf.h"
#include "task.bpf.h"

enum {
	ZERNEL_RELEASE_NS = 5000000, /* how often parked threads are looked at while some are */
};

/* A quota at or above this many us is "max" (the kernel passes RUNTIME_INF). */
#define QUOTA_INF_US (1ULL << 40)

/* How many nodes have a quota: ops.tick does nothing for cpu.max while it is 0. */
static u64 nr_quotas;
/* When the next release step is due (the last one plus ZERNEL_RELEASE_NS); claimed by CAS. */
static u64 release_due_ns;
/* Set by ops.tick when threads are parked: the next ops.dispatch looks at them. */
static volatile u64 parked_release_pending;

/*
 * Starts the periods of the node's quota that ended by now, paying back what the quota covers
 * (no credit from idle periods); true when that thawed it. One caller per period end wins the
 * compare-and-swap of period_end_ns; the others see the new end.
 */
static __always_inline bool node_refill(struct znode *n, u64 now)
{
	u64 end = n->period_end_ns, periods, quota = n->quota_ns, period = n->period_ns;
	s64 used;

	if (!quota || !period || time_before(now, end))
		return false;
	periods = time_delta(now, end) / period + 1;
	if (periods > 1000)
		periods = 1000;
	if (__sync_val_compare_and_swap(&n->period_end_ns, end, end + periods * period) != end)
		return false;
	used = __sync_sub_and_fetch(&n->quota_used_ns, (s64)(periods * quota));
	if (used < 0)
		__sync_fetch_and_sub(&n->quota_used_ns, used);
	if (n->throttled && used < (s64)quota) {
		n->throttled = 0;
		return true;
	}
	return false;
}

/* True when the node or an ancestor has spent its quota. */
__noinline int zernel_node_throttled(u64 id)
{
	u64 now = 0;
	u32 i;

	for (i = 0; i < ZERNEL_MAX_LEVELS; i++) {
		struct znode *n = node_get(id);

		if (!n)
			return 0;
		if (n->throttled) {
			if (!now)
				now = now_ns();
			node_refill(n, now);
		}
		if (n->throttled)
			return 1;
		if (!id)
			return 0;
		id = n->parent;
	}
	return 0;
}

static __always_inline bool task_throttled(struct task_ctx *tctx)
{
	return tctx->limited && nr_quotas && zernel_node_throttled(tctx->cgroup_node);
}

/* Charges run time to the quotas of the cgroup and its ancestors. */
__noinline int zernel_quota_charge(u64 id, u64 used)
{
	u64 now = 0;
	u32 i;

	for (i = 0; i < ZERNEL_MAX_LEVELS && id; i++) {
		struct znode *n = node_get(id);

		if (!n)
			return 0;
		if (!n->quota_ns) {
			id = n->parent;
			continue;
		}
		if (!now)
			now = now_ns();
		node_refill(n, now);
		if (__sync_add_and_fetch(&n->quota_used_ns, (s64)used) >= (s64)n->quota_ns)
			n->throttled = 1;
		id = n->parent;
	}
	return 0;
}

/* A cgroup's cpu.max, from ops.cgroup_init or ops.cgroup_set_bandwidth: a new period starts. */
static void node_set_quota(u64 id, u64 period_us, u64 quota_us)
{
	struct znode *n = node_get(id);
	bool on, was;

	if (!n || !id)
		return;
	on = quota_us < QUOTA_INF_US && period_us;
	was = n->quota_ns != 0;
	n->quota_ns = on ? quota_us * 1000 : 0;
	n->period_ns = on ? period_us * 1000 : 0;
	n->quota_used_ns = 0;
	n->period_end_ns = now_ns() + n->period_ns;
	n->throttled = 0;
	if (on && !was)
		__sync_fetch_and_add(&nr_quotas, 1);
	else if (!on && was)
		__sync_fetch_and_sub(&nr_quotas, 1);
	tree_changed();
}

/*
 * Claims the release step that is due (one per ZERNEL_RELEASE_NS, whoever comes first: the timer
 * or a tick); true when this caller is to look at the parked threads.
 */
static bool release_due(u64 now)
{
	u64 due = release_due_ns;

	if (time_before(now, due))
		return false;
	if (__sync_val_compare_and_swap(&release_due_ns, due, now + ZERNEL_RELEASE_NS) != due)
		return false;
	return scx_bpf_dsq_nr_queued(ZERNEL_DSQ_THROTTLED) > 0;
}

/*
 * Tasks parked in the throttled DSQ whose cgroups have quota again (the test refills a cgroup
 * whose period ended) go back to the queue.
 */
static void release_parked(void)
{
	struct task_struct *p;

	bpf_rcu_read_lock();
	bpf_for_each(scx_dsq, p, ZERNEL_DSQ_THROTTLED, 0) {
		struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);
		s32 cpu;
		u32 llc;

		if (tctx && zernel_node_throttled(tctx->cgroup_node))
			continue;
		if (tctx) {
			scx_bpf_dsq_move_set_vtime(BPF_FOR_EACH_ITER, tctx->queue_key);
			tctx->pub.queued_at = now_ns();
		}
		llc = task_llc(p);
		if (!scx_bpf_dsq_move_vtime(BPF_FOR_EACH_ITER, p, llc_dsq(llc), 0))
			continue;
		llc_mark_waiting(llc);
		stat_inc(ZERNEL_STAT_UNTHROTTLED);
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (cpu >= 0)
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	}
	bpf_rcu_read_unlock();
}

/*
 * The release step from ops.tick: a tick comes from the hard timer interrupt of every busy CPU,
 * where the BPF timer is a soft one (above). A tick cannot move tasks between queues (only
 * ops.dispatch and timers may): it flags the release for the next ops.dispatch and kicks an idle
 * CPU to make one. Idle CPUs have no tick; with every CPU idle the timer is left, and nothing
 * else waits.
 */
static void release_at_tick(void)
{
	const struct cpumask *idle;
	s32 cpu;

	if (!release_due(now_ns()))
		return;
	parked_release_pending = 1;
	idle = scx_bpf_get_idle_cpumask();
	cpu = bpf_cpumask_any_distribute(idle);
	scx_bpf_put_idle_cpumask(idle);
	if (cpu < nr_cpus)
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
}

/* The release timer (zernel_timers slot ZERNEL_TIMER_RELEASE), every ZERNEL_RELEASE_NS. */
static int quota_timer(void *map, int *key, struct bpf_timer *timer)
{
	if (nr_quotas && release_due(now_ns()))
		release_parked();
	bpf_timer_start(timer, ZERNEL_RELEASE_NS, 0);
	return 0;
}

#endif /* ZERNEL_SCHED_CPU_MAX_BPF_H */
