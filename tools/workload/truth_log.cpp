#include "workload/truth_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <utility>

#include <fmt/format.h>

#include "workload/clock.hpp"

namespace zernel::workload {

TruthLog::TruthLog(TruthLog&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      pid_(other.pid_),
      tid_(other.tid_),
      role_(other.role_),
      current_(other.current_),
      warned_(other.warned_) {}

TruthLog& TruthLog::operator=(TruthLog&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    pid_ = other.pid_;
    tid_ = other.tid_;
    role_ = other.role_;
    current_ = other.current_;
    warned_ = other.warned_;
  }
  return *this;
}

TruthLog::~TruthLog() {
  if (fd_ >= 0) close(fd_);
}

Result<void> TruthLog::create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error("creating truth log " + path);
  close(fd);
  return Ok{};
}

Result<TruthLog> TruthLog::open(const std::string& path, std::string_view role) {
  TruthLog log;
  if (path.empty()) return log;
  log.fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (log.fd_ < 0) return errno_error("opening truth log " + path);
  log.pid_ = getpid();
  log.tid_ = gettid();
  log.role_ = role;
  log.write_line(Phase::unknown, monotonic_ns());
  return log;
}

void TruthLog::enter(Phase p) { enter(p, monotonic_ns()); }

void TruthLog::enter(Phase p, std::uint64_t t_ns) {
  if (p == current_) return;
  current_ = p;
  write_line(p, t_ns);
}

void TruthLog::close_line() { write_line(current_, monotonic_ns()); }

void TruthLog::write_line(Phase p, std::uint64_t t_ns) {
  if (fd_ < 0) return;
  std::array<char, 192> buf{};
  const auto res = fmt::format_to_n(
      buf.data(), buf.size(),
      "{{\"t_ns\": {}, \"pid\": {}, \"tid\": {}, \"phase\": \"{}\", \"role\": \"{}\"}}\n", t_ns,
      pid_, tid_, policy::phase_name(p), role_);
  const auto len = static_cast<std::size_t>(res.out - buf.data());
  ssize_t n;
  do {
    n = ::write(fd_, buf.data(), len);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(len) && !warned_) {
    warned_ = true;
    fmt::print(stderr, "zernel-workload: warning: pid {}: truth log write failed\n", pid_);
  }
}

}  // namespace zernel::workload
