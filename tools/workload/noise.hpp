#pragma once
// Noise mode: a noisy neighbour. `threads` threads spin on the CPU (integer arithmetic, no memory
// traffic, no system calls) for `seconds`, or until SIGINT/SIGTERM when seconds is 0; then one
// JSON line: {"mode": "noise", "threads": N, "elapsed_s": ..., "cpu_s": ..., "iterations": ...,
// "interrupted": false}. Exit code 0, also when stopped by a signal.

#include "workload/options.hpp"

namespace zernel::workload {

int run_noise(const NoiseOptions& opts);

}  // namespace zernel::workload
