/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cpu_max.bpf.h: cgroups' cpu.max, a cap on their run time per period.
 *
 * ops.cgroup_set_bandwidth (and ops.cgroup_init) give each cgroup its quota and period
 * (node_set_quota); the cgroups with a quota are listed in quota_cgroups, and nr_quotas counts
 * them: while it is 0 none of this costs anything (no ops.tick work, no throttle checks). Run time
 * is charged to the quota of the thread's cgroup and of each ancestor with one
 * (zernel_quota_charge, from the charge of vtime.bpf.h), also for a tenant's thread: its tenant
 * decides its share, its cgroup still caps it. A cgroup that spent its quota is throttled:
 *   - ops.enqueue parks its threads in ZERNEL_DSQ_THROTTLED, a FIFO, with their queue key;
 *   - a running one loses its slice at the next tick (ops.tick);
 *   - ops.select_cpu does not put one on an idle CPU: it leaves it to ops.enqueue.
 * SCX_OPS_ENQ_LAST makes the kernel hand a task whose slice ended with nothing else to run to
 * ops.enqueue, where it is parked (otherwise the kernel runs it on with a new slice, and a lone
 * limited task on a machine with idle CPUs would never be throttled).
 *
 * Every ZERNEL_REFILL_NS (5 ms) a refill starts the periods that ended: quota_used_ns -= quota per
 * period. An overrun is debt the next period pays, so the long-run rate is the quota exactly;
 * idle periods earn no credit; burst is not implemented. A cgroup the refill thaws has its parked
 * threads moved back into the shared queue with the key they had (release_parked). The refill
 * comes from ops.tick of a busy CPU, or from a BPF timer when no CPU is busy: the timer is a soft
 * one, whose callbacks came up to 90 ms late in the VM (docs/sched-ext.md, "Measured"), and
 * alone it let a cgroup at 20 % run 12-15 % of a CPU (periods found over too late earn nothing).
 * Whichever comes first claims the refill by a compare-and-swap of refill_due_ns.
 *
 * Worked example: cpu.max "20000 100000" (20 ms per 100 ms) on a cgroup with one busy thread. It
 * runs 20 ms, plus up to a tick before the tick that finds the quota spent cuts its slice, say
 * 24 ms: throttled, parked until the period ends; the next period starts with 4 ms of debt and
 * allows 16 ms. Over time, 20 % of a CPU (19-20 % measured in the VM).
 *
 * Known weaknesses: enforced at tick granularity, with the overrun paid back by the next period
 * (tasks already in the shared queue when their cgroup throttles run their slice: that too is
 * debt); cpu.max.burst is ignored; more than ZERNEL_MAX_QUOTAS (256) cgroups with a quota: the
 * scheduler exits with an error (and the daemon observes, then reloads); ancestors more than
 * ZERNEL_MAX_LEVELS up are not charged.
 *
 * Races accepted: quota bookkeeping (quota_used_ns) is atomic, the period end and the throttled
 * flag are not: a refill racing with a charge may thaw a cgroup one refill step early or late.
 * Two refills never run together: each claims its step by the compare-and-swap.
 */
#ifndef ZERNEL_SCHED_CPU_MAX_BPF_H
#define ZERNEL_SCHED_CPU_MAX_BPF_H

#include "common.bpf.h"
#include "node.bpf.h"
#include "task.bpf.h"

enum {
	ZERNEL_MAX_QUOTAS = 256,    /* cgroups with a cpu.max quota that are enforced */
	ZERNEL_REFILL_NS = 5000000, /* how often quotas are refilled and tasks released */
};

/* A quota at or above this many us is "max" (the kernel passes RUNTIME_INF). */
#define QUOTA_INF_US (1ULL << 40)

/* Ids of the cgroups with a quota, scanned by the refill; 0 = free slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ZERNEL_MAX_QUOTAS);
	__type(key, u32);
	__type(value, u64);
} quota_cgroups SEC(".maps");

/* Non-zero while some cgroup has a quota: ops.tick does nothing for cpu.max otherwise. */
static u64 nr_quotas;
/* When the next refill is due (the last one plus ZERNEL_REFILL_NS); claimed by compare-and-swap. */
static u64 refill_due_ns;
/* Set when a refill from ops.tick thawed a cgroup: the next ops.dispatch releases its threads. */
static volatile u64 parked_release_pending;

/* True when the node or an ancestor has spent its quota. */
__noinline int zernel_node_throttled(u64 id)
{
	u32 i;

	for (i = 0; i < ZERNEL_MAX_LEVELS; i++) {
		struct znode *n = node_get(id);

		if (!n)
			return 0;
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
	u32 i;

	for (i = 0; i < ZERNEL_MAX_LEVELS && id; i++) {
		struct znode *n = node_get(id);

		if (!n)
			return 0;
		if (n->quota_ns &&
		    __sync_add_and_fetch(&n->quota_used_ns, (s64)used) >= (s64)n->quota_ns)
			n->throttled = 1;
		id = n->parent;
	}
	return 0;
}

/* Registers (quota) or drops (none) the cgroup's slot in quota_cgroups. */
static void quota_register(u64 id, bool on)
{
	u32 i;

	bpf_for(i, 0, ZERNEL_MAX_QUOTAS) {
		u32 k = i;
		u64 *slot = bpf_map_lookup_elem(&quota_cgroups, &k);

		if (!slot)
			return;
		if (*slot == id) {
			if (!on) {
				*slot = 0;
				__sync_fetch_and_sub(&nr_quotas, 1);
			}
			return;
		}
	}
	if (!on)
		return;
	bpf_for(i, 0, ZERNEL_MAX_QUOTAS) {
		u32 k = i;
		u64 *slot = bpf_map_lookup_elem(&quota_cgroups, &k);

		if (!slot)
			return;
		if (__sync_val_compare_and_swap(slot, 0, id) == 0) {
			__sync_fetch_and_add(&nr_quotas, 1);
			return;
		}
	}
	scx_bpf_error("more than %d cgroups with a cpu.max quota", ZERNEL_MAX_QUOTAS);
}

/* A cgroup's cpu.max, from ops.cgroup_init or ops.cgroup_set_bandwidth: a new period starts. */
static void node_set_quota(u64 id, u64 period_us, u64 quota_us)
{
	struct znode *n = node_get(id);
	bool on;

	if (!n || !id)
		return;
	on = quota_us < QUOTA_INF_US && period_us;
	n->quota_ns = on ? quota_us * 1000 : 0;
	n->period_ns = on ? period_us * 1000 : 0;
	n->quota_used_ns = 0;
	n->period_end_ns = now_ns() + n->period_ns;
	n->throttled = 0;
	quota_register(id, on);
	__sync_fetch_and_add(&tree_gen, 1);
}

/* Starts the periods that ended, paying back what the quota covers; true when one thawed. */
static bool quota_refill(u64 now)
{
	bool thawed = false;
	u32 i;

	bpf_for(i, 0, ZERNEL_MAX_QUOTAS) {
		u32 k = i;
		u64 *slot = bpf_map_lookup_elem(&quota_cgroups, &k), id, periods;
		struct znode *n;
		s64 used;

		if (!slot || !*slot)
			continue;
		id = *slot;
		n = bpf_map_lookup_elem(&nodes, &id);
		if (!n || !n->quota_ns || !n->period_ns || time_before(now, n->period_end_ns))
			continue;
		periods = time_delta(now, n->period_end_ns) / n->period_ns + 1;
		if (periods > 1000)
			periods = 1000;
		used = __sync_sub_and_fetch(&n->quota_used_ns, (s64)(periods * n->quota_ns));
		/* No credit from idle periods. */
		if (used < 0)
			__sync_fetch_and_sub(&n->quota_used_ns, used);
		n->period_end_ns += periods * n->period_ns;
		if (n->throttled && used < (s64)n->quota_ns) {
			n->throttled = 0;
			thawed = true;
		}
	}
	return thawed;
}

/*
 * Claims the refill that is due (one per ZERNEL_REFILL_NS step, whoever comes first: the timer
 * or a tick) and does it; true when it thawed a cgroup.
 */
static bool quota_refill_due(u64 now)
{
	u64 due = refill_due_ns;

	if (time_before(now, due))
		return false;
	if (__sync_val_compare_and_swap(&refill_due_ns, due, now + ZERNEL_REFILL_NS) != due)
		return false;
	return quota_refill(now);
}

/* Tasks parked in the throttled DSQ whose cgroups have quota again go back to the queue. */
static void release_parked(void)
{
	struct task_struct *p;

	bpf_rcu_read_lock();
	bpf_for_each(scx_dsq, p, ZERNEL_DSQ_THROTTLED, 0) {
		struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);
		s32 cpu;

		if (tctx && zernel_node_throttled(tctx->cgroup_node))
			continue;
		if (tctx) {
			scx_bpf_dsq_move_set_vtime(BPF_FOR_EACH_ITER, tctx->queue_key);
			tctx->pub.queued_at = now_ns();
		}
		if (!scx_bpf_dsq_move_vtime(BPF_FOR_EACH_ITER, p, ZERNEL_DSQ_SHARED, 0))
			continue;
		stat_inc(ZERNEL_STAT_UNTHROTTLED);
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (cpu >= 0)
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	}
	bpf_rcu_read_unlock();
}

/*
 * The refill step from ops.tick: a tick comes from the hard timer interrupt of every busy CPU,
 * where the BPF timer is a soft one (above). A tick cannot move tasks between queues (only
 * ops.dispatch and timers may): it flags the release for the next ops.dispatch and kicks an idle
 * CPU to make one. Idle CPUs have no tick; with every CPU idle the timer is left, and nothing
 * else waits.
 */
static void quota_refill_at_tick(void)
{
	const struct cpumask *idle;
	s32 cpu;

	if (!quota_refill_due(now_ns()))
		return;
	parked_release_pending = 1;
	idle = scx_bpf_get_idle_cpumask();
	cpu = bpf_cpumask_any_distribute(idle);
	scx_bpf_put_idle_cpumask(idle);
	if (cpu < nr_cpus)
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
}

/* The refill timer (zernel_timers slot ZERNEL_TIMER_REFILL), every ZERNEL_REFILL_NS. */
static int quota_timer(void *map, int *key, struct bpf_timer *timer)
{
	if (nr_quotas) {
		quota_refill_due(now_ns());
		if (scx_bpf_dsq_nr_queued(ZERNEL_DSQ_THROTTLED) > 0)
			release_parked();
	}
	bpf_timer_start(timer, ZERNEL_REFILL_NS, 0);
	return 0;
}

#endif /* ZERNEL_SCHED_CPU_MAX_BPF_H */
