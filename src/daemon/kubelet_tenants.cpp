// Tenants from the kubelet's pod-resources API applied to the running daemon (RuntimeControl).
// The collector (collect/pod_resources.hpp) and the mapping (config/pod_tenants.hpp) decide what
// the tenants are; this file only merges them with the file's and the runtime tenants, and the
// daemon's side: starting the collector ([kubernetes] enabled) and taking its answers on poll
// ticks.

#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/daemon.hpp"
#include "daemon/runtime_control.hpp"
#include "sys/cgroup.hpp"
#include "sys/file.hpp"

namespace zernel::daemon {

bool RuntimeControl::apply_kubelet_tenants(std::vector<config::TenantConfig> next) {
  std::unordered_set<std::string> wanted;
  for (const config::TenantConfig& t : next) wanted.insert(t.spec.id);
  std::vector<config::TenantConfig> tenants;
  tenants.reserve(config_.tenants.size() + next.size());
  for (const config::TenantConfig& t : config_.tenants) {
    if (!kubelet_tenants_.contains(t.spec.id)) tenants.push_back(t);
  }
  const std::size_t others = tenants.size();
  std::unordered_set<std::string> ids;
  std::size_t over = 0;
  for (config::TenantConfig& t : next) {
    const bool taken =
        std::any_of(tenants.begin(), tenants.begin() + static_cast<long>(others),
                    [&t](const config::TenantConfig& o) { return o.spec.id == t.spec.id; });
    if (taken) {
      if (kubelet_conflicts_.insert(t.spec.id).second) {
        spdlog::warn(
            "kubernetes: tenant \"{}\" is defined by the configuration or `tenant add`; that one "
            "stays and the pod's is not applied",
            t.spec.id);
      }
      continue;
    }
    if (!policy::validate_tenant(t.spec)) continue;  // pod_tenants makes only valid specs
    if (tenants.size() >= policy::kMaxTenants) {
      ++over;
      continue;
    }
    ids.insert(t.spec.id);
    tenants.push_back(std::move(t));
  }
  if (over > 0) {
    spdlog::warn("kubernetes: {} tenant(s) from the kubelet not applied: at most {} tenants", over,
                 policy::kMaxTenants);
  }
  std::erase_if(kubelet_conflicts_,
                [&wanted](const std::string& id) { return !wanted.contains(id); });
  if (tenants == config_.tenants) return false;

  std::size_t added = 0;
  std::size_t removed = 0;
  for (const std::string& id : ids) added += kubelet_tenants_.contains(id) ? 0U : 1U;
  for (const std::string& id : kubelet_tenants_) removed += ids.contains(id) ? 0U : 1U;
  apply_tenants(std::move(tenants));
  spdlog::info("kubernetes: {} tenant(s) from the kubelet ({} new, {} gone)", ids.size(), added,
               removed);
  kubelet_tenants_ = std::move(ids);
  return true;
}

void Daemon::start_pod_resources() {
  const config::KubernetesConfig& k = opts_.config.kubernetes;
  if (!k.enabled) return;
  // Pods' cgroups are looked for in the unified (v2) hierarchy, where /proc/PID/cgroup's "0::"
  // paths live: /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host.
  std::string cgroup_root = opts_.sys_root + "/fs/cgroup";
  if (auto info = sys::read_file(opts_.proc_root + "/self/mountinfo")) {
    for (const sys::CgroupMount& m : sys::parse_cgroup_mounts(*info)) {
      if (m.version == sys::CgroupVersion::v2 && m.mount_root == "/") {
        cgroup_root = m.mount_point;
        break;
      }
    }
  }
  pods_ = std::make_unique<collect::PodResourcesSource>(k, cgroup_root, opts_.proc_root);
  pods_->start();
  spdlog::info("kubernetes: tenants from {} every {} ms, one per {}; pod cgroups under {}",
               k.pod_resources_socket, k.refresh_ms,
               k.tenant_by == config::TenantBy::pod ? "pod" : "namespace", cgroup_root);
}

// The latest good answer of the kubelet, if a new one came, as tenants.
void Daemon::apply_pod_resources() {
  if (!pods_) return;
  std::optional<config::PodSnapshot> snap = pods_->take();
  if (!snap) return;
  config::PodTenants t = config::pod_tenants(*snap, opts_.config.kubernetes,
                                             opts_.config.multi_tenant.default_priority_class);
  std::set<std::string> now(t.problems.begin(), t.problems.end());
  for (const std::string& p : now) {
    if (!pod_problems_.contains(p)) spdlog::warn("kubernetes: {}", p);
  }
  pod_problems_ = std::move(now);
  runtime_->apply_kubelet_tenants(std::move(t.tenants));
}

}  // namespace zernel::daemon
