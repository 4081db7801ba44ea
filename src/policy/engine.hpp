#pragma once
// The policy engine: the task table, the phase detector, tenants and CPU placement, turned into
// one decision per task. Pure: no I/O, no clocks (callers pass `now_ns`), no globals, no logging;
// everything it has to say comes back in return values (Result errors, Decision::phase_changed).
//
// A tick, as the daemon (and bench_engine) drives it:
//   set_cpu_loads(loads);                 // once, re-ranks the CPUs and clears placements
//   update_task(pid, update) ...          // signals from the collectors
//   schedule(pid, now) / schedule_all(now, out)   // one decision per task
//
// Inputs are sanitised, not trusted: a GPU utilisation above 100 counts as 100, an io-wait
// fraction that is NaN or outside 0..1 is clamped (NaN -> 0).
//
// Cost: schedule() is a pid lookup, seven comparisons, two table lookups and an O(1) cursor step
// for the CPU (about 230 instructions); it allocates nothing once the table has grown to the task
// count. GPU ids above INT32_MAX are clamped to INT32_MAX (an unmapped GPU).

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "policy/decision.hpp"
#include "policy/options.hpp"
#include "policy/phase_detector.hpp"
#include "policy/task_table.hpp"
#include "policy/tenant.hpp"
#include "policy/topology.hpp"

namespace zernel::policy {

class Engine {
 public:
  Engine(const EngineOptions& opts, Topology topo);

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Starts tracking pid (re-registering resets its signals, phase, accounting and debounce but
  // keeps its tenant). Fails, changing nothing, when max_tracked_tasks are tracked.
  Result<void> register_task(std::uint32_t pid, bool is_ml, std::optional<std::uint32_t> gpu_id,
                             std::uint64_t now_ns = 0);
  // Stops tracking pid and forgets its tenant assignment (a reused pid starts clean).
  bool unregister_task(std::uint32_t pid);
  // Applies the set fields; false when pid is not tracked.
  bool update_task(std::uint32_t pid, const TaskUpdate& update);
  // A phase change the BPF event rules made at `at_ns` (the event's CLOCK_MONOTONIC time): it
  // becomes the task's event_phase and is committed at that time, so the phase times and the
  // transition count follow the events, not the ticks (a 60 ms GPU step between two 100 ms ticks
  // is accounted); the next decision then commits nothing more. A change to the phase already in
  // progress is no transition. Changes of one task come in time order; one dated before the
  // phase in progress began counts from that start. False when pid is not tracked.
  bool record_event_phase(std::uint32_t pid, Phase phase, std::uint64_t at_ns);
  // Per-CPU load, indexed by CPU id, 0..1. Replaces the previous loads and starts a new tick of
  // CPU placement.
  void set_cpu_loads(std::span<const float> loads);

  // Detects the phase and decides for one task. An untracked pid gets the default decision
  // (priority 0, no preemption) and is not counted.
  Decision schedule(std::uint32_t pid, std::uint64_t now_ns);
  // Decides for every tracked task, in table order; `out` is resized (reuse it across ticks).
  void schedule_all(std::uint64_t now_ns, std::vector<Decision>& out);

  // Tenants. Adding replaces an existing id; removing drops its processes' assignments.
  Result<std::uint16_t> upsert_tenant(const TenantSpec& spec);
  bool remove_tenant(std::string_view id);
  // Assigns a process to a tenant; a pid not yet tracked is registered as a non-ML task, since an
  // assigned process is scheduled by its tenant's share whatever it runs. Fails when the tenant is
  // unknown or the table is full.
  Result<void> assign_pid(std::uint32_t pid, std::string_view tenant_id);
  // The tenant of a tracked pid.
  [[nodiscard]] const TenantSpec* tenant_of(std::uint32_t pid) const;
  // The tenant weight a pid is scheduled with: its tenant's weight, 1.0 without one or when
  // multi-tenancy is off.
  [[nodiscard]] float cpu_weight_for_pid(std::uint32_t pid) const;
  [[nodiscard]] const TenantRegistry& tenants() const { return tenants_; }
  // Tracked tasks assigned to a tenant slot.
  [[nodiscard]] std::size_t tenant_task_count(std::uint16_t slot) const;

  [[nodiscard]] const TaskState* task(std::uint32_t pid) const { return table_.find(pid); }
  [[nodiscard]] std::span<const TaskState> tasks() const { return table_.tasks(); }
  [[nodiscard]] std::size_t task_count() const { return table_.size(); }
  [[nodiscard]] std::uint64_t decisions_made() const { return decisions_; }
  // Committed phase changes: the detector's, and those recorded from events.
  [[nodiscard]] std::uint64_t phase_transition_count() const {
    return detector_.transition_count() + event_transitions_;
  }
  [[nodiscard]] const EngineOptions& options() const { return opts_; }
  [[nodiscard]] const Topology& topology() const { return topo_; }

 private:
  Decision decide(TaskState& s, std::uint64_t now_ns);

  EngineOptions opts_;
  Topology topo_;
  PhaseDetector detector_;
  TaskTable table_;
  TenantRegistry tenants_;
  std::vector<std::uint32_t> tenant_tasks_;  // tracked tasks per tenant slot
  CpuPlacer placer_;
  std::uint64_t decisions_ = 0;
  std::uint64_t event_transitions_ = 0;
};

}  // namespace zernel::policy
