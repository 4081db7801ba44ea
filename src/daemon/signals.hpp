#pragma once
// SIGINT and SIGTERM as a readable fd (the self-pipe trick), so the daemon's loop can wait for its
// next tick and for a stop request with one poll(). Handlers only write a byte: async-signal-safe.
// SIGHUP (reload the configuration) has its own pipe: reload_fd() is readable after one or more
// SIGHUPs until drain_reload() is called; the stop fd stays readable once a stop arrived.

#include "common/result.hpp"

namespace zernel::daemon {

class StopSignals {
 public:
  // Installs the handlers (once per process).
  static Result<StopSignals> install();
  // Readable once SIGINT or SIGTERM arrived.
  [[nodiscard]] int fd() const { return read_fd_; }
  // Readable once SIGHUP arrived (and not yet drained).
  [[nodiscard]] int reload_fd() const { return reload_fd_; }
  // Empties the reload pipe; returns true when at least one SIGHUP was pending.
  static bool drain_reload(int reload_fd);

 private:
  StopSignals(int fd, int reload_fd) : read_fd_(fd), reload_fd_(reload_fd) {}
  int read_fd_;
  int reload_fd_;
};

}  // namespace zernel::daemon
