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
 * ALGORITHM: weighted virtual time over a flattened share hierarchy, one shared queue.
 *
 * SHARING. The machine is shared as its cgroup tree says, with tenants as one more level
 * (docs/sched-ext.md, "Sharing"). The hierarchy has three kinds of nodes:
 *   - the root;
 *   - a cgroup of the cpu controller, child of its parent cgroup, weighing its cpu.weight
 *     (ops.cgroup_init, cgroup_set_weight, cgroup_move, cgroup_exit keep the tree);
 *   - a tenant, child of the root, weighing its weight from the daemon (GPU-proportional times
 *     the class factor, cpu.weight scale). A tenant's threads count in the tenant, wherever
 *     their cgroups are; the cgroups' cpu.max still caps them.
 * A node's own runnable threads compete with its active children as one group of weight 100
 * (cpu.weight scale; in cgroup v2 only the root has both). Inside that group, threads split by
 * their decision weights (the phase priority; the nice weight without a decision).
 *
 * Flattening (the scx_flatcg idea): instead of picking a node, then a child, then a thread, every
 * runnable thread gets its share of the whole machine,
 *
 *	share(t) = hshare(node) * OWN / D(node) * w_t / S(node)
 *	hshare(node) = prod over node and its ancestors below the root of  w(c) / D(parent(c))
 *
 * with D(x) the summed weights of x's active children plus OWN (100) while x has runnable
 * threads of its own, S(x) the summed weights of those threads. A node is active while it has
 * a runnable thread below it. Activity changes are counted up the tree (nr_runnable gates
 * nr_active, one level at a time under tree_lock) and bump tree_gen; hshare is cached per node
 * until tree_gen moves. S(x) changes on every wakeup and is read fresh.
 *
 * Each thread has a virtual time (task storage). When it stops running after `used` ns it is
 * charged
 *
 *	vtime += used / share(t)		(FP_ONE fixed point: a share of 1 is the machine)
 *
 * and runnable threads wait in one shared DSQ ordered by vtime, so over time every busy thread
 * gets CPU in proportion to its share, and every active node in proportion to its hshare.
 *
 * Worked example, 2 CPUs. Cgroups A (cpu.weight 300) and B (100) under the root, 3 busy threads
 * each, and a tenant T (weight 305: one GPU of one, training) with 4 threads. D(root) = 300 +
 * 100 + 305 = 705: hshare A = 0.43, B = 0.14, T = 0.43; each A thread's share is 0.142, each B
 * thread's 0.047, each T thread's 0.108. Equal vtime progress gives A:B:T = 300:100:305 of the
 * two CPUs (with nothing else runnable), and it stays so if B starts 30 threads. The VM test (tests/vm, "sharing") measures
 * such splits within 5 %.
 *
 * LAG. vtime_now is the largest queue key (vtime + request, below) at the head of the shared
 * queue when a CPU took a task from it (or that a CPU kept, see keep_prev), so it follows a
 * thread that runs alone. Every wakeup bounds the thread's key to
 *
 *	vtime_now - credit  <=  key  <=  vtime_now + lead
 *
 * credit = one default slice (20 ms) of its own service, lead = two of its own slices (one is
 * what any thread leads by after a slice taken from the head of the queue; the second covers the
 * overrun to the tick that ends it). In service time: a sleeper gains at most 20 ms of CPU ahead
 * of the threads that ran, and a thread that ran alone on an idle CPU, or was rescued, is at most
 * two slices ahead of newcomers, which start at vtime_now. A thread that never sleeps is kept
 * near vtime_now by keep_prev while it runs alone, and by the queue order once it competes. So
 * a job that trained alone for an hour competes fairly from the first slice after neighbours
 * arrive. The bound is not applied when a runnable thread is put back: vtime_now can run ahead
 * of a group's keys (a CPU that cannot run the head of the queue takes a later task, whose key
 * then sets vtime_now), and lifting the group's keys there would shift shares.
 *
 * A thread that keeps its CPU (keep_prev) has its credit bounded against its rival instead, the
 * first queued task that may run on that CPU, when that rival may not run on every CPU: its
 * vtime is at most one default slice of its own service behind the rival's. A thread whose
 * share is more than the one CPU it can use (a tenant's lone busy thread) falls behind without
 * end; unbounded, that credit would keep a thread that can only run on its CPU (a per-CPU
 * kworker, a pinned worker) waiting for the starvation rescue. Bounded, the two share that CPU
 * by their shares, as on a per-CPU run queue.
 *
 * CPU.MAX. ops.cgroup_set_bandwidth (and cgroup_init) give each cgroup its quota and period.
 * Run time is charged to the quota of the thread's cgroup and of each ancestor with one (also
 * for a tenant's thread); a cgroup that spent its quota is throttled: its threads are parked in
 * a FIFO DSQ at enqueue, a running one loses its slice at the next tick (ops.tick), and a
 * select_cpu that would put one on an idle CPU leaves it to ops.enqueue. SCX_OPS_ENQ_LAST makes
 * the kernel hand a task whose slice ended with nothing else to run to ops.enqueue, where it is
 * parked (otherwise the kernel runs it on with a new slice, and a lone limited task on a machine
 * with idle CPUs would never be throttled). Every 5 ms a refill (ops.tick of a busy CPU, or a BPF
 * timer when no CPU is busy: a soft timer, which came up to 90 ms late in the VM)
 * starts the periods that ended (used -= quota per period; an overrun is debt the next period
 * pays, so the long-run rate is the quota exactly; idle periods earn no credit; burst is not
 * implemented) and moves the parked threads of thawed cgroups back into the shared queue with
 * the key they had. Tasks already in the shared queue when their cgroup throttles run their
 * slice; that too is debt.
 *
 * A CPU TAKEN by a higher sched class (an RT or deadline task): ops.cpu_release re-enqueues the
 * tasks queued on its local DSQ, which would otherwise wait there until the CPU came back; they
 * go to the shared queue (or preempt elsewhere). Linux 7.x logs that cpu_release is deprecated
 * in favour of SCX_ENQ_IMMED; it works on 6.12 .. 7.3.
 *
 * Order within the queue. The queue key is vtime plus a virtual request, as in EEVDF:
 *
 *	key = vtime + request / share(t),  request = latency target if set, else slice
 *
 * A constant offset per thread does not change the long-run shares (those come from the
 * charges), but it puts a latency-critical thread (50 us target) ahead of a throughput thread
 * (20 ms slice) of equal vtime.
 *
 * Dispatch. ops.dispatch runs before the kernel charges and re-queues the previous task, so a
 * plain "take the head of the queue" makes two busy tasks on one CPU alternate whatever their
 * weights. ops.dispatch therefore compares prev's key (charged up to now) with its rival, the
 * first queued task that may run on this CPU (not the head: one pinned to another CPU is no
 * rival), and lets prev keep the CPU for another slice when it is not behind. A FIFO rescue DSQ
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
 * looks, in ops.enqueue, for the CPU running the lowest-weight task (read from each CPU's
 * current task: its weight and the slice it has left) among the CPUs it may use. If that
 * weight is lower than its own, it is inserted into that CPU's local DSQ with SCX_ENQ_PREEMPT
 * (head of the queue, the current task's slice cleared). A CPU whose slice is already over
 * (waiting for its tick) is the victim whatever its weight. With a latency target longer than a
 * tick, it does not preempt when some allowed CPU's slice ends, and a tick notices it, within
 * the target: it goes to the head of that CPU's local DSQ and runs when the slice ends. The
 * same task put back while runnable (slice used up, higher class) preempts the same way when it
 * would lead the shared queue, so that it does not wait for another CPU's slice to end (100 ms
 * for a batch task). Counters: kick_preempt, preempt_wait, preempt_skip (nothing lower to
 * preempt: queued by its key).
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
 * the UEI helpers. The decision map is sized by the loader from max_tracked_tasks and allocates
 * entries as they are written (BPF_F_NO_PREALLOC).
 *
 * COST. A wakeup runs select_cpu (or enqueue), running and stopping, and a CPU going idle runs
 * dispatch; these must cost about what scx_simple's do (docs/benchmarks.md). So:
 * - at most one task-storage lookup per callback, and no hash lookup: the process's decision is
 *   cached in the thread's storage with the value of zernel_decision_gen (intf.h) it was read
 *   at. The loader increments the generation after every write or delete, and a thread whose
 *   cached generation differs reads zernel_decisions once and caches the result (clamped, the
 *   node of the preferred CPU resolved). Between writes, that is no lookup at all; after one,
 *   one per thread. The cost of a global generation: one changed decision makes every thread
 *   look once.
 * - no ops.runnable / ops.quiescent: their work (wakeup count, lag bound, joining the node's
 *   runnable weight) is done in select_cpu / enqueue and stopping, which run anyway.
 * - the share hierarchy: a thread of the root cgroup (most threads of a test VM, kernel threads
 *   on a real node) uses the root node in .bss: no map lookup. Others take one hash lookup of
 *   their node per wakeup and per stop, plus one per ancestor when tree_gen has moved since the
 *   node's hshare was cached. Joining and leaving a node is two atomic adds; only a node's first
 *   runnable thread and its last going to sleep walk up the tree (under tree_lock, level by
 *   level). cpu.max costs nothing while no cgroup has a quota (bw_nr == 0): no ops.tick work, no
 *   throttle checks; with quotas, only threads below one pay an ancestor walk per charge.
 *   (With phases from events, ops.tick looks up the running thread's task_ctx, and for a thread
 *   of a decided process its phase: one or two task-storage lookups per tick, 250/s a CPU.)
 * - nothing is written for the preemption victim search on the hot paths: it reads each CPU's
 *   current task (scx_bpf_cpu_curr, its task_ctx and p->scx.slice; before 6.18 scx_bpf_cpu_rq,
 *   and the task_ctx through a reference taken by pid) when a preempting wakeup finds no idle
 *   CPU, which is rare, instead of a per-CPU record that ops.running and ops.stopping kept up
 *   to date (with a clock read) on every context switch;
 * - the rescue DSQ is looked at only while the starvation scan has flagged it;
 * - counters are per-CPU array slots (no shared cache line).
 * - run time is charged from p->se.sum_exec_runtime, which the kernel brings up to date before
 *   ops.stopping, ops.tick and ops.dispatch (update_curr_scx), against its value at the last
 *   charge (or ops.enable): no clock read and no start mark. So ops.running has work only for
 *   a followed thread (PHASES OF THREADS); for any other it reads its tgid's slot of
 *   followed_slots and returns, with no task-storage lookup (and with phases not from events,
 *   nothing at all). vtime_now moves in ops.dispatch, from the head of the queue a CPU takes a
 *   task from.
 * - a thread's node is looked up once per callback and passed on (join, share, leave), and the
 *   share uses the weight the thread joined its node with (no second weight computation);
 *   task_share and task_account are inlined (no BPF-to-BPF call on a wakeup or a stop), and
 *   the lag bound divides once where the request is the default slice.
 * Where that leaves it (2026-12-02, docs/benchmarks.md): per pipe round trip, in instruction
 * time with the BPF statistics on, select_cpu about 790 ns a call against scx_simple's 560,
 * running 100 against 104, stopping 307 against 172 (about 100 ns of each is the statistics'
 * own); at equal placement, 1.044 of scx_simple's round trip in two boots. What remains is the
 * model's work at a wakeup and a stop (join, lag bound, share, charge, leave) and the two
 * task-storage lookups (about 45 ns each) those callbacks need.
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
 * loader drops ops the kernel lacks at open with a warning (cgroup_set_bandwidth came in 6.17:
 * before it cpu.max is not enforced, and the daemon says so, see docs/sched-ext.md). Only ops and
 * kfuncs of 6.12 are required. The cgroup ops need CONFIG_EXT_GROUP_SCHED; without it every
 * thread counts in the root node. The timer callback takes the RCU read lock itself (the 6.16 verifier wants it for
 * the DSQ iterator; 7.x implies it). Per-node idle masks (6.15+, SCX_OPS_BUILTIN_IDLE_PER_NODE)
 * are not used: node preference uses our own node cpumasks, built in ops.init from the loader's
 * CPU->node table. Tested on 7.3.4, 6.16.3 and a 6.12.118 built by hand (docs/sched-ext.md): there
 * the victim search reaches another CPU's task through scx_bpf_cpu_rq, an untrusted pointer
 * (cpu_running).
 *
 * KNOWN WEAKNESSES.
 * - One shared queue: fine for tens of CPUs, a contention point on hundreds (scx_simple's
 *   trade-off). Per-node queues would be the next step.
 * - Flattening (like scx_flatcg): shares change as threads wake and sleep, and a thread is
 *   charged with the share of the moment it stops, so a group whose threads wake in a burst can
 *   briefly take more than its share (the thundering herd scx_flatcg describes). The error is
 *   bounded by one slice per thread.
 * - A node's own threads compete with its children as one group of weight 100, where CFS lets
 *   each root-cgroup thread compete alone: on a real node the root holds kernel threads, and
 *   treating them as one group keeps D(root) and the cached shares stable.
 * - The share of a thread running alone on a CPU of a many-CPU machine is a fraction of the
 *   machine it cannot exceed on one CPU; vtime then falls behind and the lag bound, not the
 *   share, decides what it has when competition arrives (within two slices).
 * - cgroups deeper than ZERNEL_MAX_LEVELS (12) levels: the ancestors above are ignored. More than
 *   ZERNEL_MAX_BW (256) cgroups with a quota: the scheduler exits with an error (and the daemon
 *   observes, then reloads).
 * - cpu.max: enforced at tick granularity with debt carried over; cpu.max.burst is ignored.
 * - The preemption victim search compares decision weights, not shares.
 * - Vtime is per thread: a group entitled to exactly as many CPUs as it has busy threads keeps
 *   them only while its threads' credit lasts; host noise on its CPUs wears a bounded credit
 *   down, which is why the credit bound of keep_prev applies only against pinned rivals.
 * - keep_prev looks at the first KEEP_SCAN (16) queued tasks for one that may run on its CPU;
 *   with more tasks pinned elsewhere ahead of them, prev keeps the CPU for another slice.
 * - Victim search for preemption is O(nr_cpus) per preempting wakeup with no idle CPU.
 * - The starvation scan is O(queue length) every 100 ms.
 * - A task's first slice after a decision is written runs with the values of its last enqueue.
 *
 * RACES ACCEPTED.
 * - vtime_now is updated without atomics (as in scx_simple): a lost update only lowers the
 *   sleeper credit floor for a moment.
 * - Each CPU's current task is read without locks: two waking threads may pick the same victim;
 *   the second waits behind the first at the head of that CPU's queue. The task read may be
 *   leaving the CPU that moment; its storage stays valid under RCU.
 * - The loader may replace a decision while a thread copies it into its cache: the copy may mix
 *   the old and new decision of the same process until the generation increment that follows
 *   the write makes the thread copy it again (at its next scheduling event).
 * - The generation is read before the lookup, so a write racing with a refresh leaves the
 *   thread with an older generation than the value it saw: it looks once more, never too few.
 * - rescue_pending is cleared by a dispatch that found the rescue DSQ empty; a rescue racing
 *   with that is served when the next scan (100 ms) sets it again.
 * - Shares are read without locks: a charge may use a share a wakeup elsewhere just changed.
 * - An activation and a deactivation of the same node racing through the levels: counts commute
 *   under tree_lock, so the tree ends right; a concurrent hshare computation may cache a value
 *   of the moment between, until tree_gen moves again.
 * - ops.cgroup_exit deletes the cgroup's node; its tasks have left sched_ext by then (ops.disable
 *   takes each out of its node's load), so the node is inactive. Were one still counted, its
 *   weight would stay in the parent's sum: the siblings' shares a little low, never starved.
 * - Quota bookkeeping (bw_used) is atomic, the period start and throttled flag are not: a
 *   refill racing with a charge may thaw a cgroup one 5 ms refill step early or late. Two
 *   refills never run together: each claims its step by a compare-and-swap of bw_next_ns.
 */
#include <scx/common.bpf.h>

#include "intf.h"
#include "probes.h"

char _license[] SEC("license") = "GPL";

/* Load-time knobs, set by the loader between open and load. */
const volatile u32 nr_cpus = 1;			/* possible CPU ids, <= ZERNEL_MAX_CPUS */
const volatile u32 nr_nodes = 1;		/* NUMA node ids, <= ZERNEL_MAX_NODES */
const volatile u8 cpu_node[ZERNEL_MAX_CPUS];	/* NUMA node of each CPU */
const volatile u64 starve_ns = ZERNEL_STARVE_DFL_US * 1000ULL;
const volatile u32 switch_partial; /* 1: SCX_OPS_SWITCH_PARTIAL (SCHED_EXT tasks only) */
/* ns between scheduler ticks: a slice's end is noticed at the first tick after it. The loader
 * sets it from the kernel's CONFIG_HZ when it can read the config; else 1/100 s, the longest. */
const volatile u64 tick_ns = 10000000ULL;
/* Tests only: scx_bpf_error() this long after ops.init, to exercise the ejection path. */
const volatile u64 inject_error_after_ns;

/*
 * The decision generation (intf.h): the loader increments it after every write or delete in
 * zernel_decisions or zernel_tenants. A thread re-reads its process's decision only when this
 * moved.
 */
u64 zernel_decision_gen;

UEI_DEFINE(uei);

/* The kernel's exit kinds, exit code bits and UEI lengths are ABI; intf.h mirrors them for the
 * loader, and every one is checked here against vmlinux.h. */
#define ZERNEL_ASSERT_EXIT_KIND(NAME, value)						\
	_Static_assert((int)ZERNEL_EXIT_##NAME == (int)SCX_EXIT_##NAME, "exit kind " #NAME);
ZERNEL_EXIT_KINDS(ZERNEL_ASSERT_EXIT_KIND)
#undef ZERNEL_ASSERT_EXIT_KIND
_Static_assert(ZERNEL_ECODE_RSN_HOTPLUG == (u64)SCX_ECODE_RSN_HOTPLUG, "exit code bit");
_Static_assert(ZERNEL_ECODE_RSN_CGROUP_OFFLINE == (u64)SCX_ECODE_RSN_CGROUP_OFFLINE,
	       "exit code bit");
_Static_assert(ZERNEL_ECODE_ACT_RESTART == (u64)SCX_ECODE_ACT_RESTART, "exit code bit");
_Static_assert((int)ZERNEL_UEI_REASON_LEN == (int)UEI_REASON_LEN, "UEI reason length");
_Static_assert((int)ZERNEL_UEI_MSG_LEN == (int)UEI_MSG_LEN, "UEI message length");

enum {
	ZERNEL_DSQ_SHARED = 0,		/* vtime-ordered queue of every waiting task */
	ZERNEL_DSQ_RESCUE = 1,		/* FIFO of starved tasks, served first */
	ZERNEL_DSQ_THROTTLED = 2,	/* FIFO of tasks whose cgroup spent its cpu.max quota */
	ZERNEL_USED_MAX_NS = 1000000000, /* a single charge covers at most 1 s of run time */
	KEEP_SCAN = 16,			/* queued tasks keep_prev looks at for a rival */
	ZERNEL_NO_PHASE = 0xFF,		/* task_ctx.phase of a thread with no decision */
	ZERNEL_MAX_LEVELS = 12,		/* cgroup levels walked up; deeper ancestors are ignored */
	ZERNEL_MAX_NODES_MAP = 65536,	/* cgroups + tenants + the root in the node map */
	ZERNEL_MAX_BW = 256,		/* cgroups with a cpu.max quota that are enforced */
	ZERNEL_BW_TICK_NS = 5000000,	/* how often quotas are refilled and tasks released */
};

#define SLICE_DFL_NS ((u64)ZERNEL_SLICE_DFL_US * 1000)
#define SLICE_MIN_NS ((u64)ZERNEL_SLICE_MIN_US * 1000)
#define SLICE_MAX_NS ((u64)ZERNEL_SLICE_MAX_US * 1000)
/* Fixed point of shares: FP_ONE is the whole machine. */
#define FP_ONE (1ULL << 30)
/* Node ids: 0 is the root; a cgroup's is its kernfs id; a tenant's this bit | its slot. */
#define TENANT_NODE (1ULL << 63)
/* The weight with which a node's own runnable threads, as one group, compete with its children:
 * that of a cgroup of cpu.weight 100. */
#define OWN_GROUP_W ((u64)ZERNEL_WEIGHT_DFL)
/* A quota at or above this many us is "max" (the kernel passes RUNTIME_INF). */
#define BW_QUOTA_INF_US (1ULL << 40)

static u64 vtime_now;
static u64 init_at;			/* ns: when ops.init ran */
/*
 * Non-zero while the rescue DSQ may hold tasks: the scan's count of them, cleared by ops.dispatch
 * when it finds the DSQ empty. (A count, not a flag: clang shrinks a 0/1 static to one byte,
 * which the kernel's BTF check then rejects.)
 */
static u64 rescue_pending;

/* The contract's maps (intf.h). max_entries of zernel_decisions is set by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
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
 * A node of the sharing hierarchy (see SHARING above): the root, a cgroup of the cpu controller,
 * or a tenant. Fields marked (lock) change only under tree_lock; (atomic) with atomic adds.
 */
struct znode {
	u64 parent;		/* id of the parent node (0 = the root); unused for the root */
	u64 weight;		/* (lock) 1024 scale: cpu.weight 100 = 1024 */
	s64 nr_runnable;	/* (atomic) its own runnable threads: gates nr_active */
	s64 nr_active;		/* (lock) 1 for runnable own threads + 1 per active child */
	s64 own_w;		/* (atomic) sum of the weights of its own runnable threads */
	s64 child_w;		/* (lock) sum of the weights of its active children */
	u64 hshare;		/* cache: its share of the machine, FP_ONE = all; valid at hgen */
	u64 hgen;		/* tree_gen the cache was computed at; 0 = never */
	u64 limited;		/* cache (hgen): 1 when it or an ancestor has a cpu.max quota */
	u64 quota_ns;		/* cpu.max quota per period; 0 = none */
	u64 period_ns;		/* cpu.max period */
	s64 bw_used;		/* (atomic) ns run in this period, plus the debt of earlier ones */
	u64 period_end;		/* ns: when the current period ends */
	u64 throttled;		/* 1 while bw_used >= quota_ns */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, ZERNEL_MAX_NODES_MAP);
	__type(key, u64);
	__type(value, struct znode);
} nodes SEC(".maps");

/* Ids of the cgroups with a quota, scanned by the bandwidth timer; 0 = free slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ZERNEL_MAX_BW);
	__type(key, u32);
	__type(value, u64);
} bw_ids SEC(".maps");

/* The root node lives in .bss: root-cgroup threads, most of a test VM's, need no map lookup. */
static struct znode root_node;
/* Moves whenever some node's activity or weight changes: hshare caches older than it are stale. */
static u64 tree_gen = 1;
/* Non-zero while some cgroup has a quota: ops.tick does nothing otherwise. */
static u64 bw_nr;
/* When the next refill is due (the last one plus ZERNEL_BW_TICK_NS); claimed by compare-and-swap. */
static u64 bw_next_ns;
/* Set when a refill from ops.tick thawed a cgroup: the next ops.dispatch releases its threads. */
static volatile u64 bw_release_pending;
private(ZTREE) struct bpf_spin_lock tree_lock;

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
	u64 cgid;		/* node id of its cgroup (0 = the root cgroup) */
	u64 cnode;		/* node it is counted in while runnable (valid when joined) */
	u64 key;		/* queue key it had when parked in the throttled DSQ */
	u32 weight;		/* decision weight, clamped; 0 = no decision (weight from nice) */
	u32 tweight;		/* decision's tenant_weight, clamped (cgroup scale) */
	s32 pref_cpu;		/* preferred CPU, checked against nr_cpus; ZERNEL_NO_CPU = none */
	s32 pref_node;		/* the decision's node, else the preferred CPU's; -1 = none */
	u16 tenant;		/* tenant slot; ZERNEL_NO_TENANT = none */
	u8 phase;		/* enum zernel_phase; ZERNEL_NO_PHASE without a decision */
	u8 flags;		/* enum zernel_decision_flags */
	u8 woke;		/* 1: ops.select_cpu counted this wakeup (ops.stopping of the sleep
				 * clears) */
	u8 joined;		/* 1: counted in cnode's runnable weight (pub.contrib_weight) */
	u8 limited;		/* 1: its node or an ancestor has a cpu.max quota (last charge) */
	u8 tphase;		/* zernel_phase_policy index it follows now; ZERNEL_NO_PHASE: the
				 * decision's (phase_follow) */
	u8 pkicked;		/* 1: the phase timer kicked its CPU (ops.enqueue keeps it there) */
	u8 followed;		/* 1: phase_follow found the probes' state of it (kept across
				 * decisions: ops.running arms the phase timer for it); counted in
				 * followed_slots (set_followed) */
	u8 __pad[2];
	u64 psince_ns; /* ns: since_ns of the last phase change phase_delay counted */
	u64 sum_at;    /* ns: p->se.sum_exec_runtime when its run time was last charged (or it
			* was enabled): it grows only while the thread runs */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} zernel_task_ctx SEC(".maps");

/*
 * The threads with task_ctx.followed set, counted per slot of their tgid (tgid modulo
 * ZERNEL_FOLLOW_SLOTS), so that ops.running, which has work only for such a thread, looks up
 * no task storage for the others (COST). Processes that share a slot cost a lookup more, never
 * a missed one.
 */
#define ZERNEL_FOLLOW_SLOTS 4096
static u32 followed_slots[ZERNEL_FOLLOW_SLOTS];

static __always_inline u32 *followed_slot(const struct task_struct *p)
{
	return &followed_slots[(u32)p->tgid & (ZERNEL_FOLLOW_SLOTS - 1)];
}

static __always_inline void set_followed(const struct task_struct *p, struct task_ctx *tctx,
					 bool on)
{
	if (tctx->followed == on)
		return;
	tctx->followed = on;
	__sync_fetch_and_add(followed_slot(p), on ? 1 : -1);
}

/*
 * PHASES OF THREADS. With phases from events (bpf/probes.bpf.c) each thread of a GPU process or
 * DataLoader worker has a phase of its own, changed by its events as they happen. The loader
 * then hands this object the probes' task storage (bpf_map__reuse_fd: the same map) and sets
 * zernel_follow_phases; at each wakeup (ops.select_cpu) and enqueue, a thread of a process with
 * a decision is scheduled with its own phase's policy (zernel_phase_policy: weight, slice,
 * latency target, preemption), not with its process's phase as the daemon last decided it: the
 * tenant, the preferred CPU and the cgroup stay the decision's. A GpuCompute thread woken inside
 * a sync it slept in gets the last entry: the engine's blocked GPU waiter, whose wait is ending.
 * Without phases from events the map is this object's own, empty, and nothing changes.
 *
 * A change made while the thread runs (a sync's or an NCCL futex's return, a launch, a worker
 * switched in) has no wakeup to be applied at, and the probes that make it cannot kick a CPU
 * (sched_ext's kfuncs are not registered for uprobes; and older kernels, 6.12 among them, refuse
 * a bpf_timer in a tracing program, which would let a probe start this object's timer at once:
 * the VM tests' 7.3 does not).
 * The phase timer does it: ops.running of a followed thread (one of a decided process whose
 * phase phase_follow applied) arms its CPU's timer (phase_kicks, pinned to the CPU); every
 * ZERNEL_PHASE_KICK_NS, for as long as a followed thread runs there, it looks whether that thread
 * has a change the scheduler has not acted on, and then kicks the CPU (SCX_KICK_PREEMPT): the
 * thread goes through ops.dispatch (keep_prev applies the phase and keeps it on) or ops.enqueue,
 * which applies the phase and puts it back at the head of its CPU's local DSQ, so that it runs
 * on with the new slice and weight rather than losing its CPU to the kick (placed in the shared
 * queue, a thread that ran a while queues behind the hogs' 20 ms slices: a first VM run did
 * that, and lost throughput). The first look that finds no followed thread running there stops
 * the timer: ops.stopping does nothing for it, and a CPU that runs only other tasks never has it
 * armed. ops.tick (phase_tick) is the fallback, at most a tick (4 ms at HZ=250) after a change.
 * Cost, for followed threads only: a timer start when one starts running on a CPU whose timer is
 * stopped, a timer interrupt per period while they run (4,000 a second on a CPU busy with them)
 * plus one after each run, and one extra pass through the scheduler per change. A first version
 * armed the timer only after a sync or NCCL wakeup, for four periods: the changes in the middle
 * of a run (a launch well after a data wait) then waited for the tick.
 *
 * How fast (the delay measure, docs/sched-ext.md): each change the probes commit is counted once
 * in the phase_delay_* buckets, by the time the thread was runnable or running with it before the
 * scheduler acted on it: 0 when it changed while the thread slept (applied at the wakeup); now
 * minus the change at a non-waking enqueue or a tick; and when the thread goes to sleep first
 * (ops.stopping), the time it ran with it unapplied. tctx->psince_ns marks the change counted.
 * Weaknesses: a change replaced by another before any of these (two changes in one run of the
 * thread) is not counted, only the later one; changes of threads without a decision are not.
 */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct zernel_phase_thread);
} zernel_phase_threads SEC(".maps");

const volatile u32 zernel_follow_phases;
const volatile struct zernel_phase_policy zernel_phase_policy[ZERNEL_PHASE_NR + 1];

enum {
	ZERNEL_PHASE_KICK_NS = 250000, /* the phase timer's period */
};

/*
 * Per CPU: the phase timer (PHASES OF THREADS), armed by ops.running for the followed thread it
 * runs, pinned to that CPU. Written only on its CPU: by ops.running there, and by the timer's
 * callback, which runs there in softirq context and so never in the middle of ops.running.
 */
struct phase_kick {
	struct bpf_timer timer;
	s32 pid;   /* the thread it watches: the last followed thread ops.running started here */
	s32 cpu;   /* this entry's CPU */
	u32 armed; /* 1: started, and its callback has not yet found the thread gone */
	u32 __pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ZERNEL_MAX_CPUS);
	__type(key, u32);
	__type(value, struct phase_kick);
} phase_kicks SEC(".maps");

struct node_mask {
	struct bpf_cpumask __kptr *mask;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ZERNEL_MAX_NODES);
	__type(key, u32);
	__type(value, struct node_mask);
} node_masks SEC(".maps");

struct zernel_timer {
	struct bpf_timer timer;
};

/* Slot 0: the starvation scan; slot 1: the bandwidth refill. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, struct zernel_timer);
} zernel_timers SEC(".maps");

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

/* The weight of p's nice value on the 1024 scale (p->scx.weight is 100 at nice 0). */
static __always_inline u64 nice_weight(const struct task_struct *p)
{
	return clamp_u64((u64)p->scx.weight * ZERNEL_WEIGHT_DFL / 100, ZERNEL_WEIGHT_MIN,
			 ZERNEL_WEIGHT_MAX);
}

/*
 * The thread's weight inside its group: the decision's (a process outside any tenant scaled by
 * its tenant_weight, 100 = x1), or the nice value's.
 */
static __always_inline u64 task_weight(struct task_struct *p, const struct task_ctx *tctx)
{
	if (tctx->weight) {
		if (has_tenant(tctx) || tctx->tweight == ZERNEL_TENANT_WEIGHT_DFL)
			return tctx->weight;
		return clamp_u64((u64)tctx->weight * tctx->tweight / ZERNEL_TENANT_WEIGHT_DFL,
				 ZERNEL_WEIGHT_MIN, ZERNEL_WEIGHT_MAX);
	}
	return nice_weight(p);
}

/* cpu.weight scale (100 = one nice-0 thread) -> the 1024 scale of thread weights. */
static __always_inline u64 cg_to_1024(u64 w)
{
	return clamp_u64(w, ZERNEL_TENANT_WEIGHT_MIN, ZERNEL_TENANT_WEIGHT_MAX) *
	       ZERNEL_WEIGHT_DFL / ZERNEL_TENANT_WEIGHT_DFL;
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

/*
 * Activity changes of a node, carried up the tree: a node is active while nr_active > 0, and an
 * active node's weight is in its parent's child_w. The lock covers one level at a time
 * (bpf_spin_lock allows no calls while held); the counts commute, so an activation and a
 * deactivation of the same node racing through the levels leave them right.
 */
__noinline int zernel_propagate(u64 id, u32 activate)
{
	u32 i;

	for (i = 0; i < ZERNEL_MAX_LEVELS; i++) {
		struct znode *n = node_get(id), *pn = NULL;
		bool up = false;
		u64 pid;

		if (!n)
			break;
		pid = n->parent;
		if (id)
			pn = node_get(pid);
		bpf_spin_lock(&tree_lock);
		if (activate) {
			/* The first level: its own threads start to compete, as one child. */
			if (i == 0)
				n->child_w += OWN_GROUP_W;
			if (n->nr_active++ == 0 && pn) {
				pn->child_w += n->weight;
				up = true;
			}
		} else {
			if (i == 0)
				n->child_w -= OWN_GROUP_W;
			if (--n->nr_active == 0 && pn) {
				pn->child_w -= n->weight;
				up = true;
			}
		}
		bpf_spin_unlock(&tree_lock);
		if (!up)
			break;
		id = pid;
	}
	/* Every call changed some child_w: the shares cached with the old sums are stale. */
	__sync_fetch_and_add(&tree_gen, 1);
	return 0;
}

static void node_set_weight(u64 id, u64 w1024)
{
	struct znode *n = node_get(id), *pn = NULL;

	if (!n)
		return;
	if (id)
		pn = node_get(n->parent);
	bpf_spin_lock(&tree_lock);
	if (pn && n->nr_active > 0)
		pn->child_w += (s64)w1024 - (s64)n->weight;
	n->weight = w1024;
	bpf_spin_unlock(&tree_lock);
	__sync_fetch_and_add(&tree_gen, 1);
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

/* A runnable thread of weight w joins node n, of id id (its own threads). */
static __always_inline void node_join(struct znode *n, u64 id, s64 w)
{
	__sync_fetch_and_add(&n->own_w, w);
	tenant_load_add(id, w, 1);
	if (__sync_fetch_and_add(&n->nr_runnable, 1) == 0)
		zernel_propagate(id, 1);
}

static __always_inline void node_leave(struct znode *n, u64 id, s64 w)
{
	__sync_fetch_and_sub(&n->own_w, w);
	tenant_load_add(id, -w, -1);
	if (__sync_fetch_and_sub(&n->nr_runnable, 1) == 1)
		zernel_propagate(id, 0);
}

/* The tenant's node, created at its first use, its weight kept equal to the tenant's. */
__noinline u64 zernel_tenant_node(u32 slot, u64 tweight)
{
	u64 id = TENANT_NODE | (slot & 0xFFFF), w;
	struct zernel_tenant *t = bpf_map_lookup_elem(&zernel_tenants, &slot);
	struct znode *n;

	w = cg_to_1024(t && t->weight ? t->weight : tweight);
	n = bpf_map_lookup_elem(&nodes, &id);
	if (!n) {
		struct znode init = { .parent = 0, .weight = w };

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
	u64 id = tctx->cgid;
	struct znode *n;

	if (has_tenant(tctx))
		id = zernel_tenant_node(tctx->tenant, tctx->tweight);
	n = node_get(id);
	if (!n) {
		id = 0;
		n = &root_node;
	}
	*idp = id;
	return n;
}

/* Leaves the node it joined, n (node_get(cnode), looked up by the caller; NULL: gone). */
static __always_inline void task_unaccount_in(struct task_ctx *tctx, struct znode *n)
{
	if (!tctx->joined)
		return;
	if (n)
		node_leave(n, tctx->cnode, tctx->pub.contrib_weight);
	tctx->joined = 0;
	tctx->pub.contrib_weight = 0;
	tctx->pub.contrib_tenant = ZERNEL_NO_TENANT;
}

static void task_unaccount(struct task_ctx *tctx)
{
	if (tctx->joined)
		task_unaccount_in(tctx, node_get(tctx->cnode));
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
	if (tctx->joined && tctx->cnode == id && tc->contrib_weight == w)
		return n;
	if (tctx->joined) /* a wakeup (not joined) makes no call */
		task_unaccount(tctx);
	node_join(n, id, w);
	tctx->joined = 1;
	tctx->cnode = id;
	tc->contrib_weight = w;
	tc->contrib_tenant = (id & TENANT_NODE) ? (u16)(id & 0xFFFF) : ZERNEL_NO_TENANT;
	return n;
}

/*
 * A node's share of the machine: the product, over it and its ancestors below the root, of
 * weight / (sum of the weights of the active children of the parent + the parent's own runnable
 * threads). Cached per node until tree_gen moves. Also notes whether a quota applies on the way.
 */
__noinline u64 zernel_node_hshare(u64 id)
{
	u64 gen = tree_gen, f = FP_ONE, limited, cur = id;
	struct znode *n = node_get(id);
	u32 i;

	if (!n)
		return FP_ONE;
	if (!id || n->hgen == gen)
		return n->hshare ? n->hshare : FP_ONE;
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
		d = (u64)pn->child_w;
		if ((s64)d < (s64)w)
			d = w;
		f = f * w / d;
		cur = c->parent;
	}
	if (!f)
		f = 1;
	n = node_get(id);
	if (n) {
		n->hshare = f;
		n->limited = limited;
		n->hgen = gen;
	}
	return f;
}

/*
 * The thread's share of the machine, FP_ONE = all of it, as a thread of weight w in node n (of
 * id id): the node's share times w over the weight of the node's runnable threads and active
 * children.
 */
static __always_inline u64 share_in(struct task_ctx *tctx, struct znode *n, u64 id, u64 w)
{
	u64 hs, d, s, own;

	/* The cache is read here: the walk (a second lookup of the node) only when it is stale. */
	hs = FP_ONE;
	if (id)
		hs = n->hgen == tree_gen ? n->hshare : zernel_node_hshare(id);
	/* cpu.max follows the cgroup, also for a tenant's thread. */
	tctx->limited = 0;
	if (bw_nr && tctx->cgid) {
		struct znode *cn = node_get(tctx->cgid);

		if (cn) {
			if (cn->hgen != tree_gen)
				zernel_node_hshare(tctx->cgid);
			tctx->limited = (u8)cn->limited;
		}
	}
	/* Its weight among its node's own threads, times their group's among the node's children. */
	own = (u64)n->own_w;
	if ((s64)own < (s64)w)
		own = w;
	d = (u64)n->child_w;
	if ((s64)d < (s64)OWN_GROUP_W)
		d = OWN_GROUP_W;
	s = hs * w / own * OWN_GROUP_W / d;
	return s ? s : 1;
}

/* The share of a runnable thread (joined): its node, and the weight it joined with (in own_w). */
static __always_inline u64 joined_share(struct task_ctx *tctx, struct znode *n)
{
	return n ? share_in(tctx, n, tctx->cnode, (u64)tctx->pub.contrib_weight) : FP_ONE;
}

static __always_inline u64 task_share(struct task_struct *p, struct task_ctx *tctx)
{
	struct znode *n;
	u64 id;

	if (tctx->joined)
		return joined_share(tctx, node_get(tctx->cnode));
	n = task_node(tctx, &id);
	return share_in(tctx, n, id, task_weight(p, tctx));
}

/* Virtual time for ns of run time at a share: ns * FP_ONE / share. */
static __always_inline u64 vscale(u64 ns, u64 share)
{
	if (ns > ZERNEL_USED_MAX_NS)
		ns = ZERNEL_USED_MAX_NS;
	return ns * FP_ONE / (share ? share : 1);
}

/* The request that sets the queue position: the latency target, else the slice. */
static __always_inline u64 task_request(const struct task_ctx *tctx)
{
	return tctx->lat_ns ? tctx->lat_ns : tctx->slice;
}

/*
 * Lag bound, on queue keys (vtime + request), at every wakeup: a thread's key is put within one
 * default slice of its own service below vtime_now (the credit of a sleeper) and two of its own
 * slices above it (the lead of a thread that ran alone, on an idle CPU, or was rescued: one
 * slice is what any thread leads by after a slice taken from the head of the queue, the second
 * covers the overrun to the tick that ends it). Not when a runnable thread is put back: under
 * contention keys stay near the front by themselves, and vtime_now, the largest key a CPU took
 * in order, can run ahead of a group's keys (a CPU that cannot run the head takes a later task),
 * so a bound there would shift shares. See LAG in the opening comment.
 */
static __always_inline void clamp_lag(struct task_ctx *tctx, u64 share)
{
	/* One division where the request is the slice and the slice the default (most threads). */
	u64 v = vtime_now, slice = vscale(tctx->slice, share);
	u64 req = tctx->lat_ns ? vscale(tctx->lat_ns, share) : slice;
	u64 credit = tctx->slice == SLICE_DFL_NS ? slice : vscale(SLICE_DFL_NS, share);
	u64 lo = v - credit, hi = v + 2 * slice;
	u64 key = tctx->pub.vtime + req;

	if (time_before(key, lo)) {
		tctx->pub.vtime = lo - req;
	} else if (time_after(key, hi)) {
		tctx->pub.vtime = hi - req;
		stat_inc(ZERNEL_STAT_LAG_CLAMP);
	}
}

/* ---- cpu.max ---- */

/* True when the node or an ancestor has spent its quota. */
__noinline int zernel_node_throttled(u64 id)
{
	u32 i;

	for (i = 0; i < ZERNEL_MAX_LEVELS; i++) {
		struct znode *n = node_get(id);

		if (!n)
			return 0;
		if (n->throttled)
			return 1;
		if (!id)
			return 0;
		id = n->parent;
	}
	return 0;
}

static __always_inline bool task_throttled(struct task_ctx *tctx)
{
	return tctx->limited && bw_nr && zernel_node_throttled(tctx->cgid);
}

/* Charges run time to the quotas of the cgroup and its ancestors. */
__noinline int zernel_bw_charge(u64 id, u64 used)
{
	u32 i;

	for (i = 0; i < ZERNEL_MAX_LEVELS && id; i++) {
		struct znode *n = node_get(id);

		if (!n)
			return 0;
		if (n->quota_ns &&
		    __sync_add_and_fetch(&n->bw_used, (s64)used) >= (s64)n->quota_ns)
			n->throttled = 1;
		id = n->parent;
	}
	return 0;
}

/*
 * Re-reads the process's decision into the thread's cache (the one hash lookup, done only when
 * the loader changed some decision since this thread last looked). Every caller runs for a
 * runnable thread, so its contribution follows the new decision at once.
 */
static __noinline void task_refresh(struct task_struct *p, struct task_ctx *tctx, u64 gen)
{
	u32 tgid = p->tgid;
	struct zernel_decision *d = bpf_map_lookup_elem(&zernel_decisions, &tgid);
	s32 pcpu, node;
	u64 tw;

	tctx->gen = gen;
	tctx->tphase = ZERNEL_NO_PHASE;	/* phase_follow applies the thread's phase again */
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
	if (tctx->joined)
		task_account(p, tctx);
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

/* The probes' state of a thread they follow; NULL: none, or their cached "no role" (probes.h) */
static __always_inline struct zernel_phase_thread *phase_state(struct task_struct *p)
{
	struct zernel_phase_thread *st = bpf_task_storage_get(&zernel_phase_threads, p, 0, 0);

	return st && st->role ? st : NULL;
}

/* Counts the thread's current phase change (since_ns) in its delay bucket, once. */
static __always_inline void phase_delay(struct task_ctx *tctx, u64 since_ns, u64 delay)
{
	tctx->psince_ns = since_ns;
	if (delay <= 100000)
		stat_inc(ZERNEL_STAT_PHASE_DELAY_100US);
	else if (delay <= 1000000)
		stat_inc(ZERNEL_STAT_PHASE_DELAY_1MS);
	else if (delay <= 4000000)
		stat_inc(ZERNEL_STAT_PHASE_DELAY_4MS);
	else
		stat_inc(ZERNEL_STAT_PHASE_DELAY_LONG);
}

/*
 * Schedules a thread of a decided process by its own phase (PHASES OF THREADS above). `waking`:
 * from a wakeup. True when the policy changed; callers account the thread afterwards
 * (task_wakes, task_account), which carries a changed weight into its node.
 */
static __always_inline bool phase_follow(struct task_struct *p, struct task_ctx *tctx, bool waking)
{
	const volatile struct zernel_phase_policy *pol;
	struct zernel_phase_thread *st;
	u32 idx;

	if (!zernel_follow_phases || !tctx->weight)
		return false;
	st = phase_state(p);
	set_followed(p, tctx, !!st);
	if (!st)
		return false;
	idx = st->phase < ZERNEL_PHASE_NR ? st->phase : ZERNEL_PHASE_UNKNOWN;
	if (idx == ZERNEL_PHASE_GPU_COMPUTE && st->depth && waking)
		idx = ZERNEL_PHASE_NR;
	if (idx == tctx->tphase || idx > ZERNEL_PHASE_NR) {
		/* Nothing to apply (it changed and changed back): nothing to count later. */
		tctx->psince_ns = st->since_ns;
		return false;
	}
	if (st->since_ns != tctx->psince_ns)
		phase_delay(tctx, st->since_ns,
			    waking ? 0 : time_delta(bpf_ktime_get_ns(), st->since_ns));
	pol = &zernel_phase_policy[idx];
	tctx->tphase = idx;
	tctx->phase = idx < ZERNEL_PHASE_NR ? idx : ZERNEL_PHASE_GPU_COMPUTE;
	tctx->weight = clamp_u64(pol->weight, ZERNEL_WEIGHT_MIN, ZERNEL_WEIGHT_MAX);
	tctx->slice = pol->slice_ns ? clamp_u64(pol->slice_ns, SLICE_MIN_NS, SLICE_MAX_NS) :
				      SLICE_DFL_NS;
	tctx->lat_ns = (u64)pol->latency_target_us * 1000;
	tctx->flags = (tctx->flags & ~ZERNEL_DF_PREEMPT) | (pol->flags & ZERNEL_DF_PREEMPT);
	stat_inc(ZERNEL_STAT_PHASE_FOLLOWED);
	/* The probes stamp with bpf_ktime_get_ns (CLOCK_MONOTONIC), not the rq clock of now_ns(). */
	if (idx < ZERNEL_PHASE_NR && time_delta(bpf_ktime_get_ns(), st->since_ns) <= 1000000)
		stat_inc(ZERNEL_STAT_PHASE_FOLLOWED_1MS);
	return true;
}

/*
 * A followed thread goes to sleep: a phase change it ran with and the scheduler did not act on
 * is counted with the time it ran (its wakeup applies it, and must not count it as a wakeup's).
 */
static __always_inline void phase_sleeps(struct task_struct *p, struct task_ctx *tctx)
{
	struct zernel_phase_thread *st;
	u32 idx;

	st = phase_state(p);
	if (!st || st->since_ns == tctx->psince_ns)
		return;
	idx = st->phase < ZERNEL_PHASE_NR ? st->phase : ZERNEL_PHASE_UNKNOWN;
	if (idx == tctx->tphase)
		tctx->psince_ns = st->since_ns;
	else
		phase_delay(tctx, st->since_ns, time_delta(bpf_ktime_get_ns(), st->since_ns));
}

/*
 * The victim search's view of what cpu runs, read from its current task when the search runs
 * (nothing is written for it on the hot paths): false when the CPU runs none of ours (idle; a
 * real-time or deadline task, or one boosted to such a priority, below MAX_RT_PRIO; in a partial
 * switch, any task whose policy is not SCHED_EXT); else the task's weight and the slice it has
 * left. That is p->scx.slice as the kernel last brought it up to date (update_curr_scx, at
 * least every tick), so it is up to a tick more than the truth, and 0 once the slice is over
 * (the CPU reschedules at its next tick). Unlocked and racy, as a per-CPU record written in
 * ops.running would be: the CPU may switch the next moment.
 */
#define ZERNEL_MAX_RT_PRIO 100 /* the kernel's MAX_RT_PRIO: priorities below are RT or deadline */
#define ZERNEL_SCHED_EXT   7   /* the SCHED_EXT policy */

/* False for a CPU running none of ours (idle, a higher class, not SCHED_EXT in a partial switch) */
static __always_inline bool runs_ours(const struct task_struct *curr)
{
	return curr && curr->pid && curr->prio >= ZERNEL_MAX_RT_PRIO &&
	       (!switch_partial || curr->policy == ZERNEL_SCHED_EXT);
}

/*
 * The weight of the thread of pid (else nice_w, its nice weight), through a reference taken by
 * pid: before 6.18 (cpu_running). A global function, verified once on its own: inlined into
 * the victim search's CPU loop, the reference taken and released in each iteration made the
 * 6.12 verifier walk over its limit of a million instructions.
 */
__noinline u64 zernel_weight_of_pid(s32 pid, u64 nice_w)
{
	struct task_struct *t = bpf_task_from_pid(pid);
	struct task_ctx *tctx;
	u64 w = nice_w;

	if (!t)
		return w;
	tctx = bpf_task_storage_get(&zernel_task_ctx, t, 0, 0);
	if (tctx)
		w = task_weight(t, tctx);
	bpf_task_release(t);
	return w;
}

static __always_inline bool cpu_running(s32 cpu, u64 *weight, u64 *slice_left)
{
	struct task_struct *curr;
	struct task_ctx *tctx;
	struct rq *rq;

	if (bpf_ksym_exists(scx_bpf_cpu_curr)) {
		curr = scx_bpf_cpu_curr(cpu); /* 6.18+: an RCU pointer, task storage takes it */
		if (!runs_ours(curr))
			return false;
		tctx = bpf_task_storage_get(&zernel_task_ctx, curr, 0, 0);
		*weight = tctx ? task_weight(curr, tctx) : nice_weight(curr);
		*slice_left = curr->scx.slice;
		return true;
	}
	/*
	 * Before 6.18 only scx_bpf_cpu_rq() gives it, and rq->curr is an untrusted pointer: fields
	 * read (as probe reads), but task storage refuses it. The task's storage is reached
	 * through a reference taken by its pid (NULL when it has just exited: its nice weight).
	 */
	rq = scx_bpf_cpu_rq(cpu);
	curr = rq ? rq->curr : NULL;
	if (!runs_ours(curr))
		return false;
	*weight = zernel_weight_of_pid(curr->pid, nice_weight(curr));
	*slice_left = curr->scx.slice;
	return true;
}

static void insert_local_on(struct task_struct *p, s32 cpu, u64 slice, u64 enq_flags)
{
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL_ON | cpu, slice, enq_flags);
}

/*
 * A waking thread: counts the wakeup, joins its node's runnable weight and bounds its lag. Called
 * from ops.select_cpu and, for wakeups that skip it (one allowed CPU, migration disabled), from
 * ops.enqueue: the work of ops.runnable, without the cost of a separate callback on every wakeup.
 */
static __always_inline u64 task_wakes(struct task_struct *p, struct task_ctx *tctx, bool ttwu)
{
	u64 share;

	if (ttwu)	/* not a new task's first placement (SCX_WAKE_FORK) */
		tctx->pub.wakeups++;
	tctx->woke = 1;
	share = joined_share(tctx, task_account(p, tctx));
	clamp_lag(tctx, share);
	return share;
}

/*
 * A preempting wakeup that found no idle CPU in select_cpu (or skipped it: single-CPU affinity).
 * Returns true when the task was placed.
 */
static bool try_preempt(struct task_struct *p, struct task_ctx *tctx, u64 enq_flags)
{
	u64 my_w = task_weight(p, tctx), lat_ns = tctx->lat_ns, slice = tctx->slice;
	u64 victim_w = my_w, weight, left;
	s32 victim = -1, only = -1, soon = -1, cpu;

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
		if (only >= 0 && cpu != only)
			continue;
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		if (!cpu_running(cpu, &weight, &left))
			continue;
		/*
		 * A slice already over: the CPU reschedules at its next tick (up to 1/HZ away) and
		 * preempting it takes nothing its task is owed. The best victim, whatever its weight.
		 */
		if (!left) {
			victim = cpu;
			soon = -1;
			break;
		}
		/* left < lat_ns first: no wrap for an endless slice (SCX_SLICE_INF) */
		if (lat_ns && left < lat_ns && left + tick_ns <= lat_ns)
			soon = cpu;
		if (weight < victim_w) {
			victim_w = weight;
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
		phase_follow(p, tctx, true);
		task_wakes(p, tctx, wake_flags & SCX_WAKE_TTWU);
		/* Over its cgroup's quota: ops.enqueue parks it. */
		if (task_throttled(tctx))
			return prev_cpu;
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
	bool woke, kicked;
	u64 key, share;
	s32 cpu;

	if (!tctx) {
		/* Not initialised (cannot happen after init_task); keep it running. */
		scx_bpf_dsq_insert_vtime(p, ZERNEL_DSQ_SHARED, SLICE_DFL_NS, vtime_now, enq_flags);
		stat_inc(ZERNEL_STAT_UNDECIDED);
		stat_inc(ZERNEL_STAT_GLOBAL);
		return;
	}
	phase_follow(p, tctx, enq_flags & SCX_ENQ_WAKEUP);
	kicked = tctx->pkicked;
	if (kicked)
		tctx->pkicked = 0;
	if (tctx->weight) {
		stat_inc(ZERNEL_STAT_DECIDED);
		if (has_tenant(tctx))
			stat_inc(ZERNEL_STAT_TENANT);
	} else {
		stat_inc(ZERNEL_STAT_UNDECIDED);
	}
	if (enq_flags & SCX_ENQ_REENQ)
		stat_inc(ZERNEL_STAT_REENQ);
	woke = tctx->woke;
	if ((enq_flags & SCX_ENQ_WAKEUP) && !woke)
		share = task_wakes(p, tctx, true); /* ops.select_cpu was skipped */
	else
		share = joined_share(tctx, task_account(p, tctx));
	key = tctx->pub.vtime + vscale(task_request(tctx), share);

	/* Its cgroup (or an ancestor) spent its cpu.max quota: wait for the next period. */
	if (task_throttled(tctx)) {
		tctx->key = key;
		scx_bpf_dsq_insert(p, ZERNEL_DSQ_THROTTLED, tctx->slice, enq_flags);
		stat_inc(ZERNEL_STAT_THROTTLED);
		return;
	}

	/*
	 * The last runnable task of its CPU at the end of its slice (SCX_OPS_ENQ_LAST): ops.dispatch
	 * did not keep it (throttled: parked above; or the head of the queue cannot run here).
	 * It goes on running here; without the flag the kernel would have done that without asking,
	 * and a throttled task would have run on.
	 */
	if (enq_flags & SCX_ENQ_LAST) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, tctx->slice, enq_flags);
		stat_inc(ZERNEL_STAT_LOCAL);
		return;
	}

	/* Put back by the phase timer's kick (PHASES OF THREADS): it runs on, by its new phase. */
	if (kicked && !(enq_flags & SCX_ENQ_WAKEUP)) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, tctx->slice, enq_flags | SCX_ENQ_HEAD);
		stat_inc(ZERNEL_STAT_LOCAL);
		return;
	}

	if ((tctx->flags & ZERNEL_DF_PREEMPT) && (enq_flags & SCX_ENQ_WAKEUP) &&
	    try_preempt(p, tctx, enq_flags))
		return;

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
	tctx->key = key;
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

/*
 * Charges the run time since the last charge: the growth of p->se.sum_exec_runtime, which the
 * kernel brings up to date (update_curr_scx) before each caller (ops.stopping, ops.tick,
 * ops.dispatch for prev), so no clock read. The sum grows only while the thread runs, so the
 * value at the last charge (or at ops.enable) is the value at the start of this run: ops.running
 * writes nothing for it.
 */
static __always_inline void charge_run(struct task_struct *p, struct task_ctx *tctx, u64 share)
{
	struct zernel_task_ctx *tc = &tctx->pub;
	u64 sum = p->se.sum_exec_runtime, used;

	used = time_delta(sum, tctx->sum_at);
	tctx->sum_at = sum;
	tc->vtime += vscale(used, share);
	if (tctx->limited && bw_nr)
		zernel_bw_charge(tctx->cgid, used);
	tc->runtime_ns += used;
	tc->burst_ns += used;
	if (tctx->phase < ZERNEL_PHASE_NR)
		stat_add(ZERNEL_STAT_RUN_NS_PHASE + tctx->phase, used);
	else
		stat_add(ZERNEL_STAT_RUN_NS_UNDECIDED, used);
}

static __always_inline void account_run(struct task_struct *p, struct task_ctx *tctx)
{
	charge_run(p, tctx, task_share(p, tctx));
}

/*
 * prev's rival on cpu: the first queued task that may run there. Tasks that cannot (threads
 * pinned to other CPUs) are not rivals: comparing with the head alone let such a task push prev
 * off its CPU in favour of whatever came next, a thread with a later key, and a group entitled to
 * one CPU per thread lost a slice each time (3 % to 10 % of its share on 4 CPUs). The walk stops
 * after KEEP_SCAN tasks; none found by then counts as no rival. Sets its key and, for a rival
 * that may not run on every CPU, its vtime (else 0: no credit bound, see keep_prev).
 */
static bool rival_of(s32 cpu, u64 *key, u64 *vtime)
{
	struct task_struct *p;
	struct task_ctx *rc;
	u32 n = 0;

	bpf_for_each(scx_dsq, p, ZERNEL_DSQ_SHARED, 0) {
		if (++n > KEEP_SCAN)
			break;
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		*key = p->scx.dsq_vtime;
		*vtime = 0;
		if (p->nr_cpus_allowed < nr_cpus) {
			rc = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);
			*vtime = rc ? rc->pub.vtime : *key;
		}
		return true;
	}
	return false;
}

/*
 * ops.dispatch runs before the kernel puts prev back into the queue (ops.stopping and
 * ops.enqueue come after it), so a plain "move the head of the queue" would alternate prev with
 * the head whatever their vtimes. Instead prev, still runnable at the end of its slice, keeps
 * the CPU for another slice when its key (vtime charged up to now, plus its request) is not
 * behind its rival's (rival_of), and its vtime is lifted to the credit bound below the rival's.
 */
static bool keep_prev(struct task_struct *prev, s32 cpu)
{
	struct task_ctx *tctx = task_ctx_get(prev);
	u64 key, share, req, rkey, rvtime, floor;

	if (!tctx)
		return false;
	/* Settle the charge so far, as if it had stopped and started again. */
	account_run(prev, tctx);
	if (task_throttled(tctx))
		return false;
	/*
	 * Its slice ended (or the phase timer kicked it): a phase it changed to while running
	 * applies now, as ops.enqueue would apply it. Kept, the kick has done its work; not kept,
	 * ops.enqueue puts a kicked thread back first (pkicked), since the kick, not its slice,
	 * ended its run.
	 */
	if (phase_follow(prev, tctx, false))
		task_account(prev, tctx);
	share = task_share(prev, tctx);
	req = vscale(task_request(tctx), share);
	key = tctx->pub.vtime + req;
	if (rival_of(cpu, &rkey, &rvtime)) {
		if (time_before(rkey, key))
			return false;
		/*
		 * Credit bound while running, against a rival that may not run everywhere: prev's
		 * vtime at most one default slice of its own service behind the rival's. A thread
		 * with more share than its one CPU can use falls behind without end, and would
		 * keep the CPU from a thread that can only run here (a per-CPU kworker, a pinned
		 * worker) until the starvation rescue, 1 s. Vtimes, not keys: a key holds the
		 * rival's request, ten slices of prev's service when prev's share is ten times the
		 * rival's. Not against a rival that may run anywhere: another CPU takes it in key
		 * order, and prev's credit is what keeps a group entitled to one CPU per thread on
		 * its CPUs (bounded, the host's noise wore it down: 0.89 instead of 1.0).
		 */
		floor = rvtime - vscale(SLICE_DFL_NS, share);
		if (rvtime && time_before(tctx->pub.vtime, floor)) {
			tctx->pub.vtime = floor;
			key = floor + req;
		}
	}
	if (time_before(vtime_now, key))
		vtime_now = key;
	tctx->pkicked = 0;
	scx_bpf_task_set_slice(prev, tctx->slice);
	return true;
}

static void bw_release(void);
static void bw_tick_refill(void);

void BPF_STRUCT_OPS(zernel_dispatch, s32 cpu, struct task_struct *prev)
{
	struct task_struct *head;
	u64 key;

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
	/* A refill from ops.tick thawed a cgroup (cpu.max): its parked threads go back. */
	if (bw_release_pending) {
		bw_release_pending = 0;
		bw_release();
	}
	if (prev && (prev->scx.flags & SCX_TASK_QUEUED) && keep_prev(prev, cpu))
		return;
	/*
	 * vtime_now follows the front of the queue: the head's key, when this CPU takes a task in
	 * order (the head, or the first that may run here: its key is no smaller). Tasks that went
	 * straight to an idle CPU or were rescued do not move it: they may be far ahead, and would
	 * push every sleeper's floor past all the queued tasks (the lag bound keeps such a thread
	 * within two slices of vtime_now when it next wakes). Racy, as in scx_simple: a lost update
	 * only lowers the floor a moment. An empty queue (a CPU going idle, most dispatches of a
	 * ping-pong) costs the peek alone.
	 */
	head = __COMPAT_scx_bpf_dsq_peek(ZERNEL_DSQ_SHARED);
	if (!head)
		return;
	key = head->scx.dsq_vtime;
	if (scx_bpf_dsq_move_to_local(ZERNEL_DSQ_SHARED, 0) && time_before(vtime_now, key))
		vtime_now = key;
}

/*
 * The phase timer (PHASES OF THREADS): while the thread it watches runs on its CPU, looks every
 * period whether the thread's phase changed without the scheduler acting on it, and then kicks
 * the CPU; stops at the first look that finds the thread off the CPU or no longer followed.
 */
static int phase_kick_fire(void *map, u32 *key, struct phase_kick *k)
{
	struct zernel_phase_thread *st;
	struct task_struct *p;
	struct task_ctx *tctx;
	bool again = false;
	u32 idx;

	p = bpf_task_from_pid(k->pid);
	if (p) {
		tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);
		st = phase_state(p);
		if (tctx && st && tctx->weight && scx_bpf_task_running(p) &&
		    scx_bpf_task_cpu(p) == k->cpu) {
			again = true;
			stat_inc(ZERNEL_STAT_PHASE_TIMER);
			idx = st->phase < ZERNEL_PHASE_NR ? st->phase : ZERNEL_PHASE_UNKNOWN;
			/*
			 * To apply: a change not acted on, or the phase's policy itself after a new
			 * decision replaced it (task_refresh: tphase ZERNEL_NO_PHASE).
			 */
			if (st->since_ns == tctx->psince_ns && tctx->tphase != ZERNEL_NO_PHASE) {
				/* nothing new */
			} else if (idx == tctx->tphase) {
				/* Changed and changed back: nothing to apply (phase_follow's rule). */
				tctx->psince_ns = st->since_ns;
			} else {
				tctx->pkicked = 1;
				scx_bpf_kick_cpu(k->cpu, SCX_KICK_PREEMPT);
				stat_inc(ZERNEL_STAT_PHASE_KICK);
			}
		}
		bpf_task_release(p);
	}
	if (again)
		bpf_timer_start(&k->timer, ZERNEL_PHASE_KICK_NS, BPF_F_TIMER_CPU_PIN);
	else
		k->armed = 0;
	return 0;
}

/*
 * ops.running of a followed thread: the timer watches it from now on. Already armed (the thread
 * before it here was followed too, or this one ran on after a kick), the callback finds it at its
 * next look; started anew at each switch it would never fire under a thread that switches more
 * often than its period. Not from another CPU (ops.running also runs on a CPU that holds p's
 * runqueue lock for a property change of p: nice, affinity, policy): a pinned timer starts on
 * the CPU that calls; the tick serves that run.
 */
static __always_inline void phase_kick_arm(struct task_struct *p)
{
	u32 cpu = scx_bpf_task_cpu(p);
	struct phase_kick *k;

	if (cpu != bpf_get_smp_processor_id())
		return;
	k = bpf_map_lookup_elem(&phase_kicks, &cpu);
	if (!k)
		return;
	k->pid = p->pid;
	k->cpu = cpu;
	if (k->armed)
		return;
	k->armed = 1;
	if (bpf_timer_start(&k->timer, ZERNEL_PHASE_KICK_NS, BPF_F_TIMER_CPU_PIN))
		k->armed = 0;
}

/*
 * ops.running of a followed thread: a change made while it waited in a queue applies now, before
 * its weight and slice are read. The probes commit some changes as a thread is switched out still
 * runnable, after ops.enqueue queued it (sched_switch: a DataLoader worker's DataLoading, the
 * optimizer's bound): without this the change waited for the phase timer's first look. So does
 * the phase's policy after a new decision replaced it (task_refresh: tphase ZERNEL_NO_PHASE).
 */
static __always_inline void phase_starts(struct task_struct *p, struct task_ctx *tctx)
{
	struct zernel_phase_thread *st = phase_state(p);

	if (!st || (st->since_ns == tctx->psince_ns && tctx->tphase != ZERNEL_NO_PHASE) ||
	    !phase_follow(p, tctx, false))
		return;
	task_account(p, tctx);
	if (p->scx.slice > tctx->slice)
		scx_bpf_task_set_slice(p, tctx->slice);
}

/* ops.init: the phase timers, when threads follow their phases. */
static s32 phase_kicks_init(void)
{
	struct phase_kick *k;
	s32 ret;
	u32 cpu;

	if (!zernel_follow_phases)
		return 0;
	bpf_for(cpu, 0, nr_cpus) {
		k = bpf_map_lookup_elem(&phase_kicks, &cpu);
		if (!k)
			return -ENOENT;
		ret = bpf_timer_init(&k->timer, &phase_kicks, CLOCK_MONOTONIC);
		if (!ret)
			ret = bpf_timer_set_callback(&k->timer, phase_kick_fire);
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * ops.running has work only for a followed thread of a decided process: the phase timer watches
 * its run. The run time needs no start mark (account_run), vtime_now moves in ops.dispatch, and
 * a thread whose tgid slot counts no followed thread is not looked up (COST).
 */
void BPF_STRUCT_OPS(zernel_running, struct task_struct *p)
{
	struct task_ctx *tctx;

	if (!zernel_follow_phases || !*followed_slot(p))
		return;
	tctx = task_ctx_get(p);
	if (tctx && tctx->weight && tctx->followed) {
		phase_starts(p, tctx);
		phase_kick_arm(p);
	}
}

void BPF_STRUCT_OPS(zernel_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx = task_ctx_get(p);
	struct zernel_task_ctx *tc;
	struct znode *n;

	if (!tctx)
		return;
	tc = &tctx->pub;
	/* One lookup of its node for the charge and the leave. */
	n = tctx->joined ? node_get(tctx->cnode) : NULL;
	charge_run(p, tctx, tctx->joined ? joined_share(tctx, n) : task_share(p, tctx));
	if (!runnable) {
		/* The next wakeup is counted anew (ops.select_cpu, else ops.enqueue). */
		tctx->woke = 0;
		if (zernel_follow_phases && tctx->weight)
			phase_sleeps(p, tctx);
		/* Going to sleep: the burst ends, and the thread leaves its node's load. */
		tc->last_burst_ns = tc->burst_ns;
		tc->avg_burst_ns = tc->avg_burst_ns - (tc->avg_burst_ns >> 3) + (tc->burst_ns >> 3);
		tc->burst_ns = 0;
		task_unaccount_in(tctx, n);
	}
}

/*
 * A running thread whose phase changed since the scheduler last looked (PHASES OF THREADS): the
 * time run so far is charged at the old weight, then the new phase's policy applies: its weight
 * in the node (the victim search reads it from the thread), and its slice when shorter than
 * what is left. (A new phase that preempts needs nothing more: the thread runs.)
 */
static __always_inline void phase_tick(struct task_struct *p, struct task_ctx *tctx)
{
	struct zernel_phase_thread *st;

	st = phase_state(p);
	if (!st || st->since_ns == tctx->psince_ns)
		return;
	account_run(p, tctx);
	if (!phase_follow(p, tctx, false))
		return;
	stat_inc(ZERNEL_STAT_PHASE_TICK);
	task_account(p, tctx);
	if (p->scx.slice > tctx->slice)
		scx_bpf_task_set_slice(p, tctx->slice);
}

/*
 * A followed thread's phase change made while it runs (phase_tick); and, while some cgroup has a
 * quota, charges the running thread's cgroup as it runs and ends its slice at the tick that finds
 * the quota spent (at most one tick over; the overrun is debt that the next period pays back).
 */
void BPF_STRUCT_OPS(zernel_tick, struct task_struct *p)
{
	struct task_ctx *tctx;

	if (!bw_nr && !zernel_follow_phases)
		return;
	if (bw_nr)
		bw_tick_refill();
	tctx = task_ctx_get(p);
	if (!tctx)
		return;
	if (zernel_follow_phases && tctx->weight)
		phase_tick(p, tctx);
	if (!bw_nr || !tctx->limited)
		return;
	account_run(p, tctx);
	if (task_throttled(tctx)) {
		scx_bpf_task_set_slice(p, 0);
		stat_inc(ZERNEL_STAT_THROTTLE_CUT);
	}
}

/*
 * A CPU taken by a higher sched class (an RT or deadline task): the tasks already queued on its
 * local DSQ would wait until that task is done. Put them back through ops.enqueue, which places
 * them elsewhere.
 */
void BPF_STRUCT_OPS(zernel_cpu_release, s32 cpu, struct scx_cpu_release_args *args)
{
	scx_bpf_reenqueue_local();
}

void BPF_STRUCT_OPS(zernel_enable, struct task_struct *p)
{
	struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);

	if (!tctx)
		return;
	tctx->pub.vtime = vtime_now;
	/* Run time before (under another class) is not ours to charge. */
	tctx->sum_at = p->se.sum_exec_runtime;
	tctx->woke = 0;
}

void BPF_STRUCT_OPS(zernel_disable, struct task_struct *p)
{
	struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);

	if (!tctx)
		return;
	task_unaccount(tctx);
	/* Leaving the scheduler (or exiting): its tgid slot stops counting it. */
	set_followed(p, tctx, false);
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
	tctx->tphase = ZERNEL_NO_PHASE;
	tctx->cgid = 0;
	if (bpf_core_field_exists(args->cgroup) && args->cgroup)
		tctx->cgid = cgrp_node_id(args->cgroup);
	mask = bpf_cpumask_create();
	if (!mask)
		return -ENOMEM;
	mask = bpf_kptr_xchg(&tctx->tmp_mask, mask);
	if (mask)
		bpf_cpumask_release(mask);
	return 0;
}

/* ---- cgroups ---- */

/* Registers (quota) or drops (none) the cgroup's bandwidth slot. */
static void bw_register(u64 id, bool on)
{
	u32 i;

	bpf_for(i, 0, ZERNEL_MAX_BW) {
		u32 k = i;
		u64 *slot = bpf_map_lookup_elem(&bw_ids, &k);

		if (!slot)
			return;
		if (*slot == id) {
			if (!on) {
				*slot = 0;
				__sync_fetch_and_sub(&bw_nr, 1);
			}
			return;
		}
	}
	if (!on)
		return;
	bpf_for(i, 0, ZERNEL_MAX_BW) {
		u32 k = i;
		u64 *slot = bpf_map_lookup_elem(&bw_ids, &k);

		if (!slot)
			return;
		if (__sync_val_compare_and_swap(slot, 0, id) == 0) {
			__sync_fetch_and_add(&bw_nr, 1);
			return;
		}
	}
	scx_bpf_error("more than %d cgroups with a cpu.max quota", ZERNEL_MAX_BW);
}

static void node_set_bandwidth(u64 id, u64 period_us, u64 quota_us)
{
	struct znode *n = node_get(id);
	bool on;

	if (!n || !id)
		return;
	on = quota_us < BW_QUOTA_INF_US && period_us;
	n->quota_ns = on ? quota_us * 1000 : 0;
	n->period_ns = on ? period_us * 1000 : 0;
	n->bw_used = 0;
	n->period_end = now_ns() + n->period_ns;
	n->throttled = 0;
	bw_register(id, on);
	__sync_fetch_and_add(&tree_gen, 1);
}

s32 BPF_STRUCT_OPS_SLEEPABLE(zernel_cgroup_init, struct cgroup *cgrp,
			     struct scx_cgroup_init_args *args)
{
	u64 id = cgrp_node_id(cgrp);
	struct znode init = {}, *n;
	struct cgroup *parent;

	if (!id) {
		root_node.weight = ZERNEL_WEIGHT_DFL;
		return 0;
	}
	init.weight = cg_to_1024(args->weight);
	if (cgrp->level > 1) {
		parent = bpf_cgroup_ancestor(cgrp, cgrp->level - 1);
		if (!parent)
			return -ENOENT;
		init.parent = parent->kn->id;
		bpf_cgroup_release(parent);
	}
	if (bpf_map_update_elem(&nodes, &id, &init, BPF_ANY))
		return -ENOMEM;
	n = bpf_map_lookup_elem(&nodes, &id);
	if (!n)
		return -ENOENT;
	if (bpf_core_field_exists(args->bw_quota_us))
		node_set_bandwidth(id, args->bw_period_us, args->bw_quota_us);
	return 0;
}

void BPF_STRUCT_OPS(zernel_cgroup_exit, struct cgroup *cgrp)
{
	u64 id = cgrp_node_id(cgrp);
	struct znode *n;

	if (!id)
		return;
	n = bpf_map_lookup_elem(&nodes, &id);
	if (n && n->quota_ns)
		bw_register(id, false);
	bpf_map_delete_elem(&nodes, &id);
	__sync_fetch_and_add(&tree_gen, 1);
}

void BPF_STRUCT_OPS(zernel_cgroup_move, struct task_struct *p, struct cgroup *from,
		    struct cgroup *to)
{
	struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);

	if (!tctx)
		return;
	tctx->cgid = cgrp_node_id(to);
	if (tctx->joined)
		task_account(p, tctx);
}

void BPF_STRUCT_OPS(zernel_cgroup_set_weight, struct cgroup *cgrp, u32 weight)
{
	node_set_weight(cgrp_node_id(cgrp), cg_to_1024(weight));
}

void BPF_STRUCT_OPS_SLEEPABLE(zernel_cgroup_set_bandwidth, struct cgroup *cgrp, u64 period_us,
			      u64 quota_us, u64 burst_us)
{
	node_set_bandwidth(cgrp_node_id(cgrp), period_us, quota_us);
}

/* ---- timers ---- */

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
		if (scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, ZERNEL_DSQ_RESCUE, 0))
			stat_inc(ZERNEL_STAT_STARVE_RESCUE);
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

/* Starts the periods that ended, paying back what the quota covers; true when one thawed. */
static bool bw_refill(u64 now)
{
	bool thawed = false;
	u32 i;

	bpf_for(i, 0, ZERNEL_MAX_BW) {
		u32 k = i;
		u64 *slot = bpf_map_lookup_elem(&bw_ids, &k), id, periods;
		struct znode *n;
		s64 used;

		if (!slot || !*slot)
			continue;
		id = *slot;
		n = bpf_map_lookup_elem(&nodes, &id);
		if (!n || !n->quota_ns || !n->period_ns || time_before(now, n->period_end))
			continue;
		periods = time_delta(now, n->period_end) / n->period_ns + 1;
		if (periods > 1000)
			periods = 1000;
		used = __sync_sub_and_fetch(&n->bw_used, (s64)(periods * n->quota_ns));
		if (used < 0)
			__sync_fetch_and_sub(&n->bw_used, used);	/* no credit from idle periods */
		n->period_end += periods * n->period_ns;
		if (n->throttled && used < (s64)n->quota_ns) {
			n->throttled = 0;
			thawed = true;
		}
	}
	return thawed;
}

/*
 * Claims the refill that is due (one per ZERNEL_BW_TICK_NS step, whoever comes first: the timer or
 * a tick) and does it; true when it thawed a cgroup.
 */
static bool bw_refill_due(u64 now)
{
	u64 due = bw_next_ns;

	if (time_before(now, due))
		return false;
	if (__sync_val_compare_and_swap(&bw_next_ns, due, now + ZERNEL_BW_TICK_NS) != due)
		return false;
	return bw_refill(now);
}

/* Tasks parked in the throttled DSQ whose cgroups have quota again go back to the queue. */
static void bw_release(void)
{
	struct task_struct *p;

	bpf_rcu_read_lock();
	bpf_for_each(scx_dsq, p, ZERNEL_DSQ_THROTTLED, 0) {
		struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);
		s32 cpu;

		if (tctx && zernel_node_throttled(tctx->cgid))
			continue;
		if (tctx) {
			scx_bpf_dsq_move_set_vtime(BPF_FOR_EACH_ITER, tctx->key);
			tctx->pub.queued_at = now_ns();
		}
		if (!scx_bpf_dsq_move_vtime(BPF_FOR_EACH_ITER, p, ZERNEL_DSQ_SHARED, 0))
			continue;
		stat_inc(ZERNEL_STAT_UNTHROTTLED);
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (cpu >= 0)
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	}
	bpf_rcu_read_unlock();
}

/*
 * The refill step from ops.tick. A BPF timer is a soft one: in the VM its callbacks came 8-90 ms
 * late (on an idle CPU most), three refill periods late at worst, and the quota those periods
 * held was lost (a cgroup at cpu.max 20 % got 12-15 % of a CPU on 4 vCPUs). A tick comes from the
 * hard timer interrupt of every busy CPU. It cannot move tasks between queues (only ops.dispatch
 * and timers may): it flags the release for the next ops.dispatch and kicks an idle CPU to make
 * one. Idle CPUs have no tick; with every CPU idle the timer is left, and nothing else waits.
 */
static void bw_tick_refill(void)
{
	const struct cpumask *idle;
	s32 cpu;

	if (!bw_refill_due(now_ns()))
		return;
	bw_release_pending = 1;
	idle = scx_bpf_get_idle_cpumask();
	cpu = bpf_cpumask_any_distribute(idle);
	scx_bpf_put_idle_cpumask(idle);
	if (cpu < nr_cpus)
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
}

static int bw_timer(void *map, int *key, struct bpf_timer *timer)
{
	if (bw_nr) {
		bw_refill_due(now_ns());
		if (scx_bpf_dsq_nr_queued(ZERNEL_DSQ_THROTTLED) > 0)
			bw_release();
	}
	bpf_timer_start(timer, ZERNEL_BW_TICK_NS, 0);
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

static s32 start_timer(u32 idx, void *cb, u64 after_ns)
{
	struct zernel_timer *t = bpf_map_lookup_elem(&zernel_timers, &idx);
	s32 ret;

	if (!t)
		return -ENOENT;
	ret = bpf_timer_init(&t->timer, &zernel_timers, CLOCK_MONOTONIC);
	if (!ret)
		ret = bpf_timer_set_callback(&t->timer, cb);
	if (!ret)
		ret = bpf_timer_start(&t->timer, after_ns, 0);
	return ret;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(zernel_init)
{
	s32 ret;

	init_at = now_ns();
	if (!root_node.weight)
		root_node.weight = ZERNEL_WEIGHT_DFL;
	ret = scx_bpf_create_dsq(ZERNEL_DSQ_SHARED, -1);
	if (!ret)
		ret = scx_bpf_create_dsq(ZERNEL_DSQ_RESCUE, -1);
	if (!ret)
		ret = scx_bpf_create_dsq(ZERNEL_DSQ_THROTTLED, -1);
	if (ret) {
		scx_bpf_error("creating the DSQs: %d", ret);
		return ret;
	}
	ret = build_node_masks();
	if (ret) {
		scx_bpf_error("building the NUMA node cpumasks: %d", ret);
		return ret;
	}
	ret = start_timer(0, starve_scan, (u64)ZERNEL_STARVE_SCAN_US * 1000);
	if (!ret)
		ret = start_timer(1, bw_timer, ZERNEL_BW_TICK_NS);
	if (!ret)
		ret = phase_kicks_init();
	if (ret) {
		scx_bpf_error("starting the timers: %d", ret);
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
	scx_bpf_dump("zernel: vtime=%llu (now %llu) queued_at=%llu runtime=%llu wakeups=%llu node=%llx",
		     tctx->pub.vtime, vtime_now, tctx->pub.queued_at, tctx->pub.runtime_ns,
		     tctx->pub.wakeups, tctx->cnode);
}

SCX_OPS_DEFINE(zernel_ops,
	       /* A task whose slice ends with nothing else to run comes to ops.enqueue: cpu.max
		* parks it there (the kernel would otherwise run it on with a new slice). */
	       .flags			= SCX_OPS_ENQ_LAST,
	       .select_cpu		= (void *)zernel_select_cpu,
	       .enqueue			= (void *)zernel_enqueue,
	       .dispatch		= (void *)zernel_dispatch,
	       .tick			= (void *)zernel_tick,
	       .running			= (void *)zernel_running,
	       .stopping		= (void *)zernel_stopping,
	       .enable			= (void *)zernel_enable,
	       .disable			= (void *)zernel_disable,
	       .init_task		= (void *)zernel_init_task,
	       .cgroup_init		= (void *)zernel_cgroup_init,
	       .cgroup_exit		= (void *)zernel_cgroup_exit,
	       .cgroup_move		= (void *)zernel_cgroup_move,
	       .cgroup_set_weight	= (void *)zernel_cgroup_set_weight,
	       .cgroup_set_bandwidth	= (void *)zernel_cgroup_set_bandwidth,
	       .cpu_release		= (void *)zernel_cpu_release,
	       .dump_task		= (void *)zernel_dump_task,
	       .init			= (void *)zernel_init,
	       .exit			= (void *)zernel_exit,
	       .name			= ZERNEL_SCHED_NAME);
