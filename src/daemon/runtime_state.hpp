#pragma once
// The runtime tenants' state file: what `tenant add` and `tenant assign` changed over the control
// socket, kept across a restart (RuntimeControl writes it after every such change and reads it
// at start-up).
//
// The file is one JSON object:
//   {"version":1,
//    "tenants":[{"op":"tenant_add","id":"team-a","gpus":4,"class":"training"}, ...],
//    "assigned":[{"pid":1234,"start":56789,"tenant":"team-a"}, ...]}
// Each tenant is the `tenant add` request that made it, and is checked by parse_request as that
// request is; each assignment is checked as a `tenant assign` request, plus the process's start
// time (clock ticks after boot, /proc/PID/stat field 22), so that a later process that reuses the
// pid is not assigned.
//
// The daemon runs as root and acts on what it reads here (processes reniced and pinned), so the
// file is read like its journals (sys/trusted_file.hpp): a regular file, not a symbolic link,
// owned by root or the daemon's uid, not writable by others, at most kMaxRuntimeStateBytes. It is
// written atomically (an O_EXCL temporary file in a 0700 directory, fsynced, renamed over it).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "policy/tenant.hpp"

namespace zernel::daemon {

inline constexpr std::string_view kDefaultRuntimeStatePath = "/var/lib/zernel/runtime-tenants.json";
// kMaxTenants tenant entries and tens of thousands of assigned pids fit many times over.
inline constexpr std::size_t kMaxRuntimeStateBytes = 4U << 20;
inline constexpr int kRuntimeStateVersion = 1;

struct AssignedProcess {
  std::uint32_t pid = 0;
  std::uint64_t starttime_ticks = 0;
  std::string tenant;

  bool operator==(const AssignedProcess&) const = default;
};

struct RuntimeState {
  std::vector<policy::TenantSpec> tenants;
  std::vector<AssignedProcess> assigned;
};

// The file's text (one line and a newline).
std::string runtime_state_text(const RuntimeState& state);

// Parses and checks the whole text; the first bad entry is the error (EINVAL), naming it:
// "tenants[2]: request: field \"gpus\": ...". All or nothing: a file with one bad entry is not
// half-applied.
Result<RuntimeState> parse_runtime_state(std::string_view text);

// nullopt when PATH does not exist. Errors: those of read_trusted_file (ELOOP, ENXIO, EPERM,
// EFBIG, ...) and of parse_runtime_state, with PATH in the message.
Result<std::optional<RuntimeState>> read_runtime_state(const std::string& path);

// write_trusted_file: PATH's directory created 0700 when missing; PATH replaced atomically.
Result<void> write_runtime_state(const std::string& path, const RuntimeState& state);

}  // namespace zernel::daemon
