#include "daemon/ticker.hpp"

#include <poll.h>
#include <sys/epoll.h>
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

Result<WakeSet> WakeSet::make(int stop_fd, int reload_fd, int control_fd) {
  WakeSet w(stop_fd);
  if (reload_fd < 0 && control_fd < 0) return w;
  w.epoll_ = sys::UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!w.epoll_.valid()) return errno_error("epoll_create1");
  for (int fd : {stop_fd, reload_fd, control_fd}) {
    if (fd < 0) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(w.epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return errno_error("epoll_ctl");
  }
  return w;
}

bool WakeSet::stop_requested() const {
  if (!epoll_.valid()) return true;  // it waits on the stop fd alone
  if (stop_fd_ < 0) return false;
  pollfd p{stop_fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace zernel::daemon
