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
    // One sleep to the deadline (ppoll's timeout is as fine as clock_nanosleep's), cut short by
    // the stop fd: a single wakeup a tick.
    if (stop_fd >= 0) {
      const std::uint64_t left = next_ - now;
      const timespec ts{static_cast<time_t>(left / 1'000'000'000ULL),
                        static_cast<long>(left % 1'000'000'000ULL)};
      pollfd p{stop_fd, POLLIN, 0};
      if (ppoll(&p, 1, &ts, nullptr) > 0) return false;
    } else {
      const timespec ts{static_cast<time_t>(next_ / 1'000'000'000ULL),
                        static_cast<long>(next_ % 1'000'000'000ULL)};
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
      }
    }
    now = monotonic_ns();
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
