/* SPDX-License-Identifier: GPL-2.0 */
/*
 * process_tax: the BPF way of following processes, for bench/process_tax only (what a discovery
 * driven by BPF tracepoints would cost the node, against the process events connector the daemon
 * uses, collect/proc_events.hpp). Three programs on the scheduler's process tracepoints (tp_btf:
 * the cheapest kind of tracepoint program) send what the daemon reads from the connector: a new
 * process (a fork whose child leads its thread group; new threads leave at once), an exec, and
 * every exit, into a ring buffer without waking the reader, which drains it every 100 ms as the
 * daemon's tick would. Not loaded by the daemon.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

struct tax_event {
	__u32 kind; /* 0 fork, 1 exec, 2 exit */
	__u32 pid;
	__u32 tid;
	__u32 ppid;
	__u64 t_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} tax_events SEC(".maps");

static __always_inline void tax_send(__u32 kind, __u32 pid, __u32 tid, __u32 ppid)
{
	struct tax_event *e = bpf_ringbuf_reserve(&tax_events, sizeof(*e), 0);

	if (!e)
		return;
	e->kind = kind;
	e->pid = pid;
	e->tid = tid;
	e->ppid = ppid;
	e->t_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(tax_fork, struct task_struct *parent, struct task_struct *child)
{
	if (child->pid != child->tgid)
		return 0;
	tax_send(0, child->tgid, child->pid, parent->tgid);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(tax_exec, struct task_struct *p)
{
	tax_send(1, p->tgid, p->pid, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(tax_exit, struct task_struct *p)
{
	tax_send(2, p->tgid, p->pid, 0);
	return 0;
}
