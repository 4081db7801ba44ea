/* SPDX-License-Identifier: GPL-2.0 */
/*
 * zernel: the sched_ext scheduler that carries out zernel-sched's per-process decisions.
 *
 * The daemon decides per process (tgid) and writes struct zernel_decision (intf.h) into
 * zernel_decisions: a weight (priority), a time slice (phase), a latency target, whether a
 * wakeup may preempt, a preferred CPU and NUMA node, and a tenant. Every thread of the process
 * looks the decision up by p->tgid, so every thread follows it; it keeps a copy in its task
 * storage and looks again only when the loader has changed some decision since (below, COST).
 * A task with no decision is scheduled like any other task, with the weight of its nice value
 * (1024 at nice 0).
 *
 * ALGORITHM: weighted virtual time, one shared queue.
 *
 * Each thread has a virtual time (task storage). When it stops running after `used` ns it is
 * charged
 *
 *	vtime += used * 1024 / eff_weight
 *
 * and runnable threads wait in one shared DSQ ordered by vtime, so over time every busy thread
 * gets CPU in proportion to its effective weight. A waking thread's vtime is raised to at least
 * vtime_now - 20 ms, so sleeping earns at most one default slice of credit. vtime_now is the
 * largest vtime that started running from the queue (in order); tasks that went straight to an
 * idle CPU do not move it, or one low-weight task running alone would push every sleeper's
 * floor far past the queued tasks.
 *
 * Two levels, for tenants. A process with no tenant competes as itself: eff_weight = weight *
 * tenant_weight / 100 (tenant_weight is 100 for such processes, so eff_weight = weight). A
 * tenant's processes share the tenant's weight, like the tasks of a cgroup with cpu.weight. We
 * flatten the two levels into one (as scx_flatcg does for cgroup trees): with W_T the tenant's
 * weight (cgroup scale, 100 = one average process's worth, i.e. 1024) and S_T the sum of the
 * decision weights of the tenant's *runnable* threads,
 *
 *	eff_weight(thread i of tenant T) = W_T * 1024 / 100 * w_i / S_T
 *
 * so the tenant's threads together hold W_T * 1024 / 100 whatever number of them are busy, and
 * split it by their own weights. S_T is kept with atomic adds: a thread joins when it wakes
 * (ops.select_cpu, or ops.enqueue for wakeups that skip it) and leaves when it stops to sleep
 * (ops.stopping with runnable false) or leaves sched_ext (ops.disable): the runnable/quiescent
 * pairs, without two more callbacks per wakeup. Each thread remembers what it added (tenant slot
 * and weight) so that a decision changing while it is runnable cannot unbalance the sum; the
 * thread re-reads a changed decision at its next scheduling event and moves its contribution
 * then, so a CPU hog that never sleeps is counted as soon as it gets a decision.
 * To keep precision the charge is computed as used * num / den with num = S_T * 100 and den =
 * W_T * w_i (no tenant: num = 1024 * 100, den = w_i * tenant_weight).
 *
 * Worked example, one CPU. Tenant A (cpu.weight 300) runs 1 busy thread, tenant B (cpu.weight
 * 100) runs 3, all at weight 1024. A's thread is charged used * 1024*100 / (300*1024) = used/3,
 * each B thread used * 3072*100 / (100*1024) = 3 * used. Equal vtime progress means A's thread
 * runs 9 times as much as each B thread: A gets 9/12 = 75 %, B 25 % in total, 3:1 as the
 * weights say, and it stays 3:1 if B starts 30 threads.
 *
 * Order within the queue. The queue key is vtime plus a virtual request, as in EEVDF:
 *
 *	key = vtime + request * 1024 / eff_weight,  request = latency target if set, else slice
 *
 * A constant offset per thread does not change the long-run shares (those come from the
 * charges), but it puts a latency-critical thread (50 us target) ahead of a throughput thread
 * (20 ms slice) of equal vtime.
 *
 * Dispatch. ops.dispatch runs before the kernel charges and re-queues the previous task, so a
 * plain "take the head of the queue" makes two busy tasks on one CPU alternate whatever their
 * weights. ops.dispatch therefore compares prev's key (charged up to now) with the head of the
 * queue and lets prev keep the CPU for another slice when it is not behind. A FIFO rescue DSQ
 * (starvation bound, below) is served before both.
 *
 * Slices. A thread runs for its process's slice_ns (the phase's slice: 3 ms for an optimizer
 * step, 20 ms for GPU compute), clamped to 100 us .. 1 s; 20 ms without a decision.
 *
 * CPU choice (ops.select_cpu): the preferred CPU if it is idle, then an idle CPU of the preferred
 * NUMA node (the decision's node, else the preferred CPU's node), then the kernel's default
 * idle-CPU pick (previous CPU, its cache, any idle CPU). A thread that found an idle CPU is put
 * straight into that CPU's local DSQ.
 *
 * Preemption. A waking thread whose decision has ZERNEL_DF_PREEMPT and that found no idle CPU
 * looks, in ops.enqueue, for the CPU running the lowest-weight task (per-CPU state written in
 * ops.running) among the CPUs it may use. If that weight is lower than its own, it is inserted
 * into that CPU's local DSQ with SCX_ENQ_PREEMPT (head of the queue, the current task's slice
 * cleared). A CPU whose slice is already over (waiting for its tick) is the victim whatever its
 * weight. With a latency target longer than a tick, it does not preempt when some allowed CPU's
 * slice ends, and a tick notices it, within the target: it goes to the head of that CPU's local
 * DSQ and runs when the slice ends. The same task put back while runnable (slice used up,
 * higher class) preempts the same way when it would lead the shared queue, so that it does not
 * wait for another CPU's slice to end (100 ms for a batch task). Counters: kick_preempt,
 * preempt_wait, preempt_skip (nothing lower to preempt: queued by its key).
 *
 * Starvation bound. A BPF timer scans the shared queue every 100 ms; a thread queued for longer
 * than starve_ns (default 1 s = 50 default slices, see intf.h) is moved to a FIFO rescue DSQ that
 * ops.dispatch serves before the shared queue. Honest weighting in the policy's range (a
 * priority -5 hog beside a priority +10 hog on one CPU) makes waits of about 0.6 s, so the bound
 * does not distort normal weights; it exists for what weighting cannot bound (a tenant with
 * thousands of busy threads, extreme weights) and keeps every wait far below the kernel's 30 s
 * watchdog, which would eject us.
 *
 * Also: per-task storage with run time, burst lengths (CPU time between wakeups) and wakeup
 * counts; per-CPU counters (enum zernel_stat); CPU time per phase; the exit kind and reason via
 * the UEI helpers.
 *
 * COST. A wakeup runs select_cpu (or enqueue), running and stopping, and a CPU going idle runs
 * dispatch; these must cost about what scx_simple's do (docs/benchmarks.md). So:
 * - one task-storage lookup per callback, and no hash lookup: the process's decision is cached
 *   in the thread's storage with the value of zernel_decision_gen (intf.h) it was read at. The
 *   loader increments the generation after every write or delete, and a thread whose cached
 *   generation differs reads zernel_decisions once and caches the result (clamped, the node of
 *   the preferred CPU resolved). Between writes, that is no lookup at all; after one, one per
 *   thread. The cost of a global generation: one changed decision makes every thread look once.
 * - no ops.runnable / ops.quiescent: their work (wakeup count, sleeper credit, tenant load) is
 *   done in select_cpu / enqueue and stopping, which run anyway.
 * - the CPU state the victim search reads is a per-CPU map: no cache line shared by two CPUs;
 * - the rescue DSQ is looked at only while the starvation scan has flagged it;
 * - counters are per-CPU array slots (no shared cache line); the charge of a thread without a
 *   tenant needs no scaling loop.
 * - ops.enqueue kicks an idle CPU for a queued task only when ops.select_cpu did not place it:
 *   for a wakeup select_cpu found no idle CPU, or chose the waker's CPU on purpose (a
 *   synchronous wakeup), and a kick would undo that with an IPI and a migration.
 * A direct dispatch to the local DSQ when select_cpu finds an idle CPU (as scx_simple) skips
 * ops.enqueue altogether.
 *
 * KERNEL COMPATIBILITY (6.12 .. 7.x). Built against the 7.3 vmlinux.h and the scx headers of the
 * same tree, relocated with CO-RE. Kfuncs that were renamed or added go through scx/compat.bpf.h
 * (declared __weak, chosen with bpf_ksym_exists(): scx_bpf_dispatch* -> scx_bpf_dsq_insert* in
 * 6.13, scx_bpf_consume -> scx_bpf_dsq_move_to_local, the 6.19 argument-struct variants of
 * select_cpu_and / dsq_insert_vtime, scx_bpf_now falling back to bpf_ktime_get_ns); the SCX_*
 * enum values are rodata read from the running kernel's BTF by the loader (SCX_ENUM_INIT); the
 * loader drops ops the kernel lacks at open with a warning. Only ops and kfuncs of 6.12 are
 * required. The timer callback takes the RCU read lock itself (the 6.16 verifier wants it for
 * the DSQ iterator; 7.x implies it). Per-node idle masks (6.15+, SCX_OPS_BUILTIN_IDLE_PER_NODE)
 * are not used: node preference uses our own node cpumasks, built in ops.init from the loader's
 * CPU->node table. Tested on 7.3.4 and 6.16.3 (docs/sched-ext.md).
 *
 * KNOWN WEAKNESSES.
 * - One shared queue: fine for tens of CPUs, a contention point on hundreds (scx_simple's
 *   trade-off). Per-node queues would be the next step.
 * - Flattening (like scx_flatcg): S_T changes as threads wake and sleep, and a thread is charged
 *   with the S_T of the moment it stops, so a tenant whose threads wake in a burst can briefly
 *   take more than its share. The error is bounded by one slice per thread.
 * - Tenant weights are relative to single processes with no tenant (100 = 1024), as cgroups
 *   compete with tasks in the root cgroup.
 * - Victim search for preemption is O(nr_cpus) per preempting wakeup with no idle CPU.
 * - The starvation scan is O(queue length) every 100 ms.
 * - A task's first slice after a decision is written runs with the values of its last enqueue.
 *
 * RACES ACCEPTED.
 * - vtime_now is updated without atomics (as in scx_simple): a lost update only lowers the
 *   sleeper credit floor for a moment.
 * - Per-CPU "current weight" is read without locks: two waking threads may pick the same victim;
 *   the second waits behind the first at the head of that CPU's queue.
 * - The loader may replace a decision while a thread copies it into its cache: the copy may mix
 *   the old and new decision of the same process until the generation increment that follows
 *   the write makes the thread copy it again (at its next scheduling event).
 * - The generation is read before the lookup, so a write racing with a refresh leaves the
 *   thread with an older generation than the value it saw: it looks once more, never too few.
 * - rescue_pending is cleared by a dispatch that found the rescue DSQ empty; a rescue racing
 *   with that is served when the next scan (100 ms) sets it again.
 * - Tenant weights and loads are read without locks: a charge may use a stale S_T.
 */
#include <scx/common.bpf.h>

#include "intf.h"

char _license[] SEC("license") = "GPL";

/* Load-time knobs, set by the loader between open and load. */
const volatile u32 nr_cpus = 1;			/* possible CPU ids, <= ZERNEL_MAX_CPUS */
const volatile u32 nr_nodes = 1;		/* NUMA node ids, <= ZERNEL_MAX_NODES */
const volatile u8 cpu_node[ZERNEL_MAX_CPUS];	/* NUMA node of each CPU */
const volatile u64 starve_ns = ZERNEL_STARVE_DFL_US * 1000ULL;
/* ns between scheduler ticks: a slice's end is noticed at the first tick after it. The loader
 * sets it from the kernel's CONFIG_HZ when it can read the config; else 1/100 s, the longest. */
const volatile u64 tick_ns = 10000000ULL;
/* Tests only: scx_bpf_error() this long after ops.init, to exercise the ejection path. */
const volatile u64 inject_error_after_ns;

/*
 * The decision generation (intf.h): the loader increments it after every write or delete in
 * zernel_decisions. A thread re-reads its process's decision only when this moved.
 */
u64 zernel_decision_gen;

UEI_DEFINE(uei);

/* The kernel's exit kinds are ABI; intf.h mirrors them for the loader. */
_Static_assert((int)ZERNEL_EXIT_UNREG == (int)SCX_EXIT_UNREG, "exit kind");
_Static_assert((int)ZERNEL_EXIT_SYSRQ == (int)SCX_EXIT_SYSRQ, "exit kind");
_Static_assert((int)ZERNEL_EXIT_ERROR == (int)SCX_EXIT_ERROR, "exit kind");
_Static_assert((int)ZERNEL_EXIT_ERROR_STALL == (int)SCX_EXIT_ERROR_STALL, "exit kind");

enum {
	ZERNEL_DSQ_SHARED = 0,		/* vtime-ordered queue of every waiting task */
	ZERNEL_DSQ_RESCUE = 1,		/* FIFO of starved tasks, served first */
	ZERNEL_USED_MAX_NS = 1000000000, /* a single charge covers at most 1 s of run time */
	ZERNEL_NO_PHASE = 0xFF,		/* task_ctx.phase of a thread with no decision */
};

#define SLICE_DFL_NS ((u64)ZERNEL_SLICE_DFL_US * 1000)
#define SLICE_MIN_NS ((u64)ZERNEL_SLICE_MIN_US * 1000)
#define SLICE_MAX_NS ((u64)ZERNEL_SLICE_MAX_US * 1000)

static u64 vtime_now;
static u64 init_at;			/* ns: when ops.init ran */
/*
 * Non-zero while the rescue DSQ may hold tasks: the scan's count of them, cleared by ops.dispatch
 * when it finds the DSQ empty. (A count, not a flag: clang shrinks a 0/1 static to one byte,
 * which the kernel's BTF check then rejects.)
 */
static u64 rescue_pending;

/* The contract's maps (intf.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ZERNEL_MAX_TASKS);
	__type(key, u32);
	__type(value, struct zernel_decision);
} zernel_decisions SEC(".maps");

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

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ZERNEL_STAT_NR);
	__type(key, u32);
	__type(value, u64);
} zernel_stats SEC(".maps");

/*
 * Task storage: the shared part (intf.h), a scratch cpumask for the node search, and the
 * process's decision as this thread last read it (refreshed when zernel_decision_gen moves), so
 * that the hot paths need one task-storage lookup and no hash lookup.
 */
struct task_ctx {
	struct zernel_task_ctx pub;
	struct bpf_cpumask __kptr *tmp_mask;
	u64 gen;		/* zernel_decision_gen the cache below was read at; ~0 = never */
	u64 slice;		/* ns: the decision's slice, clamped; SLICE_DFL_NS without one */
	u64 lat_ns;		/* ns: latency target; 0 = none */
	u32 weight;		/* decision weight, clamped; 0 = no decision (weight from nice) */
	u32 tweight;		/* decision's tenant_weight, clamped (cgroup scale) */
	s32 pref_cpu;		/* preferred CPU, checked against nr_cpus; ZERNEL_NO_CPU = none */
	s32 pref_node;		/* the decision's node, else the preferred CPU's; -1 = none */
	u16 tenant;		/* tenant slot; ZERNEL_NO_TENANT = none */
	u8 phase;		/* enum zernel_phase; ZERNEL_NO_PHASE without a decision */
	u8 flags;		/* enum zernel_decision_flags */
	u8 in_order;		/* 1: queued in the shared queue, so it runs in vtime order */
	u8 woke;		/* 1: ops.select_cpu counted this wakeup (ops.running clears) */
	u8 __pad[6];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} zernel_task_ctx SEC(".maps");

/*
 * What each CPU runs, for the preemption victim search. Per-CPU, so that each CPU's entry has a
 * cache line of its own (ops.running and ops.stopping write it on nearly every context switch);
 * written for p's CPU, read by the victim search unlocked, both with
 * bpf_map_lookup_percpu_elem().
 */
struct cpu_state {
	u64 weight;			/* decision weight of the running task; 0 = none of ours */
	u64 slice_end;			/* ns: when its slice ends */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct cpu_state);
} cpu_states SEC(".maps");

struct node_mask {
	struct bpf_cpumask __kptr *mask;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ZERNEL_MAX_NODES);
	__type(key, u32);
	__type(value, struct node_mask);
} node_masks SEC(".maps");

struct starve_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct starve_timer);
} starve_timers SEC(".maps");

static __always_inline void stat_add(u32 idx, u64 v)
{
	u64 *cnt = bpf_map_lookup_elem(&zernel_stats, &idx);

	if (cnt)
		*cnt += v;
}

static __always_inline void stat_inc(u32 idx)
{
	stat_add(idx, 1);
}

static __always_inline u64 now_ns(void)
{
	return scx_bpf_now();
}

static u64 clamp_u64(u64 v, u64 lo, u64 hi)
{
	return v < lo ? lo : (v > hi ? hi : v);
}

static __always_inline bool has_tenant(const struct task_ctx *tctx)
{
	return tctx->tenant < ZERNEL_MAX_TENANTS;
}

/* The decision weight: the process's, or the nice value's (p->scx.weight is 100 at nice 0). */
static __always_inline u64 task_weight(struct task_struct *p, const struct task_ctx *tctx)
{
	if (tctx->weight)
		return tctx->weight;
	return clamp_u64((u64)p->scx.weight * ZERNEL_WEIGHT_DFL / 100, ZERNEL_WEIGHT_MIN,
			 ZERNEL_WEIGHT_MAX);
}

/* The tenant's weight (cgroup scale): its array entry, else the decision's tenant_weight. */
static u64 tenant_weight(const struct task_ctx *tctx)
{
	u32 slot = tctx->tenant;
	struct zernel_tenant *t = bpf_map_lookup_elem(&zernel_tenants, &slot);

	if (t && t->weight)
		return clamp_u64(t->weight, ZERNEL_TENANT_WEIGHT_MIN, ZERNEL_TENANT_WEIGHT_MAX);
	return tctx->tweight;
}

/*
 * Keeps the tenant's runnable weight in step with this (runnable) thread's decision: adds what
 * the thread should contribute and removes what it contributed before, if that differs.
 */
static void tenant_account(struct task_struct *p, struct task_ctx *tctx)
{
	struct zernel_task_ctx *tc = &tctx->pub;
	u16 want_slot = tctx->tenant;
	s64 want_w = has_tenant(tctx) ? (s64)task_weight(p, tctx) : 0;
	struct zernel_tenant_load *load;
	u32 slot;

	if (tc->contrib_tenant == want_slot && tc->contrib_weight == want_w)
		return;
	if (tc->contrib_tenant < ZERNEL_MAX_TENANTS) {
		slot = tc->contrib_tenant;
		load = bpf_map_lookup_elem(&zernel_tenant_load, &slot);
		if (load) {
			__sync_fetch_and_sub(&load->runnable_weight, tc->contrib_weight);
			__sync_fetch_and_sub(&load->runnable_threads, 1);
		}
	}
	tc->contrib_tenant = ZERNEL_NO_TENANT;
	tc->contrib_weight = 0;
	if (want_slot < ZERNEL_MAX_TENANTS) {
		slot = want_slot;
		load = bpf_map_lookup_elem(&zernel_tenant_load, &slot);
		if (load) {
			__sync_fetch_and_add(&load->runnable_weight, want_w);
			__sync_fetch_and_add(&load->runnable_threads, 1);
			tc->contrib_tenant = want_slot;
			tc->contrib_weight = want_w;
		}
	}
}

static void tenant_unaccount(struct zernel_task_ctx *tc)
{
	struct zernel_tenant_load *load;
	u32 slot;

	if (tc->contrib_tenant >= ZERNEL_MAX_TENANTS)
		return;
	slot = tc->contrib_tenant;
	load = bpf_map_lookup_elem(&zernel_tenant_load, &slot);
	if (load) {
		__sync_fetch_and_sub(&load->runnable_weight, tc->contrib_weight);
		__sync_fetch_and_sub(&load->runnable_threads, 1);
	}
	tc->contrib_tenant = ZERNEL_NO_TENANT;
	tc->contrib_weight = 0;
}

/*
 * Re-reads the process's decision into the thread's cache (the one hash lookup, done only when
 * the loader changed some decision since this thread last looked). Every caller runs for a
 * runnable thread, so the tenant contribution follows the new decision at once.
 */
static __noinline void task_refresh(struct task_struct *p, struct task_ctx *tctx, u64 gen)
{
	u32 tgid = p->tgid;
	struct zernel_decision *d = bpf_map_lookup_elem(&zernel_decisions, &tgid);
	s32 pcpu, node;
	u64 tw;

	tctx->gen = gen;
	if (!d) {
		tctx->weight = 0;
		tctx->tweight = ZERNEL_TENANT_WEIGHT_DFL;
		tctx->slice = SLICE_DFL_NS;
		tctx->lat_ns = 0;
		tctx->pref_cpu = ZERNEL_NO_CPU;
		tctx->pref_node = ZERNEL_NO_CPU;
		tctx->tenant = ZERNEL_NO_TENANT;
		tctx->phase = ZERNEL_NO_PHASE;
		tctx->flags = 0;
	} else {
		tctx->weight = clamp_u64(d->weight, ZERNEL_WEIGHT_MIN, ZERNEL_WEIGHT_MAX);
		tw = d->tenant_weight ? d->tenant_weight : ZERNEL_TENANT_WEIGHT_DFL;
		tctx->tweight = clamp_u64(tw, ZERNEL_TENANT_WEIGHT_MIN, ZERNEL_TENANT_WEIGHT_MAX);
		tctx->slice = d->slice_ns ? clamp_u64(d->slice_ns, SLICE_MIN_NS, SLICE_MAX_NS) :
					    SLICE_DFL_NS;
		tctx->lat_ns = (u64)d->latency_target_us * 1000;
		pcpu = d->preferred_cpu;
		node = d->preferred_node;
		if (pcpu < 0 || pcpu >= nr_cpus || pcpu >= ZERNEL_MAX_CPUS)
			pcpu = ZERNEL_NO_CPU;
		else if (node < 0)
			node = cpu_node[pcpu & (ZERNEL_MAX_CPUS - 1)];
		if (node < 0 || node >= nr_nodes || node >= ZERNEL_MAX_NODES)
			node = ZERNEL_NO_CPU;
		tctx->pref_cpu = pcpu;
		tctx->pref_node = node;
		tctx->tenant = d->tenant < ZERNEL_MAX_TENANTS ? d->tenant : ZERNEL_NO_TENANT;
		tctx->phase = d->phase < ZERNEL_PHASE_NR ? d->phase : ZERNEL_PHASE_UNKNOWN;
		tctx->flags = d->flags;
	}
	tenant_account(p, tctx);
}

/* The thread's storage with its decision cache up to date: one lookup on the hot paths. */
static __always_inline struct task_ctx *task_ctx_get(struct task_struct *p)
{
	struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);
	u64 gen;

	if (!tctx)
		return NULL;
	gen = *(volatile u64 *)&zernel_decision_gen;
	if (tctx->gen != gen)
		task_refresh(p, tctx, gen);
	return tctx;
}

/*
 * The vtime charge per ns of run time is num / den (see the opening comment). den <= 10^9;
 * num = S_T * 100 could reach 2^40 (65,536 threads of weight 100,000), so both are shifted
 * down until num < 2^33: then used (<= 1 s < 2^30) * num stays below 2^63.
 */
struct charge {
	u64 num;
	u64 den;
};

static __always_inline void task_charge(struct task_struct *p, const struct task_ctx *tctx,
					struct charge *c)
{
	u64 w = task_weight(p, tctx);
	int i;

	if (!has_tenant(tctx)) {
		/* num is 102,400, den at most 10^9: no scaling needed. */
		c->num = (u64)ZERNEL_WEIGHT_DFL * 100;
		c->den = w * tctx->tweight;
		return;
	}
	{
		u32 slot = tctx->tenant;
		struct zernel_tenant_load *load = bpf_map_lookup_elem(&zernel_tenant_load, &slot);
		s64 sum = load ? load->runnable_weight : 0;

		if (sum < (s64)w)
			sum = w;
		c->num = (u64)sum * 100;
		c->den = tenant_weight(tctx) * w;
	}
	/* Bounded: num < 2^41 to start with. */
	for (i = 0; i < 8 && c->num >= (1ULL << 33); i++) {
		c->num >>= 1;
		c->den >>= 1;
	}
	if (!c->den)
		c->den = 1;
}

static __always_inline u64 scale_charge(u64 ns, const struct charge *c)
{
	if (ns > ZERNEL_USED_MAX_NS)
		ns = ZERNEL_USED_MAX_NS;
	return ns * c->num / c->den;
}

/* The request that sets the queue position: the latency target, else the slice. */
static __always_inline u64 task_request(const struct task_ctx *tctx)
{
	return tctx->lat_ns ? tctx->lat_ns : tctx->slice;
}

/*
 * The state of the CPU p runs on. Usually the current CPU, but not always: ops.running and
 * ops.stopping also run on another CPU that holds p's runqueue lock (a property change of a
 * running task: nice, affinity, policy).
 */
static __always_inline struct cpu_state *task_cpu_state(struct task_struct *p)
{
	u32 zero = 0;

	return bpf_map_lookup_percpu_elem(&cpu_states, &zero, scx_bpf_task_cpu(p));
}

static void insert_local_on(struct task_struct *p, s32 cpu, u64 slice, u64 enq_flags)
{
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL_ON | cpu, slice, enq_flags);
}

/*
 * A waking thread: counts the wakeup, limits the credit its sleep earned, and (re)joins its
 * tenant's runnable weight. Called from ops.select_cpu and, for wakeups that skip it (one
 * allowed CPU, migration disabled), from ops.enqueue: the work of ops.runnable, without the
 * cost of a separate callback on every wakeup.
 */
static __always_inline void task_wakes(struct task_struct *p, struct task_ctx *tctx, bool ttwu)
{
	u64 floor = vtime_now - SLICE_DFL_NS;

	if (ttwu)	/* not a new task's first placement (SCX_WAKE_FORK) */
		tctx->pub.wakeups++;
	tctx->woke = 1;
	/* Sleeping earns at most one default slice of credit. */
	if (vtime_now > SLICE_DFL_NS && time_before(tctx->pub.vtime, floor))
		tctx->pub.vtime = floor;
	tenant_account(p, tctx);
}

/*
 * A preempting wakeup that found no idle CPU in select_cpu (or skipped it: single-CPU affinity).
 * Returns true when the task was placed.
 */
static bool try_preempt(struct task_struct *p, struct task_ctx *tctx, u64 enq_flags)
{
	u64 my_w = task_weight(p, tctx), lat_ns = tctx->lat_ns, slice = tctx->slice;
	u64 victim_w = my_w, now = now_ns();
	s32 victim = -1, only = -1, soon = -1, cpu;
	u32 zero = 0;

	if (is_migration_disabled(p))
		only = scx_bpf_task_cpu(p);

	/* An idle CPU may have appeared since select_cpu (or select_cpu was skipped). */
	if (only >= 0)
		cpu = scx_bpf_test_and_clear_cpu_idle(only) ? only : -1;
	else
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
	if (cpu >= 0) {
		insert_local_on(p, cpu, slice, enq_flags);
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		stat_inc(ZERNEL_STAT_LOCAL);
		stat_inc(ZERNEL_STAT_KICK_IDLE);
		return true;
	}

	bpf_for(cpu, 0, nr_cpus) {
		struct cpu_state *cs;

		if (only >= 0 && cpu != only)
			continue;
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		cs = bpf_map_lookup_percpu_elem(&cpu_states, &zero, cpu);
		if (!cs || !cs->weight)
			continue;
		/*
		 * A slice already over: the CPU reschedules at its next tick (up to 1/HZ away) and
		 * preempting it takes nothing its task is owed. The best victim, whatever its weight.
		 */
		if (cs->slice_end && !time_before(now, cs->slice_end)) {
			victim = cpu;
			soon = -1;
			break;
		}
		if (lat_ns && cs->slice_end && time_before_eq(cs->slice_end + tick_ns, now + lat_ns))
			soon = cpu;
		if (cs->weight < victim_w) {
			victim_w = cs->weight;
			victim = cpu;
		}
	}
	/*
	 * A CPU whose slice ends (and whose next tick notices it) within the latency target serves
	 * p in time without a preemption: p goes to the head of that CPU's local DSQ, which the CPU
	 * runs before it asks ops.dispatch. Not the shared queue: a queued task with a smaller key
	 * would go first, and p would wait a whole slice more.
	 */
	if (soon >= 0) {
		insert_local_on(p, soon, slice, enq_flags | SCX_ENQ_HEAD);
		stat_inc(ZERNEL_STAT_PREEMPT_WAIT);
		return true;
	}
	if (victim < 0) {
		stat_inc(ZERNEL_STAT_PREEMPT_SKIP);
		return false;
	}
	/*
	 * SCX_ENQ_PREEMPT, not a separate SCX_KICK_PREEMPT: the kernel clears the slice of the
	 * victim's current task when p lands in its local DSQ, under that CPU's lock, and never
	 * p's own. An asynchronous kick that arrives after the victim CPU has already switched
	 * to p would cut p's slice instead, and p would be queued behind tasks of a whole slice.
	 */
	insert_local_on(p, victim, slice, enq_flags | SCX_ENQ_PREEMPT);
	stat_inc(ZERNEL_STAT_KICK_PREEMPT);
	return true;
}

/* Idle CPU of the preferred node that p may use, or -1. */
static s32 pick_idle_in_node(struct task_struct *p, struct task_ctx *tctx, s32 node)
{
	struct bpf_cpumask *tmp, *nm;
	struct node_mask *entry;
	u32 key = node;

	if (node < 0 || node >= nr_nodes || node >= ZERNEL_MAX_NODES)
		return -1;
	entry = bpf_map_lookup_elem(&node_masks, &key);
	if (!entry)
		return -1;
	nm = entry->mask;
	tmp = tctx->tmp_mask;
	if (!nm || !tmp)
		return -1;
	bpf_cpumask_and(tmp, cast_mask(nm), p->cpus_ptr);
	return scx_bpf_pick_idle_cpu(cast_mask(tmp), 0);
}

/* The preferred CPU, then an idle CPU of the preferred node; -1 when neither is free. */
static s32 pick_preferred(struct task_struct *p, struct task_ctx *tctx)
{
	s32 pcpu = tctx->pref_cpu, cpu;

	if (pcpu >= 0 && bpf_cpumask_test_cpu(pcpu, p->cpus_ptr) &&
	    scx_bpf_test_and_clear_cpu_idle(pcpu)) {
		stat_inc(ZERNEL_STAT_PREF_CPU_HIT);
		return pcpu;
	}
	if (tctx->pref_node >= 0) {
		cpu = pick_idle_in_node(p, tctx, tctx->pref_node);
		if (cpu >= 0) {
			stat_inc(ZERNEL_STAT_PREF_NODE_HIT);
			return cpu;
		}
	}
	stat_inc(ZERNEL_STAT_PREF_MISS);
	return -1;
}

s32 BPF_STRUCT_OPS(zernel_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct task_ctx *tctx = task_ctx_get(p);
	u64 slice = SLICE_DFL_NS;
	bool is_idle = false;
	s32 cpu;

	if (tctx) {
		task_wakes(p, tctx, wake_flags & SCX_WAKE_TTWU);
		slice = tctx->slice;
		if (tctx->pref_cpu >= 0 || tctx->pref_node >= 0) {
			cpu = pick_preferred(p, tctx);
			if (cpu >= 0) {
				stat_inc(ZERNEL_STAT_LOCAL);
				scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice, 0);
				return cpu;
			}
		}
	}

	cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	if (is_idle) {
		stat_inc(ZERNEL_STAT_LOCAL);
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice, 0);
	}
	return cpu;
}

/* True when a task queued with key would be the head of the shared queue. */
static bool would_lead(u64 key)
{
	struct task_struct *head = __COMPAT_scx_bpf_dsq_peek(ZERNEL_DSQ_SHARED);

	return !head || !time_before(head->scx.dsq_vtime, key);
}

void BPF_STRUCT_OPS(zernel_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = task_ctx_get(p);
	struct charge c;
	bool woke;
	u64 key;
	s32 cpu;

	if (!tctx) {
		/* Not initialised (cannot happen after init_task); keep it running. */
		scx_bpf_dsq_insert_vtime(p, ZERNEL_DSQ_SHARED, SLICE_DFL_NS, vtime_now, enq_flags);
		stat_inc(ZERNEL_STAT_UNDECIDED);
		stat_inc(ZERNEL_STAT_GLOBAL);
		return;
	}
	if (tctx->weight) {
		stat_inc(ZERNEL_STAT_DECIDED);
		if (has_tenant(tctx))
			stat_inc(ZERNEL_STAT_TENANT);
	} else {
		stat_inc(ZERNEL_STAT_UNDECIDED);
	}
	woke = tctx->woke;
	if ((enq_flags & SCX_ENQ_WAKEUP) && !woke)
		task_wakes(p, tctx, true);	/* ops.select_cpu was skipped */
	else
		tenant_account(p, tctx);
	tctx->in_order = 0;

	if ((tctx->flags & ZERNEL_DF_PREEMPT) && (enq_flags & SCX_ENQ_WAKEUP) &&
	    try_preempt(p, tctx, enq_flags))
		return;

	task_charge(p, tctx, &c);
	key = tctx->pub.vtime + scale_charge(task_request(tctx), &c);
	/*
	 * A preempting task put back while runnable (its slice ran out, or a higher class took
	 * the CPU) that would be the head of the shared queue: no CPU looks at the queue before
	 * its current slice ends, which may be 100 ms away. It preempts as a wakeup does. Only
	 * at the head: its weighted share, not more, is what it takes this way.
	 */
	if ((tctx->flags & ZERNEL_DF_PREEMPT) && !(enq_flags & SCX_ENQ_WAKEUP) &&
	    would_lead(key) && try_preempt(p, tctx, enq_flags))
		return;
	tctx->pub.queued_at = now_ns();
	tctx->in_order = 1;
	scx_bpf_dsq_insert_vtime(p, ZERNEL_DSQ_SHARED, tctx->slice, key, enq_flags);
	stat_inc(ZERNEL_STAT_GLOBAL);

	/*
	 * An idle CPU that p may use would otherwise sleep until its next tick. Not for a wakeup
	 * that went through ops.select_cpu: that found no idle CPU, or chose the waker's CPU on
	 * purpose (a synchronous wakeup: the waker is about to sleep), and kicking another CPU
	 * would undo the choice at the price of an IPI and a migration.
	 */
	if ((enq_flags & SCX_ENQ_WAKEUP) && woke)
		return;
	cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
	if (cpu >= 0) {
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		stat_inc(ZERNEL_STAT_KICK_IDLE);
	}
}

/* Charges the run time since running_at and restarts the count at now. */
static __always_inline void account_run(struct task_struct *p, struct task_ctx *tctx, u64 now)
{
	struct zernel_task_ctx *tc = &tctx->pub;
	struct charge c;
	u64 used;

	if (!tc->running_at)
		return;
	used = time_delta(now, tc->running_at);
	tc->running_at = now;
	task_charge(p, tctx, &c);
	tc->vtime += scale_charge(used, &c);
	tc->runtime_ns += used;
	tc->burst_ns += used;
	if (tctx->phase < ZERNEL_PHASE_NR)
		stat_add(ZERNEL_STAT_RUN_NS_PHASE + tctx->phase, used);
	else
		stat_add(ZERNEL_STAT_RUN_NS_UNDECIDED, used);
}

/*
 * ops.dispatch runs before the kernel puts prev back into the queue (ops.stopping and
 * ops.enqueue come after it), so a plain "move the head of the queue" would alternate prev with
 * the head whatever their vtimes. Instead prev, still runnable at the end of its slice, keeps
 * the CPU for another slice when its key (vtime charged up to now, plus its request) is not
 * behind the head of the queue.
 */
static bool keep_prev(struct task_struct *prev, s32 cpu)
{
	struct task_ctx *tctx = task_ctx_get(prev);
	u64 now = now_ns(), key;
	struct task_struct *head;
	struct cpu_state *cs;
	struct charge c;

	if (!tctx)
		return false;
	head = __COMPAT_scx_bpf_dsq_peek(ZERNEL_DSQ_SHARED);
	if (head) {
		/* A head that cannot run here is not our competitor: let move_to_local choose. */
		if (!bpf_cpumask_test_cpu(cpu, head->cpus_ptr))
			return false;
		task_charge(prev, tctx, &c);
		key = tctx->pub.vtime;
		if (tctx->pub.running_at)
			key += scale_charge(time_delta(now, tctx->pub.running_at), &c);
		key += scale_charge(task_request(tctx), &c);
		if (time_before(head->scx.dsq_vtime, key))
			return false;
	}
	/* Settle the charge so far, as if it had stopped and started again. */
	account_run(prev, tctx, now);
	if (time_before(vtime_now, tctx->pub.vtime))
		vtime_now = tctx->pub.vtime;
	scx_bpf_task_set_slice(prev, tctx->slice);
	cs = task_cpu_state(prev);
	if (cs)
		cs->slice_end = now + tctx->slice;
	return true;
}

void BPF_STRUCT_OPS(zernel_dispatch, s32 cpu, struct task_struct *prev)
{
	/*
	 * The rescue DSQ is looked at only while the starvation scan says it may hold tasks: a
	 * DSQ lookup per dispatch is a cost every context switch would pay. The scan sets the
	 * flag again every 100 ms while the DSQ is not empty, so a cleared flag racing with a
	 * new rescue delays that task by one scan at most.
	 */
	if (rescue_pending) {
		if (scx_bpf_dsq_move_to_local(ZERNEL_DSQ_RESCUE, 0))
			return;
		rescue_pending = 0;
	}
	if (prev && (prev->scx.flags & SCX_TASK_QUEUED) && keep_prev(prev, cpu))
		return;
	scx_bpf_dsq_move_to_local(ZERNEL_DSQ_SHARED, 0);
}

void BPF_STRUCT_OPS(zernel_running, struct task_struct *p)
{
	struct task_ctx *tctx = task_ctx_get(p);
	struct cpu_state *cs = task_cpu_state(p);
	u64 now = now_ns();

	if (!tctx) {
		if (cs) {
			cs->weight = (u64)p->scx.weight * ZERNEL_WEIGHT_DFL / 100;
			cs->slice_end = now + p->scx.slice;
		}
		return;
	}
	if (cs) {
		cs->weight = task_weight(p, tctx);
		cs->slice_end = now + p->scx.slice;
	}
	tctx->pub.running_at = now;
	tctx->pub.queued_at = 0;
	tctx->woke = 0;
	/*
	 * vtime_now follows the front of the queue: only a task that comes from the shared queue
	 * (in vtime order) moves it. One that went straight to an idle CPU or was rescued may be
	 * far ahead (a low weight running alone), and would push every sleeper's floor past all
	 * the queued tasks. Racy, as in scx_simple: a lost update only lowers the floor a moment.
	 */
	if (tctx->in_order && time_before(vtime_now, tctx->pub.vtime))
		vtime_now = tctx->pub.vtime;
	tctx->in_order = 0;
}

void BPF_STRUCT_OPS(zernel_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx = task_ctx_get(p);
	struct cpu_state *cs = task_cpu_state(p);
	struct zernel_task_ctx *tc;

	if (cs)
		cs->weight = 0;
	if (!tctx)
		return;
	tc = &tctx->pub;
	account_run(p, tctx, now_ns());
	tc->running_at = 0;
	if (!runnable) {
		/* Going to sleep: the burst ends, and the thread leaves its tenant's load. */
		tc->last_burst_ns = tc->burst_ns;
		tc->avg_burst_ns = tc->avg_burst_ns - (tc->avg_burst_ns >> 3) + (tc->burst_ns >> 3);
		tc->burst_ns = 0;
		tenant_unaccount(tc);
	}
}

void BPF_STRUCT_OPS(zernel_enable, struct task_struct *p)
{
	struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);

	if (tctx)
		tctx->pub.vtime = vtime_now;
}

void BPF_STRUCT_OPS(zernel_disable, struct task_struct *p)
{
	struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);

	if (tctx)
		tenant_unaccount(&tctx->pub);
}

s32 BPF_STRUCT_OPS(zernel_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	struct bpf_cpumask *mask;
	struct task_ctx *tctx;

	tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tctx)
		return -ENOMEM;
	tctx->pub.contrib_tenant = ZERNEL_NO_TENANT;
	/* No decision until the first lookup, which the generation forces. */
	tctx->gen = ~0ULL;
	tctx->weight = 0;
	tctx->tweight = ZERNEL_TENANT_WEIGHT_DFL;
	tctx->slice = SLICE_DFL_NS;
	tctx->pref_cpu = ZERNEL_NO_CPU;
	tctx->pref_node = ZERNEL_NO_CPU;
	tctx->tenant = ZERNEL_NO_TENANT;
	tctx->phase = ZERNEL_NO_PHASE;
	mask = bpf_cpumask_create();
	if (!mask)
		return -ENOMEM;
	mask = bpf_kptr_xchg(&tctx->tmp_mask, mask);
	if (mask)
		bpf_cpumask_release(mask);
	return 0;
}

/* Moves tasks queued longer than starve_ns to the rescue DSQ. */
static int starve_scan(void *map, int *key, struct bpf_timer *timer)
{
	struct task_struct *p;
	u64 now = now_ns();
	s32 nr_rescued;

	/*
	 * The DSQ iterator visits only the tasks queued when it started: bounded. Timer callbacks
	 * run in an RCU read-side section only on newer kernels (before 6.17 the verifier wants it
	 * explicit).
	 */
	bpf_rcu_read_lock();
	bpf_for_each(scx_dsq, p, ZERNEL_DSQ_SHARED, 0) {
		struct task_ctx *tctx;
		u64 queued_at;

		tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);
		if (!tctx)
			continue;
		queued_at = tctx->pub.queued_at;
		if (!queued_at || time_delta(now, queued_at) <= starve_ns)
			continue;
		if (scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, ZERNEL_DSQ_RESCUE, 0)) {
			tctx->in_order = 0;
			stat_inc(ZERNEL_STAT_STARVE_RESCUE);
		}
	}
	bpf_rcu_read_unlock();
	/* Set after the moves, and again while anything waits there (see ops.dispatch). */
	nr_rescued = scx_bpf_dsq_nr_queued(ZERNEL_DSQ_RESCUE);
	if (nr_rescued > 0)
		rescue_pending = nr_rescued;
	if (inject_error_after_ns && time_delta(now, init_at) > inject_error_after_ns) {
		scx_bpf_error("injected error (test), %llu ms after init",
			      time_delta(now, init_at) / 1000000);
		return 0;
	}
	bpf_timer_start(timer, (u64)ZERNEL_STARVE_SCAN_US * 1000, 0);
	return 0;
}

/* Node cpumasks from the loader's cpu_node table: one empty mask per node, then each CPU's bit. */
static s32 build_node_masks(void)
{
	struct bpf_cpumask *mask;
	struct node_mask *entry;
	u32 node, cpu, key;

	bpf_for(node, 0, nr_nodes) {
		key = node;
		entry = bpf_map_lookup_elem(&node_masks, &key);
		if (!entry)
			return -ENOENT;
		mask = bpf_cpumask_create();
		if (!mask)
			return -ENOMEM;
		mask = bpf_kptr_xchg(&entry->mask, mask);
		if (mask)
			bpf_cpumask_release(mask);
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
	return 0;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(zernel_init)
{
	struct starve_timer *st;
	u32 zero = 0;
	s32 ret;

	init_at = now_ns();
	ret = scx_bpf_create_dsq(ZERNEL_DSQ_SHARED, -1);
	if (ret) {
		scx_bpf_error("creating the shared DSQ: %d", ret);
		return ret;
	}
	ret = scx_bpf_create_dsq(ZERNEL_DSQ_RESCUE, -1);
	if (ret) {
		scx_bpf_error("creating the rescue DSQ: %d", ret);
		return ret;
	}
	ret = build_node_masks();
	if (ret) {
		scx_bpf_error("building the NUMA node cpumasks: %d", ret);
		return ret;
	}
	st = bpf_map_lookup_elem(&starve_timers, &zero);
	if (!st) {
		scx_bpf_error("no starvation timer");
		return -ENOENT;
	}
	ret = bpf_timer_init(&st->timer, &starve_timers, CLOCK_MONOTONIC);
	if (!ret)
		ret = bpf_timer_set_callback(&st->timer, starve_scan);
	if (!ret)
		ret = bpf_timer_start(&st->timer, (u64)ZERNEL_STARVE_SCAN_US * 1000, 0);
	if (ret) {
		scx_bpf_error("starting the starvation timer: %d", ret);
		return ret;
	}
	return 0;
}

void BPF_STRUCT_OPS(zernel_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

void BPF_STRUCT_OPS(zernel_dump_task, struct scx_dump_ctx *dctx, struct task_struct *p)
{
	struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);

	if (!tctx)
		return;
	scx_bpf_dump("zernel: vtime=%llu (now %llu) queued_at=%llu runtime=%llu wakeups=%llu tenant=%u",
		     tctx->pub.vtime, vtime_now, tctx->pub.queued_at, tctx->pub.runtime_ns,
		     tctx->pub.wakeups, tctx->pub.contrib_tenant);
}

SCX_OPS_DEFINE(zernel_ops,
	       .select_cpu		= (void *)zernel_select_cpu,
	       .enqueue			= (void *)zernel_enqueue,
	       .dispatch		= (void *)zernel_dispatch,
	       .running			= (void *)zernel_running,
	       .stopping		= (void *)zernel_stopping,
	       .enable			= (void *)zernel_enable,
	       .disable			= (void *)zernel_disable,
	       .init_task		= (void *)zernel_init_task,
	       .dump_task		= (void *)zernel_dump_task,
	       .init			= (void *)zernel_init,
	       .exit			= (void *)zernel_exit,
	       .name			= "zernel");
