/* SPDX-License-Identifier: GPL-2.0 */
/*
 * probes: the tracing programs behind two of the daemon's per-process signals (design brief,
 * section 5), counters only, read by the daemon once per tick; and the per-thread phase rules
 * (PHASES FROM EVENTS in probes/rules.bpf.h, with every map), which send one ring-buffer record
 * per phase change.
 *
 *   cpu_burst_duration_ns  CPU time the process has run since its last GPU synchronisation
 *                          returned; 0 while it is blocked in one.
 *   last_gpu_sync_ns       when it last returned.
 *   futex_wait_count       futex waits in the last interval.
 *
 * GPU SYNCHRONISATION. A uprobe and a uretprobe on each of libcuda's blocking synchronisation
 * entry points (cuCtxSynchronize, cuStreamSynchronize, cuEventSynchronize; the loader attaches
 * them in each followed process, to the library files it maps). The entry probe bumps the
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
 * FUTEX WAITS. Counted where a wait costs something: when a thread of a followed process goes
 * to sleep in futex(2) with FUTEX_WAIT, FUTEX_WAIT_BITSET or FUTEX_WAIT_REQUEUE_PI, seen by the
 * context-switch program (tp_btf/sched_switch) from the system call number and arguments the
 * thread entered the kernel with (its saved registers). Only a tracked process's tgid is in
 * zernel_probe_futex; a hit is one atomic add, and for the main thread (tid == tgid) a time
 * stamp: the daemon reads "the main thread entered a futex wait N ms ago" to see a collective's
 * wait loop (short timed waits) also at an instant when the thread is between two waits. A wait
 * that returns without sleeping (the word had changed: EAGAIN) is not counted.
 *   Why not at the system call: the tracepoint syscalls:sys_enter_futex (and raw_syscalls, any
 * syscall tracepoint) sends every system call of every task of the machine through the
 * kernel's slow path while it is attached, and fentry on futex_wait (no such tax: only futex
 * waits pay the trampoline) is refused on some kernels (the development host answers EPERM for
 * any fentry program) and costs every futex wait of the machine a trampoline where it works.
 * A context switch is paid for anyway by the phase rules; the futex wait adds nothing for a
 * task nobody follows (docs/benchmarks.md, "The tax on the rest of the node").
 *
 * WHO PAYS (docs/probes.md, "What is attached when"). Nothing of this object is attached while
 * user space follows no process: the loader attaches the context-switch and thread-exit
 * programs when the first process becomes followed and detaches them when the last is
 * forgotten. While attached they run for every task of the machine, so each first tests the
 * task's tgid in zernel_follow, a bitmap in .data.zprobe (one load, no map lookup), and a task of a
 * process nobody follows leaves there: it never reaches a map or task-storage lookup and never
 * gets storage. The GPU uprobes are attached per process (the kernel installs their breakpoints
 * only in that process's memory), so another process that maps the same libcuda never traps.
 *
 * WHERE THE SWITCH RULES RUN. The context-switch rules (phase_switch_out for the thread that
 * leaves its CPU, phase_switch_in for the one that gets it) and all the state they use are in
 * probes/rules.bpf.h, which the sched_ext scheduler includes too. A tracepoint costs every task
 * at every switch even when its program returns at once (docs/benchmarks.md, "The floor of any
 * program on the context switch"), so when the daemon runs that scheduler with phases from
 * events (full switch), the scheduler carries the rules in its ops.stopping and ops.running,
 * which run at every switch anyway, and zernel_switch is not attached; the daemon attaches it
 * again whenever the scheduler stops carrying them (docs/probes.md, "What is attached when").
 *
 * THREAD EXIT. The raw tracepoint sched_process_exit removes the exiting thread's entry (fixing
 * its process's in_sync if it died inside a sync: a killed process never returns), and when the
 * last thread of a process exits, the process's entries, so a reused pid starts clean. Threads of
 * processes that are not followed leave at the bitmap; user space removes a forgotten process's
 * entries itself.
 *
 * For these signals no ring buffer and no event per call: a sync costs two probe hits and a few
 * map operations, a futex wait of a process nobody follows one bitmap test (docs/probes.md has
 * the measurements).
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
#include "probes/rules.bpf.h"

char _license[] SEC("license") = "GPL";

SEC("tp_btf/sched_switch")
int BPF_PROG(zernel_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	bool sleeps = !preempt &&
		      (prev_state & (ZERNEL_TASK_INTERRUPTIBLE | ZERNEL_TASK_UNINTERRUPTIBLE));
	__u64 now = 0; /* the clock is read only when needed */

	phase_switch_out(prev, sleeps, prev_state, &now);
	(void)phase_switch_in(next, true, &now);
	return 0;
}

/*
 * The sync entry (GPU SYNCHRONISATION above); with `kick` (the _kick variant, SYNC KICKS), a
 * phase change it makes is kicked for.
 */
static __always_inline int sync_enter(bool kick)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32;
	struct zernel_probe_thread *t, fresh = {};
	struct zernel_phase_thread *st;
	struct zernel_probe_proc *p;
	struct task_struct *task;
	__u64 now, runtime, burst = 0;

	probe_stat_inc(ZERNEL_PROBE_STAT_SYNC_ENTER);
	t = bpf_map_lookup_elem(&zernel_probe_threads, &tid);
	if (!t) {
		fresh.tgid = tgid;
		if (bpf_map_update_elem(&zernel_probe_threads, &tid, &fresh, BPF_NOEXIST)) {
			probe_stat_inc(ZERNEL_PROBE_STAT_THREAD_MAP_FULL);
			return 0;
		}
		t = bpf_map_lookup_elem(&zernel_probe_threads, &tid);
		if (!t)
			return 0;
	}
	if (t->depth > 0) {
		if (t->depth >= ZERNEL_PROBE_MAX_DEPTH) {
			probe_stat_inc(ZERNEL_PROBE_STAT_DEPTH_OVERFLOW);
			return 0;
		}
		t->depth++;
		probe_stat_inc(ZERNEL_PROBE_STAT_SYNC_NESTED);
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
	st = phase_sync_enter(now);
	if (kick)
		sync_kick_later(st, ZERNEL_SYNC_KICK_ENTER_NS);
	p = proc_get(tgid);
	if (!p)
		return 0;
	p->last_burst_ns = burst;
	if (__sync_fetch_and_add(&p->in_sync, 1) == 0)
		p->in_sync_since_ns = now;
	return 0;
}

SEC("uprobe.multi")
int BPF_UPROBE(zernel_sync_enter)
{
	return sync_enter(false);
}

SEC("uprobe.multi")
int BPF_UPROBE(zernel_sync_enter_kick)
{
	return sync_enter(true);
}

/* The sync return (GPU SYNCHRONISATION above); with `kick`, as sync_enter. */
static __always_inline int sync_return(bool kick)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32;
	struct zernel_phase_thread *st;
	struct task_struct *task;
	struct zernel_probe_thread *t;
	struct zernel_probe_proc *p;
	__u64 now, runtime;

	probe_stat_inc(ZERNEL_PROBE_STAT_SYNC_RETURN);
	t = bpf_map_lookup_elem(&zernel_probe_threads, &tid);
	if (!t || t->depth == 0) {
		probe_stat_inc(ZERNEL_PROBE_STAT_RETURN_MISS);
		return 0;
	}
	if (--t->depth > 0)
		return 0;

	now = bpf_ktime_get_ns();
	task = (struct task_struct *)bpf_get_current_task();
	runtime = BPF_CORE_READ(task, se.sum_exec_runtime);
	t->return_ns = now;
	t->runtime_at_return_ns = runtime;
	st = phase_sync_return(now);
	if (kick)
		sync_kick_later(st, 0);

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

SEC("uretprobe.multi")
int BPF_URETPROBE(zernel_sync_return)
{
	return sync_return(false);
}

SEC("uretprobe.multi")
int BPF_URETPROBE(zernel_sync_return_kick)
{
	return sync_return(true);
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

	if (!followed(tgid))
		return 0;
	t = bpf_map_lookup_elem(&zernel_probe_threads, &tid);
	if (t) {
		if (t->depth > 0) {
			probe_stat_inc(ZERNEL_PROBE_STAT_EXIT_IN_SYNC);
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
