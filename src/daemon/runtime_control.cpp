#include "daemon/runtime_control.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "telemetry/status_json.hpp"

namespace zernel::daemon {

namespace {

std::vector<config::TenantConfig>::iterator find_tenant(std::vector<config::TenantConfig>& list,
                                                        std::string_view id) {
  return std::find_if(list.begin(), list.end(),
                      [id](const config::TenantConfig& t) { return t.spec.id == id; });
}

std::string not_registered(std::string_view id) {
  return "tenant \"" + std::string(id) + "\" is not registered";
}

std::string from_kubelet(std::string_view id) {
  return "tenant \"" + std::string(id) +
         "\" comes from the kubelet's pod-resources API; it changes and goes with its pod";
}

}  // namespace

RuntimeControl::RuntimeControl(config::Config& config, policy::Engine& engine, ControlHost& host,
                               RuntimeControlOptions opts)
    : config_(config), engine_(engine), host_(host), opts_(std::move(opts)) {}

nlohmann::json RuntimeControl::handle(const ControlRequest& req) {
  switch (req.op) {
    case ControlOp::tenant_add:
      return tenant_add(req.tenant);
    case ControlOp::tenant_remove:
      return tenant_remove(req.tenant.id);
    case ControlOp::tenant_list: {
      nlohmann::json out = ok_reply();
      out["tenants"] = tenant_list();
      return out;
    }
    case ControlOp::tenant_assign:
      return tenant_assign(req.pid, req.assign_to);
    case ControlOp::status:
      return status();
    case ControlOp::trace:  // answered later, by the daemon's loop (trace_recording.cpp)
      return error_reply("trace: not served here");
  }
  return error_reply("unknown op");
}

nlohmann::json RuntimeControl::tenant_list() const {
  nlohmann::json list = nlohmann::json::array();
  const policy::TenantRegistry& reg = engine_.tenants();
  for (std::uint16_t slot : reg.slots()) {
    const policy::TenantSpec& t = reg.spec(slot);
    list.push_back(
        {{"id", t.id},
         {"gpus", t.gpu_fraction ? nlohmann::json(*t.gpu_fraction) : nlohmann::json(t.gpus)},
         {"class", policy::class_name(t.priority_class)},
         {"cpu_weight", t.cpu_weight ? nlohmann::json(*t.cpu_weight) : nlohmann::json()},
         {"weight", reg.weight(slot)},
         {"cgroup_weight", reg.cgroup_weight(slot)},
         {"tasks", engine_.tenant_task_count(slot)},
         {"source", runtime_tenants_.contains(t.id)   ? "runtime"
                    : kubelet_tenants_.contains(t.id) ? "kubelet"
                                                      : "config"}});
  }
  return list;
}

nlohmann::json RuntimeControl::tenant_add(const policy::TenantSpec& spec) {
  if (kubelet_tenants_.contains(spec.id)) return error_reply(from_kubelet(spec.id));
  const bool existed = engine_.tenants().find(spec.id).has_value();
  if (auto r = engine_.upsert_tenant(spec); !r) return error_reply(r.error().message());
  if (auto it = find_tenant(config_.tenants, spec.id); it != config_.tenants.end()) {
    it->spec = spec;  // keeps its match rules
  } else {
    config_.tenants.push_back(config::TenantConfig{spec, {}});
    runtime_tenants_.insert(spec.id);
  }
  save_state();
  spdlog::info("control: tenant \"{}\" {} ({} GPUs, class {})", spec.id,
               existed ? "replaced" : "added", spec.gpus, policy::class_name(spec.priority_class));
  nlohmann::json out = ok_reply();
  out["replaced"] = existed;
  out["tenants"] = tenant_list();
  return out;
}

nlohmann::json RuntimeControl::tenant_remove(const std::string& id) {
  if (kubelet_tenants_.contains(id)) return error_reply(from_kubelet(id));
  if (!engine_.remove_tenant(id)) return error_reply(not_registered(id));
  if (auto it = find_tenant(config_.tenants, id); it != config_.tenants.end()) {
    config_.tenants.erase(it);
  }
  runtime_tenants_.erase(id);
  std::erase_if(assigned_, [&id](const auto& kv) { return kv.second.tenant == id; });
  save_state();
  spdlog::info("control: tenant \"{}\" removed", id);
  return ok_reply();
}

nlohmann::json RuntimeControl::tenant_assign(std::uint32_t pid, const std::string& tenant) {
  if (!engine_.tenants().find(tenant)) return error_reply(not_registered(tenant));
  // The process's identity (pid, start time), as for discovered ones: a later process that
  // reuses the pid does not inherit the tenant (the daemon's sampling drops it).
  const std::optional<LiveProcess> p = host_.live_process(pid);
  if (!p) return error_reply("no process with pid " + std::to_string(pid));
  if (auto r = assign(pid, *p, tenant); !r) return error_reply(r.error().message());
  save_state();
  spdlog::info("control: pid {} assigned to tenant \"{}\"", pid, tenant);
  return ok_reply();
}

Result<void> RuntimeControl::assign(std::uint32_t pid, const LiveProcess& p,
                                    const std::string& tenant) {
  if (auto why = assign_refusal({pid, p.ppid, p.flags, p.comm}, opts_.self_pid,
                                opts_.host_pid_namespace, config_.multi_tenant.protected_comms)) {
    return Error(EPERM, "refused: " + *why);
  }
  host_.drop_if_replaced(pid, p.starttime_ticks);
  if (auto r = engine_.assign_pid(pid, tenant); !r) return r.error();
  host_.track_assigned(pid, p.starttime_ticks);
  assigned_[pid] = AssignedProcess{pid, p.starttime_ticks, tenant};
  return Ok{};
}

nlohmann::json RuntimeControl::status() {
  nlohmann::json out = ok_reply();
  out["status"] = telemetry::status_json(host_.status_snapshot());
  return out;
}

}  // namespace zernel::daemon
