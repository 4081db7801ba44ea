#pragma once
// The daemon's one clock reader. CLOCK_MONOTONIC is the clock of the tick, the phase log
// (--phase-log's t_ns), the probes' event times (BPF's bpf_ktime_get_ns reads the same clock) and
// every deadline; other clocks by id (CLOCK_REALTIME for wall time, a CPU-time clock).
// clock_gettime cannot fail for these ids on Linux, so there is no error to return.

#include <time.h>

#include <cstdint>

namespace zernel {

inline std::uint64_t clock_ns(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return (static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL) +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

inline std::uint64_t monotonic_ns() { return clock_ns(CLOCK_MONOTONIC); }
inline std::uint64_t monotonic_ms() { return monotonic_ns() / 1'000'000; }

// Time from `since` to `now` on one clock, 0 when `since` is later: a time read before an event
// (a loop's `now`) and the event's own time read after it must not make an age of 2^64 - 1.
inline std::uint64_t elapsed(std::uint64_t now, std::uint64_t since) {
  return now > since ? now - since : 0;
}

}  // namespace zernel
