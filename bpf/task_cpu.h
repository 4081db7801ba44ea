/* SPDX-License-Identifier: GPL-2.0 */
/*
 * task_cpu.h - the contract between the task iterator that reads processes' CPU time
 * (task_cpu.bpf.c) and its reader (src/collect/probes/task_cpu_iter.cpp). Same rules as intf.h
 * and probes.h: fixed-width types, explicit padding, no bool, no pointers; sizes asserted below.
 *
 * Maps (the skeleton's names; the BPF side defines them):
 *   zernel_task_cpu_procs  HASH key __u32 tgid -> __u8 (unused): the processes to report; user
 *                          space inserts and deletes, BPF only looks up
 * Output: one struct zernel_task_cpu_rec per live thread of a listed process, written to the
 * iterator's file as it is read. ns is the thread's se.sum_exec_runtime (the first field of
 * /proc/PID/task/TID/schedstat); the record of the group leader adds the CPU time of the
 * process's threads that have exited (signal->sum_sched_runtime), so the records of a tgid sum
 * to its CPU time since it started, as the kernel's thread_group_cputime() computes it. The
 * last record has tgid 0 (no process has it) and ns the number of tasks that walks have visited
 * since the program was loaded (the difference between two reads' is the later one's walk).
 */
#ifndef ZERNEL_BPF_TASK_CPU_H
#define ZERNEL_BPF_TASK_CPU_H

#if defined(__bpf__)
/* vmlinux.h, included first, defines the __u32 family. */
#else
#include <linux/types.h>
#endif

#ifdef __cplusplus
#define ZERNEL_TASK_CPU_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define ZERNEL_TASK_CPU_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

enum {
	/* Processes the map holds at most; the reader reads the rest from /proc. */
	ZERNEL_TASK_CPU_MAX_PROCS = 65536,
};

struct zernel_task_cpu_rec {
	__u32 tgid;
	__u32 tid;
	__u64 ns;	  /* CPU time, ns (see above) */
	__u64 timeslices; /* sched_info.pcount: times switched in (schedstat's third field) */
};

ZERNEL_TASK_CPU_STATIC_ASSERT(sizeof(struct zernel_task_cpu_rec) == 24,
			      "zernel_task_cpu_rec is 24 bytes");

#endif /* ZERNEL_BPF_TASK_CPU_H */
