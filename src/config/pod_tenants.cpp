#include "config/pod_tenants.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>

namespace zernel::config {

namespace {

constexpr std::string_view kGpuResource = "nvidia.com/gpu";
constexpr std::string_view kMigPrefix = "nvidia.com/mig-";
constexpr std::string_view kReplicaSeparator = "::";
// Compute slices of a MIG-capable GPU (A100, H100, H200).
constexpr double kMigSlices = 7.0;

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// "GPU-a::2" -> "GPU-a"; other ids unchanged.
std::string_view base_id(std::string_view id) {
  const std::size_t sep = id.find(kReplicaSeparator);
  return sep == std::string_view::npos ? id : id.substr(0, sep);
}

// "nvidia.com/mig-3g.40gb" -> 3/7; unreadable -> 1/7.
double mig_fraction(std::string_view resource) {
  const std::string_view profile = resource.substr(kMigPrefix.size());
  std::size_t i = 0;
  unsigned slices = 0;
  while (i < profile.size() && i < 2 && profile[i] >= '0' && profile[i] <= '9') {
    slices = slices * 10 + static_cast<unsigned>(profile[i] - '0');
    ++i;
  }
  if (i == 0 || i >= profile.size() || profile[i] != 'g' || slices == 0) return 1.0 / kMigSlices;
  return std::min(static_cast<double>(slices), kMigSlices) / kMigSlices;
}

// The GPU ids of a pod as NVIDIA_VISIBLE_DEVICES would list them (replicas as their GPU).
std::set<std::string> gpu_ids(const PodInfo& pod) {
  std::set<std::string> out;
  for (const PodDevices& d : pod.devices) {
    if (d.resource_name != kGpuResource && !starts_with(d.resource_name, kMigPrefix)) continue;
    for (const std::string& id : d.device_ids) out.emplace(base_id(id));
  }
  return out;
}

std::string tenant_id(const KubernetesConfig& k8s, const PodInfo& pod) {
  return k8s.tenant_by == TenantBy::pod ? "k8s:" + pod.namespace_ + ":" + pod.name
                                        : "k8s:" + pod.namespace_;
}

// The pods (indices) a cgroup belongs to, by the rules in the header.
std::vector<std::size_t> owners(const PodCgroup& cg, const std::vector<PodInfo>& pods,
                                const std::vector<std::string>& hostnames) {
  std::vector<std::size_t> candidates;
  if (cg.hostname) {
    for (std::size_t i = 0; i < pods.size(); ++i) {
      if (hostnames[i] == *cg.hostname) candidates.push_back(i);
    }
    if (candidates.size() == 1) return candidates;
  }
  const bool by_name = !candidates.empty();
  if (!by_name) {
    for (std::size_t i = 0; i < pods.size(); ++i) candidates.push_back(i);
  }
  const std::set<std::string> visible(cg.visible_devices.begin(), cg.visible_devices.end());
  if (visible.empty()) return by_name ? candidates : std::vector<std::size_t>{};
  std::erase_if(candidates, [&](std::size_t i) { return gpu_ids(pods[i]) != visible; });
  return candidates;
}

}  // namespace

double pod_gpus(const PodInfo& pod, const std::vector<PodDevices>& allocatable) {
  std::map<std::string, unsigned, std::less<>> replicas;  // GPU id -> allocatable replicas
  for (const PodDevices& d : allocatable) {
    if (d.resource_name != kGpuResource) continue;
    for (const std::string& id : d.device_ids) {
      if (id.find(kReplicaSeparator) != std::string::npos) ++replicas[std::string(base_id(id))];
    }
  }
  double total = 0.0;
  for (const PodDevices& d : pod.devices) {
    if (starts_with(d.resource_name, kMigPrefix)) {
      total += mig_fraction(d.resource_name) * static_cast<double>(d.device_ids.size());
      continue;
    }
    if (d.resource_name != kGpuResource) continue;
    for (const std::string& id : d.device_ids) {
      if (id.find(kReplicaSeparator) == std::string::npos) {
        total += 1.0;
        continue;
      }
      const auto it = replicas.find(base_id(id));
      total += it == replicas.end() ? 1.0 : 1.0 / static_cast<double>(it->second);
    }
  }
  return std::round(total * 1000.0) / 1000.0;
}

std::string pod_hostname(const std::string& pod_name) {
  std::string h = pod_name.substr(0, 63);
  while (!h.empty() && (h.back() == '-' || h.back() == '.')) h.pop_back();
  return h;
}

PodTenants pod_tenants(const PodSnapshot& snapshot, const KubernetesConfig& k8s,
                       policy::PriorityClass default_class) {
  PodTenants out;
  const std::vector<PodInfo>& pods = snapshot.pods;
  std::vector<std::string> hostnames;
  hostnames.reserve(pods.size());
  for (const PodInfo& p : pods) hostnames.push_back(pod_hostname(p.name));

  // Cgroups of each pod.
  std::vector<std::vector<std::string>> cgroups_of(pods.size());
  for (const PodCgroup& cg : snapshot.cgroups) {
    const std::vector<std::size_t> o = owners(cg, pods, hostnames);
    if (o.size() == 1) {
      cgroups_of[o.front()].push_back(cg.path);
    } else if (o.size() > 1) {
      out.problems.push_back(
          fmt::format("pod cgroup {} (hostname {}) could belong to {} pods; its processes are in "
                      "no pod's tenant",
                      cg.path, cg.hostname.value_or("unknown"), o.size()));
    }
  }

  struct Group {
    double gpus = 0.0;
    std::string namespace_;
    std::vector<std::string> cgroups;
  };
  std::map<std::string, Group> groups;
  for (std::size_t i = 0; i < pods.size(); ++i) {
    const double gpus = pod_gpus(pods[i], snapshot.allocatable);
    if (gpus <= 0.0) continue;
    const std::string id = tenant_id(k8s, pods[i]);
    if (id.size() > policy::kMaxTenantIdLength) {
      out.problems.push_back(fmt::format("pod {}/{}: tenant id longer than {} bytes; not a tenant",
                                         pods[i].namespace_, pods[i].name,
                                         policy::kMaxTenantIdLength));
      continue;
    }
    Group& g = groups[id];
    g.gpus += gpus;
    g.namespace_ = pods[i].namespace_;
    g.cgroups.insert(g.cgroups.end(), cgroups_of[i].begin(), cgroups_of[i].end());
  }

  for (auto& [id, g] : groups) {
    TenantConfig t;
    t.spec.id = id;
    const float fraction = static_cast<float>(std::round(g.gpus * 1000.0) / 1000.0);
    t.spec.gpu_fraction = fraction;
    t.spec.gpus = static_cast<std::uint32_t>(std::ceil(fraction));
    const auto cls = k8s.namespace_classes.find(g.namespace_);
    t.spec.priority_class = cls == k8s.namespace_classes.end() ? default_class : cls->second;
    std::sort(g.cgroups.begin(), g.cgroups.end());
    t.match.cgroup = std::move(g.cgroups);
    out.tenants.push_back(std::move(t));
  }
  return out;
}

}  // namespace zernel::config
