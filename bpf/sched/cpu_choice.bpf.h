/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cpu_choice.bpf.h: the CPU a waking thread is placed on, near its GPU.
 *
 * ops.select_cpu tries, for a thread whose decision names a preferred CPU or NUMA node: the
 * preferred CPU if it is idle, then an idle CPU of the preferred node (the decision's node, else
 * the preferred CPU's node, resolved by task_refresh); then, for every thread, the kernel's
 * default idle-CPU pick (previous CPU, its cache, any idle CPU). A thread that found an idle CPU
 * is put straight into that CPU's local DSQ (as scx_simple), which skips ops.enqueue altogether.
 * Counters: pref_cpu_hit, pref_node_hit, pref_miss.
 *
 * Node cpumasks are our own (node_masks), built in ops.init from the loader's CPU -> node table
 * (cpu_node): the kernel's per-node idle masks (6.15+, SCX_OPS_BUILTIN_IDLE_PER_NODE) are not
 * used, so that 6.12 works the same. The search of a node intersects its mask with the thread's
 * affinity in the scratch mask of the CPU it runs on (scratch_masks: one per CPU, made in
 * ops.init). ops.select_cpu runs with interrupts off (the waker holds p->pi_lock with them
 * disabled), so nothing else on that CPU uses the mask meanwhile. Before issue 24 the scratch
 * mask was a bpf_cpumask per task, allocated at ops.init_task, where a failed allocation failed
 * the fork and every thread of the node carried one.
 */
#ifndef ZERNEL_SCHED_CPU_CHOICE_BPF_H
#define ZERNEL_SCHED_CPU_CHOICE_BPF_H

#include "common.bpf.h"
#include "task.bpf.h"

struct node_mask {
	struct bpf_cpumask __kptr *mask;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ZERNEL_MAX_NODES);
	__type(key, u32);
	__type(value, struct node_mask);
} node_masks SEC(".maps");

/* This CPU's scratch mask (ops.select_cpu only: interrupts are off there). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct node_mask);
} scratch_masks SEC(".maps");

/* Idle CPU of the preferred node that p may use, or -1. */
static s32 pick_idle_in_node(struct task_struct *p, s32 node)
{
	struct node_mask *entry, *scratch;
	struct bpf_cpumask *tmp, *nm;
	u32 key = node, zero = 0;

	if (node < 0 || node >= nr_nodes || node >= ZERNEL_MAX_NODES)
		return -1;
	entry = bpf_map_lookup_elem(&node_masks, &key);
	if (!entry)
		return -1;
	scratch = bpf_map_lookup_elem(&scratch_masks, &zero);
	if (!scratch)
		return -1;
	nm = entry->mask;
	tmp = scratch->mask;
	if (!nm || !tmp)
		return -1;
	bpf_cpumask_and(tmp, cast_mask(nm), p->cpus_ptr);
	return scx_bpf_pick_idle_cpu(cast_mask(tmp), 0);
}

/* The preferred CPU, then an idle CPU of the preferred node; -1 when neither is free. */
static s32 pick_preferred(struct task_struct *p, struct task_ctx *tctx)
{
	s32 pcpu = tctx->preferred_cpu, cpu;

	if (pcpu >= 0 && bpf_cpumask_test_cpu(pcpu, p->cpus_ptr) &&
	    scx_bpf_test_and_clear_cpu_idle(pcpu)) {
		stat_inc(ZERNEL_STAT_PREF_CPU_HIT);
		return pcpu;
	}
	if (tctx->preferred_node >= 0) {
		cpu = pick_idle_in_node(p, tctx->preferred_node);
		if (cpu >= 0) {
			stat_inc(ZERNEL_STAT_PREF_NODE_HIT);
			return cpu;
		}
	}
	stat_inc(ZERNEL_STAT_PREF_MISS);
	return -1;
}

/* A new empty mask in the entry (the one it held, if any, released). */
static s32 new_empty_mask(struct node_mask *entry)
{
	struct bpf_cpumask *mask = bpf_cpumask_create();

	if (!mask)
		return -ENOMEM;
	mask = bpf_kptr_xchg(&entry->mask, mask);
	if (mask)
		bpf_cpumask_release(mask);
	return 0;
}

/*
 * Node cpumasks from the loader's cpu_node table: one empty mask per node, then each CPU's bit;
 * and an empty scratch mask per CPU.
 */
static s32 build_cpumasks(void)
{
	struct bpf_cpumask *mask;
	struct node_mask *entry;
	u32 node, cpu, key, zero = 0;

	bpf_for(node, 0, nr_nodes) {
		key = node;
		entry = bpf_map_lookup_elem(&node_masks, &key);
		if (!entry)
			return -ENOENT;
		if (new_empty_mask(entry))
			return -ENOMEM;
	}
	bpf_for(cpu, 0, nr_cpus) {
		if (cpu >= ZERNEL_MAX_CPUS)
			break;
		key = cpu_node[cpu];
		entry = bpf_map_lookup_elem(&node_masks, &key);
		if (!entry)
			continue;
		/* Take the mask out (an owned reference), set the bit, put it back. */
		mask = bpf_kptr_xchg(&entry->mask, NULL);
		if (!mask)
			continue;
		bpf_cpumask_set_cpu(cpu, mask);
		mask = bpf_kptr_xchg(&entry->mask, mask);
		if (mask)
			bpf_cpumask_release(mask);
	}
	bpf_for(cpu, 0, nr_cpus) {
		entry = bpf_map_lookup_percpu_elem(&scratch_masks, &zero, cpu);
		if (!entry)
			continue; /* a possible CPU id without a per-CPU area: never runs us */
		if (new_empty_mask(entry))
			return -ENOMEM;
	}
	return 0;
}

#endif /* ZERNEL_SCHED_CPU_CHOICE_BPF_H */
