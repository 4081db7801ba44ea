#pragma once
// From the GPU-sync probes' raw state (collect/probes, bpf/probes.bpf.c) to the detector's two
// GPU inputs, as the process stands at the tick, not averaged over it:
//
//   cpu_burst_duration_ns  the CPU time run since the last GPU synchronisation returned, and 0
//                          while blocked in one. "Blocked" means a wait on a real piece of GPU
//                          work: a sync that has lasted kLongSyncNs (20 ms) or more. A shorter
//                          sync in progress is the gap between two CPU bursts (an optimizer
//                          launching a small kernel and waiting for it, ~0.2 ms); for it the
//                          burst is the one that ended when the sync began (the sync-to-sync gap
//                          in CPU time, recorded by the entry probe), so a tick that lands in such
//                          a gap still sees the short-burst pattern it is part of. A long sync
//                          whose thread is runnable while NVML shows its GPU mostly idle is such a
//                          gap too: the GPU work is done and the thread waits for a CPU. Once a sync has
//                          returned, a burst of 0 reads as 1 ns: schedstat moves in scheduler
//                          ticks, the thread has run, and 0 stays reserved for "blocked".
//   gpu floor (percent)    100 while blocked in a long sync (waiting on its own GPU work this
//                          instant, while NVML's per-process figure trails); otherwise the share
//                          of the interval spent inside syncs. The daemon takes the larger of
//                          this and NVML's figure as gpu_utilization.
//
// Worked example (100 ms tick): an optimizer alternates 0.8 ms of CPU and a 0.2 ms sync. A tick
// that lands in a burst reads the CPU since the return, ~0.4 ms; one that lands in a sync reads
// the burst before it, ~0.8 ms: both are 0 < burst < 5 ms (OptimizerStep). A forward pass
// blocks in one 800 ms sync: from 20 ms into it every tick reads burst 0 and floor 100
// (GpuCompute); a tick in its first 20 ms reads the burst before it.
// Pure: no I/O, no clocks.

#include <cstdint>
#include <optional>

namespace zernel::collect {

// A sync in progress for at least this long is a wait on real GPU work...
inline constexpr std::uint64_t kLongSyncNs = 20'000'000;
// ...unless the thread is runnable (its wait is over; on a busy machine it may sit on a run queue
// for hundreds of ms before it runs the return) and NVML says the process kept its GPU busy for
// less than this share of the interval. A thread that spins in the sync (CUDA's spin and yield
// modes) is runnable too, but its GPU is busy, so it still reads as blocked.
inline constexpr std::uint32_t kSyncGpuBusyPct = 50;

// What the probes say about one process at one read (collect::ProbeSample's fields).
struct SyncState {
  bool in_sync = false;                 // a thread is inside a sync now
  std::uint64_t in_sync_since_ns = 0;   // since when (valid while in_sync)
  std::uint64_t last_return_ns = 0;     // when a sync last returned; 0 = never
  std::uint64_t burst_since_return_ns = 0;  // CPU since that return (0 while in_sync)
  std::uint64_t last_burst_ns = 0;      // the burst that ended at the latest sync entry
  std::uint64_t sync_time_delta_ns = 0;  // time in syncs that completed since the last read
  std::uint64_t interval_ns = 0;        // since the last read; 0 = first read
  // The process's main thread is running or runnable now (/proc/PID/stat state R), and NVML's
  // utilisation of the GPU by this process over the last interval (nullopt: not known).
  bool runnable = false;
  std::optional<std::uint32_t> nvml_util_pct;
};

struct SyncSignals {
  std::uint64_t cpu_burst_ns = 0;
  std::uint32_t gpu_floor_pct = 0;  // 0..100
  bool long_sync = false;           // blocked in a sync of kLongSyncNs or more now
  // Inside a long sync: whether the process blocks in it (its main thread sleeps) or spins
  // (runnable while its GPU is busy); nullopt outside one (TaskState::gpu_wait_blocks).
  std::optional<bool> wait_blocks;
};

// `tick_ns` stands in for the interval on a first read.
SyncSignals sync_signals(const SyncState& s, std::uint64_t now_ns, std::uint64_t tick_ns);

}  // namespace zernel::collect
