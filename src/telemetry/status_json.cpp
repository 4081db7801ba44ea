#include "telemetry/status_json.hpp"

#include "common/utf8.hpp"

namespace zernel::telemetry {
namespace {

nlohmann::json phase_times_ms(const std::array<std::uint64_t, policy::kPhaseCount>& ns) {
  nlohmann::json times = nlohmann::json::object();
  for (policy::Phase p : policy::kAllPhases) {
    times[std::string(policy::phase_name(p))] = static_cast<double>(ns[policy::index_of(p)]) / 1e6;
  }
  return times;
}

}  // namespace

nlohmann::json status_json(const Snapshot& s) {
  using nlohmann::json;
  json tenants = json::array();
  for (const TenantView& t : s.tenants) {
    tenants.push_back({{"id", valid_utf8(t.id)},
                       {"gpus", t.gpus},
                       {"class", policy::class_name(t.priority_class)},
                       {"weight", t.weight},
                       {"cgroup_weight", t.cgroup_weight},
                       {"tasks", t.tasks}});
  }
  json tasks = json::array();
  for (const TaskView& t : s.tasks) {
    json task = {
        {"pid", t.pid},
        {"comm", valid_utf8(t.comm)},
        {"ml", t.is_ml},
        {"phase", policy::phase_name(t.phase)},
        {"priority", t.priority},
        {"weight", t.weight},
        {"tenant", t.tenant.empty() ? json(nullptr) : json(t.tenant)},
        {"tenant_share", t.tenant_share.empty() ? json(nullptr) : json(valid_utf8(t.tenant_share))},
        {"gpu_id", t.gpu_id < 0 ? json(nullptr) : json(t.gpu_id)},
        {"preferred_cpu", t.preferred_cpu < 0 ? json(nullptr) : json(t.preferred_cpu)},
        {"phase_time_ms", phase_times_ms(t.phase_time_ns)}};
    if (!t.threads.empty()) {
      json threads = json::array();
      for (const ThreadView& th : t.threads) {
        threads.push_back({{"tid", th.tid},
                           {"phase", policy::phase_name(th.phase)},
                           {"exited", th.exited},
                           {"phase_time_ms", phase_times_ms(th.phase_time_ns)}});
      }
      task["threads"] = std::move(threads);
    }
    tasks.push_back(std::move(task));
  }
  const auto str_or_null = [](const std::string& v) { return v.empty() ? json(nullptr) : json(v); };
  return {{"backend", s.backend},
          {"backend_requested", str_or_null(s.backend_requested)},
          {"backend_state", s.backend_state},
          {"backend_reason", str_or_null(valid_utf8(s.backend_reason))},
          {"taken_at_ns", s.taken_at_ns},
          {"decisions", s.decisions_total},
          {"transitions", s.phase_transitions_total},
          {"tasks_total", s.tasks_total},
          {"tasks_ml", s.tasks_ml},
          {"tenants", tenants},
          {"tasks", tasks}};
}

}  // namespace zernel::telemetry
