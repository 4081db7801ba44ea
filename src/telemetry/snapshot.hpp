#pragma once
// A point-in-time copy of what the engine knows, taken once per tick (or per scrape), so that
// rendering (Prometheus text, status JSON, the live view) never touches the engine itself.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/version.hpp"
#include "policy/engine.hpp"
#include "telemetry/thread_phases.hpp"

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
  // Its threads' own phase times, for processes whose phases come from events (filled by the
  // daemon, telemetry/thread_phases.hpp); empty otherwise.
  std::vector<ThreadView> threads;
  // How the backend carries the tenant's weight for this process, filled by the daemon (userspace:
  // "cpu.weight 458 on its cgroup /job1" or "nice shift -2 on its threads: <why>"); empty: nothing
  // to say (no tenant, or a backend without the notion).
  std::string tenant_share;
};

struct TenantView {
  std::string id;
  std::uint32_t gpus = 0;
  policy::PriorityClass priority_class = policy::PriorityClass::training;
  float weight = 1.0F;
  std::uint32_t cgroup_weight = 100;
  std::size_t tasks = 0;
  // Kubernetes origin (TenantSpec), for the namespace and pod labels; empty otherwise.
  std::string k8s_namespace;
  std::string k8s_pod;
  // cgroup_weight over the sum of every tenant's cgroup_weight: the share of the CPUs it is
  // entitled to against the other tenants (every tenant may use every CPU).
  double entitled_share = 0.0;
  // Filled by the daemon: CPU time of the tenant's processes since start (summed while they were
  // the tenant's), and its share of all tenants' CPU time over the last publish interval (nullopt
  // before the second snapshot, or when no tenant used any CPU in it).
  std::uint64_t cpu_time_ns = 0;
  std::optional<double> achieved_share;
};

// One GPU as the daemon knows it (filled by the daemon from NVML; empty without it), labelled
// as DCGM exporter labels its series so that PromQL can join the two.
struct GpuView {
  std::uint32_t index = 0;  // NVML's index: DCGM's "gpu" label
  std::string uuid;         // "GPU-...": DCGM's "UUID"; empty when NVML cannot tell
  std::string bus_id;       // sysfs form "0000:1b:00.0"
  std::optional<std::uint32_t> utilization_pct;                  // the last device utilisation read
  std::array<std::uint64_t, policy::kPhaseCount> phase_tasks{};  // tracked tasks on it, by phase
  std::vector<std::string> tenants;  // ids of the tenants with tasks on it, sorted, unique
};

// A counter with a fixed name (a backend's or the probes' event kinds).
struct NamedCounter {
  std::string name;
  std::uint64_t value = 0;
  bool operator==(const NamedCounter&) const = default;
};

// Decision latency: how long a tick took from its start to its decisions handed to the backend,
// as a Prometheus histogram (fixed bounds, 50 us .. 1 s).
struct LatencyHistogram {
  static constexpr std::array<double, 12> kBoundsSeconds = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.25, 1.0};
  std::array<std::uint64_t, kBoundsSeconds.size()> buckets{};  // per bound, not cumulative
  std::uint64_t count = 0;                                     // all observations (+Inf)
  double sum_seconds = 0.0;

  void observe(std::uint64_t ns) {
    const double s = static_cast<double>(ns) / 1e9;
    for (std::size_t i = 0; i < kBoundsSeconds.size(); ++i) {
      if (s <= kBoundsSeconds[i]) {
        ++buckets[i];
        break;
      }
    }
    ++count;
    sum_seconds += s;
  }
  bool operator==(const LatencyHistogram&) const = default;
};

struct CollectorErrors {
  std::string collector;  // "nvml", "discovery", "signals", "cpu_load", "backend", "power"
  std::uint64_t errors = 0;
};

struct Snapshot {
  std::string backend = "observe";  // the backend acting
  // The daemon's --backend, whether that backend acts (the supervisor's mode: "requested",
  // "reloading", "fallback", "observing"; daemon/backend_supervisor.hpp) and why not, in a
  // sentence (empty when it does).
  std::string backend_requested;
  std::string backend_state = "requested";
  std::string backend_reason;
  // The node's name for the Hostname label of GPU series (the daemon: $NODE_NAME, else
  // gethostname).
  std::string hostname;
  // The build (zernel_scheduler_build_info): every snapshot carries it, whoever takes it (the
  // daemon, --demo, a test).
  std::string version = kVersion;
  std::string commit = kCommit;
  std::uint64_t taken_at_ns = 0;
  std::uint64_t tasks_total = 0;
  std::uint64_t tasks_ml = 0;
  std::uint64_t decisions_total = 0;
  std::uint64_t phase_transitions_total = 0;
  std::array<std::uint64_t, policy::kPhaseCount> phase_tasks{};    // tasks now in each phase
  std::array<std::uint64_t, policy::kPhaseCount> phase_time_ns{};  // summed over tasks, to now
  // The same including the time of tasks no longer tracked (a counter): take_snapshot sets it to
  // phase_time_ns, the daemon adds what the tasks it dropped had accounted.
  std::array<std::uint64_t, policy::kPhaseCount> phase_time_total_ns{};
  std::vector<TenantView> tenants;
  std::vector<TaskView> tasks;  // only when asked for
  // Filled by the daemon (empty or zero in take_snapshot): the last tick's decision latency,
  // all ticks' latencies, and the errors of each collector since start.
  std::uint64_t last_decision_latency_ns = 0;
  LatencyHistogram decision_latency;
  std::vector<CollectorErrors> collector_errors;
  // The backend's own counters (Backend::counters, summed over restarts; empty for a backend
  // with none), the GPU sync probes' counters (empty without probes), backend ejections by exit
  // kind (the daemon lists every kind, 0 for those not seen) and backend restarts (attempted;
  // the failed ones among them).
  std::vector<NamedCounter> backend_counters;
  std::vector<NamedCounter> probe_counters;
  // Where the probes' context-switch rules run (phases from events): "sched_ext" (the
  // scheduler's ops.stopping and ops.running), "tracepoint" (the probes' sched_switch, attached
  // while a process is followed); empty without phases from events.
  std::string switch_rules_in;
  // How often the daemon looked for the processes to follow, by kind (proc_scan: all of /proc;
  // proc_update: the processes the kernel's events named; nvml_list: NVML's process list).
  std::vector<NamedCounter> discovery_runs;
  std::vector<NamedCounter> backend_ejections;
  std::uint64_t backend_restarts = 0;
  std::uint64_t backend_restarts_failed = 0;
  std::vector<GpuView> gpus;
};

// Reads the engine at `now_ns`. With include_tasks, one TaskView per tracked task.
Snapshot take_snapshot(const policy::Engine& engine, std::uint64_t now_ns, bool include_tasks);

// Percent of all accounted time spent in each phase (all zeros when nothing is accounted).
std::array<double, policy::kPhaseCount> phase_time_pct(const Snapshot& s);

}  // namespace zernel::telemetry
