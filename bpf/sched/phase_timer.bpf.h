/* SPDX-License-Identifier: GPL-2.0 */
/*
 * phase_timer.bpf.h: the per-CPU timer that applies a running thread's phase change within about
 * 0.25 ms when the probes cannot ask for it themselves (phase.bpf.h says what a phase change is and
 * how its delay is measured).
 *
 * A change made while a thread runs has no wakeup to be applied at. The probes' context-switch
 * program kicks the thread's CPU itself for the changes it makes as a followed thread is switched
 * in (an NCCL wait's end, a batch that came, a worker back from idling: probes/rules.bpf.h, sched_kick;
 * sched_ext registers its general kfuncs for tracing programs). Their uprobes cannot: those
 * kfuncs are not registered for uprobes, and older kernels, 6.12 among them, refuse a bpf_timer in
 * them. Where the kernel allows it (the VM tests' 7.3), the probes kick for a sync's entry and
 * return themselves, from a timer of their own (probes/rules.bpf.h, SYNC KICKS; zernel_sync_kicks), and
 * this timer is armed only for a change still pending when a followed thread starts to run. On the
 * others, for the one change a uprobe makes in the middle of a run that matters, a GPU sync's
 * return (OptimizerStep), and for a change pending after a run began, the scheduler looks:
 * ops.running of a followed thread (one of a decided process whose phase phase_follow applied)
 * that is inside a sync or has a change pending (phase_may_change) arms its CPU's timer
 * (phase_timers, pinned to the CPU), and so does ops.tick for a thread that entered a sync while
 * it ran; every ZERNEL_PHASE_TIMER_NS, while that thread runs there and is in a sync or has a
 * change pending, the timer looks whether a change is pending (phase_change_pending), and then
 * kicks the CPU (SCX_KICK_PREEMPT): the thread goes through ops.dispatch (keep_prev applies the
 * phase and keeps it on) or ops.enqueue, which applies the phase and puts it back at the head of
 * its CPU's local DSQ (task_ctx.phase_kicked, or the probes' mark: phase_kick_take), so that it
 * runs on with the new slice and weight rather than losing its CPU to the kick (placed in the
 * LLC's queue, a thread that ran a while queues behind the hogs' 20 ms slices, and the job lost
 * throughput). The first look that finds the thread off the CPU, no longer followed, or out of its
 * sync with nothing pending stops the timer (one more look follows a kick); ops.stopping does
 * nothing for it, and a CPU that runs only other tasks never has it armed. ops.tick (phase_tick)
 * remains the fallback, at most a tick after a change: a sync that begins and returns within one
 * run and one tick waits for it.
 *
 * Cost, for followed threads only (without the sync kicks; with them, only the pending case): a
 * timer start when one in a sync (or with a change pending) starts running on a CPU whose timer
 * is stopped, a timer interrupt per period while such a thread runs (4,000 a second on a CPU
 * busy with a thread spinning in a sync; none while it runs outside syncs: its launches, its
 * optimizer step, a DataLoader worker's batch) plus one after each run and each kick, and one
 * extra pass through the scheduler per change applied by a kick. The timer
 * for the whole of each run (every followed thread, every period) was the version before; arming
 * it only after a sync or NCCL wakeup, for four periods, the one before that: the changes in the
 * middle of a run (a launch well after a data wait) then waited for the tick (docs/sched-ext.md,
 * "How fast a phase change is applied", has them measured).
 *
 * No race on an entry: it is written only on its CPU, by ops.running and ops.tick there and by the
 * timer's callback, which runs there in softirq context and so never in the middle of either.
 */
#ifndef ZERNEL_SCHED_PHASE_TIMER_BPF_H
#define ZERNEL_SCHED_PHASE_TIMER_BPF_H

#include "common.bpf.h"
#include "phase.bpf.h"
#include "task.bpf.h"

enum {
	ZERNEL_PHASE_TIMER_NS = 250000, /* the phase timer's period */
};

/*
 * Per CPU: the phase timer, armed by ops.running for the followed thread it runs, pinned to that
 * CPU. Written only on its CPU (above).
 */
struct phase_timer {
	struct bpf_timer timer;
	s32 pid;   /* the thread it watches: the last followed thread ops.running started here */
	s32 cpu;   /* this entry's CPU */
	u32 armed; /* 1: started, and its callback has not yet found the thread gone */
	u32 __pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ZERNEL_MAX_CPUS);
	__type(key, u32);
	__type(value, struct phase_timer);
} phase_timers SEC(".maps");

/*
 * The timer's callback: while the thread it watches runs on its CPU, looks every period whether
 * the thread has a phase change pending, and then kicks the CPU; stops at the first look that
 * finds the thread off the CPU, no longer followed, or out of its sync with nothing pending.
 */
static int phase_timer_fire(void *map, u32 *key, struct phase_timer *t)
{
	struct zernel_phase_thread *st;
	struct task_struct *p;
	struct task_ctx *tctx;
	bool again = false;
	u32 idx;

	p = bpf_task_from_pid(t->pid);
	if (p) {
		tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);
		st = phase_state(p);
		if (tctx && st && tctx->weight && scx_bpf_task_running(p) &&
		    scx_bpf_task_cpu(p) == t->cpu) {
			stat_inc(ZERNEL_STAT_PHASE_TIMER);
			idx = phase_index(st->phase);
			if (!phase_change_pending(st, tctx)) {
				/* Nothing new: look again while in a sync (phase_may_change). */
				again = phase_in_polled_sync(st);
			} else if (idx == tctx->applied_phase) {
				/* Changed and changed back: nothing to apply (phase_follow's rule). */
				tctx->seen_since_ns = st->since_ns;
				again = phase_in_polled_sync(st);
			} else {
				/* One more look after the kick: it stops there unless in a sync. */
				again = true;
				tctx->phase_kicked = 1;
				scx_bpf_kick_cpu(t->cpu, SCX_KICK_PREEMPT);
				stat_inc(ZERNEL_STAT_PHASE_KICK);
			}
		}
		bpf_task_release(p);
	}
	if (again)
		bpf_timer_start(&t->timer, ZERNEL_PHASE_TIMER_NS, BPF_F_TIMER_CPU_PIN);
	else
		t->armed = 0;
	return 0;
}

/*
 * ops.running of a followed thread in a sync or with a change pending (phase_may_change), or
 * ops.tick of one that entered a sync: the timer watches it from now on. Already armed (the thread
 * before it here was followed too, or this one ran on after a kick), the callback finds it at its
 * next look; started anew at each switch it would never fire under a thread that switches more
 * often than its period. Not from another CPU (ops.running also runs on a CPU that holds p's
 * runqueue lock for a property change of p: nice, affinity, policy): a pinned timer starts on
 * the CPU that calls; the tick serves that run.
 */
static __always_inline void phase_timer_arm(struct task_struct *p)
{
	u32 cpu = scx_bpf_task_cpu(p);
	struct phase_timer *t;

	if (cpu != bpf_get_smp_processor_id())
		return;
	t = bpf_map_lookup_elem(&phase_timers, &cpu);
	if (!t)
		return;
	t->pid = p->pid;
	t->cpu = cpu;
	if (t->armed)
		return;
	t->armed = 1;
	if (bpf_timer_start(&t->timer, ZERNEL_PHASE_TIMER_NS, BPF_F_TIMER_CPU_PIN))
		t->armed = 0;
}

/* ops.init: the phase timers, when threads follow their phases. */
static s32 phase_timers_init(void)
{
	struct phase_timer *t;
	s32 ret;
	u32 cpu;

	if (!zernel_follow_phases)
		return 0;
	bpf_for(cpu, 0, nr_cpus) {
		t = bpf_map_lookup_elem(&phase_timers, &cpu);
		if (!t)
			return -ENOENT;
		ret = bpf_timer_init(&t->timer, &phase_timers, CLOCK_MONOTONIC);
		if (!ret)
			ret = bpf_timer_set_callback(&t->timer, phase_timer_fire);
		if (ret)
			return ret;
	}
	return 0;
}

#endif /* ZERNEL_SCHED_PHASE_TIMER_BPF_H */
