#include "telemetry/snapshot.hpp"

namespace zernel::telemetry {

using policy::index_of;
using policy::kAllPhases;

Snapshot take_snapshot(const policy::Engine& engine, std::uint64_t now_ns, bool include_tasks) {
  Snapshot s;
  s.taken_at_ns = now_ns;
  s.decisions_total = engine.decisions_made();
  s.phase_transitions_total = engine.phase_transition_count();
  const auto& reg = engine.tenants();
  const auto tasks = engine.tasks();
  s.tasks_total = tasks.size();
  if (include_tasks) s.tasks.reserve(tasks.size());
  for (const policy::TaskState& t : tasks) {
    if (t.is_ml_process) ++s.tasks_ml;
    ++s.phase_tasks[index_of(t.current_phase)];
    for (policy::Phase p : kAllPhases) s.phase_time_ns[index_of(p)] += t.time_in_phase(p, now_ns);
    if (!include_tasks) continue;
    TaskView v;
    v.pid = t.pid;
    v.is_ml = t.is_ml_process;
    v.phase = t.current_phase;
    v.priority = t.last_priority;
    v.weight = t.last_weight;
    if (reg.valid(t.tenant)) v.tenant = reg.spec(t.tenant).id;
    v.gpu_id = t.gpu_id;
    v.preferred_cpu = t.last_preferred_cpu;
    for (policy::Phase p : kAllPhases) v.phase_time_ns[index_of(p)] = t.time_in_phase(p, now_ns);
    s.tasks.push_back(std::move(v));
  }
  s.phase_time_total_ns = s.phase_time_ns;
  std::uint64_t weight_sum = 0;
  for (std::uint16_t slot : reg.slots()) {
    const auto& spec = reg.spec(slot);
    TenantView v;
    v.id = spec.id;
    v.gpus = spec.gpus;
    v.priority_class = spec.priority_class;
    v.weight = reg.weight(slot);
    v.cgroup_weight = reg.cgroup_weight(slot);
    v.tasks = engine.tenant_task_count(slot);
    v.k8s_namespace = spec.k8s_namespace;
    v.k8s_pod = spec.k8s_pod;
    weight_sum += v.cgroup_weight;
    s.tenants.push_back(std::move(v));
  }
  for (TenantView& v : s.tenants) {
    v.entitled_share = static_cast<double>(v.cgroup_weight) / static_cast<double>(weight_sum);
  }
  return s;
}

std::array<double, policy::kPhaseCount> phase_time_pct(const Snapshot& s) {
  std::array<double, policy::kPhaseCount> pct{};
  std::uint64_t total = 0;
  for (std::uint64_t t : s.phase_time_ns) total += t;
  if (total == 0) return pct;
  for (std::size_t i = 0; i < pct.size(); ++i) {
    pct[i] = 100.0 * static_cast<double>(s.phase_time_ns[i]) / static_cast<double>(total);
  }
  return pct;
}

}  // namespace zernel::telemetry
