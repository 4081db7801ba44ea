#pragma once
// The daemon's descriptor budget. Process discovery and sampling open /proc files every tick;
// connections from other local users must never take the descriptors they need (1,025 idle HTTP
// connections once made discovery fail with EMFILE: the scheduler went blind). So the daemon
// raises its soft RLIMIT_NOFILE to the hard limit at start (the systemd unit sets
// LimitNOFILE=65536) and caps its connections at a fraction of what it has.

#include <cstdint>

namespace zernel {

// Raises the soft RLIMIT_NOFILE to the hard limit (capped at kMaxNofile); returns the soft limit
// in effect afterwards (the old one when raising failed).
std::uint64_t raise_nofile_limit();

inline constexpr std::uint64_t kMaxNofile = 1U << 20;

struct FdBudget {
  std::uint32_t http_connections = 0;  // at most 1/8 of the limit, 16..512
  std::uint32_t http_per_peer = 0;     // half of that
};

FdBudget fd_budget(std::uint64_t nofile);

}  // namespace zernel
