#pragma once
// The launcher: the process the user starts. It prepares what the ranks share (the dataset, the
// NCCL-like segment, the truth log), forks the ranks, supervises them and prints the summary.
//
// Process tree (2 ranks, 2 workers):
//   zernel-workload              launcher: no GPU, not in the truth log
//   +- rank 0                    main process, GPU context on device 0 % device_count
//   |  +- worker 0.0, 0.1        DataLoader workers, no GPU context
//   +- rank 1                    GPU context on device 1 % device_count
//      +- worker 1.0, 1.1
// The ranks and workers share one process group (led by rank 0), separate from the launcher's, so
// a terminal's Ctrl-C reaches the launcher only and it stops the job in order: SIGTERM to the
// group, SIGKILL after kStopGraceMs. Every child also has PR_SET_PDEATHSIG(SIGTERM), so it dies
// with its parent even when the launcher is killed outright. The launcher removes the shared
// segment and the dataset at exit.
//
// Exit codes: 0 when every rank finished, or the job was stopped by SIGINT/SIGTERM (the summary
// then says "interrupted": true); 1 when the job could not start or a rank failed (the message
// names the rank and the reason, and no summary is printed).

#include "workload/options.hpp"

namespace zernel::workload {

inline constexpr int kStopGraceMs = 5000;
inline constexpr std::size_t kDatasetFiles = 8;

int run_job(const JobOptions& opts);

}  // namespace zernel::workload
