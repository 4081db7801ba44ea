// Tenants from the kubelet's pod-resources API applied to the running daemon (RuntimeControl).
// The collector (collect/pod_resources.hpp) and the mapping (config/pod_tenants.hpp) decide what
// the tenants are; this file only merges them with the file's and the runtime tenants.

#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/runtime_control.hpp"

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

}  // namespace zernel::daemon
