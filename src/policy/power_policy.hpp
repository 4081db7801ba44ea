#pragma once
// Power management policy ([power], docs/configuration.md): which GPU clock, GPU power limit and
// CPU maximum frequency serve the dominant phase. Pure: phases in, targets out; enforce/power.hpp
// applies them.
//
//   dominant phase   GPU SM clock        GPU power limit         CPU max frequency
//   DataLoading      1/3 of max          78 % of the default     full
//   GpuCompute       full                full                    minimum
//   NcclCollective   1/2 of max          85 % of the default     minimum
//   OptimizerStep    full                full                    full
//   Unknown / none   full                full                    full
//
// "Full" means "as the machine had it before": the actuator restores the original setting.
//
// The dominant phase of a set of tasks is the phase most of them are in. Tasks in Unknown say
// nothing about what the GPU does, so they count only when no task has a known phase. A tie goes
// to the phase that needs more power (GpuCompute, OptimizerStep, NcclCollective, DataLoading), so
// that an ambiguous GPU is never slowed down.

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "policy/phase.hpp"
#include "policy/task_state.hpp"

namespace zernel::policy {

struct GpuPowerTarget {
  // Fractions of the device's maximum SM clock and default power limit; full = the original.
  std::uint32_t clock_num = 1;  // clock = max * clock_num / clock_den
  std::uint32_t clock_den = 1;
  std::uint32_t power_pct = 100;  // percent of the default power limit
  [[nodiscard]] bool full() const { return clock_num == clock_den && power_pct == 100; }
  bool operator==(const GpuPowerTarget&) const = default;
};

enum class CpuFreqTarget : std::uint8_t { full, minimum };

GpuPowerTarget gpu_power_target(Phase dominant);
CpuFreqTarget cpu_freq_target(Phase dominant);

// The tasks' phase counts -> the dominant phase (Unknown when there is no task).
Phase dominant_phase(const std::array<std::uint32_t, kPhaseCount>& counts);

struct PowerPlan {
  std::vector<Phase> gpu_phase;  // by GPU index, 0 .. gpu_count-1
  Phase cpu_phase = Phase::unknown;  // over the tasks bound to any GPU
};

// The dominant phase of each GPU's tasks (tasks with gpu_id in 0..gpu_count-1), and over the
// tasks bound to any GPU for the CPUs. Tasks bound to no GPU are ignored.
PowerPlan plan_power(std::span<const TaskState> tasks, std::size_t gpu_count);

}  // namespace zernel::policy
