#pragma once
// The cpu cgroup hierarchy the userspace backend writes tenant weights into.
//
// Layout detection reads mountinfo (/proc/self/mountinfo): a cgroup2 mount whose
// cgroup.controllers lists "cpu" wins (the unified hierarchy, cpu.weight 1..10000); else a cgroup
// v1 mount whose options name the cpu controller (cpu.shares 2..262144). A cgroup2 mount without
// the cpu controller (a hybrid host's /sys/fs/cgroup/unified) does not count.
//
// The backend owns one subtree, <mount>/<name> (default "zernel"), with one child per tenant,
// <mount>/<name>/tenant-<slot>. Processes move with cgroup.procs (all threads at once, in both
// versions). On v2 the "+cpu" controller is enabled in <mount>/cgroup.subtree_control and
// <mount>/<name>/cgroup.subtree_control when missing; the subtree itself holds no processes, so
// the no-internal-processes rule is kept.
//
// Every path goes through a CpuCgroupLayout, so unit tests run the same code on a plain
// directory tree in a temp dir.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace zernel::enforce::userspace {

enum class CgroupVersion : std::uint8_t { v1, v2 };

struct CpuCgroupLayout {
  CgroupVersion version = CgroupVersion::v1;
  std::string mount_point;       // where the hierarchy is mounted: "/sys/fs/cgroup/cpu"
  std::string mount_root = "/";  // the hierarchy path that mount shows (field 4 of mountinfo)
};

// Finds the cpu hierarchy from the text of a mountinfo file. `fs_prefix` is prepended to every
// mount point when files are read or returned (tests: a temp dir). ENOENT when there is none.
Result<CpuCgroupLayout> detect_cpu_cgroup(std::string_view mountinfo,
                                          const std::string& fs_prefix = "");

// Reads `mountinfo_path` and detects as above.
Result<CpuCgroupLayout> detect_cpu_cgroup_from(const std::string& mountinfo_path,
                                               const std::string& fs_prefix = "");

// tenant_weight (cpu.weight scale, 100 = an average tenant) -> what the hierarchy's file takes:
// v2 cpu.weight clamped to 1..10000; v1 cpu.shares = weight * 1024 / 100 clamped to 2..262144.
std::uint64_t cgroup_cpu_value(CgroupVersion version, std::uint32_t tenant_weight);
// "cpu.weight" or "cpu.shares".
const char* cgroup_cpu_file(CgroupVersion version);

// The directory of hierarchy path `path` ("/user.slice/x", as /proc/PID/cgroup gives it) under
// the layout's mount; nullopt when the mount does not show that path.
std::optional<std::string> cgroup_dir(const CpuCgroupLayout& layout, std::string_view path);

// The cpu hierarchy's path of a process from the text of /proc/PID/cgroup: the "0::" line on v2,
// the line whose controllers include "cpu" on v1.
std::optional<std::string> cpu_cgroup_path(CgroupVersion version, std::string_view proc_cgroup);

// Writes `value` to a cgroup file (open O_WRONLY|O_TRUNC|O_CREAT, one write). Errors carry errno
// (ESRCH when a pid written to cgroup.procs has exited).
Result<void> write_cgroup_file(const std::string& path, std::string_view value);

// The pids in a cgroup.procs file.
Result<std::vector<std::uint32_t>> read_cgroup_procs(const std::string& dir);

// The subtree the backend owns under a layout.
class CgroupTree {
 public:
  CgroupTree(CpuCgroupLayout layout, std::string name);

  [[nodiscard]] const CpuCgroupLayout& layout() const { return layout_; }
  [[nodiscard]] const std::string& name() const { return name_; }
  // <mount>/<name>
  [[nodiscard]] std::string subtree_dir() const;
  // <mount>/<name>/tenant-<slot>
  [[nodiscard]] std::string tenant_dir(std::uint16_t slot) const;
  // The hierarchy path of a tenant group ("/zernel/tenant-3", relative to the mount's root).
  [[nodiscard]] std::string tenant_path(std::uint16_t slot) const;

  // Creates the subtree (and on v2 enables +cpu where needed). Idempotent.
  Result<void> ensure_subtree();
  // Creates the tenant's group when missing.
  Result<void> ensure_tenant(std::uint16_t slot);
  // Writes the tenant's cpu.weight / cpu.shares for `tenant_weight`.
  Result<void> set_tenant_weight(std::uint16_t slot, std::uint32_t tenant_weight);
  // Moves process `pid` (all its threads) into the directory `dir`.
  static Result<void> move(const std::string& dir, std::uint32_t pid);

  // The tenant groups present under the subtree (directory names "tenant-N").
  [[nodiscard]] std::vector<std::uint16_t> tenant_slots() const;
  // Removes a tenant group (rmdir; EBUSY while it has members).
  Result<void> remove_tenant(std::uint16_t slot) const;
  // Removes the subtree directory when it is empty of groups.
  Result<void> remove_subtree() const;

 private:
  Result<void> enable_cpu(const std::string& dir);

  CpuCgroupLayout layout_;
  std::string name_;
};

}  // namespace zernel::enforce::userspace
