#pragma once
// A scheduling decision for one task (and, through its tgid, all its threads).
//
// Two levels of weight, as with cgroups: `weight` ranks the task among the tasks of its group
// (from priority, policy/weight.hpp), `tenant_weight` ranks its tenant's group among the tenants
// (cgroup cpu.weight scale, 100 = an average tenant, also for tasks with no tenant). Enforcement
// maps them to nice + cgroup cpu.weight, or to the sched_ext program's two-level virtual time.

#include <cstdint>
#include <optional>

#include "policy/phase.hpp"
#include "policy/task_state.hpp"
#include "policy/weight.hpp"

namespace zernel::policy {

struct Decision {
  std::uint32_t pid = 0;
  Phase phase = Phase::unknown;
  bool phase_changed = false;        // this decision committed a new phase
  bool preempt = false;
  std::int32_t priority = 0;         // the phase priority (the class is in tenant_weight)
  std::uint32_t weight = kDefaultWeight;  // weight_for_priority(priority)
  std::uint32_t latency_target_us = 0;   // 0 = none
  std::uint64_t slice_ns = kDefaultSliceNs;
  std::int32_t preferred_cpu = kNoCpu;
  std::uint16_t tenant = kNoTenant;
  std::uint32_t tenant_weight = 100;  // cgroup cpu.weight scale
  std::int32_t gpu_id = kNoGpu;       // the GPU the task is bound to (kNoGpu: none)

  [[nodiscard]] std::optional<std::uint32_t> latency_target() const {
    if (latency_target_us == 0) return std::nullopt;
    return latency_target_us;
  }
  [[nodiscard]] std::optional<std::uint32_t> cpu() const {
    if (preferred_cpu < 0) return std::nullopt;
    return static_cast<std::uint32_t>(preferred_cpu);
  }
};

}  // namespace zernel::policy
