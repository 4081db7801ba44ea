#pragma once
// Clocks used by the workload's processes.

#include <cstdint>
#include <ctime>

namespace zernel::workload {

inline std::uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// CLOCK_MONOTONIC, the clock of the truth log and of the scheduler's --phase-log.
inline std::uint64_t monotonic_ns() { return clock_ns(CLOCK_MONOTONIC); }

// CPU time consumed by the calling thread.
inline std::uint64_t thread_cpu_ns() { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

inline timespec to_timespec(std::uint64_t ns) {
  return timespec{static_cast<time_t>(ns / 1'000'000'000ULL),
                  static_cast<long>(ns % 1'000'000'000ULL)};
}

}  // namespace zernel::workload
