#include "common/fd_budget.hpp"

#include <sys/resource.h>

#include <algorithm>

namespace zernel {

std::uint64_t raise_nofile_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  const rlim_t want = std::min<rlim_t>(rl.rlim_max, kMaxNofile);
  if (rl.rlim_cur < want) {
    rlimit raised = rl;
    raised.rlim_cur = want;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return rl.rlim_cur;
}

FdBudget fd_budget(std::uint64_t nofile) {
  FdBudget b;
  // 7/8 of the descriptors stay for the rest: the signal sampler keeps at most half of the
  // limit open (collect/signals.hpp), the control socket at most ControlServer::kMaxClients,
  // and discovery, sysfs, BPF, NVML and the journals have the remaining 3/8 minus those.
  b.http_connections = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(nofile / 8, 16, 512));
  b.http_per_peer = std::max<std::uint32_t>(b.http_connections / 2, 1);
  return b;
}

}  // namespace zernel
