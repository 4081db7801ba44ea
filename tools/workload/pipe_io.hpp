#pragma once
// Fixed-size messages over pipes, and fd helpers for the forked processes.

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace zernel::workload {

enum class IoStatus { ok, eof, interrupted, error };

// Reads exactly `len` bytes. EINTR before any byte arrives gives `interrupted` (a signal asked
// the caller to look at its stop flag); once a message has started it is read to the end.
inline IoStatus read_exact(int fd, void* buf, std::size_t len) {
  auto* p = static_cast<char*>(buf);
  std::size_t got = 0;
  while (got < len) {
    const ssize_t n = ::read(fd, p + got, len - got);
    if (n < 0) {
      if (errno == EINTR) {
        if (got == 0) return IoStatus::interrupted;
        continue;
      }
      return IoStatus::error;
    }
    if (n == 0) return IoStatus::eof;
    got += static_cast<std::size_t>(n);
  }
  return IoStatus::ok;
}

inline IoStatus write_exact(int fd, const void* buf, std::size_t len) {
  const auto* p = static_cast<const char*>(buf);
  std::size_t done = 0;
  while (done < len) {
    const ssize_t n = ::write(fd, p + done, len - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EPIPE ? IoStatus::eof : IoStatus::error;
    }
    done += static_cast<std::size_t>(n);
  }
  return IoStatus::ok;
}

// True when a read on `fd` would not block (data or end of file waiting).
inline bool readable_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace zernel::workload
