/* SPDX-License-Identifier: GPL-2.0 */
/*
 * phase.bpf.h: threads scheduled by their own phase, as the probes see it change.
 *
 * PHASES OF THREADS. With phases from events (bpf/probes.bpf.c) each thread of a GPU process or
 * DataLoader worker has a phase of its own, changed by its events as they happen. The loader
 * then hands this object the probes' task storage (zernel_phase_threads, bpf_map__reuse_fd: the
 * same map) and sets zernel_follow_phases; at each wakeup (ops.select_cpu) and enqueue, a thread
 * of a process with a decision is scheduled with its own phase's policy (zernel_phase_policy:
 * weight, slice, latency target, preemption), not with its process's phase as the daemon last
 * decided it: the tenant, the preferred CPU and the cgroup stay the decision's (phase_follow). A
 * GpuCompute thread woken inside a sync it slept in, or outside any sync (launching), gets the
 * last entry: the engine's blocked GPU waiter, whose wait is ending (phase_policy_index). Without
 * phases from events the map is this object's own, empty, and nothing changes.
 *
 * A change made while the thread runs (a sync's or an NCCL futex's return, a batch that came, a
 * worker switched in) has no wakeup to be applied at. Four places apply such a change, each when
 * one is pending (phase_change_pending: a change the scheduler has not seen, or the phase's policy
 * itself after a new decision replaced it, task_refresh setting applied_phase to ZERNEL_NO_PHASE):
 *   - the probes' context-switch program, for the changes it makes as a followed thread is
 *     switched in (after ops.running): it kicks the CPU (probes/rules.bpf.h, sched_kick; sched_follows
 *     tells it which threads this scheduler follows), and ops.dispatch (keep_prev) or ops.enqueue
 *     applies the phase (phase_kick_take). Where this object carries those rules
 *     (zernel_switch_rules), ops.running runs them before it applies the thread's phase, and
 *     nothing is kicked;
 *   - the probes' timer, for a sync's entry and return, which their uprobes make and cannot kick
 *     for themselves: its callback kicks in the same way (probes/rules.bpf.h, SYNC KICKS), where the
 *     kernel allows it (zernel_sync_kicks);
 *   - else the phase timer of the thread's CPU, every 0.25 ms while a followed thread runs there
 *     inside a GPU sync, and while one has a change pending: it kicks the CPU in the same way
 *     (phase_timer.bpf.h);
 *   - ops.running (phase_starts): a change made while the thread waited in a queue;
 *   - ops.tick (phase_tick): the fallback, at most a tick (4 ms at HZ=250) after a change.
 *
 * HOW FAST (the delay measure, docs/sched-ext.md): each change the probes commit is counted once
 * in the phase_delay_* buckets, by the time the thread was runnable or running with it before the
 * scheduler acted on it: 0 when it changed while the thread slept (applied at the wakeup); now
 * minus the change at a non-waking enqueue or a tick; and when the thread goes to sleep first
 * (ops.stopping, phase_sleeps), the time it ran with it unapplied. task_ctx.seen_since_ns marks
 * the change seen.
 *
 * COST. Nothing at all while phases do not come from events (zernel_follow_phases is rodata). With
 * them, a thread of a decided process takes a second task-storage lookup, its state in
 * zernel_phase_threads (phase_state), in each callback that follows its phase: ops.select_cpu,
 * ops.enqueue, ops.tick, keep_prev, ops.stopping of a sleep, and ops.running of a followed
 * thread (ops.enqueue and keep_prev read a kick's mark in the state phase_follow found).
 * ops.running has work only for a followed thread (one whose phase phase_follow applied:
 * task_ctx.followed); running_slots (task.bpf.h) counts them per tgid slot, so that ops.running
 * of any other thread reads that count and returns without a task-storage lookup.
 *
 * Known weaknesses: a change replaced by another before any of these (two changes in one run of
 * the thread) is not counted, only the later one; changes of threads without a decision are not
 * counted (nor followed).
 */
#ifndef ZERNEL_SCHED_PHASE_BPF_H
#define ZERNEL_SCHED_PHASE_BPF_H

#include "common.bpf.h"
#include "probes/rules.bpf.h"
#include "share.bpf.h"
#include "task.bpf.h"
#include "vtime.bpf.h"

/* The probes' per-thread phases (zernel_phase_threads) and all their other state come with
 * probes/rules.bpf.h; the loader hands this object the probes' maps. */
const volatile u32 zernel_follow_phases;
/*
 * 1: this object carries the probes' context-switch rules (probes.bpf.c, WHERE THE SWITCH RULES
 * RUN): ops.stopping and ops.running run them, and the probes' tracepoint is not attached. Set
 * by the loader with zernel_follow_phases on a full switch; 0 leaves the rules' code out of the
 * verified programs (a kernel whose struct_ops programs may not call bpf_task_pt_regs or
 * bpf_find_vma loads the object without it).
 */
const volatile u32 zernel_switch_rules;
/*
 * 1: the probes kick for the changes a GPU sync's entry and return make (their SYNC KICKS, where
 * the kernel lets a uprobe start a bpf_timer), so the phase timer does not poll inside syncs.
 */
const volatile u32 zernel_sync_kicks;
const volatile struct zernel_phase_policy zernel_phase_policy[ZERNEL_PHASE_NR + 1];

/*
 * The thread is followed (on) or no longer: its tgid slot counts it (running_slots, task.bpf.h:
 * ops.running has work for it), and the probes' state says so (sched_follows: their
 * context-switch program kicks its CPU for a change it makes as the thread is switched in,
 * probes/rules.bpf.h sched_kick). st: the probes' state, NULL where they have none (nothing to tell
 * them).
 */
static __always_inline void set_followed(const struct task_struct *p, struct task_ctx *tctx,
					 struct zernel_phase_thread *st, bool on)
{
	if (st && st->sched_follows != on)
		st->sched_follows = on;
	if (tctx->followed == on)
		return;
	tctx->followed = on;
	__sync_fetch_and_add(running_slot(p), on ? 1 : -1);
}

/* The probes' state of a thread they follow; NULL: none, or their cached "no role" (probes.h) */
static __always_inline struct zernel_phase_thread *phase_state(struct task_struct *p)
{
	struct zernel_phase_thread *st = bpf_task_storage_get(&zernel_phase_threads, p, 0, 0);

	return st && st->role ? st : NULL;
}

/*
 * A phase change the scheduler has not seen yet: not applied, not counted in a delay bucket, not
 * found changed back (each of those sets seen_since_ns to the change's since_ns).
 */
static __always_inline bool phase_change_unseen(const struct zernel_phase_thread *st,
						const struct task_ctx *tctx)
{
	return st->since_ns != tctx->seen_since_ns;
}

/*
 * Something to apply to a running or queued thread: a change not seen yet, or its phase's policy
 * itself after a new decision replaced it (task_refresh: applied_phase ZERNEL_NO_PHASE).
 */
static __always_inline bool phase_change_pending(const struct zernel_phase_thread *st,
						 const struct task_ctx *tctx)
{
	return phase_change_unseen(st, tctx) || tctx->applied_phase == ZERNEL_NO_PHASE;
}

/*
 * Takes the kick that ended the thread's run for its phase change, if one did: the phase timer's
 * (task_ctx.phase_kicked) or the probes' at its switch-in (zernel_phase_thread.kicked, counted
 * here with the timer's kicks; st: the probes' state of a followed thread, as phase_follow just
 * found it, NULL for any other). keep_prev then keeps the thread on its CPU without comparing it
 * with the queue, ops.enqueue puts it back at the head of its CPU's local DSQ. A mark whose kick
 * found the thread gone (it slept first) is dropped as it goes to sleep (phase_sleeps), so that
 * it cannot spare a later slice's end the comparison.
 */
static __always_inline bool phase_kick_take(struct task_ctx *tctx, struct zernel_phase_thread *st)
{
	bool kicked = tctx->phase_kicked;

	tctx->phase_kicked = 0;
	if (st && st->kicked) {
		st->kicked = 0;
		stat_inc(ZERNEL_STAT_PHASE_KICK);
		stat_inc(ZERNEL_STAT_PHASE_PROBE_KICK);
		kicked = true;
	}
	return kicked;
}

/* Counts the thread's current phase change (since_ns) in its delay bucket, once. */
static __always_inline void phase_delay_count(struct task_ctx *tctx, u64 since_ns, u64 delay)
{
	tctx->seen_since_ns = since_ns;
	if (delay <= 100000)
		stat_inc(ZERNEL_STAT_PHASE_DELAY_100US);
	else if (delay <= 1000000)
		stat_inc(ZERNEL_STAT_PHASE_DELAY_1MS);
	else if (delay <= 4000000)
		stat_inc(ZERNEL_STAT_PHASE_DELAY_4MS);
	else
		stat_inc(ZERNEL_STAT_PHASE_DELAY_LONG);
}

/*
 * The policy a thread's phase schedules it with (an index of zernel_phase_policy): its phase's,
 * but GpuCompute's low priority is for a thread that waits on the GPU, inside a sync. Woken inside
 * a sync it slept in, or outside any sync (the batch came and it launches the step's kernels: the
 * CPU work the GPU waits for; launches are not probed, so GpuCompute begins when the batch
 * arrives), it gets the last entry: the engine's blocked GPU waiter, whose priority is the step's
 * critical phases' (src/policy/phase.hpp). Given that of GpuCompute, such a thread waited up to
 * the 1 s starvation bound behind DataLoader workers at 28 times its weight (issue 24 item 6).
 * `woken`: it woke inside the sync and has not slept since (task_ctx.woke_in_sync): a thread
 * whose wait is over keeps that policy until its sync returns, also when it is put back before
 * (preempted, its slice over), where GpuCompute's weight and 20 ms slice put its queue key more
 * than a second of the machine's time ahead (traced: a rank waited 1,087 ms so, once per 300
 * steps). Entering a sync is no phase change: a launching thread that then spins in its sync
 * keeps this policy until its next change or wakeup.
 */
static __always_inline u32 phase_policy_index(const struct zernel_phase_thread *st, bool woken)
{
	u32 idx = phase_index(st->phase);

	if (idx == ZERNEL_PHASE_GPU_COMPUTE && (!st->depth || woken))
		idx = ZERNEL_PHASE_NR;
	return idx;
}

/*
 * Schedules a thread of a decided process by its own phase (PHASES OF THREADS above). `waking`:
 * from a wakeup. True when the policy changed; callers account the thread afterwards
 * (task_wakes, task_account), which carries a changed weight into its node. `stp`, when not
 * NULL, gets the probes' state of a followed thread (NULL: none), for a caller that reads it too
 * (phase_kick_take) without a second task-storage lookup.
 */
static __always_inline bool phase_follow(struct task_struct *p, struct task_ctx *tctx, bool waking,
					 struct zernel_phase_thread **stp)
{
	const volatile struct zernel_phase_policy *pol;
	struct zernel_phase_thread *st;
	u32 idx;

	if (stp)
		*stp = NULL;
	if (!zernel_follow_phases)
		return false;
	if (!tctx->weight) {
		/* Its decision is gone: no longer followed, and the probes no longer kick for it. */
		if (tctx->followed)
			set_followed(p, tctx, phase_state(p), false);
		return false;
	}
	st = phase_state(p);
	set_followed(p, tctx, st, !!st);
	if (stp)
		*stp = st;
	if (!st)
		return false;
	if (waking)
		tctx->woke_in_sync = st->depth ? 1 : 0;
	idx = phase_policy_index(st, tctx->woke_in_sync);
	/* (idx is at most ZERNEL_PHASE_NR: the second test is the bound of the policy table.) */
	if (idx == tctx->applied_phase || idx > ZERNEL_PHASE_NR) {
		/* Nothing to apply (it changed and changed back): nothing to count later. */
		tctx->seen_since_ns = st->since_ns;
		return false;
	}
	if (phase_change_unseen(st, tctx))
		phase_delay_count(tctx, st->since_ns,
				  waking ? 0 : time_delta(bpf_ktime_get_ns(), st->since_ns));
	pol = &zernel_phase_policy[idx];
	tctx->applied_phase = idx;
	tctx->phase = idx < ZERNEL_PHASE_NR ? idx : ZERNEL_PHASE_GPU_COMPUTE;
	tctx->weight = clamp_u64(pol->weight, ZERNEL_WEIGHT_MIN, ZERNEL_WEIGHT_MAX);
	tctx->slice_ns =
		pol->slice_ns ? clamp_u64(pol->slice_ns, SLICE_MIN_NS, SLICE_MAX_NS) : SLICE_DFL_NS;
	tctx->latency_ns = (u64)pol->latency_target_us * 1000;
	tctx->flags = (tctx->flags & ~ZERNEL_DF_PREEMPT) | (pol->flags & ZERNEL_DF_PREEMPT);
	stat_inc(ZERNEL_STAT_PHASE_FOLLOWED);
	/* The probes stamp with bpf_ktime_get_ns (CLOCK_MONOTONIC), not the rq clock of now_ns(). */
	if (idx < ZERNEL_PHASE_NR && time_delta(bpf_ktime_get_ns(), st->since_ns) <= 1000000)
		stat_inc(ZERNEL_STAT_PHASE_FOLLOWED_1MS);
	return true;
}

/*
 * A followed thread goes to sleep: a phase change it ran with and the scheduler did not act on
 * is counted with the time it ran (its wakeup applies it, and must not count it as a wakeup's);
 * a sync's ended wait (woke_in_sync) is over, and so is any kick for a change (phase_kick_take).
 */
static __always_inline void phase_sleeps(struct task_struct *p, struct task_ctx *tctx)
{
	struct zernel_phase_thread *st;

	tctx->woke_in_sync = 0;
	tctx->phase_kicked = 0;
	st = phase_state(p);
	if (st && st->kicked)
		st->kicked = 0;
	if (!st || !phase_change_unseen(st, tctx))
		return;
	if (phase_policy_index(st, false) == tctx->applied_phase)
		tctx->seen_since_ns = st->since_ns;
	else
		phase_delay_count(tctx, st->since_ns, time_delta(bpf_ktime_get_ns(), st->since_ns));
}

/*
 * ops.running of a followed thread: a change made while it waited in a queue applies now, before
 * its weight and slice are read. The probes commit some changes as a thread is switched out still
 * runnable, after ops.enqueue queued it (sched_switch: a DataLoader worker's DataLoading, the
 * optimizer's bound): without this the change waited for the phase timer's first look. So does
 * the phase's policy after a new decision replaced it (phase_change_pending).
 */
static __always_inline void phase_starts(struct task_struct *p, struct task_ctx *tctx,
					 struct zernel_phase_thread *st)
{
	if (!phase_change_pending(st, tctx) || !phase_follow(p, tctx, false, NULL))
		return;
	task_account(p, tctx);
	if (p->scx.slice > tctx->slice_ns)
		scx_bpf_task_set_slice(p, tctx->slice_ns);
}

/*
 * A change may come while the thread runs that no one would apply before the tick: it is in a GPU
 * sync (its return is one: OptimizerStep) and the probes cannot kick for it (zernel_sync_kicks),
 * or one is pending. The phase timer looks only then (phase_timer.bpf.h); the probes kick for the
 * changes they make as it is switched in, and, with zernel_sync_kicks, for a sync's.
 */
static __always_inline bool phase_in_polled_sync(const struct zernel_phase_thread *st)
{
	return st->depth && !zernel_sync_kicks;
}

static __always_inline bool phase_may_change(const struct zernel_phase_thread *st,
					     const struct task_ctx *tctx)
{
	return phase_in_polled_sync(st) || phase_change_pending(st, tctx);
}

/*
 * ops.tick of a running thread with a phase change pending (phase_change_pending): the time run
 * so far is charged at the old weight, then the new phase's policy applies: its weight in the
 * node (the victim search reads it from the thread), and its slice when shorter than what is
 * left. (A new phase that preempts needs nothing more: the thread runs.) Returns the probes'
 * state of the thread (NULL: none), for the phase timer's arming at the tick.
 */
static __always_inline struct zernel_phase_thread *phase_tick(struct task_struct *p,
							      struct task_ctx *tctx)
{
	struct zernel_phase_thread *st;

	st = phase_state(p);
	if (!st || !phase_change_pending(st, tctx))
		return st;
	account_run(p, tctx);
	if (!phase_follow(p, tctx, false, NULL))
		return st;
	stat_inc(ZERNEL_STAT_PHASE_TICK);
	task_account(p, tctx);
	if (p->scx.slice > tctx->slice_ns)
		scx_bpf_task_set_slice(p, tctx->slice_ns);
	return st;
}

#endif /* ZERNEL_SCHED_PHASE_BPF_H */
