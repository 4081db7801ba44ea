#include "policy/phase.hpp"

namespace zernel::policy {

std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::data_loading: return "DataLoading";
    case Phase::gpu_compute: return "GpuCompute";
    case Phase::nccl_collective: return "NcclCollective";
    case Phase::optimizer_step: return "OptimizerStep";
    case Phase::unknown: break;
  }
  return "Unknown";
}

std::string_view phase_label(Phase p) {
  switch (p) {
    case Phase::data_loading: return "data_loading";
    case Phase::gpu_compute: return "gpu_compute";
    case Phase::nccl_collective: return "nccl_collective";
    case Phase::optimizer_step: return "optimizer_step";
    case Phase::unknown: break;
  }
  return "unknown";
}

std::optional<Phase> parse_phase(std::string_view s) {
  for (Phase p : kAllPhases) {
    if (s == phase_name(p) || s == phase_label(p)) return p;
  }
  return std::nullopt;
}

}  // namespace zernel::policy
