#include "policy/power_policy.hpp"

namespace zernel::policy {

GpuPowerTarget gpu_power_target(Phase dominant) {
  switch (dominant) {
    case Phase::data_loading: return {1, 3, 78};
    case Phase::nccl_collective: return {1, 2, 85};
    case Phase::gpu_compute:
    case Phase::optimizer_step:
    case Phase::unknown: break;
  }
  return {};
}

CpuFreqTarget cpu_freq_target(Phase dominant) {
  switch (dominant) {
    case Phase::gpu_compute:
    case Phase::nccl_collective: return CpuFreqTarget::minimum;
    case Phase::data_loading:
    case Phase::optimizer_step:
    case Phase::unknown: break;
  }
  return CpuFreqTarget::full;
}

Phase dominant_phase(const std::array<std::uint32_t, kPhaseCount>& counts) {
  // Tie order: the phase that needs more power first.
  constexpr std::array<Phase, 4> kOrder = {Phase::gpu_compute, Phase::optimizer_step,
                                           Phase::nccl_collective, Phase::data_loading};
  Phase best = Phase::unknown;
  std::uint32_t best_count = 0;
  for (Phase p : kOrder) {
    if (counts[index_of(p)] > best_count) {
      best = p;
      best_count = counts[index_of(p)];
    }
  }
  return best;
}

PowerPlan plan_power(std::span<const TaskState> tasks, std::size_t gpu_count) {
  std::vector<std::array<std::uint32_t, kPhaseCount>> per_gpu(gpu_count);
  std::array<std::uint32_t, kPhaseCount> all{};
  for (const TaskState& t : tasks) {
    if (t.gpu_id < 0) continue;
    ++all[index_of(t.current_phase)];
    if (static_cast<std::size_t>(t.gpu_id) < gpu_count) {
      ++per_gpu[static_cast<std::size_t>(t.gpu_id)][index_of(t.current_phase)];
    }
  }
  PowerPlan plan;
  plan.gpu_phase.reserve(gpu_count);
  for (const auto& counts : per_gpu) plan.gpu_phase.push_back(dominant_phase(counts));
  plan.cpu_phase = dominant_phase(all);
  return plan;
}

}  // namespace zernel::policy
