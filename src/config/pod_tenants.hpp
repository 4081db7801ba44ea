#pragma once
// Pods -> tenants: what the kubelet's pod-resources API says about the pods of this node, and
// the pod cgroups found under /sys/fs/cgroup, turned into tenants with match rules. Pure: the
// collector (collect/pod_resources.hpp) reads the kubelet and the cgroup tree, the daemon applies
// the result (daemon/runtime_control.hpp); this file decides.
//
// GPUs. Each pod's GPUs are the devices of its containers with a GPU resource name:
//   nvidia.com/gpu        "GPU-<uuid>"       one GPU
//                         "GPU-<uuid>::<n>"  a time-sliced replica: 1/r of a GPU, where r is the
//                                            number of allocatable ids of that GPU (from
//                                            GetAllocatableResources; 1 when the GPU is not
//                                            listed there)
//                         "MIG-<uuid>"       a MIG device under the "single" strategy: one GPU
//                                            (the id does not tell the slice's size)
//   nvidia.com/mig-<g>g.<mem>gb              a MIG slice: g/7 of a GPU (7 compute slices on
//                                            A100, A30 halves aside, H100 and H200); a name
//                                            without a readable <g> counts as 1/7
// Other resources (CPUs, hugepages, NICs) are ignored. The sum is rounded to 1/1000 GPU.
// Worked example: a pod with "nvidia.com/mig-3g.40gb" and one of 4 replicas of GPU-a
// ("GPU-a::2") holds 3/7 + 1/4 = 0.679 GPU.
//
// Grouping (tenant_by): "pod" makes one tenant per pod with id "k8s:<namespace>:<pod>";
// "namespace" one per namespace, "k8s:<namespace>", holding the sum of its pods' GPUs. Labels
// and annotations are not in the pod-resources API (only the API server has them, which a node
// agent here does not reach), so a tenant's class comes from `namespace_classes`, else the
// default class. Pods without GPUs make no tenant: they stay scheduled as any other process.
//
// Processes. The API names a pod by namespace and name and carries no UID, while the cgroup
// tree names pods by UID only (".../kubepods-burstable-pod<uid>.slice/..." with the systemd
// driver, ".../pod<uid>/..." with cgroupfs). The link is made through the pod's processes: the
// container runtime sets HOSTNAME in every container's environment to the pod's hostname, which
// is the pod's name cut to 63 bytes (trailing '-' and '.' dropped) unless the pod sets
// spec.hostname; and the NVIDIA device plugin sets NVIDIA_VISIBLE_DEVICES to the GPU ids it
// allocated. A pod cgroup belongs to the pod whose (cut) name equals the HOSTNAME of a process
// in it; when several pods qualify (same name in two namespaces) or the cgroup's processes have
// no HOSTNAME (hostNetwork pods see the node's), the pods whose GPU ids equal the cgroup's
// NVIDIA_VISIBLE_DEVICES decide; a cgroup left with no single pod is reported and not used.
// The tenant then matches its pods' cgroup paths (TenantMatch::cgroup), so discovery places
// every process of the pod, now and later, in the tenant.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace zernel::config {

struct PodDevices {
  std::string resource_name;
  std::vector<std::string> device_ids;

  bool operator==(const PodDevices&) const = default;
};

// One pod of a List answer, its containers' devices flattened.
struct PodInfo {
  std::string name;
  std::string namespace_;
  std::vector<PodDevices> devices;

  bool operator==(const PodInfo&) const = default;
};

// A pod's cgroup as found on the node.
struct PodCgroup {
  std::string path;  // as /proc/PID/cgroup shows it: "/kubepods.slice/...pod<uid>.slice"
  std::string uid;   // with '-' (the systemd driver's '_' turned back)
  // From the environment of the first process in the cgroup (or below) that has them.
  std::optional<std::string> hostname;
  std::vector<std::string> visible_devices;  // NVIDIA_VISIBLE_DEVICES split at ','

  bool operator==(const PodCgroup&) const = default;
};

struct PodSnapshot {
  std::vector<PodInfo> pods;
  std::vector<PodDevices> allocatable;  // GetAllocatableResources' devices
  std::vector<PodCgroup> cgroups;
};

struct PodTenants {
  std::vector<TenantConfig> tenants;  // sorted by id
  // Things an operator should know (a cgroup that matches no pod or several, an id too long);
  // full sentences, for the log.
  std::vector<std::string> problems;
};

// The GPUs a pod holds, by the rules above.
double pod_gpus(const PodInfo& pod, const std::vector<PodDevices>& allocatable);

// The pod's hostname as its containers see it by default: the name cut to 63 bytes, without
// trailing '-' and '.'.
std::string pod_hostname(const std::string& pod_name);

PodTenants pod_tenants(const PodSnapshot& snapshot, const KubernetesConfig& k8s,
                       policy::PriorityClass default_class);

}  // namespace zernel::config
