/* SPDX-License-Identifier: GPL-2.0 */
/*
 * intf.h - THE contract between the zernel sched_ext scheduler (zernel.bpf.c) and its loader
 * (src/enforce/scx/). One copy only: both sides include this file, so the map layouts cannot
 * drift. Rules (as in the kernel's scx_qmap.h / scx_flatcg.h):
 *   - fixed-width types only, explicit padding, no bool, no pointers, no bit fields;
 *   - limits and flags are enum constants (usable in C, C++ and BPF C alike);
 *   - every field says its unit;
 *   - sizes and offsets are asserted at the bottom and checked by both compilers.
 *
 * Maps (the names are the skeleton's; the BPF side defines them):
 *   zernel_decisions  HASH   key __u32 tgid -> struct zernel_decision   (userspace writes;
 *                     max_entries set by the loader from max_tracked_tasks, no prealloc)
 *   zernel_tenants    ARRAY  key __u32 slot -> struct zernel_tenant     (userspace writes)
 *   zernel_tenant_load ARRAY key __u32 slot -> struct zernel_tenant_load
 *                     (BPF writes, userspace only reads: the tenant's runnable weight)
 *   zernel_stats      PERCPU_ARRAY key __u32 enum zernel_stat -> __u64   (BPF counts, loader sums)
 *   zernel_task_ctx   TASK_STORAGE -> struct zernel_task_ctx (BPF writes; userspace may look a
 *                     live thread up with a pidfd key)
 * Global (the skeleton's .bss, memory-mapped by the loader):
 *   __u32 zernel_decision_slot_gen[ZERNEL_DECISION_SLOTS]   the decision generations, one per
 *                     slot of processes (tgid % ZERNEL_DECISION_SLOTS). The loader increments a
 *                     process's slot (atomically, after the map update or delete has returned)
 *                     every time it writes or deletes that process's entry of zernel_decisions.
 *                     Each thread caches its process's decision in its task storage and re-reads
 *                     zernel_decisions only when its slot's generation moved, so a writer that
 *                     does not increment the slot is not seen until some other write to it does,
 *                     and a change to one process costs a lookup to its own threads only (and to
 *                     those of the processes that share its slot).
 * Exit info is the scx "uei" (struct user_exit_info in scx/user_exit_info_common.h, written by
 * UEI_RECORD when the scheduler exits); the kernel's exit kinds are mirrored here as enum
 * zernel_exit_kind, the lengths of its strings as ZERNEL_UEI_*_LEN.
 */
#ifndef ZERNEL_BPF_INTF_H
#define ZERNEL_BPF_INTF_H

#if defined(__bpf__)
/* vmlinux.h (through scx/common.bpf.h, included first) defines the __u32 family. */
#else
#include <linux/types.h>
#endif

#define ZERNEL_OFF(type, field) __builtin_offsetof(struct type, field)
#ifdef __cplusplus
#define ZERNEL_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#define ZERNEL_INT(x) static_cast<int>(x)	/* compares constants of two enums */
#else
#define ZERNEL_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#define ZERNEL_INT(x) ((int)(x))
#endif

/* Limits. */
enum zernel_limits {
	ZERNEL_MAX_TASKS = 65536,     /* decision map entries when the loader is given no size */
	ZERNEL_DECISION_SLOTS = 4096, /* decision generation slots (a power of two) */
	ZERNEL_MAX_TENANTS = 1024,    /* tenant slots (policy::kMaxTenants) */
	ZERNEL_MAX_CPUS = 1024,	      /* CPU ids the scheduler handles (0..1023) */
	ZERNEL_MAX_NODES = 64,	      /* NUMA node ids (0..63) */
	ZERNEL_MAX_LLCS = 64,	      /* queues, one per LLC (0..63); more LLCs share them */
	ZERNEL_NO_TENANT = 0xFFFF,    /* zernel_decision.tenant: the process has no tenant */
	ZERNEL_NO_CPU = -1,	      /* preferred_cpu / preferred_node: none */
	ZERNEL_UEI_REASON_LEN = 128,  /* bytes of the exit reason (UEI_REASON_LEN) */
	ZERNEL_UEI_MSG_LEN = 1024,    /* bytes of the exit message (UEI_MSG_LEN) */
};

/* The scheduler's name: sched_ext_ops.name, as /sys/kernel/sched_ext/root/ops shows it. */
#define ZERNEL_SCHED_NAME "zernel"

/* Weights. */
enum zernel_weights {
	ZERNEL_WEIGHT_DFL = 1024,	  /* decision weight of priority 0 (= nice 0) */
	ZERNEL_WEIGHT_MIN = 1,
	ZERNEL_WEIGHT_MAX = 100000,	  /* > weight of priority +20 (88,818) */
	ZERNEL_TENANT_WEIGHT_DFL = 100,	  /* cgroup cpu.weight scale: an average tenant */
	ZERNEL_TENANT_WEIGHT_MIN = 1,
	ZERNEL_TENANT_WEIGHT_MAX = 10000, /* cgroup cpu.weight range is 1..10000 */
};

/* Time defaults (ns). Enum constants must fit an int: the 64-bit ones are multiples of 1 us. */
enum zernel_times_us {
	ZERNEL_SLICE_DFL_US = 20000, /* slice of a task with no decision or slice_ns 0: 20 ms */
	/* A task with no decision that has run this long in its slice ends it at the next tick
	 * while a thread of a decided process waits in its LLC's queue (YIELD, sched/yield.bpf.h):
	 * 3 ms, EEVDF's base slice on a node of 8 CPUs or more. */
	ZERNEL_YIELD_RUN_US = 3000,
	/* ... and also for a woken thread of an earlier key at the head of that queue when the task
	 * is a CPU hog: it has run this long since it last slept, or its runs between sleeps are
	 * this long on average (OWED, sched/yield.bpf.h): five default slices. */
	ZERNEL_OWED_HOG_US = 100000,
	ZERNEL_SLICE_MIN_US = 100, /* slices are clamped to 100 us .. 1 s */
	ZERNEL_SLICE_MAX_US = 1000000,
	/* Starvation bound: a task queued longer than this is dispatched before anything else.
	 * 50 x the default slice (1 s): above the longest wait that honest weighting makes in the
	 * policy's range (a priority -5 hog next to a priority +10 hog waits ~0.6 s), well under
	 * the sched_ext watchdog (30 s). A load-time knob (rodata starve_ns) may change it. */
	ZERNEL_STARVE_DFL_US = 1000000,
	ZERNEL_STARVE_SCAN_US = 100000, /* how often the BPF timer scans for starved tasks */
};

/* zernel_decision.flags */
enum zernel_decision_flags {
	ZERNEL_DF_PREEMPT = 1u << 0,	/* a wakeup may preempt a CPU running a lower-weight task */
};

/* zernel_decision.phase: the numeric values of policy::Phase (src/policy/phase.hpp). */
enum zernel_phase {
	ZERNEL_PHASE_DATA_LOADING = 0,
	ZERNEL_PHASE_GPU_COMPUTE = 1,
	ZERNEL_PHASE_NCCL_COLLECTIVE = 2,
	ZERNEL_PHASE_OPTIMIZER_STEP = 3,
	ZERNEL_PHASE_UNKNOWN = 4,
	ZERNEL_PHASE_NR = 5,
};

/*
 * Per-process decision, keyed by tgid: every thread of the process follows it. 40 bytes.
 * Written by the loader only when it changes, followed by an increment of its process's slot of
 * zernel_decision_slot_gen; each thread of the process copies it into its task storage at its
 * first scheduling event after the increment. A torn read (the loader replacing a value while a
 * CPU copies it) can mix two decisions of the same process until the increment that follows the
 * write makes the thread read it again, which is harmless.
 */
struct zernel_decision {
	__u64 slice_ns;			/* ns: time slice; 0 = ZERNEL_SLICE_DFL_US; clamped to MIN..MAX */
	__u32 weight;			/* kernel weight scale, 1024 = priority 0, x1.25 per priority step */
	__u32 tenant_weight;		/* cgroup cpu.weight scale (100 = average): for a process with no
					 * tenant, scales its weight (weight * tenant_weight / 100); for a
					 * tenant's process, used when the tenant's array entry is unset */
	__u32 latency_target_us;	/* us: wakeup latency target; 0 = none */
	__s32 preferred_cpu;		/* CPU id tried first when idle; ZERNEL_NO_CPU = none */
	__s32 preferred_node;		/* NUMA node id whose idle CPUs come next; ZERNEL_NO_CPU = none */
	__u16 tenant;			/* tenant slot (index into zernel_tenants); ZERNEL_NO_TENANT = none */
	__u8 phase;			/* enum zernel_phase: selects the per-phase run-time counter */
	__u8 flags;			/* enum zernel_decision_flags */
	__u64 __reserved;		/* zero */
};

/* A tenant slot: written by the loader. 8 bytes. */
struct zernel_tenant {
	__u32 weight;			/* cgroup cpu.weight scale, 1..10000; 0 = slot unused */
	__u32 __pad0;			/* zero */
};

/*
 * A tenant's runnable load: maintained by BPF with atomic adds as the tenant's threads become
 * runnable and stop. Kept apart from struct zernel_tenant so that a loader write never clobbers
 * it. 16 bytes.
 */
struct zernel_tenant_load {
	__s64 runnable_weight;		/* sum of the decision weights of the tenant's runnable threads */
	__s64 runnable_threads;		/* number of the tenant's runnable threads */
};

/*
 * Per-CPU counters (zernel_stats), summed over CPUs by the loader. ONE list: the enum below and
 * the loader's names (kStatNames, "local", "run_ns_gpu_compute", ...) are both made from it.
 * X(NAME, name): enumerator ZERNEL_STAT_NAME, reported as "name". Aligned by hand (one macro:
 * clang-format would rewrap all of it at any change).
 */
/* clang-format off */
#define ZERNEL_STATS(X)													\
	X(LOCAL, local)			/* inserted straight into an idle CPU's local DSQ */		\
	X(GLOBAL, global)		/* inserted into an LLC's vtime DSQ */				\
	X(LLC_STEAL, llc_steal)		/* tasks a CPU took from another LLC's queue (its own was	\
					 * empty, or the other's head was further behind) */		\
	X(PREF_CPU_HIT, pref_cpu_hit)	/* the decision's preferred CPU was idle and taken */		\
	X(PREF_NODE_HIT, pref_node_hit)	/* an idle CPU of the preferred node was taken */		\
	X(PREF_MISS, pref_miss)		/* a preference was set but no CPU of it was idle */		\
	X(KICK_PREEMPT, kick_preempt)	/* preempting wakeups: SCX_KICK_PREEMPT of a lower-weight CPU */	\
	X(PREEMPT_SKIP, preempt_skip)	/* preempting wakeups with no victim (every CPU it may use	\
					 * runs a weight at least its own): queued in the shared DSQ */	\
	X(PREEMPT_WAIT, preempt_wait)	/* preempting wakeups put first on a CPU whose slice ends	\
					 * within their latency target, without a preemption */		\
	X(KICK_IDLE, kick_idle)		/* idle CPUs kicked for a task queued to them from enqueue */	\
	X(STARVE_RESCUE, starve_rescue)	/* tasks moved to the rescue DSQ by the starvation scan */	\
	X(DECIDED, decided)		/* enqueues of tasks whose process has a decision */		\
	X(DECISION_LOOKUP, decision_lookup) /* a thread re-read its process's decision (its	\
					 * process's decision generation moved, decision.bpf.h; a	\
					 * thread's first read is not counted) */			\
	X(DECISION_LOOKUP_NONE, decision_lookup_none) /* of those, lookups that found no decision	\
					 * (a thread of an undecided or forgotten process) */		\
	X(UNDECIDED, undecided)		/* enqueues of tasks with no decision (weight from nice) */	\
	X(TENANT, tenant)		/* enqueues of tasks whose process belongs to a tenant */	\
	X(LAG_CLAMP, lag_clamp)		/* vtimes cut back to the lead bound (ran ahead alone) */	\
	X(REENQ, reenq)			/* tasks put back from a CPU a higher sched class took */	\
	X(THROTTLED, throttled)		/* enqueues parked because their cgroup spent its cpu.max */	\
	X(THROTTLE_CUT, throttle_cut)	/* slices ended by a tick that found the quota spent */	\
	X(YIELD_CUT, yield_cut)		/* slices of tasks with no decision ended by a tick for	\
					 * decided threads waiting in the queue (yield.bpf.h) */	\
	X(OWED_CUT, owed_cut)		/* slices of CPU hogs with no decision ended by a tick for	\
					 * a woken thread of an earlier key at the head of the	\
					 * queue (yield.bpf.h, OWED) */				\
	X(UNTHROTTLED, unthrottled)	/* parked tasks released at a new cpu.max period */		\
	X(NODE_MAP_FULL, node_map_full)	/* cgroups given no node (the node map full): their	\
					 * threads share as the root's, their cpu.max unenforced */	\
	X(TREE_CHANGE, tree_change)	/* changes of the sharing tree (a node became active or	\
					 * idle, a weight, a cpu.max or a cgroup changed): each	\
					 * makes every node's cached share stale (tree_gen) */	\
	X(SHARE_WALK, share_walk)	/* node shares recomputed after such a change (a walk up	\
					 * the tree, one node lookup per level; share.bpf.h) */	\
	X(PHASE_FOLLOWED, phase_followed) /* a thread's own phase (probes) replaced the policy it	\
					 * was scheduled with, at a wakeup or an enqueue */		\
	X(PHASE_FOLLOWED_1MS, phase_followed_1ms) /* of those, within 1 ms of the phase's event */	\
	/* Phase changes by how long the thread was runnable or running before the scheduler	\
	 * acted on them (docs/sched-ext.md "How fast a phase change is applied"); exclusive	\
	 * buckets, one count per change */							\
	X(PHASE_DELAY_100US, phase_delay_100us)	/* at most 0.1 ms (a wakeup: 0) */		\
	X(PHASE_DELAY_1MS, phase_delay_1ms)	/* over 0.1 ms, at most 1 ms */			\
	X(PHASE_DELAY_4MS, phase_delay_4ms)	/* over 1 ms, at most 4 ms (a tick at HZ=250) */	\
	X(PHASE_DELAY_LONG, phase_delay_long)	/* over 4 ms */					\
	X(PHASE_TICK, phase_tick)	/* of the changes, applied by ops.tick to a running thread */	\
	X(PHASE_KICK, phase_kick)	/* CPUs kicked so that a running thread's changed phase	\
					 * applies (the phase timer's, and the probes' as a	\
					 * followed thread is switched in) */			\
	X(PHASE_PROBE_KICK, phase_probe_kick) /* of those, the probes' (counted as taken) */	\
	X(PHASE_TIMER, phase_timer)	/* the phase timer's looks at a followed thread running on	\
					 * its CPU (its cost: one timer interrupt each) */		\
	/* ns of CPU time run by decided tasks, one counter per phase, in enum zernel_phase order */	\
	X(RUN_NS_DATA_LOADING, run_ns_data_loading)							\
	X(RUN_NS_GPU_COMPUTE, run_ns_gpu_compute)							\
	X(RUN_NS_NCCL_COLLECTIVE, run_ns_nccl_collective)						\
	X(RUN_NS_OPTIMIZER_STEP, run_ns_optimizer_step)							\
	X(RUN_NS_UNKNOWN, run_ns_unknown)								\
	X(RUN_NS_UNDECIDED, run_ns_undecided)	/* ns of CPU time run by tasks with no decision */
/* clang-format on */

enum zernel_stat {
#define ZERNEL_STAT_ENUM(NAME, name) ZERNEL_STAT_##NAME,
	ZERNEL_STATS(ZERNEL_STAT_ENUM)
#undef ZERNEL_STAT_ENUM
	ZERNEL_STAT_NR,
	/* The per-phase counters as a range: ZERNEL_STAT_RUN_NS_PHASE + phase. */
	ZERNEL_STAT_RUN_NS_PHASE = ZERNEL_STAT_RUN_NS_DATA_LOADING,
	ZERNEL_STAT_RUN_NS_PHASE_END = ZERNEL_STAT_RUN_NS_UNKNOWN,
};

/*
 * The policy of one phase, for threads that follow their own phase (phases from events): the
 * loader fills zernel_phase_policy[] (rodata) from the engine's table, index enum zernel_phase,
 * plus ZERNEL_PHASE_NR for a GpuCompute thread woken inside a GPU sync it slept in (the engine's
 * blocked GPU waiter). 24 bytes.
 */
struct zernel_phase_policy {
	__u64 slice_ns;			/* ns: time slice; 0 = ZERNEL_SLICE_DFL_US */
	__u32 weight;			/* kernel weight scale, as zernel_decision.weight */
	__u32 latency_target_us;	/* us: wakeup latency target; 0 = none */
	__u8 flags;			/* enum zernel_decision_flags */
	__u8 __pad[7];			/* zero */
};

/*
 * Per-task (thread) state in BPF task storage. 80 bytes. The loader can read it with a pidfd
 * key (bpf_map_lookup_elem on zernel_task_ctx) for a live thread.
 */
struct zernel_task_ctx {
	__u64 vtime;			/* ns of weighted virtual time (used time * 1024 / eff. weight) */
	__u64 __reserved;		/* zero */
	__u64 queued_at;		/* ns: when it last entered the shared queue; 0 = never */
	__u64 runtime_ns;		/* ns: CPU time used under this scheduler */
	__u64 burst_ns;			/* ns: CPU time since it last woke up (the current burst) */
	__u64 last_burst_ns;		/* ns: length of the last completed burst */
	__u64 avg_burst_ns;		/* ns: moving average of bursts (7/8 old + 1/8 new) */
	__u64 wakeups;			/* count of wakeups */
	__s64 contrib_weight;		/* weight it added to its node's runnable weight; 0 = none */
	__u16 contrib_tenant;		/* the tenant slot of that node; ZERNEL_NO_TENANT = a cgroup */
	__u16 __pad0;			/* zero */
	__u32 __pad1;			/* zero */
};

/*
 * Exit kinds: the kernel's enum scx_exit_kind (include/linux/sched/ext.h; values are ABI since
 * 6.12; PARENT*, ERROR_REENQ and ERROR_RESCUE came later). ONE list: the enum, the loader's names
 * ("UNREG_BPF") and the asserts against the kernel's values (zernel.bpf.c, from vmlinux.h) are
 * made from it. X(NAME, value): ZERNEL_EXIT_NAME = value, the kernel's SCX_EXIT_NAME.
 */
#define ZERNEL_EXIT_KINDS(X)										\
	X(NONE, 0)											\
	X(DONE, 1)											\
	X(UNREG, 64)		/* user-space initiated unregistration (detach, close, kill) */	\
	X(UNREG_BPF, 65)	/* BPF-initiated unregistration (scx_bpf_exit) */			\
	X(UNREG_KERN, 66)	/* kernel-initiated unregistration */				\
	X(SYSRQ, 67)		/* requested by sysrq-S */					\
	X(PARENT, 68)		/* 7.x, for sub-schedulers: see the kernel's scx_exit_kind */	\
	X(PARENT_KILL, 69)	/* 7.x, for sub-schedulers */					\
	X(ERROR, 1024)		/* runtime error, error msg contains details */			\
	X(ERROR_BPF, 1025)	/* ERROR but triggered through scx_bpf_error() */		\
	X(ERROR_STALL, 1026)	/* watchdog detected stalled runnable tasks */			\
	X(ERROR_REENQ, 1027)	/* 7.x: an error found re-enqueueing tasks */			\
	X(ERROR_RESCUE, 1028)	/* 7.x: an error found rescuing tasks */

enum zernel_exit_kind {
#define ZERNEL_EXIT_ENUM(NAME, value) ZERNEL_EXIT_##NAME = value,
	ZERNEL_EXIT_KINDS(ZERNEL_EXIT_ENUM)
#undef ZERNEL_EXIT_ENUM
};

/*
 * Bits of the exit code (the kernel's enum scx_exit_code; user_exit_info.h): the kernel's
 * reasons and advice above the scheduler's own 32-bit code. Asserted against the kernel's values
 * in zernel.bpf.c (vmlinux.h) and skel_shim.c (scx/user_exit_info.h).
 */
#define ZERNEL_ECODE_RSN_HOTPLUG (1ULL << 32)		/* a CPU went on- or offline */
#define ZERNEL_ECODE_RSN_CGROUP_OFFLINE (1ULL << 33)	/* 7.x: a cgroup went offline */
#define ZERNEL_ECODE_ACT_RESTART (1ULL << 48)		/* the kernel advises reloading the scheduler */
#define ZERNEL_ECODE_USER_MASK ((1ULL << 32) - 1)
#define ZERNEL_ECODE_RSN_MASK (((1ULL << 16) - 1) << 32)
#define ZERNEL_ECODE_ACT_MASK (((1ULL << 16) - 1) << 48)

/* Layout checks, compiled by clang -target bpf and by the C++ compiler alike. */
ZERNEL_STATIC_ASSERT((ZERNEL_DECISION_SLOTS & (ZERNEL_DECISION_SLOTS - 1)) == 0,
		     "ZERNEL_DECISION_SLOTS is a power of two");
ZERNEL_STATIC_ASSERT(sizeof(struct zernel_decision) == 40, "zernel_decision layout");
ZERNEL_STATIC_ASSERT(sizeof(struct zernel_phase_policy) == 24, "zernel_phase_policy layout");
ZERNEL_STATIC_ASSERT(ZERNEL_OFF(zernel_phase_policy, flags) == 16, "zernel_phase_policy.flags");
ZERNEL_STATIC_ASSERT(ZERNEL_OFF(zernel_decision, slice_ns) == 0, "slice_ns");
ZERNEL_STATIC_ASSERT(ZERNEL_OFF(zernel_decision, weight) == 8, "weight");
ZERNEL_STATIC_ASSERT(ZERNEL_OFF(zernel_decision, tenant_weight) == 12, "tenant_weight");
ZERNEL_STATIC_ASSERT(ZERNEL_OFF(zernel_decision, latency_target_us) == 16, "latency");
ZERNEL_STATIC_ASSERT(ZERNEL_OFF(zernel_decision, preferred_cpu) == 20, "preferred_cpu");
ZERNEL_STATIC_ASSERT(ZERNEL_OFF(zernel_decision, preferred_node) == 24, "preferred_node");
ZERNEL_STATIC_ASSERT(ZERNEL_OFF(zernel_decision, tenant) == 28, "tenant");
ZERNEL_STATIC_ASSERT(ZERNEL_OFF(zernel_decision, phase) == 30, "phase");
ZERNEL_STATIC_ASSERT(ZERNEL_OFF(zernel_decision, flags) == 31, "flags");
ZERNEL_STATIC_ASSERT(ZERNEL_OFF(zernel_decision, __reserved) == 32, "__reserved");
ZERNEL_STATIC_ASSERT(sizeof(struct zernel_tenant) == 8, "zernel_tenant layout");
ZERNEL_STATIC_ASSERT(sizeof(struct zernel_tenant_load) == 16, "zernel_tenant_load layout");
ZERNEL_STATIC_ASSERT(sizeof(struct zernel_task_ctx) == 80, "zernel_task_ctx layout");
ZERNEL_STATIC_ASSERT(ZERNEL_OFF(zernel_task_ctx, contrib_weight) == 64, "contrib");
ZERNEL_STATIC_ASSERT(ZERNEL_OFF(zernel_task_ctx, contrib_tenant) == 72, "contrib_t");
ZERNEL_STATIC_ASSERT(ZERNEL_INT(ZERNEL_STAT_RUN_NS_PHASE) + ZERNEL_INT(ZERNEL_PHASE_NR) - 1 ==
		     ZERNEL_INT(ZERNEL_STAT_RUN_NS_PHASE_END),
		     "one run-time counter per phase");
ZERNEL_STATIC_ASSERT(ZERNEL_INT(ZERNEL_STAT_RUN_NS_PHASE) + ZERNEL_INT(ZERNEL_PHASE_GPU_COMPUTE) ==
		     ZERNEL_INT(ZERNEL_STAT_RUN_NS_GPU_COMPUTE),
		     "run-time counters in phase order");
ZERNEL_STATIC_ASSERT(ZERNEL_INT(ZERNEL_STAT_RUN_NS_PHASE) + ZERNEL_INT(ZERNEL_PHASE_NCCL_COLLECTIVE) ==
		     ZERNEL_INT(ZERNEL_STAT_RUN_NS_NCCL_COLLECTIVE), "run-time counters in phase order");
ZERNEL_STATIC_ASSERT(ZERNEL_INT(ZERNEL_STAT_RUN_NS_PHASE) + ZERNEL_INT(ZERNEL_PHASE_OPTIMIZER_STEP) ==
		     ZERNEL_INT(ZERNEL_STAT_RUN_NS_OPTIMIZER_STEP), "run-time counters in phase order");
ZERNEL_STATIC_ASSERT(ZERNEL_INT(ZERNEL_STAT_RUN_NS_PHASE) + ZERNEL_INT(ZERNEL_PHASE_UNKNOWN) ==
		     ZERNEL_INT(ZERNEL_STAT_RUN_NS_UNKNOWN),
		     "run-time counters in phase order");
ZERNEL_STATIC_ASSERT((ZERNEL_ECODE_RSN_HOTPLUG & ZERNEL_ECODE_RSN_MASK) == ZERNEL_ECODE_RSN_HOTPLUG,
		     "a reason bit");
ZERNEL_STATIC_ASSERT((ZERNEL_ECODE_RSN_CGROUP_OFFLINE & ZERNEL_ECODE_RSN_MASK) ==
		     ZERNEL_ECODE_RSN_CGROUP_OFFLINE, "a reason bit");
ZERNEL_STATIC_ASSERT((ZERNEL_ECODE_ACT_RESTART & ZERNEL_ECODE_ACT_MASK) == ZERNEL_ECODE_ACT_RESTART,
		     "an action bit");
ZERNEL_STATIC_ASSERT((ZERNEL_ECODE_USER_MASK & (ZERNEL_ECODE_RSN_MASK | ZERNEL_ECODE_ACT_MASK)) == 0,
		     "the user code is apart from the kernel's bits");
ZERNEL_STATIC_ASSERT(ZERNEL_MAX_TENANTS <= ZERNEL_NO_TENANT, "tenant slots fit __u16");

#endif /* ZERNEL_BPF_INTF_H */
