#include "collect/sync_signals.hpp"

#include <algorithm>

#include "common/clock.hpp"

namespace zernel::collect {

SyncSignals sync_signals(const SyncState& s, std::uint64_t now_ns, std::uint64_t tick_ns) {
  SyncSignals out;
  const std::uint64_t in_sync_for = s.in_sync ? elapsed(now_ns, s.in_sync_since_ns) : 0;
  const bool gpu_idle = s.nvml_util_pct && *s.nvml_util_pct < kSyncGpuBusyPct;
  out.long_sync = s.in_sync && in_sync_for >= kLongSyncNs && !(s.runnable && gpu_idle);
  if (out.long_sync) {
    out.cpu_burst_ns = 0;
    out.wait_blocks = !s.runnable;
  } else if (s.last_return_ns > 0) {
    // A returned process has run; in a short sync, the burst that led into it.
    const std::uint64_t burst = s.in_sync ? s.last_burst_ns : s.burst_since_return_ns;
    out.cpu_burst_ns = std::max<std::uint64_t>(burst, 1);
  }
  const std::uint64_t interval = s.interval_ns > 0 ? s.interval_ns : tick_ns;
  if (out.long_sync) {
    out.gpu_floor_pct = 100;
  } else if (interval > 0) {
    const std::uint64_t blocked =
        s.sync_time_delta_ns + (s.runnable && gpu_idle ? 0 : std::min(in_sync_for, interval));
    out.gpu_floor_pct = static_cast<std::uint32_t>(std::min<std::uint64_t>(100, blocked * 100 / interval));
  }
  return out;
}

}  // namespace zernel::collect
