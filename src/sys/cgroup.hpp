#pragma once
// The cpu cgroup hierarchy in which the userspace backend carries tenant weights: where it is
// mounted, where a process is in it, and reading and writing a group's CPU weight.
//
// Layout detection reads mountinfo (/proc/self/mountinfo): a cgroup2 mount whose
// cgroup.controllers lists "cpu" wins (the unified hierarchy, cpu.weight 1..10000); else a cgroup
// v1 mount whose options name the cpu controller (cpu.shares 2..262144). A cgroup2 mount without
// the cpu controller (a hybrid host's /sys/fs/cgroup/unified) does not count.
//
// The backend never creates a group and never moves a process (docs/userspace.md): it only writes
// the weight file of the group a process's owner placed it in, when that group holds nothing but
// one tenant's processes (tenant_share.hpp decides).
//
// Every path goes through a CpuCgroupLayout, so unit tests run the same code on a plain
// directory tree in a temp dir.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace zernel::sys {

enum class CgroupVersion : std::uint8_t { v1, v2 };

struct CpuCgroupLayout {
  CgroupVersion version = CgroupVersion::v1;
  std::string mount_point;       // where the hierarchy is mounted: "/sys/fs/cgroup/cpu"
  std::string mount_root = "/";  // the hierarchy path that mount shows (field 4 of mountinfo)
};

// One cgroup (v1) or cgroup2 mount of a mountinfo file.
struct CgroupMount {
  CgroupVersion version = CgroupVersion::v1;
  std::string mount_point;    // unescaped, as mounted: "/sys/fs/cgroup"
  std::string mount_root;     // the hierarchy path that mount shows (field 4)
  std::string super_options;  // "rw,cpu,cpuacct" (v1: the controllers are among them)
};

// The cgroup and cgroup2 mounts in the text of a mountinfo file, in its order; other lines are
// skipped. The daemon's layout detection and `zernel-scheduler info` both read mounts here.
std::vector<CgroupMount> parse_cgroup_mounts(std::string_view mountinfo);

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
// the layout's mount; nullopt when the mount does not show that path (also for a path with "." or
// ".." components: a process outside the reader's cgroup namespace).
std::optional<std::string> cgroup_dir(const CpuCgroupLayout& layout, std::string_view path);

// The cpu hierarchy's path of a process from the text of /proc/PID/cgroup: the "0::" line on v2,
// the line whose controllers include "cpu" on v1.
std::optional<std::string> cpu_cgroup_path(CgroupVersion version, std::string_view proc_cgroup);

// Writes `value` to a cgroup file (open O_WRONLY|O_TRUNC|O_CREAT, one write). Errors carry errno.
Result<void> write_cgroup_file(const std::string& path, std::string_view value);

// The pids in a cgroup.procs file.
Result<std::vector<std::uint32_t>> read_cgroup_procs(const std::string& dir);

// The CPU weight file of the group in `dir` as a number (cpu.weight or cpu.shares); nullopt when
// it cannot be read or is not a number (no cpu controller in that group, a removed group).
std::optional<std::uint64_t> read_cgroup_cpu_value(CgroupVersion version, const std::string& dir);
// Writes the CPU weight file of the group in `dir`.
Result<void> write_cgroup_cpu_value(CgroupVersion version, const std::string& dir,
                                    std::uint64_t value);
// The identity of the group in `dir` (its inode: the cgroup id on v2): a group removed and made
// again under the same path (a restarted pod) is another group. nullopt when it does not exist.
std::optional<std::uint64_t> cgroup_inode(const std::string& dir);
// The pids of every process in the group in `dir` and in all groups below it (cgroup.procs of
// each; at most `limit` pids, then the walk stops and `complete` is false).
struct SubtreeProcs {
  std::vector<std::uint32_t> pids;
  bool complete = true;
};
Result<SubtreeProcs> read_subtree_procs(const std::string& dir, std::size_t limit = 4096);

}  // namespace zernel::sys
