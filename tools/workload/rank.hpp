#pragma once
// A rank: the main process of one data-parallel replica, with a GPU context on device
// rank % device_count and its own DataLoader worker processes.
//
// One step, with the phase the truth log gives the rank's process at each moment:
//   1. take the next batch from worker (step % workers); DataLoading while it has to wait for
//      it (no change when the batch is already queued). With --workers 0 the rank reads and
//      decodes the batch itself, DataLoading throughout;
//   2. forward + backward: queue --gpu-ms of device time as a series of kernels of at most
//      kGpuKernelNs (or as --kernels equal ones), then one cuStreamSynchronize: GpuCompute;
//   3. gradient all-reduce: the NCCL-like collective (nccl_barrier.hpp), waiting for the other
//      ranks and then for --nccl-ms: NcclCollective;
//   4. optimizer step: --optimizer-ms split into ~1 ms rounds, each a CPU burst of 80 % of the
//      round (CPU time) followed by a tiny kernel of the other 20 % and a cuStreamSynchronize, as
//      a GPU optimizer launching its kernels does: OptimizerStep.
// A step's time is its wall time from (1) to the end of (4). The rank is Unknown before its first
// step (starting workers, creating the GPU context, the start barrier) and after its last.
//
// At the end the rank sends the launcher one JSON object on its result pipe (rank_result_json).

#include <string>

#include "workload/dataset.hpp"
#include "workload/gpu.hpp"
#include "workload/options.hpp"

namespace zernel::workload {

inline constexpr std::uint64_t kGpuKernelNs = 25'000'000;
inline constexpr std::uint64_t kOptimizerRoundNs = 1'000'000;

struct RankSetup {
  const JobOptions* opts = nullptr;
  int rank = 0;
  GpuLibrary gpu;
  std::string nccl_name;  // shared-memory segment of the collective
  const Dataset* dataset = nullptr;
  int result_fd = -1;    // write end of the pipe to the launcher
  int launcher_pid = 0;  // when the parent is no longer this, the launcher died: clean up for it
};

// Runs the rank in the calling (forked) process; returns its exit code.
int run_rank(const RankSetup& setup);

}  // namespace zernel::workload
