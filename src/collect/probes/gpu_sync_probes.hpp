#pragma once
// GpuSyncProbes: the BPF tracing programs of bpf/probes.bpf.c, loaded, attached while some
// process is followed, and the per-process signals they give, read once per tick
// (docs/probes.md).
//
//   in_sync, last_sync_return_ns, cpu_burst_ns, sync_count/time deltas: uprobes and uretprobes
//       on libcuda's cuCtxSynchronize, cuStreamSynchronize and cuEventSynchronize, attached in
//       each followed process to the library files it maps (attach_process_libraries); another
//       process mapping the same file takes no breakpoint.
//   futex_waits_delta, main_futex_wait_ns: the context-switch program (tp_btf/sched_switch)
//       counts the futex(2) waits (FUTEX_WAIT, _BITSET, _REQUEUE_PI) that threads of the
//       processes track() names go to sleep in, and stamps when their main thread last did; no
//       system-call tracepoint (those tax every system call of every task).
//   last_burst_ns: the entry uprobe, the CPU burst a sync ends (runtime at entry minus runtime
//       at the thread's previous return).
//
// Who pays: open() loads the object and attaches nothing. A process becomes followed when
// attach_process_libraries(), track() or set_phase_role() first names it, and stays so until
// forget(). While at least one process is followed, the programs that run for every task (the
// context switch: futex waits and the phase rules; thread exit) are attached, and each leaves at
// once for a task whose process is not followed (a bitmap test, no map lookup, no storage);
// when the last one is forgotten they are detached. Detaching is done by a background thread (a
// uprobe's detach waits for an RCU grace period, up to ~100 ms), so forget() never blocks the
// daemon's tick; the destructor waits for it.
//
// Only built with the BPF toolchain (ZERNEL_HAVE_PROBES); without it, or where open() fails
// (not root, no BPF, no BTF), the daemon goes on without these signals and says so once. Errors
// are worded for that one log line:
//   "loading the GPU sync probes: BPF probes need root (CAP_BPF, CAP_PERFMON)"
//   "counting futex waits: attaching tp_btf/sched_switch: ..." (at the first follow)
//   "/usr/lib/x86_64-linux-gnu/libcuda.so.1 has no cuStreamSynchronize: not a CUDA driver ..."
//
// Pids are the host pid namespace's (the daemon runs there, as it must to schedule). Not
// thread-safe: one thread (the daemon's collect step) owns the object.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/result.hpp"

struct bpf_link;  // libbpf

namespace zernel::collect {

// One process's GPU synchronisation and futex signals at one read.
struct ProbeSample {
  // A thread of the process is inside a synchronisation call now.
  bool in_sync = false;
  // CLOCK_MONOTONIC ns since which the process has been waiting (valid while in_sync).
  std::uint64_t in_sync_since_ns = 0;
  // CLOCK_MONOTONIC ns when a synchronisation call last returned; 0 = none seen.
  std::uint64_t last_sync_return_ns = 0;
  // CPU time the thread whose sync returned last has run since that return (its schedstat
  // runtime now minus its runtime then): the design's cpu_burst_duration_ns. 0 while in_sync,
  // before any sync, and when that thread has exited. Accurate to about a scheduler tick.
  std::uint64_t cpu_burst_ns = 0;
  // CPU time of the burst that ended at the latest outermost sync entry (that thread's runtime
  // at the entry minus its runtime at its previous return; 0 when it had not returned before).
  // Lags like cpu_burst_ns: both runtimes are read as the kernel last brought them up to date.
  std::uint64_t last_burst_ns = 0;
  // Completed (outermost) synchronisation calls, and the time spent in them, summed over the
  // threads, since the previous read of this pid (the first read: since the probes first saw
  // the process). A call in progress counts when it returns.
  std::uint64_t sync_count_delta = 0;
  std::uint64_t sync_time_delta_ns = 0;
  // Futex waits since the previous read (the first read: since track()); 0 when not tracked.
  std::uint64_t futex_waits_delta = 0;
  // CLOCK_MONOTONIC ns when the main thread (tid == pid) last entered a futex wait; 0 = never
  // since track(), or not tracked.
  std::uint64_t main_futex_wait_ns = 0;
  // now_ns minus the previous read's now_ns; 0 on the first read of this pid.
  std::uint64_t interval_ns = 0;
};

// The BPF side's counters (enum zernel_probe_stat), summed over the CPUs.
struct ProbeStats {
  std::uint64_t sync_enter = 0;         // uprobe hits
  std::uint64_t sync_return = 0;        // uretprobe hits
  std::uint64_t sync_nested = 0;        // entries while the thread was already in a sync
  std::uint64_t return_miss = 0;        // returns without a recorded entry
  std::uint64_t depth_overflow = 0;     // entries nested deeper than 64, ignored
  std::uint64_t thread_map_full = 0;    // sync entries lost to a full thread map
  std::uint64_t proc_map_full = 0;      // updates lost for want of a process entry
  std::uint64_t exit_in_sync = 0;       // threads that exited inside a sync
  std::uint64_t futex_waits = 0;        // futex waits counted (tracked processes)
  std::uint64_t futex_untracked = 0;    // futex waits of untracked processes (looked up only)
  std::uint64_t phase_events = 0;       // phase changes sent by the BPF side
  std::uint64_t phase_events_lost = 0;  // phase changes the ring buffer had no room for
  std::uint64_t phase_recovered = 0;    // of those, taken from zernel_phase_unsent
  std::uint64_t unsent_failed = 0;      // lost and not kept either (stale until the next)
  std::uint64_t phase_no_storage = 0;   // threads left without phase state (allocation failed)
  std::uint64_t nccl_checks = 0;        // shared futex waits of rank threads checked for NCCL
  std::uint64_t nccl_missed = 0;        // of those, not done (bpf_find_vma: mmap_lock busy)
  std::uint64_t wake_unseen = 0;        // returns from a sleep seen at the next switch-out
  std::uint64_t sync_kicks =
      0;  // CPU kicks for a sync's phase change (probes/rules.bpf.h, SYNC KICKS)
};

// Which event rules apply to a process's threads (probes/rules.bpf.h, "PHASES FROM EVENTS").
enum class PhaseRole : std::uint8_t { rank = 1, worker = 2 };

// What made a phase change (probes.h's enum zernel_phase_cause, asserted equal).
enum class PhaseCause : std::uint8_t {
  sync_enter = 1,       // a GPU sync began: GpuCompute
  sync_return = 2,      // it returned: OptimizerStep
  long_sync = 3,        // a sync begun in OptimizerStep outlasted the hysteresis: GpuCompute
  nccl_wait = 4,        // a futex wait on an NCCL segment: NcclCollective
  nccl_done = 5,        // it returned: OptimizerStep
  data_wait = 6,        // blocked reading or polling: DataLoading
  worker_run = 7,       // a worker runs: DataLoading
  worker_idle = 8,      // a worker slept past the hysteresis: Unknown
  optimizer_bound = 9,  // OptimizerStep outran its CPU bound: Unknown
  data_arrived = 10,    // back from that data wait: GpuCompute
  not_driver = 11,      // a rank's main thread, no longer its driver (another synced): Unknown
  batch_wait = 12,      // a long futex wait after the optimizer step: DataLoading (backdated)
  optimizer_end = 13,   // a sync long after the learned optimizer length: GpuCompute (backdated)
  batch_taken = 14,     // a worker of the driver woke from idle in OptimizerStep: GpuCompute
};

// One phase change of one thread, as the BPF side made it. `phase` is policy::Phase's value
// (0 DataLoading .. 4 Unknown), `cause` a PhaseCause.
struct PhaseEvent {
  std::uint64_t t_ns = 0;  // CLOCK_MONOTONIC ns of the event that made the change
  std::uint32_t tid = 0;
  std::uint32_t tgid = 0;
  std::uint8_t phase = 4;
  std::uint8_t cause = 0;
};

// A library file the probes are attached to.
struct AttachedLibrary {
  std::string path;  // the path it was first attached by
  std::uint64_t dev = 0;
  std::uint64_t inode = 0;
  std::vector<std::string> symbols;  // the entry points probed (3 to 5)
  std::vector<std::uint64_t> offsets;  // their offsets in the file, in the same order
};

class GpuSyncProbes {
 public:
  struct Options {
    std::string proc_root = "/proc";  // for maps, schedstat and /proc/PID/root
    // Phases from events: the context-switch program applies the phase rules, and the ring
    // buffer is sized for them, only when this is set.
    bool phase_events = false;
    std::uint64_t sync_hysteresis_ns = 2'000'000;  // a sync begun in OptimizerStep
    std::uint64_t idle_hysteresis_ns = 2'000'000;  // a worker's sleep before it is idle
    std::uint64_t optimizer_max_ns = 200'000'000;  // CPU in OptimizerStep before Unknown
    // The ring buffer's size in bytes, a power of 2 and a multiple of the page size; 0: 4 MiB
    // (131,072 changes). Tests make it small to overflow it.
    std::uint32_t phase_ring_bytes = 0;
    // Uprobes as one perf-event link per function even where the kernel has multi-uprobe links:
    // what kernels before 6.6 get, so that tests cover it.
    bool perf_uprobes = false;
  };

  // Loads the BPF object (needs root: CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN; and kernel BTF)
  // and attaches nothing: no program runs until a process is followed.
  static Result<std::unique_ptr<GpuSyncProbes>> open(const Options& options);
  static Result<std::unique_ptr<GpuSyncProbes>> open() { return open(Options{}); }

  ~GpuSyncProbes();
  GpuSyncProbes(const GpuSyncProbes&) = delete;
  GpuSyncProbes& operator=(const GpuSyncProbes&) = delete;
  GpuSyncProbes(GpuSyncProbes&&) = delete;
  GpuSyncProbes& operator=(GpuSyncProbes&&) = delete;

  // Attaches the sync probes (entry and return of the three sync calls, plus the optional
  // variants the file has; kernel launches are not probed, docs/probes.md) to the library at
  // `path` in process `pid` only, and follows it. True when newly attached, false when that
  // file (dev, inode) already is in that process. Errors: the file cannot be opened; it is not
  // ELF; it lacks one of the three calls; the process is gone; the kernel refuses the uprobe.
  // On error nothing of this file stays attached in it.
  [[nodiscard]] Result<bool> attach_library(std::uint32_t pid, const std::string& path);

  // Attaches every libcuda the process maps (/proc/PID/maps), opened through /proc/PID/root so
  // a library inside a container's file system is found. Returns how many files were newly
  // attached (0: none mapped, or all attached already). A process that is gone gives an error
  // with code ESRCH.
  [[nodiscard]] Result<std::size_t> attach_process_libraries(std::uint32_t pid);

  // Starts / stops counting the process's futex waits; track() follows the process. track() of
  // a tracked pid keeps its count. Errors: futex counting unavailable (has_futex() false), or
  // the filter map is full (65,536).
  [[nodiscard]] Result<void> track(std::uint32_t pid);
  [[nodiscard]] Result<void> untrack(std::uint32_t pid);

  // The process's signals now; `now_ns` is the caller's CLOCK_MONOTONIC time of this tick.
  // A process the probes never saw reads as all zeros. Errors only for a failing map read.
  [[nodiscard]] Result<ProbeSample> read(std::uint32_t pid, std::uint64_t now_ns);

  // Drops everything about the process: its uprobes (detached in the background), its map
  // entries (sync state, futex tracking, role) and the previous-read state; when it was the
  // last followed process, the programs that run for every task are detached too. Call when it
  // exits or stops being tracked. (The BPF side also drops a followed process's entries when
  // its last thread exits, so a reused pid starts clean.)
  void forget(std::uint32_t pid);

  // Phases from events. set_phase_role() names a process whose threads get phases (again: its
  // role changes for threads not seen yet) and follows it; forget() drops it. drain_phase_events()
  // appends every change the ring buffer holds, oldest first, then the last change of each
  // thread whose changes the ring had no room for (kept by the BPF side, its time that of the
  // change; none that an appended one of the thread supersedes), and returns how many. Errors:
  // phase events off or unavailable (has_phase_events() false), the role map full (65,536).
  [[nodiscard]] Result<void> set_phase_role(std::uint32_t pid, PhaseRole role);
  std::size_t drain_phase_events(std::vector<PhaseEvent>& out);
  [[nodiscard]] bool has_phase_events() const { return !phase_error_.has_value(); }
  // The per-thread phase map (task storage), for the sched_ext scheduler to share; -1 when
  // phases from events are off.
  [[nodiscard]] int phase_map_fd() const;
  // Every map of the probes' object (bpf/probes/rules.bpf.h), by name, for the sched_ext
  // scheduler to share (its own maps of those names take these); empty when phases from
  // events are off. The fds stay the probes'.
  struct SharedMap {
    std::string name;
    int fd = -1;
  };
  [[nodiscard]] std::vector<SharedMap> shared_maps() const;
  // Whether the sched_ext scheduler runs the context-switch rules in its own callbacks (it
  // carries them: probes.bpf.c, WHERE THE SWITCH RULES RUN). While it does, the probes'
  // context-switch tracepoint is not attached; when it stops (ejected, unloaded), the tracepoint
  // is attached again while a process is followed. Idempotent; the daemon calls it every tick.
  void set_switch_carried(bool carried);
  [[nodiscard]] bool switch_carried() const;
  // Whether a GPU sync's entry and return kick the sched_ext scheduler for their phase change
  // themselves (probes/rules.bpf.h, SYNC KICKS): the kernel lets a uprobe start a bpf_timer.
  [[nodiscard]] bool sync_kicks() const;
  [[nodiscard]] const std::optional<Error>& phase_events_error() const { return phase_error_; }

  [[nodiscard]] bool has_futex() const { return !futex_error_.has_value(); }
  [[nodiscard]] const std::optional<Error>& futex_error() const { return futex_error_; }
  [[nodiscard]] const std::vector<AttachedLibrary>& libraries() const { return libraries_; }
  [[nodiscard]] ProbeStats stats() const;
  // The context-switch program's runs and their summed time (ns) so far, for benchmarks;
  // counted only while the kernel's run-time statistics are on (BPF_ENABLE_STATS or
  // kernel.bpf_stats_enabled) and while it is attached (a process is followed).
  struct ProgramRuns {
    std::uint64_t count = 0;
    std::uint64_t ns = 0;
  };
  [[nodiscard]] ProgramRuns switch_runs() const;

  // What is attached (docs/probes.md, "What is attached when"). followed(): processes with
  // uprobes, futex counting or a role. attached(): the programs that run for every task are.
  [[nodiscard]] std::size_t followed() const;
  [[nodiscard]] bool attached() const;
  // Whether a process's uprobes are one multi-uprobe link per program (Linux 6.6+) rather than
  // one perf-event link per function.
  [[nodiscard]] bool uprobe_multi() const;
  // Waits until every detach begun so far is done (they run on a background thread).
  void settle();

  struct Impl;  // libbpf objects (gpu_sync_probes.cpp)

 private:
  GpuSyncProbes(std::unique_ptr<Impl> impl, Options options);
  void open_phase_events();  // sets phase_error_ when it cannot
  // A followed process: what of it is probed.
  struct Followed {
    bool futex = false;  // its futex waits are counted (track)
    bool role = false;   // its threads get phases (set_phase_role)
    std::vector<std::pair<std::uint64_t, std::uint64_t>> files;  // (dev, inode) probed in it
    std::vector<bpf_link*> links;                                // its uprobes
  };
  // The process's entry of the followed set, made (and the every-task programs attached, for
  // the first) when missing; unfollow_if_idle() drops it once nothing of it is left.
  Followed& follow(std::uint32_t pid);
  void unfollow_if_idle(std::uint32_t pid);
  void attach_every_task_programs();
  void attach_switch_program();
  void detach_every_task_programs();
  void take_unsent_phase_events(std::vector<PhaseEvent>& out, std::size_t drained_from);

  struct Previous {
    std::uint64_t sync_count = 0;
    std::uint64_t sync_time_ns = 0;
    std::uint64_t futex_waits = 0;
    std::uint64_t now_ns = 0;
  };

  std::unique_ptr<Impl> impl_;
  Options options_;
  std::optional<Error> futex_error_;
  std::optional<Error> phase_error_;
  std::vector<AttachedLibrary> libraries_;
  std::unordered_map<std::uint32_t, Followed> followed_;
  std::unordered_map<std::uint32_t, Previous> previous_;
  std::string buf_;  // schedstat reads
  std::uint64_t phase_events_recovered_ = 0;  // taken from zernel_phase_unsent
};

}  // namespace zernel::collect
