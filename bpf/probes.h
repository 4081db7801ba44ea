/* SPDX-License-Identifier: GPL-2.0 */
/*
 * probes.h - the contract between the tracing programs (probes.bpf.c) and their loader
 * (src/collect/probes/). One copy only: both sides include this file. Same rules as intf.h:
 * fixed-width types, explicit padding, no bool, no pointers, no bit fields; limits and flags are
 * enum constants; every field says its unit; sizes and offsets asserted at the bottom.
 *
 * Maps (the names are the skeleton's; the BPF side defines them):
 *   zernel_probe_procs    LRU_HASH  key __u32 tgid -> struct zernel_probe_proc   (BPF writes;
 *                         userspace reads, deletes on forget)
 *   zernel_probe_threads  HASH      key __u32 tid  -> struct zernel_probe_thread (BPF writes;
 *                         userspace reads one entry: the thread whose sync returned last)
 *   zernel_probe_futex    HASH      key __u32 tgid -> struct zernel_probe_futex  (userspace
 *                         inserts zeros to track a process and deletes to untrack; BPF counts
 *                         and stamps)
 *   zernel_probe_stats    PERCPU_ARRAY key __u32 enum zernel_probe_stat -> __u64 (BPF counts,
 *                         loader sums)
 *   zernel_follow         .data.zprobe __u64[ZERNEL_FOLLOW_WORDS]: bit (tgid &
 *                         ZERNEL_FOLLOW_MASK) set while user space follows a process with that
 *                         tgid (or another that shares its bit); every program that runs for all
 *                         tasks tests it before any lookup (user space sets and clears, BPF
 *                         reads)
 * All times are CLOCK_MONOTONIC ns (bpf_ktime_get_ns); CPU runtimes are the kernel's
 * se.sum_exec_runtime, the first field of /proc/PID/task/TID/schedstat.
 */
#ifndef ZERNEL_BPF_PROBES_H
#define ZERNEL_BPF_PROBES_H

#if defined(__bpf__)
/* vmlinux.h, included first, defines the __u32 family. */
#else
#include <linux/types.h>
#endif

#ifdef __cplusplus
#define ZERNEL_PROBES_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define ZERNEL_PROBES_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* Limits. */
enum zernel_probe_limits {
	ZERNEL_PROBE_MAX_PROCS = 65536,	  /* processes with sync state; futex-tracked processes */
	ZERNEL_PROBE_MAX_THREADS = 65536, /* threads that have called a sync and not yet exited */
	ZERNEL_PROBE_MAX_DEPTH = 64,	  /* sync calls nested in one thread (the kernel's
					     uretprobe limit, MAX_URETPROBE_DEPTH, is 64 too) */
	ZERNEL_FOLLOW_BITS = 65536,	  /* bits of zernel_follow: tgids are hashed onto them by
					     their low 16 bits (a shared bit costs a task of an
					     unfollowed process one lookup, never a wrong answer) */
	ZERNEL_FOLLOW_MASK = ZERNEL_FOLLOW_BITS - 1,
	ZERNEL_FOLLOW_WORDS = ZERNEL_FOLLOW_BITS / 64,
};

/* futex(2) operations, from include/uapi/linux/futex.h (vmlinux.h has no macros). */
enum zernel_probe_futex_op {
	ZERNEL_FUTEX_WAIT = 0,
	ZERNEL_FUTEX_WAIT_BITSET = 9,
	ZERNEL_FUTEX_WAIT_REQUEUE_PI = 11,
	ZERNEL_FUTEX_PRIVATE_FLAG = 128,
	ZERNEL_FUTEX_CLOCK_REALTIME = 256,
	ZERNEL_FUTEX_CMD_MASK = ~(ZERNEL_FUTEX_PRIVATE_FLAG | ZERNEL_FUTEX_CLOCK_REALTIME),
};

/* Per process (tgid): GPU synchronisation calls, summed over its threads. */
struct zernel_probe_proc {
	__u64 last_return_ns;	/* ns, CLOCK_MONOTONIC: when an outermost sync last returned; 0 never */
	__u64 in_sync_since_ns; /* ns, CLOCK_MONOTONIC: when in_sync last went from 0 to 1 */
	__u64 sync_time_ns;	/* ns: time inside completed outermost syncs, all threads */
	__u64 sync_count;	/* count: completed outermost syncs, all threads */
	__u32 last_return_tid;	/* tid of the thread whose sync returned last (its runtime then is
				   in zernel_probe_threads); 0 never */
	__u32 in_sync;		/* count: threads inside a sync now */
	__u64 last_burst_ns;	/* ns of CPU: the burst that ended at the latest outermost sync
				   entry, i.e. that thread's runtime at the entry minus its runtime
				   at its previous return (0: the thread had not returned before) */
};

/* Per thread (tid): its sync nesting and its CPU runtime when its last sync returned. Written
 * only by the thread itself (and removed when it exits), so one entry is always consistent. */
struct zernel_probe_thread {
	__u64 enter_ns;		    /* ns, CLOCK_MONOTONIC: start of the current outermost sync
				       (valid while depth > 0) */
	__u64 return_ns;	    /* ns, CLOCK_MONOTONIC: when its last outermost sync returned */
	__u64 runtime_at_return_ns; /* ns: its se.sum_exec_runtime at that return */
	__u32 tgid;		    /* its process */
	__u32 depth;		    /* count: sync calls of this thread in progress (nesting) */
};

/* Per tracked process (tgid): its futex waits. */
struct zernel_probe_futex {
	__u64 waits;	     /* count: FUTEX_WAIT, _WAIT_BITSET, _WAIT_REQUEUE_PI calls, all threads */
	__u64 main_wait_ns;  /* ns, CLOCK_MONOTONIC: when the main thread (tid == tgid) last
				entered such a wait; 0 never */
};

/* Counters, per CPU, summed by the loader. */
enum zernel_probe_stat {
	ZERNEL_PROBE_STAT_SYNC_ENTER,	     /* uprobe hits on a sync entry point */
	ZERNEL_PROBE_STAT_SYNC_RETURN,	     /* uretprobe hits */
	ZERNEL_PROBE_STAT_SYNC_NESTED,	     /* entries while the thread was already in a sync */
	ZERNEL_PROBE_STAT_RETURN_MISS,	     /* returns with no recorded entry (attached mid-call,
					       or the entry was not recorded) */
	ZERNEL_PROBE_STAT_DEPTH_OVERFLOW,    /* entries beyond ZERNEL_PROBE_MAX_DEPTH, ignored */
	ZERNEL_PROBE_STAT_THREAD_MAP_FULL,   /* entries lost: zernel_probe_threads full */
	ZERNEL_PROBE_STAT_PROC_MAP_FULL,     /* updates lost: no zernel_probe_procs entry */
	ZERNEL_PROBE_STAT_EXIT_IN_SYNC,	     /* threads that exited inside a sync */
	ZERNEL_PROBE_STAT_FUTEX_WAIT,	     /* futex waits counted (tracked processes) */
	ZERNEL_PROBE_STAT_FUTEX_UNTRACKED,   /* futex waits of untracked processes (looked up, not
					       counted) */
	ZERNEL_PROBE_STAT_PHASE_EVENT,	     /* phase changes sent to zernel_phase_events */
	ZERNEL_PROBE_STAT_PHASE_EVENT_LOST,  /* phase changes not sent: the ring buffer was full
					       (each kept in zernel_phase_unsent as its thread's
					       last change, for user space to take) */
	ZERNEL_PROBE_STAT_PHASE_NO_STORAGE,  /* threads of a phase-tracked process given no state
					       (task storage allocation failed) */
	ZERNEL_PROBE_STAT_NCCL_CHECK,	     /* futex waits of rank threads checked for an nccl-*
					       mapping (shared futexes only: a private one cannot
					       be on NCCL's shared segment) */
	ZERNEL_PROBE_STAT_NCCL_CHECK_MISSED, /* of those, checks that could not be done:
					       bpf_find_vma failed for another reason than "no
					       mapping there" (mmap_lock contended: -EBUSY); such a
					       wait is not seen as NCCL's */
	ZERNEL_PROBE_STAT_UNSENT_FAILED,     /* lost changes not kept either (the update of
					       zernel_phase_unsent failed): that thread's phase is
					       stale in user space until its next change */
	ZERNEL_PROBE_STAT_WAKE_UNSEEN,	     /* a followed thread's return from a sleep taken at its
					       next switch-out: the kernel ran it without a
					       sched_switch naming it next (phase_woke) */
	ZERNEL_PROBE_STAT_SYNC_KICK,	     /* CPU kicks for a change a sync's entry or return
					       made (SYNC KICKS in probes/rules.bpf.h) */
	ZERNEL_PROBE_STAT_NR,
};

ZERNEL_PROBES_STATIC_ASSERT(sizeof(struct zernel_probe_proc) == 48, "zernel_probe_proc layout");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_probe_proc, last_return_ns) == 0,
			    "last_return_ns");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_probe_proc, in_sync_since_ns) == 8,
			    "in_sync_since_ns");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_probe_proc, sync_time_ns) == 16,
			    "sync_time_ns");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_probe_proc, sync_count) == 24,
			    "sync_count");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_probe_proc, last_return_tid) == 32,
			    "last_return_tid");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_probe_proc, in_sync) == 36,
			    "in_sync");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_probe_proc, last_burst_ns) == 40,
			    "last_burst_ns");
ZERNEL_PROBES_STATIC_ASSERT(sizeof(struct zernel_probe_thread) == 32, "zernel_probe_thread layout");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_probe_thread, enter_ns) == 0,
			    "enter_ns");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_probe_thread, return_ns) == 8,
			    "return_ns");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_probe_thread, runtime_at_return_ns) ==
				    16, "runtime_at_return_ns");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_probe_thread, tgid) == 24, "tgid");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_probe_thread, depth) == 28, "depth");
ZERNEL_PROBES_STATIC_ASSERT(sizeof(struct zernel_probe_futex) == 16, "zernel_probe_futex layout");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_probe_futex, main_wait_ns) == 8,
			    "main_wait_ns");
ZERNEL_PROBES_STATIC_ASSERT(ZERNEL_PROBE_STAT_NR == 18,
			    "update the loader's stat names with the enum");

/*
 * Phases from events (docs/probes.md, "Phases from events"). Each thread of a process user space
 * names in zernel_phase_procs gets a phase of its own, kept in BPF task storage and changed by
 * the events below as they happen; every change goes to the ring buffer zernel_phase_events with
 * the time of the event that made it.
 *
 * Maps (names as in the skeleton):
 *   zernel_phase_procs    HASH          key __u32 tgid -> struct zernel_phase_proc (user space
 *                         inserts when discovery gives a process its role, deletes on forget)
 *   zernel_phase_threads  TASK_STORAGE  -> struct zernel_phase_thread (BPF only; created only
 *                         for the threads of a process with a role, so role is never 0)
 *   zernel_phase_events   RINGBUF       struct zernel_phase_event records (BPF writes, user
 *                         space consumes)
 *   zernel_phase_unsent   LRU_HASH      key __u32 tid -> struct zernel_phase_event: a thread's
 *                         last change when the ring buffer had no room for it (BPF writes and
 *                         deletes once a later change of the thread went through the ring; user
 *                         space takes the entries, lookup-and-delete, when the .data.zprobe flag
 *                         zernel_phase_unsent_pending is set, and clears the flag first)
 */

/* The phase numbers: policy::Phase's (src/policy/phase.hpp), intf.h's enum zernel_phase. */
enum zernel_probe_phase {
	ZERNEL_PROBE_PHASE_DATA_LOADING = 0,
	ZERNEL_PROBE_PHASE_GPU_COMPUTE = 1,
	ZERNEL_PROBE_PHASE_NCCL_COLLECTIVE = 2,
	ZERNEL_PROBE_PHASE_OPTIMIZER_STEP = 3,
	ZERNEL_PROBE_PHASE_UNKNOWN = 4,
};

/* Which rules apply to a process's threads. */
enum zernel_phase_role {
	ZERNEL_PHASE_ROLE_RANK = 1,   /* a GPU process (a training rank): GPU syncs, NCCL waits,
					 data waits, CPU work after a wait */
	ZERNEL_PHASE_ROLE_WORKER = 2, /* a DataLoader worker: producing while it runs or waits on
					 I/O, idle while it sleeps */
};

/* What made a change (zernel_phase_event.cause). */
enum zernel_phase_cause {
	ZERNEL_CAUSE_SYNC_ENTER = 1,	  /* a GPU sync began: GpuCompute */
	ZERNEL_CAUSE_SYNC_RETURN = 2,	  /* a GPU sync returned: OptimizerStep (CPU work the GPU
					     waits for) */
	ZERNEL_CAUSE_LONG_SYNC = 3,	  /* a sync begun in OptimizerStep outlasted the
					     hysteresis: GpuCompute from its entry */
	ZERNEL_CAUSE_NCCL_WAIT = 4,	  /* a futex wait on an NCCL shared-memory segment */
	ZERNEL_CAUSE_NCCL_DONE = 5,	  /* that wait returned: OptimizerStep */
	ZERNEL_CAUSE_DATA_WAIT = 6,	  /* blocked reading a pipe, socket or file, or polling */
	ZERNEL_CAUSE_WORKER_RUN = 7,	  /* a worker runs: DataLoading */
	ZERNEL_CAUSE_WORKER_IDLE = 8,	  /* a worker slept at least the hysteresis: Unknown from
					     when it fell asleep */
	ZERNEL_CAUSE_OPTIMIZER_BOUND = 9, /* OptimizerStep ran longer than its bound: Unknown */
	ZERNEL_CAUSE_DATA_ARRIVED = 10,	  /* back from that data wait: GpuCompute (the batch is
					     there; the step's GPU work is what follows) */
	ZERNEL_CAUSE_NOT_DRIVER = 11,	  /* a rank's main thread that had a phase while no thread
					     had synced, now that another one has: Unknown */
	ZERNEL_CAUSE_BATCH_WAIT = 12,	  /* a driver slept in a private futex wait for
					     zernel_batch_wait_ns or more after its optimizer
					     step (a batch from a pin-memory thread): DataLoading
					     from when it fell asleep, committed when it wakes */
	ZERNEL_CAUSE_OPTIMIZER_END = 13,  /* a sync entered in OptimizerStep long after the
					     learned length of the driver's optimizer step:
					     GpuCompute from where that step ended (the batch was
					     ready: the forward pass ran unseen) */
	ZERNEL_CAUSE_BATCH_TAKEN = 14,	  /* a DataLoader worker of the driver woke from its idle
					     sleep while the driver was in OptimizerStep: the
					     driver took a ready batch and sent the worker its next
					     index (BATCH TAKEN): GpuCompute */
};

/* Per tracked process. */
struct zernel_phase_proc {
	__u32 role;	/* enum zernel_phase_role */
	__u32 synced;	/* 1 once a thread of the process entered a GPU sync (BPF sets it; user
			   space writes 0 when it names the process) */
	__u64 named_ns; /* ns, CLOCK_MONOTONIC: when user space named it, read before it wrote
			   this entry (a thread asleep since before then: FIRST SIGHT in
			   probes/rules.bpf.h); 0 unknown */
};

/* Per thread (task storage; BPF only, user space sees the events). */
struct zernel_phase_thread {
	__u64 since_ns;		/* ns, CLOCK_MONOTONIC: when the current phase began */
	__u64 runtime_at_since; /* ns: se.sum_exec_runtime then (the OptimizerStep bound) */
	__u64 pending_ns;	/* ns: entry of a sync begun in OptimizerStep; 0 none */
	__u64 sleep_ns;		/* ns: a worker's interruptible sleep began, or a driver's futex
				   wait after its optimizer step; 0 awake (or in I/O) */
	__u32 tgid;
	__u8 phase;		/* enum zernel_probe_phase */
	__u8 role;		/* enum zernel_phase_role */
	__u8 depth;		/* GPU sync calls in progress (nesting, saturating) */
	__u8 nccl_wait;		/* 1 while in a futex wait on an NCCL segment */
	__u8 data_wait;		/* 1 while asleep in the data wait that made it DataLoading */
	__u8 driver;		/* 1 once the thread entered a GPU sync: a rank's driver thread */
	__u8 unsent;		/* 1 while its last change is in zernel_phase_unsent (the ring
				   buffer was full), not in the ring */
	__u8 pad;
	__u8 sched_follows; /* 1 while the sched_ext scheduler schedules the thread by its
				   phase (the scheduler writes it: set_followed) */
	__u8 kicked;	    /* 1: the probes kicked its CPU for a change made as it was
				   switched in (the scheduler clears it when it takes the kick) */
	__u8 pad2[2];
	__u32 opt_us; /* us: how long its optimizer step lasts, learned where a wait for data
			 ended one (OPTIMIZER LENGTH, probes/rules.bpf.h); 0 not yet */
	__u32 pad3;
};

/* One phase change, as the ring buffer carries it. */
struct zernel_phase_event {
	__u64 t_ns;  /* ns, CLOCK_MONOTONIC: the time of the event that made it */
	__u32 tid;
	__u32 tgid;
	__u8 phase;  /* enum zernel_probe_phase: the new phase */
	__u8 cause;  /* enum zernel_phase_cause */
	__u8 pad[6];
};

enum zernel_phase_limits {
	ZERNEL_PHASE_MAX_PROCS = 65536,		   /* processes with a role */
	ZERNEL_PHASE_RING_BYTES = 4 * 1024 * 1024, /* 131,072 events (24 bytes + 8 of header) */
	ZERNEL_PHASE_UNSENT_MAX = 16384,	   /* threads whose last change waits in
						      zernel_phase_unsent */
};

ZERNEL_PROBES_STATIC_ASSERT(sizeof(struct zernel_phase_proc) == 16, "zernel_phase_proc layout");
ZERNEL_PROBES_STATIC_ASSERT(sizeof(struct zernel_phase_thread) == 56, "zernel_phase_thread layout");
ZERNEL_PROBES_STATIC_ASSERT(sizeof(struct zernel_phase_event) == 24,
			    "zernel_phase_event layout");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_phase_event, tid) == 8, "tid");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_phase_event, tgid) == 12, "tgid");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_phase_event, phase) == 16, "phase");
ZERNEL_PROBES_STATIC_ASSERT(__builtin_offsetof(struct zernel_phase_event, cause) == 17, "cause");

#endif /* ZERNEL_BPF_PROBES_H */
