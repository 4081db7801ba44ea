/* SPDX-License-Identifier: GPL-2.0 */
/*
 * probes: the tracing programs behind two of the daemon's per-process signals (design brief,
 * section 5), counters only, read by the daemon once per tick; and the per-thread phase rules
 * (PHASES FROM EVENTS below), which send one ring-buffer record per phase change.
 *
 *   cpu_burst_duration_ns  CPU time the process has run since its last GPU synchronisation
 *                          returned; 0 while it is blocked in one.
 *   last_gpu_sync_ns       when it last returned.
 *   futex_wait_count       futex waits in the last interval.
 *
 * GPU SYNCHRONISATION. A uprobe and a uretprobe on each of libcuda's blocking synchronisation
 * entry points (cuCtxSynchronize, cuStreamSynchronize, cuEventSynchronize; the loader attaches
 * them per distinct library file, for every process that maps it). The entry probe bumps the
 * calling thread's nesting depth; on the outermost entry it records the time and counts the
 * thread into its process's in_sync. The return probe undoes that; on the outermost return it
 * adds the call's duration and a count to the process, records the return time and the returning
 * thread's CPU runtime then (task->se.sum_exec_runtime, read with CO-RE so one object runs on the
 * host's 6.x kernel and the 7.x test kernel). User space computes the burst as that thread's
 * runtime now (the first field of /proc/PID/task/TID/schedstat, the same counter) minus the
 * runtime at the return, and 0 while in_sync > 0.
 *
 * Worked example: a training thread calls cuStreamSynchronize at t=1.000 s and the GPU finishes
 * at t=1.200 s. Entry: thread depth 0->1, proc in_sync 0->1, in_sync_since 1.000. Return: depth
 * 1->0, in_sync 1->0, sync_time += 200 ms, sync_count += 1, last_return 1.200, the thread's
 * runtime (say 5.000 s) is stored. It then runs the optimizer for 3 ms of CPU: at the next tick
 * its schedstat reads 5.003 s, so cpu_burst = 3 ms (OptimizerStep), until the next sync.
 * The outermost entry also records, per process, the burst that this sync ends (the thread's
 * runtime at the entry minus its runtime at its previous return): during a short sync between
 * two bursts (an optimizer's kernel launches) user space reports that burst instead of 0, so a
 * tick that lands in a 0.2 ms wait still sees the short-burst pattern (docs/probes.md).
 *
 * FUTEX WAITS. The tracepoint syscalls:sys_enter_futex fires for every futex call of every
 * process, so it does the cheapest thing first: the op (without the private and clock flags) is
 * compared with FUTEX_WAIT, FUTEX_WAIT_BITSET and FUTEX_WAIT_REQUEUE_PI, and only a wait costs a
 * hash lookup of the caller's tgid in zernel_probe_futex, which holds only the processes user
 * space tracks; a hit is one atomic add, and for the main thread (tid == tgid) a time stamp: the
 * daemon reads "the main thread entered a futex wait N ms ago" to see a collective's wait loop
 * (short timed waits) also at an instant when the thread is between two waits.
 *
 * THREAD EXIT. The raw tracepoint sched_process_exit removes the exiting thread's entry (fixing
 * its process's in_sync if it died inside a sync: a killed process never returns), and when the
 * last thread of a process exits, the process's entries, so a reused pid starts clean.
 *
 * For these signals no ring buffer and no event per call: a sync costs two probe hits and a few map operations, a
 * futex wait of an untracked process one hash miss (docs/probes.md has the measurements).
 *
 * Known weaknesses and accepted races:
 *   - Threads of one process update its zernel_probe_proc entry concurrently. Counters and
 *     in_sync are atomic; last_return_ns and last_return_tid are plain stores, so two threads
 *     returning within nanoseconds of each other may leave the older time or the other thread's
 *     tid (either is a true "last" to within those nanoseconds). The runtime lives in the
 *     thread's own entry, written only by that thread, so tid and runtime always match.
 *   - in_sync_since_ns is set when in_sync goes from 0 to 1; with overlapping syncs of several
 *     threads it is when the process as a whole started waiting.
 *   - se.sum_exec_runtime is brought up to date at each tick and context switch, so both values
 *     lag the truth by at most a tick (4 ms at HZ=250); the burst is exact to about a tick.
 *   - A uprobe attached while a thread is inside a sync misses that call's entry, and then its
 *     return (no return probe is armed): consistent, just one call lost. A return with no entry
 *     (RETURN_MISS) is ignored.
 *   - A process entry evicted by the LRU while a thread is in a sync: the return recreates it and
 *     does not let in_sync go below 0.
 *   - Syncs the driver makes internally, not through these exported symbols, are not seen;
 *     cudaDeviceSynchronize and cudaStreamSynchronize reach them on the CUDA versions we know.
 */
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "probes.h"

char _license[] SEC("license") = "GPL";

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

static __always_inline void stat_inc(enum zernel_probe_stat stat)
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
		stat_inc(ZERNEL_PROBE_STAT_PROC_MAP_FULL);
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
 *   rank (a GPU process), every thread:
 *     kernel launch in DataLoading or Unknown -> GpuCompute (the step's GPU part is queued)
 *     outermost GPU sync entry          -> GpuCompute; in OptimizerStep the thread stays there
 *                                          unless the sync outlasts zernel_sync_hyst_ns (the
 *                                          optimizer's own short syncs), and then it is
 *                                          GpuCompute from the sync's entry, committed at its
 *                                          return (the thread sleeps meanwhile: nothing is
 *                                          scheduled on a wrong phase)
 *     outermost GPU sync return         -> OptimizerStep (CPU work the GPU waits for)
 *     futex wait on an NCCL segment     -> NcclCollective (a shared mapping named nccl-*)
 *     that futex call returns           -> OptimizerStep
 *     blocks (sleeps, not preempted) in read, pread, readv, preadv, recvfrom, recvmsg,
 *     recvmmsg, poll, ppoll, select, pselect6, epoll_wait, epoll_pwait or epoll_pwait2, outside
 *     a GPU sync and an NCCL wait       -> DataLoading (waiting for a batch)
 *     OptimizerStep for more than zernel_optimizer_max_ns of CPU since it began or since its
 *     last (short) sync, seen when it leaves a CPU -> Unknown
 *   worker (a DataLoader worker), every thread:
 *     runs, or sleeps uninterruptibly (block I/O)        -> DataLoading (producing a batch)
 *     slept interruptibly for zernel_idle_hyst_ns or more -> Unknown from when it fell asleep,
 *                                          committed when it wakes (then DataLoading again)
 *
 * Other futex waits (a lock, the GIL) and sleeps change nothing. A change is committed at once,
 * with the time of its event, and sent to zernel_phase_events; the two backdated ones (a long
 * sync begun in OptimizerStep, an idle worker) are sent when they are known, with the earlier
 * time.
 *
 * COST. sched_switch runs for every context switch of the machine, tracked or not, so the
 * untracked path is the one to keep short:
 *   - while user space has named no process (zernel_phase_gen 0), every program returns after
 *     one load, before any lookup or clock read;
 *   - otherwise a thread that is not followed costs one task-storage lookup per program (prev
 *     and next at a switch): the first time a program that may create state sees it, its tgid
 *     is looked up in zernel_phase_procs and the answer "no role" is kept in its storage with
 *     zernel_phase_gen, which user space increments after every role it names; the hash lookup
 *     is repeated only when that moved. This gives every thread that switches a small storage
 *     entry (48 bytes of value, freed with the thread); a named process's threads are found
 *     at their next event, as before;
 *   - the clock is read only for a followed thread.
 * Measured (docs/benchmarks.md, "What the phase programs cost, after the untracked fast path"):
 * the switch program's own run time for an untracked thread went from about 230-260 ns to
 * 110-125 ns per switch, 80-90 ns while no process is named. Every futex wait of a tracked
 * process costs one VMA lookup.
 */
const volatile __u64 zernel_sync_hyst_ns = 10000000;
const volatile __u64 zernel_idle_hyst_ns = 2000000;
const volatile __u64 zernel_optimizer_max_ns = 200000000;

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

/* task_struct states (include/linux/sched.h; vmlinux.h has no macros). */
#define ZERNEL_TASK_INTERRUPTIBLE 0x1
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
	if (bpf_ringbuf_output(&zernel_phase_events, &ev, sizeof(ev), 0))
		stat_inc(ZERNEL_PROBE_STAT_PHASE_EVENT_LOST);
	else
		stat_inc(ZERNEL_PROBE_STAT_PHASE_EVENT);
}

/*
 * Incremented by user space after every role it names (set_phase_role). 0 while no process has
 * ever been named: then no thread can have a phase and every program returns at once.
 */
__u32 zernel_phase_gen;

/* `*now`, read from the clock the first time it is needed. */
static __always_inline __u64 now_of(__u64 *now)
{
	if (!*now)
		*now = bpf_ktime_get_ns();
	return *now;
}

/*
 * The thread's state; with `create`, made (Unknown since now) for a thread of a process that
 * has a role. NULL for the threads of other processes. A thread of another process seen with
 * `create` keeps the negative answer in its storage (role 0) with the generation it was read
 * at, so it costs one task-storage lookup until user space names a process again; the
 * generation is read before the role lookup, so a role named meanwhile is looked up once more,
 * never missed.
 */
static __always_inline struct zernel_phase_thread *phase_thread(struct task_struct *task,
								bool create, __u64 *now)
{
	__u32 gen = *(volatile __u32 *)&zernel_phase_gen;
	struct zernel_phase_thread *st;
	struct zernel_phase_proc *pp;
	__u32 tgid;

	if (!gen)
		return NULL;
	st = bpf_task_storage_get(&zernel_phase_threads, task, 0, 0);
	if (st && st->role)
		return st;
	if (!create || (st && st->gen == gen))
		return NULL;
	tgid = BPF_CORE_READ(task, tgid);
	pp = bpf_map_lookup_elem(&zernel_phase_procs, &tgid);
	if (!st)
		st = bpf_task_storage_get(&zernel_phase_threads, task, 0,
					  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st) {
		if (pp)
			stat_inc(ZERNEL_PROBE_STAT_PHASE_NO_STORAGE);
		return NULL;
	}
	st->gen = gen;
	if (!pp)
		return NULL;
	st->tgid = tgid;
	st->role = (__u8)pp->role;
	st->phase = ZERNEL_PROBE_PHASE_UNKNOWN;
	st->since_ns = now_of(now);
	return st;
}

static __always_inline void phase_sync_enter(__u64 now)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct zernel_phase_thread *st = phase_thread(task, true, &now);

	if (!st || st->role != ZERNEL_PHASE_ROLE_RANK)
		return;
	st->depth = 1;
	if (st->phase == ZERNEL_PROBE_PHASE_OPTIMIZER_STEP) {
		st->pending_ns = now;
		return;
	}
	phase_set(st, task, ZERNEL_PROBE_PHASE_GPU_COMPUTE, ZERNEL_CAUSE_SYNC_ENTER, now);
}

static __always_inline void phase_sync_return(__u64 now)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct zernel_phase_thread *st = phase_thread(task, false, &now);

	if (!st || st->role != ZERNEL_PHASE_ROLE_RANK)
		return;
	st->depth = 0;
	if (st->pending_ns) {
		if (now - st->pending_ns >= zernel_sync_hyst_ns)
			phase_set(st, task, ZERNEL_PROBE_PHASE_GPU_COMPUTE, ZERNEL_CAUSE_LONG_SYNC,
				  st->pending_ns);
		st->pending_ns = 0;
	}
	if (st->phase == ZERNEL_PROBE_PHASE_GPU_COMPUTE)
		phase_set(st, task, ZERNEL_PROBE_PHASE_OPTIMIZER_STEP, ZERNEL_CAUSE_SYNC_RETURN, now);
	else if (st->phase == ZERNEL_PROBE_PHASE_OPTIMIZER_STEP)	/* the bound is per burst */
		st->runtime_at_since = BPF_CORE_READ(task, se.sum_exec_runtime);
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

static __always_inline void phase_futex_wait(__u64 uaddr)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct zernel_phase_thread *st;
	__u64 now = 0;
	__u8 nccl = 0;

	st = phase_thread(task, true, &now);
	if (!st || st->role != ZERNEL_PHASE_ROLE_RANK)
		return;
	if (bpf_find_vma(task, uaddr, nccl_vma, &nccl, 0) || !nccl)
		return;
	st->nccl_wait = 1;
	phase_set(st, task, ZERNEL_PROBE_PHASE_NCCL_COLLECTIVE, ZERNEL_CAUSE_NCCL_WAIT,
		  now_of(&now));
}

/* A wait for a batch: the syscall a sleeping thread is in (x86-64 numbers). */
static __always_inline bool in_data_wait(struct task_struct *task)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	long nr;

	if (!regs)
		return false;
	nr = BPF_CORE_READ(regs, orig_ax);
	switch (nr) {
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

SEC("tp_btf/sched_switch")
int BPF_PROG(zernel_phase_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	bool sleeps = !preempt &&
		      (prev_state & (ZERNEL_TASK_INTERRUPTIBLE | ZERNEL_TASK_UNINTERRUPTIBLE));
	struct zernel_phase_thread *st;
	__u64 now = 0; /* the clock is read only for a thread with a role */

	st = phase_thread(prev, true, &now);
	if (st && st->role == ZERNEL_PHASE_ROLE_RANK) {
		if (st->phase == ZERNEL_PROBE_PHASE_OPTIMIZER_STEP &&
		    BPF_CORE_READ(prev, se.sum_exec_runtime) - st->runtime_at_since >
			    zernel_optimizer_max_ns)
			phase_set(st, prev, ZERNEL_PROBE_PHASE_UNKNOWN,
				  ZERNEL_CAUSE_OPTIMIZER_BOUND, now_of(&now));
		if (sleeps && !st->depth && !st->nccl_wait && in_data_wait(prev))
			phase_set(st, prev, ZERNEL_PROBE_PHASE_DATA_LOADING, ZERNEL_CAUSE_DATA_WAIT,
				  now_of(&now));
	} else if (st && st->role == ZERNEL_PHASE_ROLE_WORKER) {
		/* It ran until now (a thread first seen here was running too). */
		phase_set(st, prev, ZERNEL_PROBE_PHASE_DATA_LOADING, ZERNEL_CAUSE_WORKER_RUN,
			  now_of(&now));
		st->sleep_ns = sleeps && (prev_state & ZERNEL_TASK_INTERRUPTIBLE) ? now : 0;
	}

	st = phase_thread(next, false, &now);
	if (st && st->role == ZERNEL_PHASE_ROLE_WORKER && st->sleep_ns) {
		if (now_of(&now) - st->sleep_ns >= zernel_idle_hyst_ns) {
			phase_set(st, next, ZERNEL_PROBE_PHASE_UNKNOWN, ZERNEL_CAUSE_WORKER_IDLE,
				  st->sleep_ns);
			phase_set(st, next, ZERNEL_PROBE_PHASE_DATA_LOADING, ZERNEL_CAUSE_WORKER_RUN, now);
		}
		st->sleep_ns = 0;
	}
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_futex")
int zernel_futex_exit(void *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct zernel_phase_thread *st;

	st = bpf_task_storage_get(&zernel_phase_threads, task, 0, 0);
	if (!st || !st->nccl_wait)
		return 0;
	st->nccl_wait = 0;
	if (st->phase == ZERNEL_PROBE_PHASE_NCCL_COLLECTIVE)
		phase_set(st, task, ZERNEL_PROBE_PHASE_OPTIMIZER_STEP, ZERNEL_CAUSE_NCCL_DONE,
			  bpf_ktime_get_ns());
	return 0;
}

/* A kernel launch (cuLaunchKernel*, the emulated driver's zfgEnqueueWork): after a data wait (or
 * from Unknown) the step's GPU part begins; launches in the optimizer or a collective change
 * nothing. */
SEC("uprobe")
int BPF_UPROBE(zernel_launch)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct zernel_phase_thread *st;
	__u64 now = 0;

	st = phase_thread(task, true, &now);
	if (st && st->role == ZERNEL_PHASE_ROLE_RANK &&
	    (st->phase == ZERNEL_PROBE_PHASE_DATA_LOADING || st->phase == ZERNEL_PROBE_PHASE_UNKNOWN))
		phase_set(st, task, ZERNEL_PROBE_PHASE_GPU_COMPUTE, ZERNEL_CAUSE_LAUNCH,
			  now_of(&now));
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(zernel_sync_enter)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32;
	struct zernel_probe_thread *t, fresh = {};
	struct zernel_probe_proc *p;
	struct task_struct *task;
	__u64 now, runtime, burst = 0;

	stat_inc(ZERNEL_PROBE_STAT_SYNC_ENTER);
	t = bpf_map_lookup_elem(&zernel_probe_threads, &tid);
	if (!t) {
		fresh.tgid = tgid;
		if (bpf_map_update_elem(&zernel_probe_threads, &tid, &fresh, BPF_NOEXIST)) {
			stat_inc(ZERNEL_PROBE_STAT_THREAD_MAP_FULL);
			return 0;
		}
		t = bpf_map_lookup_elem(&zernel_probe_threads, &tid);
		if (!t)
			return 0;
	}
	if (t->depth > 0) {
		if (t->depth >= ZERNEL_PROBE_MAX_DEPTH) {
			stat_inc(ZERNEL_PROBE_STAT_DEPTH_OVERFLOW);
			return 0;
		}
		t->depth++;
		stat_inc(ZERNEL_PROBE_STAT_SYNC_NESTED);
		return 0;
	}

	now = bpf_ktime_get_ns();
	/* The CPU burst this sync ends: runtime now minus the runtime at this thread's previous
	 * return (the sync-to-sync gap in CPU time). Both reads lag by at most a tick. */
	if (t->return_ns > 0 && t->tgid == tgid) {
		task = (struct task_struct *)bpf_get_current_task();
		runtime = BPF_CORE_READ(task, se.sum_exec_runtime);
		burst = runtime > t->runtime_at_return_ns ? runtime - t->runtime_at_return_ns : 0;
	}
	t->tgid = tgid; /* a reused tid of another process: the exit hook normally prevents this */
	t->enter_ns = now;
	t->depth = 1;
	phase_sync_enter(now);
	p = proc_get(tgid);
	if (!p)
		return 0;
	p->last_burst_ns = burst;
	if (__sync_fetch_and_add(&p->in_sync, 1) == 0)
		p->in_sync_since_ns = now;
	return 0;
}

SEC("uretprobe")
int BPF_URETPROBE(zernel_sync_return)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32;
	struct task_struct *task;
	struct zernel_probe_thread *t;
	struct zernel_probe_proc *p;
	__u64 now, runtime;

	stat_inc(ZERNEL_PROBE_STAT_SYNC_RETURN);
	t = bpf_map_lookup_elem(&zernel_probe_threads, &tid);
	if (!t || t->depth == 0) {
		stat_inc(ZERNEL_PROBE_STAT_RETURN_MISS);
		return 0;
	}
	if (--t->depth > 0)
		return 0;

	now = bpf_ktime_get_ns();
	task = (struct task_struct *)bpf_get_current_task();
	runtime = BPF_CORE_READ(task, se.sum_exec_runtime);
	t->return_ns = now;
	t->runtime_at_return_ns = runtime;
	phase_sync_return(now);

	p = proc_get(tgid);
	if (!p)
		return 0;
	proc_leave(p);
	__sync_fetch_and_add(&p->sync_time_ns, now - t->enter_ns);
	__sync_fetch_and_add(&p->sync_count, 1);
	p->last_return_ns = now;
	p->last_return_tid = tid;
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_futex")
int zernel_futex_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u32 cmd = (__u32)ctx->args[1] & (__u32)ZERNEL_FUTEX_CMD_MASK;
	struct zernel_probe_futex *f;
	__u32 tgid, tid;
	__u64 id;

	if (cmd != ZERNEL_FUTEX_WAIT && cmd != ZERNEL_FUTEX_WAIT_BITSET &&
	    cmd != ZERNEL_FUTEX_WAIT_REQUEUE_PI)
		return 0;
	phase_futex_wait((__u64)ctx->args[0]);
	id = bpf_get_current_pid_tgid();
	tgid = id >> 32;
	tid = (__u32)id;
	f = bpf_map_lookup_elem(&zernel_probe_futex, &tgid);
	if (!f) {
		stat_inc(ZERNEL_PROBE_STAT_FUTEX_UNTRACKED);
		return 0;
	}
	__sync_fetch_and_add(&f->waits, 1);
	if (tid == tgid)
		f->main_wait_ns = bpf_ktime_get_ns(); /* only the main thread writes it */
	stat_inc(ZERNEL_PROBE_STAT_FUTEX_WAIT);
	return 0;
}

/* A raw tracepoint: attached by name, no tracefs needed. */
SEC("raw_tp/sched_process_exit")
int zernel_thread_exit(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32;
	struct zernel_probe_thread *t;
	struct zernel_probe_proc *p;
	struct task_struct *task;

	t = bpf_map_lookup_elem(&zernel_probe_threads, &tid);
	if (t) {
		if (t->depth > 0) {
			stat_inc(ZERNEL_PROBE_STAT_EXIT_IN_SYNC);
			p = bpf_map_lookup_elem(&zernel_probe_procs, &tgid);
			if (p)
				proc_leave(p);
		}
		bpf_map_delete_elem(&zernel_probe_threads, &tid);
	}

	/* signal->live is decremented before this tracepoint: 0 means the whole process is gone. */
	task = (struct task_struct *)bpf_get_current_task();
	if (BPF_CORE_READ(task, signal, live.counter) == 0) {
		bpf_map_delete_elem(&zernel_probe_procs, &tgid);
		bpf_map_delete_elem(&zernel_probe_futex, &tgid);
		bpf_map_delete_elem(&zernel_phase_procs, &tgid);
	}
	return 0;
}
