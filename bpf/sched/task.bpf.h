/* SPDX-License-Identifier: GPL-2.0 */
/*
 * task.bpf.h: what the scheduler keeps per thread (task storage), and a thread's weight.
 *
 * struct task_ctx holds the part the loader may read (struct zernel_task_ctx of intf.h: vtime,
 * run time, bursts, wakeups, its contribution to its node), the copy of its process's decision
 * (decision.bpf.h: refreshed when the loader has changed some decision since), and the state of
 * each concern that follows a thread: its place in the share hierarchy (share.bpf.h), its cgroup's
 * quota (cpu_max.bpf.h), the phase it follows (phase.bpf.h, phase_timer.bpf.h) and the charge of
 * its run time (vtime.bpf.h). One task-storage lookup gives a callback all of it.
 *
 * A thread's weight inside its group (its cgroup's or tenant's own threads, share.bpf.h) is its
 * decision's weight, the phase's priority on the kernel's 1024 scale; a process outside any
 * tenant has it scaled by its tenant_weight (100 = x1). A thread with no decision has the weight
 * of its nice value (1024 at nice 0).
 */
#ifndef ZERNEL_SCHED_TASK_BPF_H
#define ZERNEL_SCHED_TASK_BPF_H

#include "common.bpf.h"

enum {
	ZERNEL_NO_PHASE = 0xFF, /* task_ctx.phase of a thread with no decision */
};

/*
 * Task storage: the shared part (intf.h) and the process's decision as this thread last read it
 * (refreshed when its slot's generation moves), so that a callback finds all it needs about the
 * thread in one task-storage lookup, and no hash lookup. The order of the fields is the layout;
 * each says which part writes it.
 */
struct task_ctx {
	struct zernel_task_ctx pub;
	u64 decision_gen;   /* its process's slot generation the decision below was read at
			     * (decision.bpf.h); ~0 = never */
	u64 slice_ns;	    /* ns: the decision's slice, clamped; SLICE_DFL_NS without one */
	u64 latency_ns;	    /* ns: latency target; 0 = none */
	u64 cgroup_node;    /* node id of its cgroup (0 = the root cgroup): ops.cgroup_move */
	u64 joined_node;    /* node id it is counted in while runnable (valid when joined) */
	u64 queue_key;	    /* queue key of its last insert into the shared or the throttled
			     * DSQ; a parked thread goes back with it (release_parked) */
	u32 weight;	    /* decision weight, clamped; 0 = no decision (weight from nice) */
	u32 tenant_weight;  /* decision's tenant_weight, clamped (cgroup scale) */
	s32 preferred_cpu;  /* checked against nr_cpus; ZERNEL_NO_CPU = none */
	s32 preferred_node; /* the decision's node, else the preferred CPU's; -1 = none */
	u16 tenant;	    /* tenant slot; ZERNEL_NO_TENANT = none */
	u8 phase;	    /* enum zernel_phase; ZERNEL_NO_PHASE without a decision */
	u8 flags;	    /* enum zernel_decision_flags */
	u8 wakeup_counted;  /* 1: ops.select_cpu counted this wakeup (ops.stopping of the
			     * sleep clears) */
	u8 joined;	    /* 1: counted in joined_node's runnable weight (pub.contrib_weight) */
	u8 kthread;	    /* 1: a kernel thread (PF_KTHREAD, as of its last join): in the root
			     * cgroup it writes nothing to the root's own sum (share.bpf.h, ROOT
			     * GROUP) */
	u8 limited;	    /* 1: its cgroup or an ancestor has a cpu.max quota (as share_in
			     * last found) */
	u8 applied_phase;   /* zernel_phase_policy index it is scheduled by now; ZERNEL_NO_PHASE:
			     * the decision's policy (phase_follow) */
	u8 phase_kicked;    /* 1: the phase timer kicked its CPU (keep_prev or ops.enqueue keeps it
			     * there: phase_kick_take) */
	u8 followed;	    /* 1: phase_follow found the probes' state of it (kept across
			     * decisions, cleared when it has none: ops.running arms the phase
			     * timer for it); counted in running_slots (set_followed) */
	u8 woke_in_sync;    /* 1: it woke inside a GPU sync it slept in, and has not slept since:
			     * its wait is over (phase_policy_index, phase.bpf.h) */
	u8 decided_queued;  /* 1 + the LLC whose queue counts it in decided_waiting (ops.enqueue
			     * sets, ops.running or ops.disable takes it out); 0 = none */
	u8 queued_woken;    /* 1: ops.enqueue put it in its LLC's queue at a wakeup (it slept),
			     * not back at the end of a run: it may end a running task's slice
			     * for its earlier key (OWED, yield.bpf.h) */
	u8 lag_due;	    /* 1: it woke and its key has not been compared since: the lag bound
			     * applies at the first comparison (lag_settle, vtime.bpf.h), with
			     * wake_front and wake_vtime */
	u64 seen_since_ns;  /* ns: the probes' since_ns of the last phase change the scheduler
			     * has seen (phase_change_unseen, phase.bpf.h) */
	u64 charged_sum_ns; /* ns: p->se.sum_exec_runtime when its run time was last charged (or
			     * it was enabled): it grows only while the thread runs */
	u64 wake_front;	    /* the front of its LLC's queue at its last wakeup (task_wakes) */
	u64 wake_vtime;	    /* its vtime at its last wakeup (task_wakes) */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} zernel_task_ctx SEC(".maps");

/*
 * The threads for which ops.running has work, counted per slot of their tgid (tgid modulo
 * ZERNEL_RUNNING_SLOTS): followed ones (task_ctx.followed, phase.bpf.h) and decided ones counted
 * as waiting in a queue (task_ctx.decided_queued, yield.bpf.h). ops.running of a thread whose slot
 * counts none reads that count and returns without a task-storage lookup. Processes that share a
 * slot cost a lookup more, never a missed one.
 */
#define ZERNEL_RUNNING_SLOTS 4096
static u32 running_slots[ZERNEL_RUNNING_SLOTS];

static __always_inline u32 *running_slot(const struct task_struct *p)
{
	return &running_slots[(u32)p->tgid & (ZERNEL_RUNNING_SLOTS - 1)];
}

static __always_inline bool has_tenant(const struct task_ctx *tctx)
{
	return tctx->tenant < ZERNEL_MAX_TENANTS;
}

/* The weight of p's nice value on the 1024 scale (p->scx.weight is 100 at nice 0). */
static __always_inline u64 nice_weight(const struct task_struct *p)
{
	return clamp_u64((u64)p->scx.weight * ZERNEL_WEIGHT_DFL / 100, ZERNEL_WEIGHT_MIN,
			 ZERNEL_WEIGHT_MAX);
}

/*
 * The thread's weight inside its group: the decision's (a process outside any tenant scaled by
 * its tenant_weight, 100 = x1), or the nice value's.
 */
static __always_inline u64 task_weight(struct task_struct *p, const struct task_ctx *tctx)
{
	if (tctx->weight) {
		if (has_tenant(tctx) || tctx->tenant_weight == ZERNEL_TENANT_WEIGHT_DFL)
			return tctx->weight;
		return clamp_u64((u64)tctx->weight * tctx->tenant_weight / ZERNEL_TENANT_WEIGHT_DFL,
				 ZERNEL_WEIGHT_MIN, ZERNEL_WEIGHT_MAX);
	}
	return nice_weight(p);
}

#endif /* ZERNEL_SCHED_TASK_BPF_H */
