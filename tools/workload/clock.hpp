#pragma once
// Clocks used by the workload's processes: the daemon's clock reader (common/clock.hpp), so the
// truth log and the scheduler's --phase-log read CLOCK_MONOTONIC the same way.

#include <cstdint>
#include <ctime>

#include "common/clock.hpp"

namespace zernel::workload {

using zernel::clock_ns;
using zernel::monotonic_ns;

// CPU time consumed by the calling thread.
inline std::uint64_t thread_cpu_ns() { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

inline timespec to_timespec(std::uint64_t ns) {
  return timespec{static_cast<time_t>(ns / 1'000'000'000ULL),
                  static_cast<long>(ns % 1'000'000'000ULL)};
}

}  // namespace zernel::workload
