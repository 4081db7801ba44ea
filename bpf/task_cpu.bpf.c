/* SPDX-License-Identifier: GPL-2.0 */
/*
 * task_cpu: the CPU time of a set of processes in one read (task_cpu.h has the contract).
 *
 * The daemon keeps a tenant's account of CPU seconds (zernel_scheduler_tenant_cpu_seconds_total)
 * for every process the tenant's rules match, once a second; reading it from /proc costs one
 * system call per process (its schedstat or stat), a thousand a second on a node with a thousand
 * tracked processes. An iterator over tasks (iter/task) runs only when its file is read: one
 * read walks the node's tasks in the kernel and writes a record for each thread of a listed
 * process. Nothing is attached to any event, so no other task pays anything for it.
 *
 * A thread's se.sum_exec_runtime is brought up to date at each tick and context switch, so the
 * figure of a thread running now lags by at most a tick. A thread that exits between the read
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

SEC("iter/task")
int zernel_task_cpu(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct zernel_task_cpu_rec rec = {};

	if (!task)
		return 0;
	rec.tgid = task->tgid;
	if (!bpf_map_lookup_elem(&zernel_task_cpu_procs, &rec.tgid))
		return 0;
	rec.tid = task->pid;
	rec.ns = task->se.sum_exec_runtime;
	if (rec.tid == rec.tgid)
		rec.ns += BPF_CORE_READ(task, signal, sum_sched_runtime);
	bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec));
	return 0;
}
