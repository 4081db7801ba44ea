/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rules.bpf.h: the probes' shared state and the per-thread phase rules, in one header that two
 * BPF objects include: the probes (probes.bpf.c: the context-switch tracepoint, the GPU sync
 * uprobes, thread exit) and the sched_ext scheduler (zernel.bpf.c), which runs the context-switch
 * rules in its own ops.stopping and ops.running when it carries them (WHERE THE SWITCH RULES RUN,
 * probes.bpf.c). Each object gets its own copy of every map and of the two data sections below;
 * the scheduler's loader hands it the probes' ones (bpf_map__reuse_fd, by name), so both objects
 * read and write one state: one follow bitmap, one phase per thread, one ring buffer.
 *
 * The globals live in sections of their own, not in .bss and .rodata, so that sharing them
 * shares nothing else of either object: .data.zprobe (the follow bitmap, the unsent flag) and
 * .rodata.zprobe (the rules' knobs, set by the probes' loader; frozen at their load, so the
 * verifier of either object folds them as constants).
 */
#ifndef ZERNEL_PROBES_RULES_BPF_H
#define ZERNEL_PROBES_RULES_BPF_H

#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "probes.h"

#ifndef CLOCK_MONOTONIC
#define CLOCK_MONOTONIC 1
#endif
#ifndef EBUSY
#define EBUSY 16
#endif

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, ZERNEL_PROBE_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct zernel_probe_proc);
} zernel_probe_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ZERNEL_PROBE_MAX_THREADS);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* memory for the threads that sync, not 65,536 */
	__type(key, __u32);
	__type(value, struct zernel_probe_thread);
} zernel_probe_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ZERNEL_PROBE_MAX_PROCS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct zernel_probe_futex);
} zernel_probe_futex SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ZERNEL_PROBE_STAT_NR);
	__type(key, __u32);
	__type(value, __u64);
} zernel_probe_stats SEC(".maps");

/*
 * The processes user space follows, by tgid & ZERNEL_FOLLOW_MASK (probes.h). A plain global: its
 * test is a load from a fixed address, cheaper than any map lookup, which is the point.
 */
__u64 zernel_follow[ZERNEL_FOLLOW_WORDS] SEC(".data.zprobe");

static __always_inline bool followed(__u32 tgid)
{
	__u32 bit = tgid & ZERNEL_FOLLOW_MASK;

	return zernel_follow[bit / 64] & (1ULL << (bit % 64));
}

static __always_inline void probe_stat_inc(enum zernel_probe_stat stat)
{
	__u32 key = stat;
	__u64 *v = bpf_map_lookup_elem(&zernel_probe_stats, &key);

	if (v)
		(*v)++; /* per CPU: no other writer */
}

/* The process's entry, created (zeroed) if it has none; NULL only when that fails. */
static __always_inline struct zernel_probe_proc *proc_get(__u32 tgid)
{
	struct zernel_probe_proc *p, zero = {};

	p = bpf_map_lookup_elem(&zernel_probe_procs, &tgid);
	if (p)
		return p;
	/* NOEXIST: another thread of the process may have created it meanwhile; keep theirs. */
	bpf_map_update_elem(&zernel_probe_procs, &tgid, &zero, BPF_NOEXIST);
	p = bpf_map_lookup_elem(&zernel_probe_procs, &tgid);
	if (!p)
		probe_stat_inc(ZERNEL_PROBE_STAT_PROC_MAP_FULL);
	return p;
}

/* in_sync -= 1, never below 0 (the entry may have been evicted and recreated meanwhile). */
static __always_inline void proc_leave(struct zernel_probe_proc *p)
{
	if (__sync_fetch_and_add(&p->in_sync, -1) == 0)
		__sync_fetch_and_add(&p->in_sync, 1);
}

/*
 * PHASES FROM EVENTS (probes.h, docs/probes.md "Phases from events"). Each thread of a process
 * user space names in zernel_phase_procs keeps its phase in task storage; the rules, by role:
 *
 *   rank (a GPU process), its driver threads (rank_driver: a thread that has entered a GPU sync;
 *   until one has, the main thread); every other thread has no phase (Unknown, no event), and a
 *   main thread that had one becomes Unknown when another thread syncs first (not_driver):
 *     outermost GPU sync entry          -> GpuCompute; in OptimizerStep the thread stays there
 *                                          unless the sync outlasts zernel_sync_hyst_ns (the
 *                                          optimizer's own short syncs), and then it is
 *                                          GpuCompute from the sync's entry, committed at its
 *                                          return (the thread sleeps meanwhile: nothing is
 *                                          scheduled on a wrong phase)
 *     outermost GPU sync return         -> OptimizerStep (CPU work the GPU waits for)
 *     sleeps in a futex wait on an NCCL segment -> NcclCollective (a shared futex, not
 *                                          FUTEX_PRIVATE_FLAG, on a mapping named nccl-*)
 *     woken from it (runs again)        -> OptimizerStep
 *     blocks (sleeps, not preempted) in read, pread, readv, preadv, recvfrom, recvmsg,
 *     recvmmsg, poll, ppoll, select, pselect6, epoll_wait, epoll_pwait or epoll_pwait2, outside
 *     a GPU sync and an NCCL wait       -> DataLoading (waiting for a batch)
 *     runs again after that wait, still DataLoading -> GpuCompute (the batch arrived: what the
 *                                          thread does next is the step's GPU work, its
 *                                          launches and then the sync; launches themselves
 *                                          are not probed, docs/probes.md "Kernel launches")
 *     OptimizerStep for more than zernel_optimizer_max_ns of CPU since it began or since its
 *     last (short) sync, seen when it leaves a CPU -> Unknown
 *     a DataLoader worker it forked wakes from an idle sleep while it is in OptimizerStep,
 *     outside a sync and an NCCL wait -> GpuCompute (it took a ready batch: BATCH TAKEN below)
 *     enters a sync in OptimizerStep more than 1.5 times its learned optimizer length (+2 ms)
 *     after the step began   -> GpuCompute from where the step ended (OPTIMIZER LENGTH below)
 *     slept in a futex wait (outside a GPU sync and an NCCL wait) for zernel_batch_wait_ns or
 *     more, from OptimizerStep, Unknown (before its first step, or the Unknown the optimizer's
 *     bound left) or GpuCompute outside a sync (a batch came, not the one it waits for;
 *     batch_wait_from) -> DataLoading from when it fell asleep, then GpuCompute, committed
 *     when it wakes (the wait for a batch that a pin-memory thread hands over in a queue:
 *     pin_memory=True; a shorter wait, the GIL's or a lock's, changes nothing)
 *   worker (a DataLoader worker), every thread:
 *     runs, or sleeps uninterruptibly (block I/O)        -> DataLoading (producing a batch)
 *     slept interruptibly for zernel_idle_hyst_ns or more -> Unknown from when it fell asleep,
 *                                          committed when it wakes (then DataLoading again;
 *                                          its main thread's wake may end its driver's
 *                                          OptimizerStep: BATCH TAKEN)
 *   a thread already asleep when its process was named: at its first switch-in, the rules above
 *   as if its sleep had begun at the naming (FIRST SIGHT, below)
 *
 * Shorter futex waits (a lock, the GIL) and other sleeps change nothing; a long lock wait or a
 * thread join in those phases reads as a batch's wait (only the log is wrong: the thread slept
 * through it). A change is committed at once, with the time of its event, and sent to
 * zernel_phase_events; the three backdated ones (a long sync begun in OptimizerStep, a long
 * futex wait, an idle worker) are sent when they are known, with the earlier time.
 *
 * COST. The switch rules run for every context switch of the machine while any process is
 * followed (in the sched_switch tracepoint, or in the scheduler's ops.stopping and ops.running
 * where it carries them), so the path of a task nobody follows is the one to keep short: it leaves at its tgid's bit in
 * zernel_follow (prev's and next's), before any lookup or clock read, and gets no storage. A
 * thread of a followed process looks its storage up; the first time a program that may create
 * state sees it, its tgid is looked up in zernel_phase_procs, and storage is created only when
 * the process has a role (a followed process without one, or an unfollowed one that shares its
 * bit, pays that lookup at each event, and keeps no state). The clock is read only for a thread
 * with a role. Every shared futex wait a rank thread sleeps in costs one VMA lookup (private
 * ones, locks and the GIL, none). A change the tracepoint makes as a thread that the sched_ext
 * scheduler follows is switched in kicks its CPU once (sched_kick), so that the scheduler applies
 * it now (ops.running, carrying the rules, applies it itself). Measured:
 * docs/benchmarks.md, "The tax on the rest of the node".
 */
const volatile __u64 zernel_sync_hyst_ns SEC(".rodata.zprobe") = 10000000;
const volatile __u64 zernel_idle_hyst_ns SEC(".rodata.zprobe") = 2000000;
const volatile __u64 zernel_optimizer_max_ns SEC(".rodata.zprobe") = 200000000;
/* A driver's futex wait in batch_wait_from's phases at least this long was a wait for a batch
 * (the GIL is handed over every 5 ms: its waits are shorter). */
const volatile __u64 zernel_batch_wait_ns SEC(".rodata.zprobe") = 10000000;
/* Phases from events on: the rules below run and threads of named processes get storage. */
const volatile __u8 zernel_phase_rules SEC(".rodata.zprobe") = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ZERNEL_PHASE_MAX_PROCS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct zernel_phase_proc);
} zernel_phase_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct zernel_phase_thread);
} zernel_phase_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, ZERNEL_PHASE_RING_BYTES);
} zernel_phase_events SEC(".maps");

/*
 * LOST CHANGES. A change the ring buffer has no room for (user space fell behind: a stopped or
 * starved daemon, a burst of changes) is kept here as its thread's last one, replacing an older
 * kept one, and zernel_phase_unsent_pending is set; user space takes the entries at its next
 * drain, so its view of each thread is the thread's real phase again, from the time of the
 * change (the changes in between are lost; the scheduler reads the phases from task storage and
 * never depended on the ring). A later change of the thread that goes through the ring deletes
 * the kept one (the thread's `unsent` byte says there is one, so no lookup otherwise).
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, ZERNEL_PHASE_UNSENT_MAX);
	__type(key, __u32);
	__type(value, struct zernel_phase_event);
} zernel_phase_unsent SEC(".maps");

__u32 zernel_phase_unsent_pending SEC(".data.zprobe");

/* task_struct states (include/linux/sched.h; vmlinux.h has no macros). */
#define ZERNEL_TASK_INTERRUPTIBLE   0x1
#define ZERNEL_TASK_UNINTERRUPTIBLE 0x2

/* Commits `phase` at `t` and sends the change; nothing when the thread is in it already. */
static __always_inline void phase_set(struct zernel_phase_thread *st, struct task_struct *task,
				      __u8 phase, __u8 cause, __u64 t)
{
	struct zernel_phase_event ev = {};

	if (st->phase == phase)
		return;
	st->phase = phase;
	st->since_ns = t;
	st->runtime_at_since = BPF_CORE_READ(task, se.sum_exec_runtime);
	ev.t_ns = t;
	ev.tid = BPF_CORE_READ(task, pid);
	ev.tgid = st->tgid;
	ev.phase = phase;
	ev.cause = cause;
	if (bpf_ringbuf_output(&zernel_phase_events, &ev, sizeof(ev), 0)) {
		/* No room: the change waits for user space as the thread's last one. */
		probe_stat_inc(ZERNEL_PROBE_STAT_PHASE_EVENT_LOST);
		if (bpf_map_update_elem(&zernel_phase_unsent, &ev.tid, &ev, BPF_ANY)) {
			probe_stat_inc(ZERNEL_PROBE_STAT_UNSENT_FAILED);
			return;
		}
		st->unsent = 1;
		zernel_phase_unsent_pending = 1; /* after the entry: user space clears it first */
		return;
	}
	probe_stat_inc(ZERNEL_PROBE_STAT_PHASE_EVENT);
	if (st->unsent) { /* a later change went through: the kept one is stale */
		st->unsent = 0;
		bpf_map_delete_elem(&zernel_phase_unsent, &ev.tid);
	}
}

/* `*now`, read from the clock the first time it is needed. */
static __always_inline __u64 now_of(__u64 *now)
{
	if (!*now)
		*now = bpf_ktime_get_ns();
	return *now;
}

/* A new state for a thread without one, of process tgid whose entry is pp: Unknown from now. */
static __always_inline struct zernel_phase_thread *
phase_thread_new(struct task_struct *task, __u32 tgid, const struct zernel_phase_proc *pp,
		 __u64 *now)
{
	struct zernel_phase_thread *st;

	st = bpf_task_storage_get(&zernel_phase_threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st) {
		probe_stat_inc(ZERNEL_PROBE_STAT_PHASE_NO_STORAGE);
		return NULL;
	}
	st->tgid = tgid;
	st->role = (__u8)pp->role;
	st->phase = ZERNEL_PROBE_PHASE_UNKNOWN;
	st->since_ns = now_of(now);
	return st;
}

/*
 * The thread's state; with `create`, made (Unknown since now) for a thread of a process that
 * has a role. NULL for the threads of other processes, which get no storage. Callers that run
 * for every task have tested zernel_follow first.
 */
static __always_inline struct zernel_phase_thread *phase_thread(struct task_struct *task,
								bool create, __u64 *now)
{
	struct zernel_phase_thread *st;
	struct zernel_phase_proc *pp;
	__u32 tgid;

	st = bpf_task_storage_get(&zernel_phase_threads, task, 0, 0);
	if (st || !create)
		return st;
	tgid = BPF_CORE_READ(task, tgid);
	pp = bpf_map_lookup_elem(&zernel_phase_procs, &tgid);
	return pp ? phase_thread_new(task, tgid, pp, now) : NULL;
}

/*
 * A rank's driver thread, the one the rank rules apply to: a thread that has entered a GPU sync,
 * and, while no thread of the process has, its main thread (tid == tgid). The main thread pays
 * one hash lookup per event until it syncs itself.
 */
static __always_inline bool rank_driver(const struct zernel_phase_thread *st,
					struct task_struct *task)
{
	struct zernel_phase_proc *pp;
	__u32 tgid = st->tgid;

	if (st->driver)
		return true;
	if (task->pid != tgid)
		return false;
	pp = bpf_map_lookup_elem(&zernel_phase_procs, &tgid);
	return pp && !pp->synced;
}

/*
 * OPTIMIZER LENGTH. A driver whose batch is ready when it asks for it (a DataLoader that keeps
 * up; with pin_memory=True the batch comes from a queue without a wait) goes from its optimizer
 * step into the next step's forward pass without any event the probes see: launches are not
 * probed (docs/probes.md, "Kernel launches"), and on a real GPU the optimizer launches kernels
 * too. The rules would keep it in OptimizerStep until the step's sync, the whole forward and
 * backward pass. So each driver learns how long its optimizer step lasts, from the steps where a
 * wait for data ended it (a blocking read or poll, or a batch's futex wait, begun in
 * OptimizerStep): opt_us, a running average (3/4 the old value, 1/4 the new one). A sync entered
 * in OptimizerStep more than 1.5 times that (+2 ms) after the step began ends it: GpuCompute
 * from the step's start plus opt_us, sent with that earlier time (the scheduler gets it at the
 * sync's entry; a blocking sync is asleep by then). Syncs inside the optimizer step (a loss's
 * .item(), gradient clipping) come before that point and keep the hysteresis rule. A driver
 * that never waits for data learns nothing and keeps the rule as it was.
 */
enum {
	ZERNEL_OPT_SLACK_NS = 2000000,
};

static __always_inline void opt_learn(struct zernel_phase_thread *st, __u64 end_ns)
{
	__u64 len = end_ns > st->since_ns ? end_ns - st->since_ns : 0;
	__u32 us;

	if (st->phase != ZERNEL_PROBE_PHASE_OPTIMIZER_STEP || len > zernel_optimizer_max_ns)
		return;
	us = (__u32)(len / 1000);
	st->opt_us = st->opt_us ? (__u32)(((__u64)st->opt_us * 3 + us) / 4) : (us ? us : 1);
}

/*
 * A rank thread's sync entry and return (the GPU rules above). Each returns the thread's state
 * when it changed the phase (the SYNC KICKS below ask the scheduler to apply it), else NULL.
 */
static __always_inline struct zernel_phase_thread *phase_sync_enter(__u64 now)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct zernel_phase_thread *st = phase_thread(task, true, &now);
	struct zernel_phase_proc *pp;
	__u64 since, opt;
	__u32 tgid;

	if (!st || st->role != ZERNEL_PHASE_ROLE_RANK)
		return NULL;
	if (!st->driver) {
		st->driver = 1;
		tgid = st->tgid;
		pp = bpf_map_lookup_elem(&zernel_phase_procs, &tgid);
		if (pp && !pp->synced)
			pp->synced = 1;
	}
	st->depth = 1;
	since = st->since_ns;
	if (st->phase == ZERNEL_PROBE_PHASE_OPTIMIZER_STEP) {
		opt = (__u64)st->opt_us * 1000;
		if (opt && now - since > opt + opt / 2 + ZERNEL_OPT_SLACK_NS) {
			phase_set(st, task, ZERNEL_PROBE_PHASE_GPU_COMPUTE,
				  ZERNEL_CAUSE_OPTIMIZER_END, since + opt);
			return st;
		}
		st->pending_ns = now;
		return NULL;
	}
	phase_set(st, task, ZERNEL_PROBE_PHASE_GPU_COMPUTE, ZERNEL_CAUSE_SYNC_ENTER, now);
	return st->since_ns != since ? st : NULL;
}

static __always_inline struct zernel_phase_thread *phase_sync_return(__u64 now)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct zernel_phase_thread *st = phase_thread(task, false, &now);
	__u64 since;

	if (!st || st->role != ZERNEL_PHASE_ROLE_RANK)
		return NULL;
	st->depth = 0;
	since = st->since_ns;
	if (st->pending_ns) {
		if (now - st->pending_ns >= zernel_sync_hyst_ns)
			phase_set(st, task, ZERNEL_PROBE_PHASE_GPU_COMPUTE, ZERNEL_CAUSE_LONG_SYNC,
				  st->pending_ns);
		st->pending_ns = 0;
	}
	if (st->phase == ZERNEL_PROBE_PHASE_GPU_COMPUTE)
		phase_set(st, task, ZERNEL_PROBE_PHASE_OPTIMIZER_STEP, ZERNEL_CAUSE_SYNC_RETURN,
			  now);
	else if (st->phase == ZERNEL_PROBE_PHASE_OPTIMIZER_STEP) /* the bound is per burst */
		st->runtime_at_since = BPF_CORE_READ(task, se.sum_exec_runtime);
	return st->since_ns != since ? st : NULL;
}

/* bpf_find_vma's callback: is the mapping a file named nccl-* (NCCL's /dev/shm segments)? */
static long nccl_vma(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	const unsigned char *name = BPF_CORE_READ(vma, vm_file, f_path.dentry, d_name.name);
	char head[5] = {};

	if (name && !bpf_probe_read_kernel(head, sizeof(head), name) && head[0] == 'n' &&
	    head[1] == 'c' && head[2] == 'c' && head[3] == 'l' && head[4] == '-')
		*(__u8 *)data = 1;
	return 0;
}

/*
 * A sleeping thread's system call, from the registers it entered the kernel with (x86-64).
 *
 * orig_ax is the syscall number only when the thread entered the kernel by a system call: an
 * exception keeps its error code there (a page fault's, 7 for a write to a present page, a
 * copy-on-write after fork, reads as poll) and an interrupt its vector. The syscall entry
 * stores -ENOSYS in ax, where the call's return value goes only when it returns, so a thread
 * asleep inside a syscall has ax == -ENOSYS; one asleep in a page fault (swap-in, a file page
 * read, userfaultfd) has its own user rax there. (A user rax of exactly -38 in a fault would
 * still be taken for a syscall: no code we know of faults with that.) The object is built for
 * x86-64 only (cmake/Bpf.cmake, __TARGET_ARCH_x86); on arm64, syscallno is NO_SYSCALL (-1)
 * outside a syscall and the numbers differ: a port needs its own table.
 */
struct zernel_sleep_call {
	long nr;    /* syscall number; -1 none (not in a syscall) */
	__u64 arg0; /* rdi: futex's uaddr */
	__u64 arg1; /* rsi: futex's op */
};

#define ZERNEL_ENOSYS 38

static __always_inline struct zernel_sleep_call sleep_call(struct task_struct *task)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	struct zernel_sleep_call c = {.nr = -1};

	if (!regs || (long)BPF_CORE_READ(regs, ax) != -ZERNEL_ENOSYS)
		return c;
	c.nr = BPF_CORE_READ(regs, orig_ax);
	c.arg0 = BPF_CORE_READ(regs, di);
	c.arg1 = BPF_CORE_READ(regs, si);
	return c;
}

/* futex(2) with one of the three wait ops (private and clock flags dropped). */
static __always_inline bool is_futex_wait(const struct zernel_sleep_call *c)
{
	__u32 cmd = (__u32)c->arg1 & (__u32)ZERNEL_FUTEX_CMD_MASK;

	return c->nr == 202 /* futex */ &&
	       (cmd == ZERNEL_FUTEX_WAIT || cmd == ZERNEL_FUTEX_WAIT_BITSET ||
		cmd == ZERNEL_FUTEX_WAIT_REQUEUE_PI);
}

/* A wait for a batch: the syscall a sleeping thread is in (x86-64 numbers). */
static __always_inline bool is_data_wait(const struct zernel_sleep_call *c)
{
	switch (c->nr) {
	case 0:	  /* read */
	case 7:	  /* poll */
	case 17:  /* pread64 */
	case 19:  /* readv */
	case 23:  /* select */
	case 45:  /* recvfrom */
	case 47:  /* recvmsg */
	case 232: /* epoll_wait */
	case 270: /* pselect6 */
	case 271: /* ppoll */
	case 281: /* epoll_pwait */
	case 295: /* preadv */
	case 299: /* recvmmsg */
	case 441: /* epoll_pwait2 */
		return true;
	}
	return false;
}

/*
 * A rank thread's futex wait, on a word in an nccl-* mapping? Only a shared futex can be: NCCL's
 * segments are MAP_SHARED files that its processes wait on together, and a FUTEX_PRIVATE_FLAG
 * wait (every pthread lock, condition variable and the GIL of a process) is keyed by the address
 * in one process only, so it is never walked. A check that cannot be done (bpf_find_vma takes
 * mmap_lock with a trylock and answers -EBUSY when it is contended) is counted; -ENOENT (no
 * mapping at that address) is an answer, not a miss.
 */
static __always_inline bool nccl_wait(struct task_struct *task, const struct zernel_sleep_call *c)
{
	__u8 nccl = 0;
	long err;

	if ((__u32)c->arg1 & ZERNEL_FUTEX_PRIVATE_FLAG)
		return false;
	probe_stat_inc(ZERNEL_PROBE_STAT_NCCL_CHECK);
	err = bpf_find_vma(task, c->arg0, nccl_vma, &nccl, 0);
	if (err && err != -2 /* -ENOENT */)
		probe_stat_inc(ZERNEL_PROBE_STAT_NCCL_CHECK_MISSED);
	return !err && nccl;
}

/*
 * The phases a driver's long futex wait is a wait for a batch from: after its optimizer step
 * (OptimizerStep, or the Unknown its bound left), before its first step (Unknown: the first
 * batch), or again after a batch came (GpuCompute outside a sync). Not from DataLoading
 * (already) nor NcclCollective.
 */
static __always_inline bool batch_wait_from(const struct zernel_phase_thread *st)
{
	return st->phase == ZERNEL_PROBE_PHASE_OPTIMIZER_STEP ||
	       st->phase == ZERNEL_PROBE_PHASE_GPU_COMPUTE ||
	       st->phase == ZERNEL_PROBE_PHASE_UNKNOWN;
}

/* A thread of a followed process goes to sleep in a futex wait: counted for a tracked process. */
static __always_inline void count_futex_wait(struct task_struct *task, __u64 *now)
{
	__u32 tgid = task->tgid;
	struct zernel_probe_futex *f = bpf_map_lookup_elem(&zernel_probe_futex, &tgid);

	if (!f) {
		probe_stat_inc(ZERNEL_PROBE_STAT_FUTEX_UNTRACKED);
		return;
	}
	__sync_fetch_and_add(&f->waits, 1);
	if (task->pid == tgid)
		f->main_wait_ns = now_of(now); /* only the main thread writes it */
	probe_stat_inc(ZERNEL_PROBE_STAT_FUTEX_WAIT);
}

/*
 * BATCH TAKEN. A DataLoader whose batches are ready when the driver asks for one (its workers
 * keep up, so each has done its share and sleeps on its index queue) hands the driver a batch
 * without any event the probes see (OPTIMIZER LENGTH above); but the same next() sends a worker
 * the index of a later batch (a write to that worker's index pipe, through the queue's feeder
 * thread), and that worker, idle until then, wakes. So a worker's main thread that wakes from an
 * idle sleep (past zernel_idle_hyst_ns) while the rank thread that forked it, its driver, is in
 * OptimizerStep outside a sync and an NCCL wait means the driver has taken its batch: GpuCompute
 * from that wake (a few milliseconds before or after next() returns: the index is sent just
 * before it returns, and the feeder waits for the GIL). The optimizer step's length is learned
 * there too, as from a wait for data. A worker that is the bottleneck does not sleep between its
 * batches, and its driver waits for data instead (the rules above): nothing changes there.
 * Known weaknesses: the fork's parent is taken as the driver (a DataLoader iterated in another
 * thread than the one that forked its workers is not seen); a worker's periodic wake from its
 * index queue's timeout (5 s in PyTorch) during an optimizer step ends that step early; the
 * change is made on the worker's CPU, so a scheduler that follows the driver applies it at the
 * driver's next tick or switch, not at once; and the driver's own rules may run on its CPU at the
 * same moment (a sync's entry): phase_set commits one phase at a time, so the worst case is a
 * second event of the same phase or a time off by that overlap.
 */
static __always_inline void batch_taken(struct task_struct *worker, __u64 now)
{
	struct task_struct *rank;
	struct zernel_phase_thread *rs;

	if (worker->pid != worker->tgid) /* the worker's loop runs in its main thread */
		return;
	rank = worker->real_parent;
	if (!rank)
		return;
	rs = bpf_task_storage_get(&zernel_phase_threads, rank, 0, 0);
	if (!rs || rs->role != ZERNEL_PHASE_ROLE_RANK ||
	    rs->phase != ZERNEL_PROBE_PHASE_OPTIMIZER_STEP || rs->depth || rs->nccl_wait)
		return;
	opt_learn(rs, now);
	phase_set(rs, rank, ZERNEL_PROBE_PHASE_GPU_COMPUTE, ZERNEL_CAUSE_BATCH_TAKEN, now);
}

/*
 * A followed thread is back on a CPU after the sleep its switch-out recorded (the flags below):
 * the call it slept in returned. Run at its switch-in, or, when the kernel switched it in without
 * the tracepoint (seen on Linux 6.18: a thread woken and running with no sched_switch naming it
 * as next, neither in this program nor in ftrace; a rank in 2 ms NCCL waits beside a CPU hog
 * lost about one wake in several hundred), at its next switch-out, which shows it ran: the change is
 * then late by its run, and counted (ZERNEL_PROBE_STAT_WAKE_UNSEEN).
 */
static __always_inline bool phase_wake_pending(const struct zernel_phase_thread *st)
{
	return st->nccl_wait || st->data_wait || st->sleep_ns;
}

static __always_inline void phase_woke(struct zernel_phase_thread *st, struct task_struct *task,
				       __u64 *now)
{
	if (st->nccl_wait) {
		/* Woken from its NCCL futex wait: the call returns. */
		st->nccl_wait = 0;
		if (st->phase == ZERNEL_PROBE_PHASE_NCCL_COLLECTIVE)
			phase_set(st, task, ZERNEL_PROBE_PHASE_OPTIMIZER_STEP,
				  ZERNEL_CAUSE_NCCL_DONE, now_of(now));
	}
	if (st->data_wait) {
		/*
		 * Woken from the data wait that made it DataLoading: the batch is there, and what
		 * the thread does next is the step's GPU work (its launches, then the sync). This
		 * is where the launch probe used to start GpuCompute, without a trap per launch.
		 */
		st->data_wait = 0;
		if (st->phase == ZERNEL_PROBE_PHASE_DATA_LOADING)
			phase_set(st, task, ZERNEL_PROBE_PHASE_GPU_COMPUTE,
				  ZERNEL_CAUSE_DATA_ARRIVED, now_of(now));
	}
	if (st->role == ZERNEL_PHASE_ROLE_RANK && st->sleep_ns) {
		/* Back from a futex wait begun in batch_wait_from's phases: long, a batch's. */
		if (now_of(now) - st->sleep_ns >= zernel_batch_wait_ns && batch_wait_from(st)) {
			opt_learn(st, st->sleep_ns);
			phase_set(st, task, ZERNEL_PROBE_PHASE_DATA_LOADING,
				  ZERNEL_CAUSE_BATCH_WAIT, st->sleep_ns);
			phase_set(st, task, ZERNEL_PROBE_PHASE_GPU_COMPUTE,
				  ZERNEL_CAUSE_DATA_ARRIVED, *now);
		}
		st->sleep_ns = 0;
	}
	if (st->role == ZERNEL_PHASE_ROLE_WORKER && st->sleep_ns) {
		if (now_of(now) - st->sleep_ns >= zernel_idle_hyst_ns) {
			phase_set(st, task, ZERNEL_PROBE_PHASE_UNKNOWN, ZERNEL_CAUSE_WORKER_IDLE,
				  st->sleep_ns);
			phase_set(st, task, ZERNEL_PROBE_PHASE_DATA_LOADING,
				  ZERNEL_CAUSE_WORKER_RUN, *now);
			batch_taken(task, *now);
		}
		st->sleep_ns = 0;
	}
}

/*
 * FIRST SIGHT. A thread that fell asleep before its process was named has no state: its
 * switch-out came before the role was in zernel_phase_procs (or before the process was followed
 * at all), and a switch-in creates none by itself. At its first switch-in after the naming it gets
 * its state here, and the call it slept in, still in its saved registers, says what that sleep
 * was from the naming on (named_ns, read by user space before it wrote the role: the thread has
 * slept since before then). For a rank's driver, a data wait is DataLoading from the naming, a
 * futex wait on an NCCL segment NcclCollective, another futex wait a wait for a batch asleep since
 * the naming; for a worker's thread, an idle sleep since the naming; then phase_woke ends each as
 * if the sleep's start had been seen. So a rank named while it waits for its first batch (its
 * GPU context is made after the DataLoader's workers fork, and the first batch takes their
 * start-up), or a job that a restarted daemon follows again, reads right from the naming, not
 * from its next switch-out. Costs one lookup of zernel_phase_procs at a switch-in of a thread
 * without state (once per thread of a process with a role; at every one for a followed process
 * without a role, which pays the same at its switch-outs); the caller has found no state. Known weakness: the switch-in cannot
 * tell a sleep from a preemption inside the call (runnable, not asleep: the few instructions
 * between the call's entry and its sleep, or a read that copies), which reads as a sleep since
 * the naming.
 */
static __always_inline struct zernel_phase_thread *phase_first_sight(struct task_struct *task,
								     __u64 *now)
{
	struct zernel_phase_thread *st;
	struct zernel_phase_proc *pp;
	struct zernel_sleep_call call;
	__u32 tgid = task->tgid;
	__u64 named;

	pp = bpf_map_lookup_elem(&zernel_phase_procs, &tgid);
	if (!pp)
		return NULL;
	named = pp->named_ns;
	st = phase_thread_new(task, tgid, pp, now);
	if (!st || !named || named >= st->since_ns)
		return st;
	st->since_ns = named; /* Unknown since the naming */
	call = sleep_call(task);
	if (call.nr < 0)
		return st; /* not in a system call: preempted while it ran */
	if (st->role == ZERNEL_PHASE_ROLE_WORKER) {
		st->sleep_ns = named;
		return st;
	}
	if (st->role != ZERNEL_PHASE_ROLE_RANK || !rank_driver(st, task))
		return st;
	if (is_futex_wait(&call)) {
		if (nccl_wait(task, &call)) {
			st->nccl_wait = 1;
			phase_set(st, task, ZERNEL_PROBE_PHASE_NCCL_COLLECTIVE,
				  ZERNEL_CAUSE_NCCL_WAIT, named);
		} else {
			st->sleep_ns = named;
		}
	} else if (is_data_wait(&call)) {
		phase_set(st, task, ZERNEL_PROBE_PHASE_DATA_LOADING, ZERNEL_CAUSE_DATA_WAIT, named);
		st->data_wait = 1;
	}
	return st;
}

/*
 * The context switch. While any process is followed it runs for every switch of the machine;
 * prev and next of processes nobody follows leave at their bit in zernel_follow.
 *
 *   prev, a thread of a followed process, going to sleep (not preempted):
 *     in futex(2) waiting          -> counted (zernel_probe_futex, when tracked); with phases, a
 *                                     rank thread waiting on an nccl-* segment: NcclCollective
 *     a rank driver's other rules and a worker's (PHASES FROM EVENTS above); a rank thread
 *     that is not a driver: Unknown
 *   next, a thread of a followed process, about to run:
 *     back from an NCCL wait       -> OptimizerStep
 *     a rank thread back from the data wait that made it DataLoading -> GpuCompute
 *     a worker back from a long sleep -> Unknown from then, DataLoading now
 */
/*
 * A change made as a thread the sched_ext scheduler follows is switched in (phase_woke on next):
 * ops.running has already run for it, and nothing else would look before the scheduler's tick (4
 * ms at HZ=250) or its phase timer, which polls only while the thread is in a GPU sync (that
 * scheduler's phase_timer.bpf.h). So this program, a tracing one for which sched_ext registers its
 * general kfuncs, kicks its own CPU (SCX_KICK_PREEMPT: the kick runs from irq_work once the switch
 * is done, and ends the thread's slice), and marks the thread so that the scheduler keeps it on its
 * CPU with the new phase instead of queueing it (st->kicked, taken by its ops.dispatch or
 * ops.enqueue). On a kernel without sched_ext the kfunc is absent, bpf_ksym_exists() is false at
 * load, and the call is dead code. sched_follows is set only by that scheduler, so threads it does
 * not follow, and every task when it is not loaded, are never kicked from here (it clears the mark
 * when a thread's process loses its decision, and of each task at ops.disable, also when the
 * kernel ejects it).
 */
static __always_inline void sched_kick(struct zernel_phase_thread *st)
{
#ifndef ZERNEL_SCHED_OBJECT /* the scheduler declares the kfunc strong (scx/common.bpf.h) */
	if (!bpf_ksym_exists(scx_bpf_kick_cpu))
		return;
#endif
	st->kicked = 1;
	scx_bpf_kick_cpu(bpf_get_smp_processor_id(), SCX_KICK_PREEMPT);
}

/*
 * SYNC KICKS. A GPU sync's return (OptimizerStep) and its entry (GpuCompute) are made by the
 * uprobes while the thread runs, and nothing switches it: without a kick the scheduler would
 * apply them at its next tick (4 ms at HZ=250). Uprobes may not call sched_ext's kfuncs, so the
 * uprobe starts this CPU's timer (a bpf_timer pinned to the CPU) and the timer's callback, which
 * the context-switch program set and which runs as part of that tracing program, kicks: at once
 * for a return, after ZERNEL_SYNC_KICK_ENTER_NS for an entry (a blocking sync is asleep by then
 * and its wakeup applies the phase; a spinning one still runs and is kicked). The callback kicks
 * only when the thread is still on that CPU (the CPU's current task) and has not been switched
 * since (its nvcsw + nivcsw), when the scheduler follows it and it is not kicked already; else
 * the switch or the kick that happened has applied the change.
 *
 * Only where the kernel lets a uprobe use a bpf_timer (the VM tests' 7.3, whose
 * check_map_prog_compatibility keeps the refusal for spin locks, lists and trees; 6.12, and the
 * development host's 6.18, answer "tracing progs cannot use bpf_timer yet"): the loader probes for that and then loads the uprobes' _kick variants
 * (zernel_sync_kick_on); elsewhere the scheduler's phase timer polls while a followed thread is
 * inside a sync (its phase_timer.bpf.h), and the timer here is never set up or started.
 *
 * Cost, for threads the scheduler follows only: one array lookup and a timer start per sync
 * entry and return of such a thread, and one timer interrupt each; one array lookup per
 * switch-in of such a thread (sync_kick_ready). Races accepted: the uprobe writes tid and
 * switches, and a callback of an earlier start may run between the two writes (a softirq on
 * its CPU): that kick is then skipped or spent on the new change, which the next tick applies
 * at the latest.
 */
enum {
	/* An entry's kick: after the scheduler's own timer period (phase_timer.bpf.h). */
	ZERNEL_SYNC_KICK_ENTER_NS = 250000,
};

struct zernel_sync_kick {
	struct bpf_timer timer;
	__u64 switches; /* the thread's nvcsw + nivcsw when the uprobe started the timer */
	__u32 tid;	/* the thread whose sync made the change */
	__u32 ready;	/* 1: the timer is set up, with sync_kick_fire as its callback */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* one per possible CPU: the loader sizes it */
	__type(key, __u32);
	__type(value, struct zernel_sync_kick);
} zernel_sync_kick_timers SEC(".maps");

/* 1: the uprobes' _kick variants are loaded (the loader's probe said the kernel allows them). */
const volatile __u8 zernel_sync_kick_on SEC(".rodata.zprobe") = 0;

static __always_inline __u64 task_switches(struct task_struct *task)
{
	return BPF_CORE_READ(task, nvcsw) + BPF_CORE_READ(task, nivcsw);
}

/* The timer's callback, on the CPU whose uprobe started it (SYNC KICKS). */
static int sync_kick_fire(void *map, __u32 *key, struct zernel_sync_kick *k)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct zernel_phase_thread *st;

	if (cur->pid != k->tid || task_switches(cur) != k->switches)
		return 0;
	st = bpf_task_storage_get(&zernel_phase_threads, cur, 0, 0);
	if (!st || !st->sched_follows || st->kicked)
		return 0;
	sched_kick(st);
	probe_stat_inc(ZERNEL_PROBE_STAT_SYNC_KICK);
	return 0;
}

/*
 * At a switch-in of a thread the scheduler follows: sets up its CPU's timer the first time (a
 * tracing program's callback may kick; a uprobe's could not).
 */
static __always_inline void sync_kick_ready(void)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct zernel_sync_kick *k;
	long ret;

	k = bpf_map_lookup_elem(&zernel_sync_kick_timers, &cpu);
	if (!k || k->ready)
		return;
	ret = bpf_timer_init(&k->timer, &zernel_sync_kick_timers, CLOCK_MONOTONIC);
	if (ret && ret != -EBUSY)
		return;
	if (!bpf_timer_set_callback(&k->timer, sync_kick_fire))
		k->ready = 1;
}

/* A uprobe's change of a followed thread (st): its CPU's timer kicks after `delay_ns`. */
static __always_inline void sync_kick_later(struct zernel_phase_thread *st, __u64 delay_ns)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct task_struct *task;
	struct zernel_sync_kick *k;

	if (!st || !st->sched_follows)
		return;
	k = bpf_map_lookup_elem(&zernel_sync_kick_timers, &cpu);
	if (!k || !k->ready)
		return;
	task = bpf_get_current_task_btf();
	k->tid = BPF_CORE_READ(task, pid);
	k->switches = task_switches(task);
	bpf_timer_start(&k->timer, delay_ns, BPF_F_TIMER_CPU_PIN);
}

/*
 * THE SWITCH RULES, as a followed thread leaves its CPU (prev): `sleeps` when it goes to sleep
 * (not preempted, not yielding) in `state` (its task state then). Run by the probes'
 * context-switch tracepoint, or by the scheduler's ops.stopping where it carries the rules.
 * `now` is the caller's clock cache (0: not read yet).
 */
static __always_inline void phase_switch_out(struct task_struct *prev, bool sleeps,
					     unsigned int state, __u64 *now)
{
	struct zernel_sleep_call call = {.nr = -1};
	struct zernel_phase_thread *st = NULL;
	bool futex_wait = false;

	/* Tasks of processes nobody follows leave here: two loads, no lookup (COST above). */
	if (!followed(prev->tgid))
		return;
	if (sleeps) {
		call = sleep_call(prev);
		futex_wait = is_futex_wait(&call);
		if (futex_wait)
			count_futex_wait(prev, now);
	}
	if (zernel_phase_rules)
		st = phase_thread(prev, true, now);
	if (st && phase_wake_pending(st)) { /* it ran since that sleep, unseen */
		probe_stat_inc(ZERNEL_PROBE_STAT_WAKE_UNSEEN);
		phase_woke(st, prev, now);
	}
	if (st && st->role == ZERNEL_PHASE_ROLE_RANK && !rank_driver(st, prev)) {
		/* Not a driver: no phase (the main thread had one while it was the driver). */
		if (st->phase != ZERNEL_PROBE_PHASE_UNKNOWN)
			phase_set(st, prev, ZERNEL_PROBE_PHASE_UNKNOWN, ZERNEL_CAUSE_NOT_DRIVER,
				  now_of(now));
		st->data_wait = 0;
		st->nccl_wait = 0;
		st->sleep_ns = 0;
	} else if (st && st->role == ZERNEL_PHASE_ROLE_RANK) {
		if (futex_wait && nccl_wait(prev, &call)) {
			st->nccl_wait = 1;
			phase_set(st, prev, ZERNEL_PROBE_PHASE_NCCL_COLLECTIVE,
				  ZERNEL_CAUSE_NCCL_WAIT, now_of(now));
		}
		if (st->phase == ZERNEL_PROBE_PHASE_OPTIMIZER_STEP &&
		    BPF_CORE_READ(prev, se.sum_exec_runtime) - st->runtime_at_since >
			    zernel_optimizer_max_ns)
			phase_set(st, prev, ZERNEL_PROBE_PHASE_UNKNOWN,
				  ZERNEL_CAUSE_OPTIMIZER_BOUND, now_of(now));
		if (sleeps && !st->depth && !st->nccl_wait && is_data_wait(&call)) {
			opt_learn(st, now_of(now));
			phase_set(st, prev, ZERNEL_PROBE_PHASE_DATA_LOADING, ZERNEL_CAUSE_DATA_WAIT,
				  now_of(now));
			st->data_wait = 1;
		}
		/*
		 * A wait for a batch from a pin-memory thread? Known when it wakes (next). Also from
		 * the GpuCompute of a batch that came (a sync would have been inside it, depth): the
		 * DataLoader waits again when a later batch came first.
		 */
		st->sleep_ns = 0;
		if (futex_wait && !st->depth && !st->nccl_wait && batch_wait_from(st))
			st->sleep_ns = now_of(now);
	} else if (st && st->role == ZERNEL_PHASE_ROLE_WORKER) {
		/* It ran until now (a thread first seen here was running too). */
		phase_set(st, prev, ZERNEL_PROBE_PHASE_DATA_LOADING, ZERNEL_CAUSE_WORKER_RUN,
			  now_of(now));
		st->sleep_ns = sleeps && (state & ZERNEL_TASK_INTERRUPTIBLE) ? *now : 0;
	}
}

/*
 * THE SWITCH RULES, as a followed thread gets its CPU (next). The tracepoint runs after the
 * scheduler picked and started the thread, so a change made here that the scheduler follows
 * kicks the CPU (`kick`) for the scheduler to apply it; the scheduler's ops.running calls this
 * before it applies the thread's phase, and passes false. Returns the thread's state when it has
 * a role (what the scheduler's phase_state would look up again), else NULL.
 */
static __always_inline struct zernel_phase_thread *phase_switch_in(struct task_struct *next,
								   bool kick, __u64 *now)
{
	struct zernel_phase_thread *st;
	__u64 since;

	if (!zernel_phase_rules || !followed(next->tgid))
		return NULL;
	st = phase_thread(next, false, now);
	if (!st)
		st = phase_first_sight(next, now);
	if (!st)
		return NULL;
	since = st->since_ns;
	phase_woke(st, next, now);
	if (kick && st->since_ns != since && st->sched_follows)
		sched_kick(st);
	if (zernel_sync_kick_on && st->sched_follows && st->role == ZERNEL_PHASE_ROLE_RANK)
		sync_kick_ready();
	return st->role ? st : NULL;
}

#endif /* ZERNEL_PROBES_RULES_BPF_H */
