/* SPDX-License-Identifier: GPL-2.0 */
/*
 * preempt.bpf.h: a latency-critical wakeup takes a CPU from lower-weight work.
 *
 * A waking thread whose decision (or phase, phase.bpf.h) has ZERNEL_DF_PREEMPT and that found no
 * idle CPU looks, in ops.enqueue (try_preempt), for the CPU running the lowest-weight task among
 * the CPUs it may use, reading each CPU's current task: its weight and the slice it has left
 * (cpu_current, compat.bpf.h). If that weight is lower than its own, it is inserted into that
 * CPU's local DSQ with SCX_ENQ_PREEMPT (head of the queue, the current task's slice cleared). A
 * CPU whose slice is already over (waiting for its tick) is the victim whatever its weight. With
 * a latency target longer than a tick, it does not preempt when some allowed CPU's slice ends,
 * and a tick notices it, within the target: it goes to the head of that CPU's local DSQ and runs
 * when the slice ends. The same task put back while runnable (slice used up, higher class)
 * preempts the same way when it would lead its LLC's queue (would_lead), so that it does not
 * wait for another CPU's slice to end (100 ms for a batch task). Counters: kick_preempt,
 * preempt_wait, preempt_skip (nothing lower to preempt: queued by its key).
 *
 * Worked example, 2 CPUs: an NCCL thread (weight 9,537, 50 us target) wakes while CPU 0 runs a
 * GPU waiter that spins (335) with 12 ms of slice left and CPU 1 a thread without a decision
 * (1,024) with 3 ms left. No slice ends within 50 us: CPU 0 runs the lowest weight, so the thread
 * lands at the head of CPU 0's local DSQ and the waiter's slice is cleared.
 *
 * COST. Nothing is written for the victim search on the hot paths: it reads each CPU's current
 * task when a preempting wakeup finds no idle CPU, which is rare, instead of a per-CPU record that
 * ops.running and ops.stopping would keep up to date (with a clock read) on every context switch.
 *
 * BOUNDED. The search looks at VICTIM_SCAN CPUs at most: on up to 16 CPUs every CPU (as before
 * issue 24); on more, the 16 ids around the thread's previous CPU (its neighbours: on a large
 * machine mostly its own LLC and node), the same 16 looks on 200 CPUs as on 16.
 *
 * Known weaknesses: the search compares decision weights, not shares; on more than VICTIM_SCAN
 * CPUs a lower-weight victim or an ending slice further away is not seen, and the thread queues
 * by its key (preempt_skip) or takes a nearer victim.
 *
 * Races accepted: each CPU's current task is read without locks: two waking threads may pick
 * the same victim; the second waits behind the first at the head of that CPU's queue. The task
 * read may be leaving the CPU that moment; its storage stays valid under RCU.
 */
#ifndef ZERNEL_SCHED_PREEMPT_BPF_H
#define ZERNEL_SCHED_PREEMPT_BPF_H

#include "common.bpf.h"
#include "compat.bpf.h"
#include "task.bpf.h"

enum {
	VICTIM_SCAN = 16, /* CPUs the victim search looks at, at most */
};

static void insert_local_on(struct task_struct *p, s32 cpu, u64 slice, u64 enq_flags)
{
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL_ON | cpu, slice, enq_flags);
}

/*
 * A preempting wakeup that found no idle CPU in select_cpu (or skipped it: single-CPU affinity).
 * Returns true when the task was placed.
 */
static bool try_preempt(struct task_struct *p, struct task_ctx *tctx, u64 enq_flags)
{
	u64 my_w = task_weight(p, tctx), lat_ns = tctx->latency_ns, slice = tctx->slice_ns;
	u64 victim_w = my_w, weight, left;
	s32 victim = -1, only = -1, soon = -1, cpu, lo, n = nr_cpus;

	if (is_migration_disabled(p))
		only = scx_bpf_task_cpu(p);

	/* An idle CPU may have appeared since select_cpu (or select_cpu was skipped). */
	if (only >= 0)
		cpu = scx_bpf_test_and_clear_cpu_idle(only) ? only : -1;
	else
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
	if (cpu >= 0) {
		insert_local_on(p, cpu, slice, enq_flags);
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		stat_inc(ZERNEL_STAT_LOCAL);
		stat_inc(ZERNEL_STAT_KICK_IDLE);
		return true;
	}

	/* The window of CPU ids looked at: the one it must run on, else VICTIM_SCAN around its own. */
	if (only >= 0) {
		lo = only;
		n = only < nr_cpus ? 1 : 0;
	} else if (n > VICTIM_SCAN) {
		lo = scx_bpf_task_cpu(p) - VICTIM_SCAN / 2;
		n = VICTIM_SCAN;
		if (lo > (s32)nr_cpus - n)
			lo = nr_cpus - n;
		if (lo < 0)
			lo = 0;
	} else {
		lo = 0;
	}
	bpf_for(cpu, lo, lo + n) {
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		if (!cpu_current(cpu, &weight, &left))
			continue;
		/*
		 * A slice already over: the CPU reschedules at its next tick (up to 1/HZ away) and
		 * preempting it takes nothing its task is owed. The best victim, whatever its weight.
		 */
		if (!left) {
			victim = cpu;
			soon = -1;
			break;
		}
		/* left < lat_ns first: no wrap for an endless slice (SCX_SLICE_INF) */
		if (lat_ns && left < lat_ns && left + tick_ns <= lat_ns)
			soon = cpu;
		if (weight < victim_w) {
			victim_w = weight;
			victim = cpu;
		}
	}
	/*
	 * A CPU whose slice ends (and whose next tick notices it) within the latency target serves
	 * p in time without a preemption: p goes to the head of that CPU's local DSQ, which the CPU
	 * runs before it asks ops.dispatch. Not its LLC's queue: a queued task with a smaller key
	 * would go first, and p would wait a whole slice more.
	 */
	if (soon >= 0) {
		insert_local_on(p, soon, slice, enq_flags | SCX_ENQ_HEAD);
		stat_inc(ZERNEL_STAT_PREEMPT_WAIT);
		return true;
	}
	if (victim < 0) {
		stat_inc(ZERNEL_STAT_PREEMPT_SKIP);
		return false;
	}
	/*
	 * SCX_ENQ_PREEMPT, not a separate SCX_KICK_PREEMPT: the kernel clears the slice of the
	 * victim's current task when p lands in its local DSQ, under that CPU's lock, and never
	 * p's own. An asynchronous kick that arrives after the victim CPU has already switched
	 * to p would cut p's slice instead, and p would be queued behind tasks of a whole slice.
	 */
	insert_local_on(p, victim, slice, enq_flags | SCX_ENQ_PREEMPT);
	stat_inc(ZERNEL_STAT_KICK_PREEMPT);
	return true;
}

/* True when a task queued with key would be the head of llc's queue. */
static bool would_lead(u32 llc, u64 key)
{
	struct task_struct *head = __COMPAT_scx_bpf_dsq_peek(llc_dsq(llc));

	return !head || !time_before(head->scx.dsq_vtime, key);
}

#endif /* ZERNEL_SCHED_PREEMPT_BPF_H */
