#pragma once
// A point-in-time copy of what the engine knows, taken once per tick (or per scrape), so that
// rendering (Prometheus text, status JSON, the live view) never touches the engine itself.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "policy/engine.hpp"

namespace zernel::telemetry {

struct TaskView {
  std::uint32_t pid = 0;
  std::string comm;  // filled by the daemon from /proc; empty in the demo
  bool is_ml = false;
  policy::Phase phase = policy::Phase::unknown;
  std::int32_t priority = 0;
  std::uint32_t weight = 0;
  std::string tenant;  // empty without one
  std::int32_t gpu_id = policy::kNoGpu;
  std::int32_t preferred_cpu = policy::kNoCpu;
  std::array<std::uint64_t, policy::kPhaseCount> phase_time_ns{};
};

struct TenantView {
  std::string id;
  std::uint32_t gpus = 0;
  policy::PriorityClass priority_class = policy::PriorityClass::training;
  float weight = 1.0F;
  std::uint32_t cgroup_weight = 100;
  std::size_t tasks = 0;
};

struct Snapshot {
  std::string backend = "observe";
  std::uint64_t taken_at_ns = 0;
  std::uint64_t tasks_total = 0;
  std::uint64_t tasks_ml = 0;
  std::uint64_t decisions_total = 0;
  std::uint64_t phase_transitions_total = 0;
  std::array<std::uint64_t, policy::kPhaseCount> phase_tasks{};    // tasks now in each phase
  std::array<std::uint64_t, policy::kPhaseCount> phase_time_ns{};  // summed over tasks, to now
  std::vector<TenantView> tenants;
  std::vector<TaskView> tasks;  // only when asked for
};

// Reads the engine at `now_ns`. With include_tasks, one TaskView per tracked task.
Snapshot take_snapshot(const policy::Engine& engine, std::uint64_t now_ns, bool include_tasks);

// Percent of all accounted time spent in each phase (all zeros when nothing is accounted).
std::array<double, policy::kPhaseCount> phase_time_pct(const Snapshot& s);

}  // namespace zernel::telemetry
