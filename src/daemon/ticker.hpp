#pragma once
// A drift-free periodic tick on CLOCK_MONOTONIC: deadlines are start + k * period, computed from
// the start, never from "now + period", so time spent in a tick never delays the next one. When a
// tick overruns one or more deadlines, the missed ones are skipped (and counted), not run in a
// burst. wait() also returns early, with false, when the stop fd becomes readable.
//
// WakeSet is what the ticker waits on besides its deadline: the stop fd alone, or an epoll set
// of the stop fd, the reload fd and the control socket's fd. When the set wakes it early without
// a stop, the loop serves the control requests and SIGHUP, then waits for the same deadline again.

#include <cstdint>

#include "common/clock.hpp"
#include "common/result.hpp"
#include "sys/unique_fd.hpp"

namespace zernel::daemon {

class Ticker {
 public:
  Ticker(std::uint64_t period_ns, std::uint64_t start_ns);

  // Sleeps until the next deadline. Returns false when `stop_fd` (>= 0) became readable first.
  bool wait(int stop_fd);

  [[nodiscard]] std::uint64_t period_ns() const { return period_ns_; }
  // The deadline the last wait() returned for.
  [[nodiscard]] std::uint64_t deadline_ns() const { return deadline_; }
  [[nodiscard]] std::uint64_t ticks() const { return ticks_; }
  [[nodiscard]] std::uint64_t skipped() const { return skipped_; }
  // Lateness of the last wake-up relative to its deadline.
  [[nodiscard]] std::uint64_t last_lateness_ns() const { return lateness_; }

 private:
  std::uint64_t period_ns_;
  std::uint64_t next_;
  std::uint64_t deadline_ = 0;
  std::uint64_t ticks_ = 0;
  std::uint64_t skipped_ = 0;
  std::uint64_t lateness_ = 0;
};

class WakeSet {
 public:
  // Descriptors below 0 are left out; with neither a reload fd nor a control fd, the stop fd
  // alone (no epoll set).
  static Result<WakeSet> make(int stop_fd, int reload_fd, int control_fd);

  // The descriptor to give Ticker::wait.
  [[nodiscard]] int fd() const { return epoll_.valid() ? epoll_.get() : stop_fd_; }
  // After the ticker woke early: whether it was for a stop.
  [[nodiscard]] bool stop_requested() const;

 private:
  explicit WakeSet(int stop_fd) : stop_fd_(stop_fd) {}
  int stop_fd_;
  sys::UniqueFd epoll_;
};

}  // namespace zernel::daemon
