#pragma once
// The userspace backend's journal of original values, so that a daemon killed with SIGKILL (or
// one that crashed) leaves nothing the next start cannot undo.
//
// Before the backend changes anything of a thread or process, the original is in the journal on
// disk: the file is rewritten whole, atomically (PATH.tmp, fsync, rename, fsync of the directory),
// whenever a new original is recorded. The next start reads it, restores every entry whose
// process (and thread) is still the same one, guarded against pid reuse by the start time
// (/proc/PID/stat field 22, clock ticks after boot), and removes it.
//
// Format (text, one record per line; the last line "end" marks a complete file):
//   zernel-userspace-journal 1
//   owner PID START                      the daemon that wrote it
//   cgroup v1|v2 MOUNT_ROOT_HEX MOUNT_POINT_HEX NAME_HEX   its cgroup subtree ("-" when none)
//   process PID START CGROUP_HEX|-       the original cpu cgroup when the backend moved it
//   thread TID START NICE CPULIST        original nice and affinity ("0-3,8")
//   end
// Strings are hex-encoded so that any path survives. A thread line belongs to the process line
// before it. Anything else is a corrupt journal: read_journal says where.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "enforce/userspace/cgroup.hpp"

namespace zernel::enforce::userspace {

struct ThreadOriginal {
  std::uint32_t tid = 0;
  std::uint64_t start = 0;  // starttime, clock ticks after boot
  std::int32_t nice = 0;
  std::vector<std::uint32_t> cpus;  // original affinity, ascending
  bool operator==(const ThreadOriginal&) const = default;
};

struct ProcessOriginal {
  std::uint32_t pid = 0;
  std::uint64_t start = 0;
  std::optional<std::string> cgroup;  // hierarchy path of the original cpu cgroup, when moved
  std::vector<ThreadOriginal> threads;
  bool operator==(const ProcessOriginal&) const = default;
};

struct JournalCgroup {
  CpuCgroupLayout layout;
  std::string name;  // the subtree's directory name
  bool operator==(const JournalCgroup& o) const {
    return layout.version == o.layout.version && layout.mount_point == o.layout.mount_point &&
           layout.mount_root == o.layout.mount_root && name == o.name;
  }
};

struct Journal {
  std::uint32_t owner_pid = 0;
  std::uint64_t owner_start = 0;
  std::optional<JournalCgroup> cgroup;
  std::vector<ProcessOriginal> processes;
  bool operator==(const Journal&) const = default;
};

std::string format_journal(const Journal& j);
// An error (EINVAL) names the line of a corrupt or truncated journal.
Result<Journal> parse_journal(std::string_view text);

// Writes atomically, creating the directory (mode 0700) when missing.
Result<void> write_journal(const std::string& path, const Journal& j);
// nullopt when there is no journal; EINVAL for a corrupt one, another errno when it cannot be
// read.
Result<std::optional<Journal>> read_journal(const std::string& path);

// "0-3,8,10-11" from an ascending list.
std::string format_cpu_list(const std::vector<std::uint32_t>& cpus);

}  // namespace zernel::enforce::userspace
