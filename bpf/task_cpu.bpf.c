/* SPDX-License-Identifier: GPL-2.0 */
/*
 * task_cpu: the CPU time, timeslices and threads of a set of processes in one read (task_cpu.h
 * has the contract).
 *
 * The daemon samples every tracked process each tick or each publish tick: a tenant's account of
 * CPU seconds (zernel_scheduler_tenant_cpu_seconds_total), and for the periodic rules whether a
 * process ran at all (one that did not has changed nothing the rules read). From /proc that is
 * one system call per process and sample at least (its schedstat or stat), and a read per thread
 * for a multi-threaded one; a thousand a second and more on a node with a thousand tracked
 * processes. An iterator over tasks (iter/task) runs only when its file is read: one read walks
 * the node's tasks in the kernel and writes a record for each thread of a listed process. Nothing
 * is attached to any event, so no other task pays anything for it.
 *
 * A thread's se.sum_exec_runtime is brought up to date at each tick and context switch, so the
 * figure of a thread running now lags by at most a tick; its sched_info.pcount counts the switch
 * in at once, so a thread that started to run since the last read shows there. A thread that exits between the read
 * of its leader's record and its own is missed once (its time moves to the leader's
 * signal->sum_sched_runtime after the leader was written); the reader never lets a process's
 * total go backwards.
 */
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "task_cpu.h"

char _license[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ZERNEL_TASK_CPU_MAX_PROCS);
	__type(key, __u32);
	__type(value, __u8);
} zernel_task_cpu_procs SEC(".maps");

/* Tasks the iterator has visited since it was loaded (every read, all readers). */
__u64 zernel_tasks_walked;

SEC("iter/task")
int zernel_task_cpu(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct zernel_task_cpu_rec rec = {};

	if (!task) {
		/*
		 * The walk's end: the tasks visited since the program was loaded, so that the reader
		 * knows what a read costs (meta->seq_num counts only the tasks that wrote a record).
		 */
		rec.ns = zernel_tasks_walked;
		bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec));
		return 0;
	}
	__sync_fetch_and_add(&zernel_tasks_walked, 1);
	rec.tgid = task->tgid;
	if (!bpf_map_lookup_elem(&zernel_task_cpu_procs, &rec.tgid))
		return 0;
	rec.tid = task->pid;
	rec.ns = task->se.sum_exec_runtime;
	if (rec.tid == rec.tgid)
		rec.ns += BPF_CORE_READ(task, signal, sum_sched_runtime);
	if (bpf_core_field_exists(task->sched_info))
		rec.timeslices = BPF_CORE_READ(task, sched_info.pcount);
	bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec));
	return 0;
}
