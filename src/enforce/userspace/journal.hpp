#pragma once
// The userspace backend's journal of original values, so that a daemon killed with SIGKILL (or
// one that crashed) leaves nothing the next start, whatever its backend, or
// `zernel-scheduler restore` cannot undo (restore.hpp replays it).
//
// Before the backend changes anything of a thread, a process or a cgroup, the original is in the
// journal on disk: the file is rewritten whole, atomically (PATH.tmp, fsync, rename, fsync of the
// directory), whenever a new original is recorded. Replay restores every entry whose process
// (and thread) is still the same one, guarded against pid reuse by the start time
// (/proc/PID/stat field 22, clock ticks after boot), and every cgroup that is still the same
// group (its inode) and still holds the value the backend wrote.
//
// Format (text, one record per line; the last line "end" marks a complete file):
//   zernel-userspace-journal 2
//   owner PID START                         the daemon that wrote it
//   process PID START NICE CPULIST APPLIED  the process's originals (its main thread's nice and
//                                           affinity: what a thread born after the last tick is
//                                           restored to) and the affinity the backend gives its
//                                           threads ("-": none, they keep their own)
//   thread TID START NICE CPULIST           a thread's original nice and affinity ("0-3,8")
//   weight DIR_HEX FILE INODE ORIGINAL WRITTEN[,WRITTEN]
//                                           a cgroup's CPU weight file (cpu.weight/cpu.shares)
//                                           in directory DIR: its original value and the values
//                                           the backend may have written (recorded before it
//                                           writes them; two while it changes one for another)
//   end
// Strings are hex-encoded so that any path survives. A thread line belongs to the process line
// before it. Anything else (a version-1 journal of a backend that moved processes into tenant
// groups included) is a corrupt journal: parse_journal says where.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"

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
  std::int32_t nice = 0;                    // the main thread's original nice
  std::vector<std::uint32_t> cpus;          // the main thread's original affinity
  std::vector<std::uint32_t> applied_cpus;  // the affinity the backend gives it (empty: none)
  std::vector<ThreadOriginal> threads;
  bool operator==(const ProcessOriginal&) const = default;
};

struct WeightOriginal {
  std::string dir;   // the cgroup's directory, "/sys/fs/cgroup/kubepods.slice/..."
  std::string file;  // "cpu.weight" or "cpu.shares"
  std::uint64_t inode = 0;
  std::uint64_t original = 0;
  // The values the backend may have in the file: the one it writes now and, during a change, the
  // one before (a crash between the journal write and the file write leaves that one).
  std::vector<std::uint64_t> written;
  bool operator==(const WeightOriginal&) const = default;
};

struct Journal {
  std::uint32_t owner_pid = 0;
  std::uint64_t owner_start = 0;
  std::vector<ProcessOriginal> processes;
  std::vector<WeightOriginal> weights;
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
