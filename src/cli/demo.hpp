#pragma once
// `zernel-scheduler --demo`: a simulated training process walks through DataLoading ->
// GpuCompute -> OptimizerStep -> DataLoading while the real engine (real config, the machine's
// real CPU topology) decides for it every tick. Each tick prints the signals fed in and the
// decision that came out, so the debounce, the policy table, tenant weights and CPU choice can be
// seen at work without a GPU or sched_ext. Time is simulated (phase_eval_interval_ms per tick),
// so the demo runs instantly and prints the same thing every time on the same machine.

#include <cstdio>
#include <string>

#include "common/result.hpp"
#include "config/config.hpp"
#include "policy/topology.hpp"

namespace zernel::cli {

struct DemoOptions {
  config::Config config;
  policy::Topology topology;
  std::string topology_summary;  // e.g. "1 NUMA node, 2 CPUs, 0 GPUs"
  std::string phase_log_path;    // empty: no phase log
};

Result<void> run_demo(const DemoOptions& opts, std::FILE* out);

}  // namespace zernel::cli
