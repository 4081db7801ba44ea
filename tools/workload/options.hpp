#pragma once
// What the command line asks for (cli.cpp parses and validates it; see docs/workload.md).

#include <cstddef>
#include <cstdint>
#include <string>

namespace zernel::workload {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

inline std::uint64_t ms_to_ns(double ms) { return static_cast<std::uint64_t>(ms * 1e6 + 0.5); }

struct JobOptions {
  int ranks = 2;                 // rank (main) processes, one GPU context each
  int workers = 2;               // DataLoader worker processes per rank; 0 = the rank loads itself
  int steps = 10;                // training steps per rank
  int warmup_steps = 0;          // first steps left out of the statistics
  double data_ms = 800;          // CPU decode time per batch
  double gpu_ms = 800;           // device time of forward + backward
  double launch_cpu_ms = 0;      // host CPU time between forward + backward's launches
  int kernels = 0;               // forward + backward as this many kernels; 0 = one per 25 ms
  double nccl_ms = 600;          // all-reduce time once every rank has arrived
  double optimizer_ms = 600;     // optimizer step: short CPU bursts between tiny GPU syncs
  int prefetch_factor = 2;       // batches queued ahead per worker (PyTorch's prefetch_factor)
  std::size_t batch_kib = 1024;  // bytes read from the dataset per batch
  std::string data_dir;          // parent of the temporary dataset; empty = $TMPDIR or /var/tmp
  std::string truth_log;         // empty = none
  std::string step_log;          // empty = none; per-step times as JSON lines, written at the end
  bool emulated_gpu = false;
  bool sync_spin = false;   // GPU syncs spin (CU_CTX_SCHED_SPIN) instead of sleeping
  bool helpers = false;     // each rank's helper threads (helpers.hpp)
  bool pin_memory = false;  // each rank's pin-memory thread (pin_memory.hpp); needs workers
};

struct NoiseOptions {
  int threads = 1;
  double seconds = 0;  // 0 = until SIGINT/SIGTERM
};

}  // namespace zernel::workload
