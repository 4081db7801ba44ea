/* SPDX-License-Identifier: GPL-2.0 */
/*
 * node.bpf.h: the nodes of the sharing hierarchy, which the shares (share.bpf.h) and the cpu.max
 * quotas (cpu_max.bpf.h) both hang on.
 *
 * A node is the root, a cgroup of the cpu controller, or a tenant:
 *   - the root (id 0) lives in .bss (root_node): the threads of the root cgroup, most threads of
 *     a test VM and the kernel threads of a real node, need no map lookup;
 *   - a cgroup's node has the cgroup's kernfs id; ops.cgroup_init creates it (child of its parent
 *     cgroup's node, weighing its cpu.weight, with its cpu.max), ops.cgroup_exit deletes it;
 *   - a tenant's node has the id TENANT_NODE | its slot, is a child of the root, and is created
 *     at the first use of the tenant (zernel_tenant_node, share.bpf.h).
 * Weights are on the threads' 1024 scale: a cgroup of cpu.weight 100 weighs 1024.
 *
 * tree_gen moves whenever some node's activity, weight or quota changes, or a cgroup's node is
 * deleted: each node caches its share of the machine (and whether a quota applies to it or above
 * it) until then.
 */
#ifndef ZERNEL_SCHED_NODE_BPF_H
#define ZERNEL_SCHED_NODE_BPF_H

#include "common.bpf.h"

enum {
	ZERNEL_MAX_LEVELS = 12,	      /* cgroup levels walked up; deeper ancestors are ignored */
	ZERNEL_MAX_NODES_MAP = 65536, /* cgroups + tenants + the root in the node map */
};

/* Node ids: 0 is the root; a cgroup's is its kernfs id; a tenant's this bit | its slot. */
#define TENANT_NODE (1ULL << 63)

/*
 * A node of the sharing hierarchy. Fields marked (lock) change only under the node's own lock
 * (the root's, which has neither a parent nor a weight to change, with atomic adds); (atomic)
 * with atomic adds. No lock is shared by two nodes: activity changes of unrelated pods never
 * meet on one (share.bpf.h, zernel_propagate_activity).
 */
struct znode {
	u64 parent;	   /* id of the parent node (0 = the root); unused for the root */
	u64 weight;	   /* (lock) 1024 scale: cpu.weight 100 = 1024 */
	s64 nr_runnable;   /* (atomic) its own runnable threads: gates nr_active (not the
			    * root's: its own group is always active, share.bpf.h) */
	s64 nr_active;	   /* (lock) 1 for runnable own threads + 1 per active child (not
			    * kept for the root) */
	s64 own_weight;	   /* (atomic) sum of the weights of its own runnable threads */
	s64 child_weight;  /* (atomic) sum of the weights of its active children, plus
			    * OWN_GROUP_WEIGHT while its own threads are runnable (the root:
			    * always) */
	u64 share;	   /* cache: its share of the machine, FP_ONE = all; valid at share_gen */
	u64 share_gen;	   /* tree_gen the cache was computed at; 0 = never */
	u64 limited;	   /* cache (share_gen): 1 when it or an ancestor has a cpu.max quota */
	u64 quota_ns;	   /* cpu.max quota per period; 0 = none */
	u64 period_ns;	   /* cpu.max period */
	s64 quota_used_ns; /* (atomic) ns run in this period, plus the debt of earlier ones */
	u64 period_end_ns; /* when the current period ends */
	u64 throttled;	   /* 1 while quota_used_ns >= quota_ns */
	struct bpf_spin_lock lock; /* weight and nr_active, with what each adds to the parent */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, ZERNEL_MAX_NODES_MAP);
	__type(key, u64);
	__type(value, struct znode);
} nodes SEC(".maps");

/*
 * The root node lives in global data, in a section of its own (every CPU writes its own_weight
 * at the wakeups and sleeps of root-cgroup threads: kept off the lines that every callback only
 * reads, such as the decision generations): root-cgroup threads, most of a test VM's, need no
 * map lookup.
 */
private(ZROOT) struct znode root_node;
/* Moves at every change of the tree (above): share caches older than it are stale. */
static u64 tree_gen = 1;

/* A change of the tree: every cached share is stale; counted (tree_change). */
static __always_inline void tree_changed(void)
{
	__sync_fetch_and_add(&tree_gen, 1);
	stat_inc(ZERNEL_STAT_TREE_CHANGE);
}

static __always_inline struct znode *node_get(u64 id)
{
	if (!id)
		return &root_node;
	return bpf_map_lookup_elem(&nodes, &id);
}

/* The node id of a cgroup of the cpu controller: 0 for the root. */
static __always_inline u64 cgrp_node_id(struct cgroup *cgrp)
{
	return cgrp->level ? cgrp->kn->id : 0;
}

/* cpu.weight scale (100 = one nice-0 thread) -> the 1024 scale of thread weights. */
static __always_inline u64 cpu_weight_to_1024(u64 w)
{
	return clamp_u64(w, ZERNEL_TENANT_WEIGHT_MIN, ZERNEL_TENANT_WEIGHT_MAX) *
	       ZERNEL_WEIGHT_DFL / ZERNEL_TENANT_WEIGHT_DFL;
}

#endif /* ZERNEL_SCHED_NODE_BPF_H */
