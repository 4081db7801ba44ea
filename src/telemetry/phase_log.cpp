#include "telemetry/phase_log.hpp"

#include <fcntl.h>
#include <cerrno>
#include <unistd.h>

#include <fmt/format.h>

namespace zernel::telemetry {

PhaseLog::~PhaseLog() {
  if (fd_ >= 0) ::close(fd_);
}

Result<void> PhaseLog::open(const std::string& path) {
  // Non-blocking: a FIFO at the path (with no reader, or one that stops reading) must cost
  // dropped lines (counted), never a hung scheduling loop. Regular files are unaffected.
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0) {
    if (errno == ENXIO) return Error(ENXIO, "opening phase log " + path + ": a FIFO no one reads");
    return errno_error("opening phase log " + path);
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  return Ok{};
}

void PhaseLog::write(std::uint64_t t_ns, std::uint32_t pid, policy::Phase phase) {
  if (fd_ < 0) return;
  char buf[128];
  const auto r =
      fmt::format_to_n(buf, sizeof(buf), "{{\"t_ns\": {}, \"pid\": {}, \"phase\": \"{}\"}}\n", t_ns,
                       pid, policy::phase_name(phase));
  emit(buf, static_cast<std::size_t>(r.out - buf));
}

void PhaseLog::write_thread(std::uint64_t t_ns, std::uint32_t pid, std::uint32_t tid,
                            policy::Phase phase) {
  if (fd_ < 0) return;
  char buf[160];
  const auto r = fmt::format_to_n(buf, sizeof(buf),
                                  "{{\"t_ns\": {}, \"pid\": {}, \"tid\": {}, \"phase\": \"{}\"}}\n",
                                  t_ns, pid, tid, policy::phase_name(phase));
  emit(buf, static_cast<std::size_t>(r.out - buf));
}

void PhaseLog::emit(const char* buf, std::size_t n) {
  if (::write(fd_, buf, n) != static_cast<ssize_t>(n)) {
    ++errors_;
  } else {
    ++lines_;
  }
}

}  // namespace zernel::telemetry
