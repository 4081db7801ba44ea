/* SPDX-License-Identifier: GPL-2.0 */
/*
 * zernel: the sched_ext scheduler that carries out zernel-sched's per-process decisions.
 *
 * The daemon decides per process (tgid) and writes struct zernel_decision (intf.h) into
 * zernel_decisions: a weight (priority), a time slice (phase), a latency target, whether a
 * wakeup may preempt, a preferred CPU and NUMA node, and a tenant. Every thread of the process
 * follows it, from a copy in its task storage. A task with no decision is scheduled like any
 * other task, with the weight of its nice value, and yields after 3 ms of its 20 ms slice while a
 * decided thread waits in its queue (yield.bpf.h).
 *
 * ALGORITHM: weighted virtual time over a flattened share hierarchy, one queue per LLC. Each
 * runnable thread has a share of the machine, from the cgroup tree (cpu.weight, level by level),
 * the tenants (one more level of it, weighing their GPUs) and its weight inside its group (the
 * phase's priority). Run time is charged to it as virtual time, used / share, and it waits in its
 * LLC's DSQ ordered by its vtime plus a virtual request (its latency target, else its burst),
 * its lag bounded at every wakeup; CPUs take from another LLC's queue when theirs is empty or the
 * other is further behind, which keeps the machine-wide shares. Around that: cgroups' cpu.max
 * caps their run time; a latency-critical wakeup preempts lower-weight work; the thread whose
 * slice ended keeps its CPU unless a rival is ahead; a thread queued for 1 s is rescued; the
 * threads of GPU processes are scheduled by their own phase as the probes see it change; a CPU
 * taken by a real-time task hands its queued tasks back (ops.cpu_release).
 *
 * THE PARTS, one header of static functions per concern under bpf/sched/, each opening with its
 * own essay (the algorithm, a worked example, known weaknesses, races accepted), in the order
 * they build on each other:
 *   common.bpf.h       load-time knobs, the DSQs, counters, helpers
 *   task.bpf.h         a thread's task storage (struct task_ctx) and its weight
 *   node.bpf.h         the nodes of the hierarchy: the root, cgroups, tenants
 *   cpu_max.bpf.h      cpu.max: run time charged to quotas, throttled threads parked, lazy refills
 *   share.bpf.h        each thread's share of the machine (SHARING, with a worked example)
 *   vtime.bpf.h        the charge, the queue key and the lag bound (LAG)
 *   decision.bpf.h     the decisions, and each thread's cached copy of its own
 *   phase.bpf.h        threads scheduled by their own phase (PHASES OF THREADS); it includes
 *                      the probes' state and rules (bpf/probes/rules.bpf.h), which ops.stopping
 *                      and ops.running run where the loader sets zernel_switch_rules
 *   phase_timer.bpf.h  the per-CPU timer that applies a running thread's phase change
 *   cpu_choice.bpf.h   the preferred CPU and NUMA node at a wakeup
 *   compat.bpf.h       what differs from 6.12 to 7.x (KERNEL COMPATIBILITY); exit ABI checks
 *   llc.bpf.h          one queue per LLC, and the balance between the queues (BALANCE)
 *   preempt.bpf.h      the victim search of a preempting wakeup
 *   dispatch.bpf.h     keep_prev: whether the thread whose slice ended keeps its CPU
 *   rescue.bpf.h       the starvation bound
 *   yield.bpf.h        the rest of the node yields to a decided thread that waits (YIELD)
 * This file holds the callbacks, which call into the parts, and the ops table.
 *
 * COST. A wakeup runs select_cpu (or enqueue), running and stopping, and a CPU going idle runs
 * dispatch; these must cost about what scx_simple's do (docs/benchmarks.md, "sched_ext
 * micro-benchmark", has the figures per callback). So:
 * - Task storage: each of those callbacks looks up the thread's task_ctx once (task_ctx_get),
 *   and finds its decision there: no hash lookup while decisions do not change (decision.bpf.h).
 *   With phases from events a thread of a decided process takes a second lookup, its phase
 *   state (phase.bpf.h); keep_prev may take another for a pinned rival's vtime (dispatch.bpf.h).
 *   ops.running looks up nothing for a thread that is not followed. Carrying the probes'
 *   context-switch rules (zernel_switch_rules) adds to ops.stopping and ops.running one load of
 *   the task's bit in the probes' follow bitmap for a task of a process nobody follows, in place
 *   of a tracepoint on sched_switch (docs/probes.md, "What is attached when").
 * - The share hierarchy: no map lookup for a thread of the root cgroup, one hash lookup of its
 *   node per callback for a thread of another cgroup, more for a tenant's (share.bpf.h, COST).
 * - No ops.runnable / ops.quiescent: their work (wakeup count, lag bound, joining the node's
 *   runnable weight) is done in select_cpu / enqueue and stopping, which run anyway.
 * - No clock read for the charge and no start mark in ops.running (vtime.bpf.h); an LLC's front
 *   moves in ops.dispatch, from the head of the queue a CPU takes a task from.
 * - Queues per LLC (llc.bpf.h): a dispatch or enqueue takes the lock of its LLC's queue and writes
 *   its LLC's front only; with several LLCs a dispatch reads one other LLC's head and front.
 * - ops.tick reads the running task's slice and does nothing more until it has run 3 ms of it,
 *   while no cgroup has a quota and phases do not come from events; after that, its LLC's count
 *   of waiting decided threads and a peek at its LLC's queue (yield.bpf.h), and one task-storage
 *   lookup per tick while that holds a task (250 a second per busy CPU at HZ=250), two when the
 *   head woke; with phases from events one more for a thread of a decided process.
 * - Nothing is written for the victim search on the hot paths (preempt.bpf.h); the rescue DSQ is
 *   looked at only while the starvation scan has flagged it (rescue.bpf.h); counters are per-CPU
 *   array slots (common.bpf.h).
 * - ops.enqueue kicks an idle CPU for a queued task only when ops.select_cpu did not place it:
 *   for a wakeup select_cpu found no idle CPU, or chose the waker's CPU on purpose (a
 *   synchronous wakeup), and a kick would undo that with an IPI and a migration. A direct
 *   dispatch to the local DSQ when select_cpu finds an idle CPU (as scx_simple) skips ops.enqueue
 *   altogether.
 *
 * KNOWN WEAKNESS of the whole: an LLC of very many CPUs (one L3 for a whole socket) shares one
 * queue among them. Each part's essay has its own.
 */
#include "sched/common.bpf.h"
#include "sched/task.bpf.h"
#include "sched/node.bpf.h"
#include "sched/cpu_max.bpf.h"
#include "sched/share.bpf.h"
#include "sched/vtime.bpf.h"
#include "sched/decision.bpf.h"
#include "sched/phase.bpf.h"
#include "sched/phase_timer.bpf.h"
#include "sched/cpu_choice.bpf.h"
#include "sched/compat.bpf.h"
#include "sched/llc.bpf.h"
#include "sched/preempt.bpf.h"
#include "sched/dispatch.bpf.h"
#include "sched/rescue.bpf.h"
#include "sched/yield.bpf.h"

char _license[] SEC("license") = "GPL";

UEI_DEFINE(uei);

struct zernel_timer {
	struct bpf_timer timer;
};

/* The timers ops.init starts; each restarts itself from its callback. */
enum {
	ZERNEL_TIMER_STARVE = 0,  /* the starvation scan (starve_scan, rescue.bpf.h) */
	ZERNEL_TIMER_RELEASE = 1, /* cpu.max: parked threads released (quota_timer) */
	ZERNEL_NR_TIMERS = 2,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ZERNEL_NR_TIMERS);
	__type(key, u32);
	__type(value, struct zernel_timer);
} zernel_timers SEC(".maps");

/*
 * A wakeup: the thread's phase (phase.bpf.h), its wakeup counted and its node joined, its lag
 * bound owed to the first comparison of its key (task_wakes, lag_settle, vtime.bpf.h); then an
 * idle CPU, its preferred one first (cpu_choice.bpf.h), straight into that CPU's local DSQ.
 * Otherwise ops.enqueue queues it (or preempts).
 */
s32 BPF_STRUCT_OPS(zernel_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct task_ctx *tctx = task_ctx_get(p);
	u64 slice = SLICE_DFL_NS;
	bool is_idle = false;
	s32 cpu;

	if (tctx) {
		phase_follow(p, tctx, true, NULL);
		task_wakes(p, tctx, wake_flags & SCX_WAKE_TTWU, prev_cpu);
		/* Over its cgroup's quota: ops.enqueue parks it. */
		if (task_throttled(tctx))
			return prev_cpu;
		slice = tctx->slice_ns;
		if (tctx->preferred_cpu >= 0 || tctx->preferred_node >= 0) {
			cpu = pick_preferred(p, tctx);
			if (cpu >= 0) {
				stat_inc(ZERNEL_STAT_LOCAL);
				scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice, 0);
				return cpu;
			}
		}
	}

	cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	if (is_idle) {
		stat_inc(ZERNEL_STAT_LOCAL);
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice, 0);
	}
	return cpu;
}

/*
 * A runnable thread to queue: a wakeup ops.select_cpu did not place, or a thread put back (its
 * slice ended, a kick, a higher class took its CPU). In order: parked when its cgroup is
 * throttled (cpu_max.bpf.h); kept on its CPU when it is the last runnable task there or the phase
 * timer kicked it; placed by the victim search when it may preempt (preempt.bpf.h); else queued
 * in its LLC's DSQ by its key (vtime.bpf.h, llc.bpf.h), and an idle CPU kicked for it unless
 * ops.select_cpu saw the wakeup.
 */
void BPF_STRUCT_OPS(zernel_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = task_ctx_get(p);
	struct zernel_phase_thread *st;
	u32 llc = task_llc(p);
	bool counted, kicked;
	u64 key, share;
	s32 cpu;

	if (!tctx) {
		/* Not initialised (cannot happen after init_task); keep it running. */
		scx_bpf_dsq_insert_vtime(p, llc_dsq(llc), SLICE_DFL_NS, *front_of(llc), enq_flags);
		llc_mark_waiting(llc);
		stat_inc(ZERNEL_STAT_UNDECIDED);
		stat_inc(ZERNEL_STAT_GLOBAL);
		return;
	}
	phase_follow(p, tctx, enq_flags & SCX_ENQ_WAKEUP, &st);
	kicked = phase_kick_take(tctx, st);
	if (tctx->weight) {
		stat_inc(ZERNEL_STAT_DECIDED);
		if (has_tenant(tctx))
			stat_inc(ZERNEL_STAT_TENANT);
	} else {
		stat_inc(ZERNEL_STAT_UNDECIDED);
	}
	if (enq_flags & SCX_ENQ_REENQ)
		stat_inc(ZERNEL_STAT_REENQ);
	counted = tctx->wakeup_counted;
	/* A wakeup that skipped ops.select_cpu is counted here. */
	if ((enq_flags & SCX_ENQ_WAKEUP) && !counted)
		share = joined_share(tctx, task_wakes(p, tctx, true, scx_bpf_task_cpu(p)));
	else
		share = joined_share(tctx, task_account(p, tctx));
	lag_settle(tctx, share);
	key = tctx->pub.vtime + vtime_for(task_request(tctx), share);
	/*
	 * Read only while it heads its LLC's queue (OWED, yield.bpf.h), where it comes below or,
	 * parked, by release_parked.
	 */
	tctx->queued_woken = (enq_flags & SCX_ENQ_WAKEUP) ? 1 : 0;

	/* Its cgroup (or an ancestor) spent its cpu.max quota: wait for the next period. */
	if (task_throttled(tctx)) {
		tctx->queue_key = key;
		scx_bpf_dsq_insert(p, ZERNEL_DSQ_THROTTLED, tctx->slice_ns, enq_flags);
		stat_inc(ZERNEL_STAT_THROTTLED);
		return;
	}

	/*
	 * The last runnable task of its CPU at the end of its slice (SCX_OPS_ENQ_LAST): ops.dispatch
	 * did not keep it (throttled: parked above; or the head of the queue cannot run here).
	 * It goes on running here; without the flag the kernel would have done that without asking,
	 * and a throttled task would have run on.
	 */
	if (enq_flags & SCX_ENQ_LAST) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, tctx->slice_ns, enq_flags);
		stat_inc(ZERNEL_STAT_LOCAL);
		return;
	}

	/*
	 * Put back by a kick for its phase change (the phase timer's or the probes',
	 * phase_kick_take): it runs on, by its new phase.
	 */
	if (kicked && !(enq_flags & SCX_ENQ_WAKEUP)) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, tctx->slice_ns, enq_flags | SCX_ENQ_HEAD);
		stat_inc(ZERNEL_STAT_LOCAL);
		return;
	}

	if ((tctx->flags & ZERNEL_DF_PREEMPT) && (enq_flags & SCX_ENQ_WAKEUP) &&
	    try_preempt(p, tctx, enq_flags))
		return;

	/*
	 * A preempting task put back while runnable (its slice ran out, or a higher class took
	 * the CPU) that would be the head of its LLC's queue: no CPU looks at the queue before
	 * its current slice ends, which may be 100 ms away. It preempts as a wakeup does. Only
	 * at the head: its weighted share, not more, is what it takes this way.
	 */
	if ((tctx->flags & ZERNEL_DF_PREEMPT) && !(enq_flags & SCX_ENQ_WAKEUP) &&
	    would_lead(llc, key) && try_preempt(p, tctx, enq_flags))
		return;
	tctx->pub.queued_at = now_ns();
	tctx->queue_key = key;
	scx_bpf_dsq_insert_vtime(p, llc_dsq(llc), tctx->slice_ns, key, enq_flags);
	llc_mark_waiting(llc);
	yield_queued(p, tctx, llc);
	stat_inc(ZERNEL_STAT_GLOBAL);

	/*
	 * An idle CPU that p may use would otherwise sleep until its next tick. Not for a wakeup
	 * that went through ops.select_cpu: that found no idle CPU, or chose the waker's CPU on
	 * purpose (a synchronous wakeup: the waker is about to sleep), and kicking another CPU
	 * would undo the choice at the price of an IPI and a migration.
	 */
	if ((enq_flags & SCX_ENQ_WAKEUP) && counted)
		return;
	cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
	if (cpu >= 0) {
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		stat_inc(ZERNEL_STAT_KICK_IDLE);
	}
}

/* A CPU looks for work: the order of what it serves is dispatch.bpf.h's essay. */
void BPF_STRUCT_OPS(zernel_dispatch, s32 cpu, struct task_struct *prev)
{
	u32 llc = llc_of(cpu), other = other_llc(llc);
	struct task_struct *head;
	u64 key;

	/*
	 * The rescue DSQ is looked at only while the starvation scan says it may hold tasks: a
	 * DSQ lookup per dispatch is a cost every context switch would pay. The scan sets the
	 * flag again every 100 ms while the DSQ is not empty, so a cleared flag racing with a
	 * new rescue delays that task by one scan at most.
	 */
	if (rescue_pending) {
		if (scx_bpf_dsq_move_to_local(ZERNEL_DSQ_RESCUE, 0))
			return;
		rescue_pending = 0;
	}
	/* A release step from ops.tick (cpu.max): parked threads whose cgroups thawed go back. */
	if (parked_release_pending) {
		parked_release_pending = 0;
		release_parked();
	}
	if (nr_llcs > 1)
		fronts_meet(llc, other);
	if (prev && (prev->scx.flags & SCX_TASK_QUEUED) && keep_prev(prev, cpu, llc, other))
		return;
	/*
	 * The front of the LLC's queue follows the head's key when this CPU takes a task in order
	 * (the head, or the first that may run here: its key is no smaller). Tasks that went
	 * straight to an idle CPU or were rescued do not move it: they may be far ahead, and would
	 * push every sleeper's floor past all the queued tasks (the lag bound keeps such a thread
	 * within two slices of the front when it next wakes). An empty queue (a CPU going idle,
	 * most dispatches of a ping-pong) costs the peek alone on a machine of one LLC; on more, a
	 * task from another LLC's queue first (llc.bpf.h, BALANCE).
	 */
	head = __COMPAT_scx_bpf_dsq_peek(llc_dsq(llc));
	if (nr_llcs > 1) {
		if (!head && llc_mark_empty(llc))
			head = __COMPAT_scx_bpf_dsq_peek(llc_dsq(llc));
		if (llc_balance(llc, other, head))
			return;
	}
	if (!head)
		return;
	key = head->scx.dsq_vtime;
	if (scx_bpf_dsq_move_to_local(llc_dsq(llc), 0))
		front_advance(front_of(llc), key);
}

/*
 * ops.running has work only for a followed thread of a decided process: a phase change made
 * while it was queued applies, and the phase timer watches its run while a change may come
 * (phase_may_change: in a GPU sync, or one pending); a decided thread leaves its LLC's count of
 * waiting ones (yield.bpf.h). The run time needs no start mark (charge_run), the fronts move in
 * ops.dispatch, and a thread whose tgid slot counts no followed thread and no queued decided one
 * is not looked up (running_slots, task.bpf.h).
 */
void BPF_STRUCT_OPS(zernel_running, struct task_struct *p)
{
	struct zernel_phase_thread *st = NULL;
	struct task_ctx *tctx;
	__u64 now = 0;

	/* The probes' switch-in rules first, so that a change they make applies below; the state
	 * they found is the one phase_state would look up. */
	if (zernel_switch_rules)
		st = phase_switch_in(p, false, &now);
	if (!*running_slot(p))
		return;
	tctx = task_ctx_get(p);
	if (!tctx)
		return;
	yield_unqueued(p, tctx);
	if (!zernel_follow_phases || !tctx->weight || !tctx->followed)
		return;
	if (!st)
		st = phase_state(p);
	if (!st)
		return;
	phase_starts(p, tctx, st);
	if (phase_may_change(st, tctx))
		phase_timer_arm(p);
}

/*
 * The thread leaves its CPU: its run time is charged (vtime.bpf.h); going to sleep, its burst
 * ends, a phase change it ran with is counted (phase.bpf.h) and it leaves its node.
 */
static __always_inline void task_stops(struct task_struct *p, struct task_ctx *tctx, bool runnable)
{
	struct zernel_task_ctx *tc = &tctx->pub;
	struct znode *n;

	/* One lookup of its node for the charge and the leave. */
	n = tctx->joined ? node_get(tctx->joined_node) : NULL;
	charge_run(p, tctx, tctx->joined ? joined_share(tctx, n) : task_share(p, tctx));
	if (!runnable) {
		/* The next wakeup is counted anew (ops.select_cpu, else ops.enqueue). */
		tctx->wakeup_counted = 0;
		if (zernel_follow_phases && tctx->weight)
			phase_sleeps(p, tctx);
		/* Going to sleep: the burst ends, and the thread leaves its node's load. */
		tc->last_burst_ns = tc->burst_ns;
		tc->avg_burst_ns = tc->avg_burst_ns - (tc->avg_burst_ns >> 3) + (tc->burst_ns >> 3);
		tc->burst_ns = 0;
		task_unaccount_in(tctx, n);
	}
}

/*
 * After the charge (which takes the phase the thread ran with), the probes' switch-out rules
 * where this object carries them, as their tracepoint ran after ops.stopping: a thread that is
 * not runnable any more goes to sleep in the state it set.
 */
void BPF_STRUCT_OPS(zernel_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx = task_ctx_get(p);
	unsigned int state;
	__u64 now = 0;

	if (tctx)
		task_stops(p, tctx, runnable);
	if (!zernel_switch_rules)
		return;
	state = p->__state;
	phase_switch_out(
		p, !runnable && (state & (ZERNEL_TASK_INTERRUPTIBLE | ZERNEL_TASK_UNINTERRUPTIBLE)),
		state, &now);
}

/*
 * A task without a decision that has run 3 ms of its slice ends it while a decided thread waits
 * in its LLC's queue, or, when it is a CPU hog, for a woken thread at the head of that queue
 * with a key before its own (yield.bpf.h, YIELD and OWED); a followed thread's phase change made
 * while it runs (phase_tick); and, while some cgroup has a quota, charges the running thread's
 * cgroup as it runs and ends its slice at the tick that finds the quota spent (at most one tick
 * over; the overrun is debt that the next period pays back).
 */
void BPF_STRUCT_OPS(zernel_tick, struct task_struct *p)
{
	struct task_struct *head = NULL;
	struct zernel_phase_thread *st;
	struct task_ctx *tctx;
	bool yield = false;

	if (yield_ran(p)) {
		yield = yield_due(p);
		if (!yield)
			head = owed_candidate(p);
	}
	if (!nr_quotas && !zernel_follow_phases && !yield && !head)
		return;
	if (nr_quotas)
		release_at_tick();
	tctx = task_ctx_get(p);
	if (!tctx)
		return;
	if (yield && !tctx->weight) {
		scx_bpf_task_set_slice(p, 0);
		stat_inc(ZERNEL_STAT_YIELD_CUT);
	} else if (head && !tctx->weight && owed_cut_due(p, tctx, head)) {
		scx_bpf_task_set_slice(p, 0);
		stat_inc(ZERNEL_STAT_OWED_CUT);
	}
	if (zernel_follow_phases && tctx->weight) {
		/*
		 * A sync entered while it ran: the timer looks for its return, unless the probes
		 * kick for it (phase_may_change).
		 */
		st = phase_tick(p, tctx);
		if (st && phase_in_polled_sync(st) && tctx->followed)
			phase_timer_arm(p);
	}
	if (!nr_quotas || !tctx->limited)
		return;
	account_run(p, tctx);
	if (task_throttled(tctx)) {
		scx_bpf_task_set_slice(p, 0);
		stat_inc(ZERNEL_STAT_THROTTLE_CUT);
	}
}

/*
 * A CPU taken by a higher sched class (an RT or deadline task): the tasks already queued on its
 * local DSQ would wait until that task is done. Put them back through ops.enqueue, which places
 * them elsewhere.
 */
void BPF_STRUCT_OPS(zernel_cpu_release, s32 cpu, struct scx_cpu_release_args *args)
{
	scx_bpf_reenqueue_local();
}

/* A task enters sched_ext: it starts at the front of the queue, with nothing to charge. */
void BPF_STRUCT_OPS(zernel_enable, struct task_struct *p)
{
	struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);

	if (!tctx)
		return;
	tctx->pub.vtime = *front_of(task_llc(p));
	/* Run time before (under another class) is not ours to charge. */
	tctx->charged_sum_ns = p->se.sum_exec_runtime;
	tctx->wakeup_counted = 0;
	/* A bound owed from before it left (lag_settle) would move the new vtime by the old one's. */
	tctx->lag_due = 0;
}

void BPF_STRUCT_OPS(zernel_disable, struct task_struct *p)
{
	struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);

	if (!tctx)
		return;
	task_unaccount(tctx);
	yield_unqueued(p, tctx);
	/*
	 * Leaving the scheduler (or exiting, or the scheduler unloading, also when the kernel ejects
	 * it): its tgid slot stops counting it, and the probes no longer kick its CPU.
	 */
	if (tctx->followed)
		set_followed(p, tctx, zernel_follow_phases ? phase_state(p) : NULL, false);
}

/* A new task (or every task at attach): its storage (task.bpf.h), with no decision yet. */
s32 BPF_STRUCT_OPS(zernel_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	struct task_ctx *tctx;

	tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tctx)
		return -ENOMEM;
	tctx->pub.contrib_tenant = ZERNEL_NO_TENANT;
	/* No decision until the first lookup, which the generation forces. */
	tctx->decision_gen = ~0ULL;
	tctx->weight = 0;
	tctx->tenant_weight = ZERNEL_TENANT_WEIGHT_DFL;
	tctx->slice_ns = SLICE_DFL_NS;
	tctx->preferred_cpu = ZERNEL_NO_CPU;
	tctx->preferred_node = ZERNEL_NO_CPU;
	tctx->tenant = ZERNEL_NO_TENANT;
	tctx->phase = ZERNEL_NO_PHASE;
	tctx->applied_phase = ZERNEL_NO_PHASE;
	tctx->kthread = (p->flags & PF_KTHREAD) ? 1 : 0;
	tctx->cgroup_node = 0;
	if (bpf_core_field_exists(args->cgroup) && args->cgroup)
		tctx->cgroup_node = cgrp_node_id(args->cgroup);
	return 0;
}

/* The cgroup tree's nodes (node.bpf.h): created, deleted, moved between, reweighted, capped. */
s32 BPF_STRUCT_OPS_SLEEPABLE(zernel_cgroup_init, struct cgroup *cgrp,
			     struct scx_cgroup_init_args *args)
{
	u64 id = cgrp_node_id(cgrp);
	struct znode init = {}, *n;
	struct cgroup *parent;

	if (!id) {
		root_node.weight = ZERNEL_WEIGHT_DFL;
		return 0;
	}
	init.weight = cpu_weight_to_1024(args->weight);
	if (cgrp->level > 1) {
		parent = bpf_cgroup_ancestor(cgrp, cgrp->level - 1);
		if (!parent)
			return -ENOENT;
		init.parent = parent->kn->id;
		bpf_cgroup_release(parent);
	}
	/*
	 * A full node map (ZERNEL_MAX_NODES_MAP) degrades, never fails: an error here would fail
	 * the cgroup's creation (a kubelet's pod) or, at attach, the scheduler's load. The cgroup's
	 * threads share as the root's own (task_node) and its cpu.max is not enforced; counted.
	 */
	if (bpf_map_update_elem(&nodes, &id, &init, BPF_ANY) ||
	    !(n = bpf_map_lookup_elem(&nodes, &id))) {
		stat_inc(ZERNEL_STAT_NODE_MAP_FULL);
		return 0;
	}
	if (bpf_core_field_exists(args->bw_quota_us))
		node_set_quota(id, args->bw_period_us, args->bw_quota_us);
	return 0;
}

void BPF_STRUCT_OPS(zernel_cgroup_exit, struct cgroup *cgrp)
{
	u64 id = cgrp_node_id(cgrp);
	struct znode *n;

	if (!id)
		return;
	n = bpf_map_lookup_elem(&nodes, &id);
	if (n && n->quota_ns)
		__sync_fetch_and_sub(&nr_quotas, 1);
	bpf_map_delete_elem(&nodes, &id);
	tree_changed();
}

void BPF_STRUCT_OPS(zernel_cgroup_move, struct task_struct *p, struct cgroup *from,
		    struct cgroup *to)
{
	struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);

	if (!tctx)
		return;
	tctx->cgroup_node = cgrp_node_id(to);
	if (tctx->joined)
		task_account(p, tctx);
}

void BPF_STRUCT_OPS(zernel_cgroup_set_weight, struct cgroup *cgrp, u32 weight)
{
	node_set_weight(cgrp_node_id(cgrp), cpu_weight_to_1024(weight));
}

void BPF_STRUCT_OPS_SLEEPABLE(zernel_cgroup_set_bandwidth, struct cgroup *cgrp, u64 period_us,
			      u64 quota_us, u64 burst_us)
{
	node_set_quota(cgrp_node_id(cgrp), period_us, quota_us);
}

static s32 start_timer(u32 idx, void *cb, u64 after_ns)
{
	struct zernel_timer *t = bpf_map_lookup_elem(&zernel_timers, &idx);
	s32 ret;

	if (!t)
		return -ENOENT;
	ret = bpf_timer_init(&t->timer, &zernel_timers, CLOCK_MONOTONIC);
	if (!ret)
		ret = bpf_timer_set_callback(&t->timer, cb);
	if (!ret)
		ret = bpf_timer_start(&t->timer, after_ns, 0);
	return ret;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(zernel_init)
{
	s32 ret = 0;
	u32 llc;

	init_at = now_ns();
	if (!root_node.weight)
		root_node.weight = ZERNEL_WEIGHT_DFL;
	/* The root's own group, counted at all times (share.bpf.h, ROOT GROUP). */
	root_node.child_weight = OWN_GROUP_WEIGHT;
	bpf_for(llc, 0, nr_llcs) {
		ret = scx_bpf_create_dsq(llc_dsq(llc), -1);
		if (ret)
			break;
	}
	if (!ret)
		ret = scx_bpf_create_dsq(ZERNEL_DSQ_RESCUE, -1);
	if (!ret)
		ret = scx_bpf_create_dsq(ZERNEL_DSQ_THROTTLED, -1);
	if (ret) {
		scx_bpf_error("creating the DSQs: %d", ret);
		return ret;
	}
	ret = build_cpumasks();
	if (ret) {
		scx_bpf_error("building the node and scratch cpumasks: %d", ret);
		return ret;
	}
	ret = start_timer(ZERNEL_TIMER_STARVE, starve_scan, (u64)ZERNEL_STARVE_SCAN_US * 1000);
	if (!ret)
		ret = start_timer(ZERNEL_TIMER_RELEASE, quota_timer, ZERNEL_RELEASE_NS);
	if (!ret)
		ret = phase_timers_init();
	if (ret) {
		scx_bpf_error("starting the timers: %d", ret);
		return ret;
	}
	return 0;
}

void BPF_STRUCT_OPS(zernel_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

void BPF_STRUCT_OPS(zernel_dump_task, struct scx_dump_ctx *dctx, struct task_struct *p)
{
	struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);

	if (!tctx)
		return;
	scx_bpf_dump(
		"zernel: vtime=%llu (now %llu) queued_at=%llu runtime=%llu wakeups=%llu node=%llx",
		tctx->pub.vtime, *front_of(task_llc(p)), tctx->pub.queued_at, tctx->pub.runtime_ns,
		tctx->pub.wakeups, tctx->joined_node);
}

SCX_OPS_DEFINE(zernel_ops,
	       /* A task whose slice ends with nothing else to run comes to ops.enqueue: cpu.max
		* parks it there (the kernel would otherwise run it on with a new slice). */
	       .flags			= SCX_OPS_ENQ_LAST,
	       .select_cpu		= (void *)zernel_select_cpu,
	       .enqueue			= (void *)zernel_enqueue,
	       .dispatch		= (void *)zernel_dispatch,
	       .tick			= (void *)zernel_tick,
	       .running			= (void *)zernel_running,
	       .stopping		= (void *)zernel_stopping,
	       .enable			= (void *)zernel_enable,
	       .disable			= (void *)zernel_disable,
	       .init_task		= (void *)zernel_init_task,
	       .cgroup_init		= (void *)zernel_cgroup_init,
	       .cgroup_exit		= (void *)zernel_cgroup_exit,
	       .cgroup_move		= (void *)zernel_cgroup_move,
	       .cgroup_set_weight	= (void *)zernel_cgroup_set_weight,
	       .cgroup_set_bandwidth	= (void *)zernel_cgroup_set_bandwidth,
	       .cpu_release		= (void *)zernel_cpu_release,
	       .dump_task		= (void *)zernel_dump_task,
	       .init			= (void *)zernel_init,
	       .exit			= (void *)zernel_exit,
	       .name			= ZERNEL_SCHED_NAME);
