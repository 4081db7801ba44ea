#pragma once
// How the userspace backend carries a tenant's weight without moving any process out of the
// cgroup its owner placed it in (design §7; docs/userspace.md, "Tenant weights").
//
// A tenant's process runs in some cpu cgroup: a Kubernetes container's, a systemd unit's, a
// session scope, or the root. When that group holds nothing but processes of this one tenant (in
// it and in every group below it), the group itself can carry the tenant's weight: its cpu.weight
// (v2) or cpu.shares (v1) is set to the tenant's weight (the original journaled first and put
// back when the group stops qualifying, at exit and after a crash). Otherwise the share is
// expressed through the nice values of the tenant's threads instead: the tenant weight becomes a
// priority shift, round(log1.25(tenant_weight / 100)), one nice level per x1.25, added to the
// phase priority (a training tenant's class factor 3.05 = 1.25^5 is 5 levels). That reaches the
// other threads of the shared group, but it weighs each thread, not the tenant as a whole.
//
// A group cannot carry the weight when it is
//   - the root of the hierarchy (or the root the mount shows: a container's own view), which has
//     no weight file and stands for the whole machine;
//   - without a weight file (v2: the cpu controller is not enabled for it by its parent; the
//     backend never enables a controller in someone else's tree);
//   - shared: a process in it or below it belongs to no tenant or another one, or is the daemon
//     itself. A process that is not tracked but descends (by parent pid) from a process of the
//     tenant counts as the tenant's (a job's helper processes);
//   - refused earlier: its weight was changed by someone else while the backend managed it (its
//     owner, kubelet or systemd, re-applied its own), or the write failed. The backend yields to
//     the owner for the rest of its run.
//
// A qualifying group gets the tenant's weight, converted by cgroup_cpu_value. A tenant whose
// processes are in several such groups gives each the whole weight: a group's weight counts among
// its siblings only, so no split is exact, and an even split would shrink a busy group for an idle
// one (a job's second pod that waits); docs/userspace.md states the limit.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "sys/cgroup.hpp"

namespace zernel::enforce::userspace {

// The tenant of a pid found in a group: the tenant slot, policy::kNoTenant for a process of no
// tenant, nullopt when unknown (then it counts as no tenant).
using TenantOfPid = std::function<std::optional<std::uint16_t>(std::uint32_t pid)>;

// Why the group at hierarchy path `path` cannot carry tenant `tenant`'s weight, in words for the
// log ("the root cgroup", "shared with pid 812 (no tenant)", ...); nullopt when it can. `self_pid`
// is the daemon's own pid.
std::optional<std::string> why_group_cannot_carry(const sys::CpuCgroupLayout& layout,
                                                  std::string_view path, std::uint16_t tenant,
                                                  const TenantOfPid& tenant_of,
                                                  std::uint32_t self_pid);

// The priority shift that stands for a tenant weight on the nice scale (one level per x1.25):
// round(log1.25(tenant_weight / 100)), within -20..20. 100 -> 0, 305 -> +5, 33 -> -5.
std::int32_t tenant_priority_shift(std::uint32_t tenant_weight);

}  // namespace zernel::enforce::userspace
