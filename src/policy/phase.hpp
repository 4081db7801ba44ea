#pragma once
// The five phases of a training step and the policy table that says how each is scheduled.
//
// Priority is "how urgently this task needs a CPU", higher is more urgent; it becomes a CPU weight
// through weight_for_priority() (policy/weight.hpp). The slice is the time a task in this phase may
// run before the kernel scheduler considers another (the sched_ext program uses it directly).
// A latency target of 0 means "none": the phase is throughput work and never preempts.

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace zernel::policy {

// The numeric values are part of the BPF/C++ contract and of the benchmark folds; do not reorder.
enum class Phase : std::uint8_t {
  data_loading = 0,
  gpu_compute = 1,
  nccl_collective = 2,
  optimizer_step = 3,
  unknown = 4,
};
inline constexpr std::size_t kPhaseCount = 5;

inline constexpr std::array<Phase, kPhaseCount> kAllPhases = {
    Phase::data_loading, Phase::gpu_compute, Phase::nccl_collective, Phase::optimizer_step,
    Phase::unknown};

constexpr std::size_t index_of(Phase p) { return static_cast<std::size_t>(p); }

// Display name: "DataLoading", "GpuCompute", "NcclCollective", "OptimizerStep", "Unknown".
std::string_view phase_name(Phase p);
// Metric label: "data_loading", "gpu_compute", "nccl_collective", "optimizer_step", "unknown".
std::string_view phase_label(Phase p);
// Accepts either spelling.
std::optional<Phase> parse_phase(std::string_view s);

struct PhasePolicy {
  std::int32_t priority;          // the decision's priority; higher = more CPU
  bool preempt;                   // a wakeup may preempt lower-priority work
  std::uint32_t latency_target_us;  // 0 = none
  std::uint64_t slice_ns;         // time slice in the kernel scheduler
};

inline constexpr std::uint64_t kDefaultSliceNs = 20'000'000;

// GpuCompute's -5 is "a thread waiting on the GPU yields": it matters for a waiter that spins
// (runnable, burning a CPU, while its GPU works). A waiter that blocks uses no CPU while it
// waits, so a low priority takes nothing from it then, and hurts the moment its wait ends: that
// is when it launches the next kernels, runs the optimizer or enters the collective, the
// critical path of the step, and a training step's GPU wait lasts tens of ms, far less than the
// ticks a phase takes to commit. So a GpuCompute task known to block in its waits
// (TaskState::gpu_wait_blocks) keeps the priority of the step's critical phases; its other
// fields (no preemption, no latency target, the 20 ms slice) stay GpuCompute's. Measured with
// bench/protection.sh (docs/benchmarks.md): a job next to CPU hogs kept 0.80 of its solo speed
// with the rank at GpuCompute's priority, 0.93 with this one.
inline constexpr std::int32_t kBlockedGpuWaitPriority = 10;

constexpr PhasePolicy policy_for_phase(Phase p) {
  switch (p) {
    case Phase::data_loading: return {10, true, 100, 5'000'000};
    case Phase::gpu_compute: return {-5, false, 0, 20'000'000};
    case Phase::nccl_collective: return {10, true, 50, 10'000'000};
    case Phase::optimizer_step: return {10, true, 100, 3'000'000};
    case Phase::unknown: break;
  }
  return {0, false, 0, kDefaultSliceNs};
}

}  // namespace zernel::policy
