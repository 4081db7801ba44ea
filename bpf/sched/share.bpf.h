/* SPDX-License-Identifier: GPL-2.0 */
/*
 * share.bpf.h: each runnable thread's share of the machine, from the cgroup tree and the tenants.
 *
 * SHARING. The machine is shared as its cgroup tree says, with tenants as one more level
 * (docs/sched-ext.md, "Sharing"). The nodes (node.bpf.h) are the root, the cgroups of the cpu
 * controller (children of their parent cgroups, weighing their cpu.weight) and the tenants
 * (children of the root, weighing their weight from the daemon: GPU-proportional times the class
 * factor, cpu.weight scale). A tenant's threads count in the tenant, wherever their cgroups are;
 * the cgroups' cpu.max still caps them (cpu_max.bpf.h). A node's own runnable threads compete
 * with its active children as one group of weight OWN_GROUP_WEIGHT, that of a cgroup of
 * cpu.weight 100 (in cgroup v2 only the root has both). Inside that group, threads split by their
 * weights (task_weight: the phase priority; the nice weight without a decision).
 *
 * Flattening (the scx_flatcg idea): instead of picking a node, then a child, then a thread, every
 * runnable thread gets its share of the whole machine,
 *
 *	share(t) = hshare(node) * OWN / D(node) * w_t / S(node)
 *	hshare(node) = prod over node and its ancestors below the root of  w(c) / D(parent(c))
 *
 * with D(x) the summed weights of x's active children plus OWN while x has runnable threads of
 * its own (znode.child_weight; always for the root, below), S(x) the summed weights of those
 * threads (znode.own_weight). A node is active while it has a runnable thread below it.
 * Activity changes are counted up the tree (nr_runnable gates nr_active, one level at a time
 * under that node's lock) and bump tree_gen; hshare is cached per node (znode.share) until
 * tree_gen moves. S(x) changes on every wakeup and is read fresh. vtime.bpf.h turns the share
 * into virtual time: equal vtime progress gives every busy thread CPU in proportion to its share,
 * and every active node in proportion to its hshare.
 *
 * Worked example, 2 CPUs. Cgroups A (cpu.weight 300) and B (100) under the root, 3 busy threads
 * each, and a tenant T (weight 305: one GPU of one, training) with 4 threads. D(root) = 300 +
 * 100 + 305 = 705: hshare A = 0.43, B = 0.14, T = 0.43; each A thread's share is 0.142, each B
 * thread's 0.047, each T thread's 0.108. Equal vtime progress gives A:B:T = 300:100:305 of the
 * two CPUs (with nothing else runnable), and it stays so if B starts 30 threads. The VM test
 * (tests/vm, "sharing") measures such splits within 5 %.
 *
 * A thread joins its node (task_account: its weight into own_weight, a count into nr_runnable)
 * when it wakes or is queued, and leaves it when it sleeps (ops.stopping) or leaves sched_ext
 * (ops.disable); a changed decision, tenant or cgroup moves it to its new node and weight at
 * once. Its share is computed with the weight it joined with (pub.contrib_weight).
 *
 * ROOT GROUP. The root's own threads count in D(root) as one group of weight OWN at all times,
 * runnable or not (zernel_init puts it in root_node.child_weight): on a real node the root
 * cgroup holds the kernel threads, which wake and sleep on every CPU all the time, and with the
 * group counted only while one of them was runnable, every such wakeup after a quiet moment and
 * every last one going to sleep changed D(root), which made every cached share in the tree stale
 * (tree_gen), and wrote three counters that every CPU shares (issue 24). With the group always
 * counted, a root-cgroup thread's wakeup and sleep write one sum (own_weight). What it changes:
 * while no root thread is runnable, every other node's share is D / (D + OWN) of what it was,
 * the same factor for all of them, so the splits between them are the same (the queue orders by
 * vtime, and every thread's vtime then grows by the same factor faster).
 *
 * Kernel threads of the root (PF_KTHREAD: task_ctx.kthread, root_alone) do not write that sum:
 * a kernel thread's own share counts its weight in it (S + w, as if it had joined), no other
 * thread's share counts it. On a node whose user space lives in cgroups (systemd's slices, the
 * kubelet's pods) the root holds only kernel threads, the per-CPU ones waking on every CPU all the
 * time, so own_weight was a line every CPU wrote on the wakeup path (issue 24 item 2); now it is
 * written only by user threads left in the root (a test VM's), S is 0 on such a node, and each
 * kernel thread competes as the whole root group (OWN / D), as CFS lets each root-cgroup thread
 * compete. Nor does a kernel thread move the shares of the root's user threads any more: a nice
 * -20 kernel worker runnable for a moment had made the root's own group weigh 91,800, not 2,048,
 * and their shares 45 times smaller (vtime.bpf.h, ORDER WITHIN THE QUEUE).
 *
 * COST. A thread of the root cgroup uses root_node in .bss: no map lookup. A thread of another
 * cgroup takes one hash lookup of its node per callback that accounts it (task_node: at a wakeup
 * in ops.select_cpu and again in ops.enqueue; at a stop, of the node it joined), plus one per
 * ancestor when tree_gen has moved since the node's share was cached, plus, while some cgroup has
 * a quota, one of its cgroup's node for the limited flag. A tenant's thread takes three at
 * task_node (the tenant's weight in zernel_tenants, its node in zernel_tenant_node, which returns
 * the id only, being a global function, and that node again in task_node). Joining and leaving
 * are two atomic adds (one for a root-cgroup thread); only a node's first runnable thread and its
 * last going to sleep walk up the tree (zernel_propagate_activity, level by level, each under its
 * node's own lock; never for the root's own threads). The node is looked up once per callback
 * and passed on to the join, the share and the leave; task_share and task_account are inlined
 * (no BPF-to-BPF call on a wakeup or a stop).
 *
 * Known weaknesses:
 * - Flattening (like scx_flatcg): shares change as threads wake and sleep, and a thread is
 *   charged with the share of the moment it stops, so a group whose threads wake in a burst can
 *   briefly take more than its share (the thundering herd scx_flatcg describes). The error is
 *   bounded by one slice per thread.
 * - A node's own threads compete with its children as one group of weight 100, where CFS lets
 *   each thread of the root cgroup compete alone: the root's kernel threads do beside no user
 *   thread of the root (ROOT GROUP), the other threads share their node's group, always counted
 *   for the root, which keeps D(root) and the cached shares stable. Several runnable kernel
 *   threads together may take more than the root group's share, as under CFS, and the root's
 *   user threads do not count them in their own shares.
 * - The root's own_weight is still one sum that every CPU writes at the wakeup and sleep of a
 *   user thread of the root cgroup (one atomic add each): on a test VM most threads; on a node
 *   whose user space is in cgroups, none.
 * - The share of a thread running alone on a CPU of a many-CPU machine is a fraction of the
 *   machine it cannot exceed on one CPU; vtime then falls behind and the lag bound (vtime.bpf.h),
 *   not the share, decides what it has when competition arrives (within two slices).
 * - cgroups deeper than ZERNEL_MAX_LEVELS (12) levels: the ancestors above are ignored.
 *
 * Races accepted:
 * - Shares are read without locks: a charge may use a share a wakeup elsewhere just changed.
 * - An activation and a deactivation of the same node racing through the levels: each level's
 *   transition is decided under that node's lock and its parent's sum takes it by an atomic add;
 *   the adds commute, so the tree ends right; a concurrent share computation may read a sum of
 *   the moment between (even one that briefly misses a child) and cache it until tree_gen moves
 *   again.
 * - ops.cgroup_exit deletes the cgroup's node; its tasks have left sched_ext by then (ops.disable
 *   takes each out of its node's load), so the node is inactive. Were one still counted, its
 *   weight would stay in the parent's sum: the siblings' shares a little low, never starved.
 */
#ifndef ZERNEL_SCHED_SHARE_BPF_H
#define ZERNEL_SCHED_SHARE_BPF_H

#include "common.bpf.h"
#include "cpu_max.bpf.h"
#include "node.bpf.h"
#include "task.bpf.h"

/* The weight with which a node's own runnable threads, as one group, compete with its children:
 * that of a cgroup of cpu.weight 100. */
#define OWN_GROUP_WEIGHT ((u64)ZERNEL_WEIGHT_DFL)

/* The contract's tenant maps (intf.h): weights from the loader, runnable load for it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ZERNEL_MAX_TENANTS);
	__type(key, u32);
	__type(value, struct zernel_tenant);
} zernel_tenants SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ZERNEL_MAX_TENANTS);
	__type(key, u32);
	__type(value, struct zernel_tenant_load);
} zernel_tenant_load SEC(".maps");

/*
 * Activity changes of a node, carried up the tree: a node is active while nr_active > 0, and an
 * active node's weight is in its parent's child_weight. Each level's transition (nr_active from
 * or to 0) and the weight it carries are decided under that node's own lock, which also orders
 * them with node_set_weight; the parent's sum takes the difference by an atomic add after the
 * lock is dropped (bpf_spin_lock allows no other lock, nor calls, while held). The adds commute,
 * so racing activations, deactivations and weight changes leave every sum right. The root has no
 * parent and a fixed weight, and its own group is always counted (ROOT GROUP): a level that
 * reaches it adds to its sum and stops. No lock is shared by two nodes, so the pods of a
 * kubelet's tree become active and idle without meeting on one (until issue 24 one tree_lock
 * served the whole tree).
 */
__noinline int zernel_propagate_activity(u64 id, u32 activate)
{
	s64 step = activate ? 1 : -1;
	u32 i;

	for (i = 0; i < ZERNEL_MAX_LEVELS; i++) {
		struct znode *n = node_get(id), *pn;
		bool up = false;
		s64 carry = 0;
		u64 pid;

		if (!n)
			break;
		/* The root: its sum took the child's weight at the level below (ROOT GROUP). */
		if (!id)
			break;
		/* The first level: its own threads start (or stop) to compete, as one child. */
		if (i == 0)
			__sync_fetch_and_add(&n->child_weight, step * (s64)OWN_GROUP_WEIGHT);
		pid = n->parent;
		bpf_spin_lock(&n->lock);
		if (activate ? n->nr_active++ == 0 : --n->nr_active == 0) {
			up = true;
			carry = step * (s64)n->weight;
		}
		bpf_spin_unlock(&n->lock);
		pn = up ? node_get(pid) : NULL;
		if (!pn)
			break;
		__sync_fetch_and_add(&pn->child_weight, carry);
		id = pid;
	}
	/* Every call changed some child_weight: the shares cached with the old sums are stale. */
	tree_changed();
	return 0;
}

/* A node's new weight (cpu.weight, a tenant's weight), carried into its parent's sum if active. */
static void node_set_weight(u64 id, u64 w1024)
{
	struct znode *n, *pn;
	s64 carry = 0;

	if (!id) /* the root's weight is no one's share */
		return;
	n = node_get(id);
	if (!n)
		return;
	bpf_spin_lock(&n->lock);
	if (n->nr_active > 0)
		carry = (s64)w1024 - (s64)n->weight;
	n->weight = w1024;
	bpf_spin_unlock(&n->lock);
	pn = node_get(n->parent);
	if (carry && pn)
		__sync_fetch_and_add(&pn->child_weight, carry);
	tree_changed();
}

static void tenant_load_add(u64 id, s64 w, s64 n)
{
	struct zernel_tenant_load *load;
	u32 slot;

	if (!(id & TENANT_NODE))
		return;
	slot = (u32)(id & 0xFFFF);
	load = bpf_map_lookup_elem(&zernel_tenant_load, &slot);
	if (load) {
		__sync_fetch_and_add(&load->runnable_weight, w);
		__sync_fetch_and_add(&load->runnable_threads, n);
	}
}

/* A kernel thread of the root cgroup: it writes nothing to the root's sum (ROOT GROUP). */
static __always_inline bool root_alone(const struct task_ctx *tctx, u64 id)
{
	return !id && tctx->kthread;
}

/*
 * A runnable thread of weight w joins node n, of id id (its own threads). The root's own group is
 * always active (ROOT GROUP above): its threads add their weight and nothing else. Its kernel
 * threads do not join at all (root_alone: their callers skip this and node_leave).
 */
static __always_inline void node_join(struct znode *n, u64 id, s64 w)
{
	__sync_fetch_and_add(&n->own_weight, w);
	if (!id)
		return;
	tenant_load_add(id, w, 1);
	if (__sync_fetch_and_add(&n->nr_runnable, 1) == 0)
		zernel_propagate_activity(id, 1);
}

static __always_inline void node_leave(struct znode *n, u64 id, s64 w)
{
	__sync_fetch_and_sub(&n->own_weight, w);
	if (!id)
		return;
	tenant_load_add(id, -w, -1);
	if (__sync_fetch_and_sub(&n->nr_runnable, 1) == 1)
		zernel_propagate_activity(id, 0);
}

/* The tenant's node, created at its first use, its weight kept equal to the tenant's. */
__noinline u64 zernel_tenant_node(u32 slot, u64 tenant_weight)
{
	u64 id = TENANT_NODE | (slot & 0xFFFF), w;
	struct zernel_tenant *t = bpf_map_lookup_elem(&zernel_tenants, &slot);
	struct znode *n;

	w = cpu_weight_to_1024(t && t->weight ? t->weight : tenant_weight);
	n = bpf_map_lookup_elem(&nodes, &id);
	if (!n) {
		struct znode init = {.parent = 0, .weight = w};

		bpf_map_update_elem(&nodes, &id, &init, BPF_NOEXIST);
		n = bpf_map_lookup_elem(&nodes, &id);
		if (!n)
			return 0;
	}
	if (n->weight != w)
		node_set_weight(id, w);
	return id;
}

/*
 * The node a thread is counted in, and its id: its tenant's, else its cgroup's; the root when
 * that has no node. One lookup: callers pass the node on rather than look it up again.
 */
static __always_inline struct znode *task_node(const struct task_ctx *tctx, u64 *idp)
{
	u64 id = tctx->cgroup_node;
	struct znode *n;

	if (has_tenant(tctx))
		id = zernel_tenant_node(tctx->tenant, tctx->tenant_weight);
	n = node_get(id);
	if (!n) {
		id = 0;
		n = &root_node;
	}
	*idp = id;
	return n;
}

/* Leaves the node it joined, n (node_get(joined_node), looked up by the caller; NULL: gone). */
static __always_inline void task_unaccount_in(struct task_ctx *tctx, struct znode *n)
{
	if (!tctx->joined)
		return;
	if (n && !root_alone(tctx, tctx->joined_node))
		node_leave(n, tctx->joined_node, tctx->pub.contrib_weight);
	tctx->joined = 0;
	tctx->pub.contrib_weight = 0;
	tctx->pub.contrib_tenant = ZERNEL_NO_TENANT;
}

static void task_unaccount(struct task_ctx *tctx)
{
	if (tctx->joined)
		task_unaccount_in(tctx, node_get(tctx->joined_node));
}

/*
 * Keeps the thread's contribution (node and weight) in step with its decision and cgroup, for a
 * runnable thread: leaves what it joined before if that differs, joins what it should. Returns
 * the node it is counted in.
 */
static __always_inline struct znode *task_account(struct task_struct *p, struct task_ctx *tctx)
{
	struct zernel_task_ctx *tc = &tctx->pub;
	s64 w = (s64)task_weight(p, tctx);
	struct znode *n;
	u64 id;

	n = task_node(tctx, &id);
	if (tctx->joined && tctx->joined_node == id && tc->contrib_weight == w)
		return n;
	if (tctx->joined) /* a wakeup (not joined) makes no call */
		task_unaccount(tctx);
	/* Read at each join (a kernel thread that execs a user program is one no longer). */
	tctx->kthread = (p->flags & PF_KTHREAD) ? 1 : 0;
	if (!root_alone(tctx, id))
		node_join(n, id, w);
	tctx->joined = 1;
	tctx->joined_node = id;
	tc->contrib_weight = w;
	tc->contrib_tenant = (id & TENANT_NODE) ? (u16)(id & 0xFFFF) : ZERNEL_NO_TENANT;
	return n;
}

/*
 * A node's share of the machine (hshare above): the product, over it and its ancestors below the
 * root, of weight / (sum of the weights of the active children of the parent + the parent's own
 * runnable threads). Cached per node until tree_gen moves. Also notes on the way whether a quota
 * applies to it (znode.limited, read by share_in for the thread's cgroup).
 */
__noinline u64 zernel_node_share(u64 id)
{
	u64 gen = tree_gen, share = FP_ONE, limited, cur = id;
	struct znode *n = node_get(id);
	u32 i;

	if (!n)
		return FP_ONE;
	if (!id || n->share_gen == gen)
		return n->share ? n->share : FP_ONE;
	stat_inc(ZERNEL_STAT_SHARE_WALK);
	limited = n->quota_ns ? 1 : 0;
	for (i = 0; i < ZERNEL_MAX_LEVELS && cur; i++) {
		struct znode *c = node_get(cur), *pn;
		u64 w, d;

		if (!c)
			break;
		pn = node_get(c->parent);
		if (!pn)
			break;
		if (pn->quota_ns)
			limited = 1;
		w = c->weight ? c->weight : 1;
		d = (u64)pn->child_weight;
		if ((s64)d < (s64)w)
			d = w;
		share = share * w / d;
		cur = c->parent;
	}
	if (!share)
		share = 1;
	n = node_get(id);
	if (n) {
		n->share = share;
		n->limited = limited;
		n->share_gen = gen;
	}
	return share;
}

/*
 * The thread's share of the machine, FP_ONE = all of it, as a thread of weight w in node n (of
 * id id): the node's share times w over the weight of the node's runnable threads and active
 * children. Sets tctx->limited on the way (cpu.max follows the cgroup, also for a tenant's
 * thread).
 */
static __always_inline u64 share_in(struct task_ctx *tctx, struct znode *n, u64 id, u64 w)
{
	u64 node_share, d, s, own;

	/* The cache is read here: the walk (a second lookup of the node) only when it is stale. */
	node_share = FP_ONE;
	if (id)
		node_share = n->share_gen == tree_gen ? n->share : zernel_node_share(id);
	/* cpu.max follows the cgroup, also for a tenant's thread. */
	tctx->limited = 0;
	if (nr_quotas && tctx->cgroup_node) {
		struct znode *cn = node_get(tctx->cgroup_node);

		if (cn) {
			if (cn->share_gen != tree_gen)
				zernel_node_share(tctx->cgroup_node);
			tctx->limited = (u8)cn->limited;
		}
	}
	/* Its weight among its node's own threads, times their group's among the node's children. */
	own = (u64)n->own_weight;
	if (root_alone(tctx, id)) /* counted as if it had joined, without writing the sum */
		own += w;
	if ((s64)own < (s64)w)
		own = w;
	d = (u64)n->child_weight;
	if ((s64)d < (s64)OWN_GROUP_WEIGHT)
		d = OWN_GROUP_WEIGHT;
	s = node_share * w / own * OWN_GROUP_WEIGHT / d;
	return s ? s : 1;
}

/* The share of a runnable thread (joined): its node, and the weight it joined with (own_weight). */
static __always_inline u64 joined_share(struct task_ctx *tctx, struct znode *n)
{
	return n ? share_in(tctx, n, tctx->joined_node, (u64)tctx->pub.contrib_weight) : FP_ONE;
}

static __always_inline u64 task_share(struct task_struct *p, struct task_ctx *tctx)
{
	struct znode *n;
	u64 id;

	if (tctx->joined)
		return joined_share(tctx, node_get(tctx->joined_node));
	n = task_node(tctx, &id);
	return share_in(tctx, n, id, task_weight(p, tctx));
}

#endif /* ZERNEL_SCHED_SHARE_BPF_H */
