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
	ZERNEL_PROBE_STAT_SYNC_ENTER,	    /* uprobe hits on a sync entry point */
	ZERNEL_PROBE_STAT_SYNC_RETURN,	    /* uretprobe hits */
	ZERNEL_PROBE_STAT_SYNC_NESTED,	    /* entries while the thread was already in a sync */
	ZERNEL_PROBE_STAT_RETURN_MISS,	    /* returns with no recorded entry (attached mid-call,
					       or the entry was not recorded) */
	ZERNEL_PROBE_STAT_DEPTH_OVERFLOW,   /* entries beyond ZERNEL_PROBE_MAX_DEPTH, ignored */
	ZERNEL_PROBE_STAT_THREAD_MAP_FULL,  /* entries lost: zernel_probe_threads full */
	ZERNEL_PROBE_STAT_PROC_MAP_FULL,    /* updates lost: no zernel_probe_procs entry */
	ZERNEL_PROBE_STAT_EXIT_IN_SYNC,	    /* threads that exited inside a sync */
	ZERNEL_PROBE_STAT_FUTEX_WAIT,	    /* futex waits counted (tracked processes) */
	ZERNEL_PROBE_STAT_FUTEX_UNTRACKED,  /* futex waits of untracked processes (looked up, not
					       counted) */
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
ZERNEL_PROBES_STATIC_ASSERT(ZERNEL_PROBE_STAT_NR == 10,
			    "update the loader's stat names with the enum");

#endif /* ZERNEL_BPF_PROBES_H */
