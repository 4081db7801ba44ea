#include "enforce/userspace/tenant_share.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "policy/task_state.hpp"

namespace zernel::enforce::userspace {

std::optional<std::string> why_group_cannot_carry(const sys::CpuCgroupLayout& layout,
                                                  std::string_view path, std::uint16_t tenant,
                                                  const TenantOfPid& tenant_of,
                                                  std::uint32_t self_pid) {
  if (path.empty() || path == "/" || path == layout.mount_root) {
    return std::string("it runs in the root cgroup");
  }
  const auto dir = sys::cgroup_dir(layout, path);
  if (!dir) return fmt::format("its cgroup {} is outside the mounted cpu hierarchy", path);
  if (!sys::read_cgroup_cpu_value(layout.version, *dir)) {
    return fmt::format("its cgroup {} has no {} (no cpu controller there)", path,
                       sys::cgroup_cpu_file(layout.version));
  }
  auto procs = sys::read_subtree_procs(*dir);
  if (!procs) {
    return fmt::format("the processes of its cgroup {} cannot be listed: {}", path,
                       procs.error().message());
  }
  if (!procs->complete) return fmt::format("its cgroup {} holds too many processes", path);
  for (const std::uint32_t pid : procs->pids) {
    if (pid == self_pid) return fmt::format("its cgroup {} holds zernel-scheduler itself", path);
    const auto t = tenant_of(pid);
    if (t && *t == tenant) continue;
    return fmt::format("its cgroup {} is shared with pid {} ({})", path, pid,
                       !t || *t == policy::kNoTenant ? "no tenant" : "another tenant");
  }
  return std::nullopt;
}

std::int32_t tenant_priority_shift(std::uint32_t tenant_weight) {
  const double w = std::max<double>(tenant_weight, 1.0) / 100.0;
  const double levels = std::round(std::log(w) / std::log(1.25));
  return static_cast<std::int32_t>(std::clamp(levels, -20.0, 20.0));
}

}  // namespace zernel::enforce::userspace
