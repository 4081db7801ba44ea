#pragma once
// How the sched_ext scheduler ended (the UEI record of ops.exit) and what the daemon should do
// about it. Pure and header-only.
//
// Restart advice, from the exit kind and the kernel's exit code bits:
//   restart               the kernel asks for a reload (SCX_ECODE_ACT_RESTART, e.g. CPU hotplug)
//   restart_with_backoff  the kernel ejected us (runtime error, scx_bpf_error, watchdog stall,
//                         kernel-initiated unregistration): retry a few times with growing
//                         delays, then fall back to observe
//   none                  we unloaded it ourselves, or an administrator did (sysrq-S)

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "intf.h"

namespace zernel::enforce::scx {

enum class RestartAdvice { none, restart, restart_with_backoff };

struct ExitInfo {
  std::int32_t kind = ZERNEL_EXIT_NONE;  // enum zernel_exit_kind
  std::int32_t cpu = -1;                 // CPU that triggered it; -1 = unknown
  std::int64_t code = 0;                 // ZERNEL_ECODE_* bits | user code
  std::string reason;                    // e.g. "unregistered from user space"
  std::string message;                   // e.g. the scx_bpf_error() text
};

// The kernel's name without SCX_EXIT_ ("UNREG_BPF"); "UNKNOWN" for a kind intf.h does not list.
inline std::string_view exit_kind_name(std::int32_t kind) {
  switch (kind) {
#define ZERNEL_EXIT_NAME(NAME, value) \
  case ZERNEL_EXIT_##NAME:            \
    return #NAME;
    ZERNEL_EXIT_KINDS(ZERNEL_EXIT_NAME)
#undef ZERNEL_EXIT_NAME
    default:
      return "UNKNOWN";
  }
}

// Whether the kind means the kernel threw the scheduler out (as opposed to a deliberate unload).
inline bool is_error_exit(std::int32_t kind) { return kind >= ZERNEL_EXIT_ERROR; }

inline RestartAdvice restart_advice(std::int32_t kind, std::int64_t code) {
  if ((static_cast<std::uint64_t>(code) & ZERNEL_ECODE_ACT_MASK) == ZERNEL_ECODE_ACT_RESTART) {
    return RestartAdvice::restart;
  }
  if (is_error_exit(kind) || kind == ZERNEL_EXIT_UNREG_KERN) {
    return RestartAdvice::restart_with_backoff;
  }
  return RestartAdvice::none;
}

inline std::string_view restart_advice_name(RestartAdvice a) {
  switch (a) {
    case RestartAdvice::none:
      return "none";
    case RestartAdvice::restart:
      return "restart";
    case RestartAdvice::restart_with_backoff:
      return "restart_with_backoff";
  }
  return "none";
}

// Names of the per-CPU counters (enum zernel_stat), for logs, JSON and metrics: made from the
// same list as the enum (ZERNEL_STATS in intf.h), so they cannot drift.
inline constexpr std::array<std::string_view, ZERNEL_STAT_NR> kStatNames = {
#define ZERNEL_STAT_NAME(NAME, name) #name,
    ZERNEL_STATS(ZERNEL_STAT_NAME)
#undef ZERNEL_STAT_NAME
};

}  // namespace zernel::enforce::scx
