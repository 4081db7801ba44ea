#include "daemon/ticker.hpp"

#include <poll.h>
#include <time.h>

#include <cerrno>

namespace zernel::daemon {

Ticker::Ticker(std::uint64_t period_ns, std::uint64_t start_ns)
    : period_ns_(period_ns == 0 ? 1 : period_ns), next_(start_ns + period_ns_) {}

bool Ticker::wait(int stop_fd) {
  std::uint64_t now = monotonic_ns();
  if (now >= next_ + period_ns_) {
    // Overran at least one whole period: skip the deadlines already missed.
    const std::uint64_t missed = (now - next_) / period_ns_;
    skipped_ += missed;
    next_ += missed * period_ns_;
  }
  while (now < next_) {
    const std::uint64_t left = next_ - now;
    // poll() has millisecond resolution: poll for the stop fd until under 2 ms remain, then
    // sleep to the exact deadline.
    if (stop_fd >= 0) {
      pollfd p{stop_fd, POLLIN, 0};
      const int ms = left > 2'000'000 ? static_cast<int>((left - 1'000'000) / 1'000'000) : 0;
      const int r = poll(&p, 1, ms);
      if (r > 0) return false;
    }
    now = monotonic_ns();
    if (now >= next_) break;
    if (next_ - now <= 2'000'000 || stop_fd < 0) {
      timespec ts{static_cast<time_t>(next_ / 1'000'000'000ULL),
                  static_cast<long>(next_ % 1'000'000'000ULL)};
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
      }
      now = monotonic_ns();
    }
  }
  deadline_ = next_;
  lateness_ = now - next_;
  next_ += period_ns_;
  ++ticks_;
  return true;
}

}  // namespace zernel::daemon
