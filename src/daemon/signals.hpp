#pragma once
// SIGINT and SIGTERM as a readable fd (the self-pipe trick), so the daemon's loop can wait for its
// next tick and for a stop request with one poll(). Handlers only write a byte: async-signal-safe.

#include "common/result.hpp"

namespace zernel::daemon {

class StopSignals {
 public:
  // Installs the handlers (once per process).
  static Result<StopSignals> install();
  // Readable once SIGINT or SIGTERM arrived.
  [[nodiscard]] int fd() const { return read_fd_; }

 private:
  explicit StopSignals(int fd) : read_fd_(fd) {}
  int read_fd_;
};

}  // namespace zernel::daemon
