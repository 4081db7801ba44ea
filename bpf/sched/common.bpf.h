/* SPDX-License-Identifier: GPL-2.0 */
/*
 * common.bpf.h: what every part of the scheduler uses: the load-time knobs, the dispatch queues,
 * the slice and fixed-point constants, the counters and a few arithmetic helpers.
 *
 * The scheduler is one BPF object: zernel.bpf.c holds the callbacks and the ops table and
 * includes one header of static functions per concern (bpf/sched/NAME.bpf.h, the list in
 * zernel.bpf.c). Each header includes the ones it uses, so its #include lines are its
 * dependencies; each opens with its own essay.
 *
 * Counters are per-CPU array slots (zernel_stats, indexed by enum zernel_stat of intf.h), summed
 * by the loader: a count costs an array lookup and an add on the CPU's own cache line, never a
 * shared one.
 */
#ifndef ZERNEL_SCHED_COMMON_BPF_H
#define ZERNEL_SCHED_COMMON_BPF_H

#include <scx/common.bpf.h>

/* For headers shared with the probes' object (probes/rules.bpf.h): this is the scheduler. */
#define ZERNEL_SCHED_OBJECT 1

#include "intf.h"

/* Load-time knobs, set by the loader between open and load. */
const volatile u32 nr_cpus = 1;		     /* possible CPU ids, <= ZERNEL_MAX_CPUS */
const volatile u32 nr_nodes = 1;	     /* NUMA node ids, <= ZERNEL_MAX_NODES */
const volatile u8 cpu_node[ZERNEL_MAX_CPUS]; /* NUMA node of each CPU */
const volatile u32 nr_llcs = 1;		     /* queues, one per LLC, <= ZERNEL_MAX_LLCS */
const volatile u8 cpu_llc[ZERNEL_MAX_CPUS];  /* the LLC (queue) of each CPU */
const volatile u64 starve_ns = ZERNEL_STARVE_DFL_US * 1000ULL;
const volatile u32 switch_partial; /* 1: SCX_OPS_SWITCH_PARTIAL (SCHED_EXT tasks only) */
/* ns between scheduler ticks: a slice's end is noticed at the first tick after it. The loader
 * sets it from the kernel's CONFIG_HZ when it can read the config; else 1/100 s, the longest. */
const volatile u64 tick_ns = 10000000ULL;
/* Tests only: scx_bpf_error() this long after ops.init, to exercise the ejection path. */
const volatile u64 inject_error_after_ns;

/* The dispatch queues (DSQs) of our own, created by ops.init. */
enum {
	ZERNEL_DSQ_RESCUE = 1,	  /* FIFO of starved tasks, served first (rescue.bpf.h) */
	ZERNEL_DSQ_THROTTLED = 2, /* FIFO of tasks whose cgroup spent its cpu.max quota
				   * (cpu_max.bpf.h) */
	ZERNEL_DSQ_LLC0 = 0x100,  /* + LLC: the vtime-ordered queue of the tasks waiting for a
				   * CPU of that LLC (llc.bpf.h) */
};

#define SLICE_DFL_NS ((u64)ZERNEL_SLICE_DFL_US * 1000)
#define YIELD_RUN_NS ((u64)ZERNEL_YIELD_RUN_US * 1000)
#define OWED_HOG_NS  ((u64)ZERNEL_OWED_HOG_US * 1000)
#define SLICE_MIN_NS ((u64)ZERNEL_SLICE_MIN_US * 1000)
#define SLICE_MAX_NS ((u64)ZERNEL_SLICE_MAX_US * 1000)
/* Fixed point of shares: FP_ONE is the whole machine. */
#define FP_ONE (1ULL << 30)

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ZERNEL_STAT_NR);
	__type(key, u32);
	__type(value, u64);
} zernel_stats SEC(".maps");

static __always_inline void stat_add(u32 idx, u64 v)
{
	u64 *cnt = bpf_map_lookup_elem(&zernel_stats, &idx);

	if (cnt)
		*cnt += v;
}

static __always_inline void stat_inc(u32 idx)
{
	stat_add(idx, 1);
}

static __always_inline u64 now_ns(void)
{
	return scx_bpf_now();
}

/*
 * The LLC (queue) of a CPU, from the loader's table; ids past the table count as LLC 0. On a
 * machine of one LLC a constant, which the verifier sees (nr_llcs is read-only after load).
 */
static __always_inline u32 llc_of(s32 cpu)
{
	u32 c = (u32)cpu;

	if (nr_llcs <= 1 || c >= ZERNEL_MAX_CPUS)
		return 0;
	return cpu_llc[c] & (ZERNEL_MAX_LLCS - 1);
}

/* The LLC whose queue a task waits in: that of the CPU it is on or ops.select_cpu chose. */
static __always_inline u32 task_llc(struct task_struct *p)
{
	return nr_llcs > 1 ? llc_of(scx_bpf_task_cpu(p)) : 0;
}

/* The queue of an LLC. */
static __always_inline u64 llc_dsq(u32 llc)
{
	return ZERNEL_DSQ_LLC0 + (llc & (ZERNEL_MAX_LLCS - 1));
}

/*
 * Each LLC's queue: its front in virtual time (vtime.bpf.h, LAG), moved by ops.dispatch and
 * keep_prev of that LLC's CPUs, and whether tasks may be waiting in it (llc.bpf.h: set by an
 * enqueue there, cleared by a dispatch there that finds it empty). Each LLC's on a cache line of
 * its own, in a section of its own: a CPU writes only its LLC's line, never the lines that every
 * callback only reads (the decision generations in .bss).
 */
struct llc_front {
	u64 vtime_now;
	u64 waiting;
	s64 decided_waiting; /* (atomic) threads of decided processes in its queue (yield.bpf.h) */
} __attribute__((aligned(64)));

private(ZVTIME) struct llc_front llc_fronts[ZERNEL_MAX_LLCS];

/* The state of an LLC's queue. */
static __always_inline struct llc_front *llc_state(u32 llc)
{
	return &llc_fronts[llc & (ZERNEL_MAX_LLCS - 1)];
}

/*
 * A task was queued in llc's queue: the flag that lets other LLCs' idle CPUs look there (written
 * only when it changes: the line is that LLC's own, but every enqueue there would dirty it).
 */
static __always_inline void llc_mark_waiting(u32 llc)
{
	struct llc_front *st = llc_state(llc);

	if (nr_llcs > 1 && !st->waiting)
		st->waiting = 1;
}

static u64 clamp_u64(u64 v, u64 lo, u64 hi)
{
	return v < lo ? lo : (v > hi ? hi : v);
}

/*
 * A phase (enum zernel_phase, from a decision or the probes) as an index of the per-phase tables
 * (zernel_phase_policy, the run-time counters): a value out of range counts as Unknown.
 */
static __always_inline u32 phase_index(u32 phase)
{
	return phase < ZERNEL_PHASE_NR ? phase : ZERNEL_PHASE_UNKNOWN;
}

#endif /* ZERNEL_SCHED_COMMON_BPF_H */
