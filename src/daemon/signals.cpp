#include "daemon/signals.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace zernel::daemon {
namespace {

int g_write_fd = -1;
int g_read_fd = -1;
int g_reload_write_fd = -1;
int g_reload_read_fd = -1;

void on_stop_signal(int /*sig*/) {
  const int saved = errno;
  const char byte = 1;
  (void)!::write(g_write_fd, &byte, 1);
  errno = saved;
}

void on_reload_signal(int /*sig*/) {
  const int saved = errno;
  const char byte = 1;
  (void)!::write(g_reload_write_fd, &byte, 1);  // a full pipe already means "reload"
  errno = saved;
}

}  // namespace

bool StopSignals::drain_reload(int reload_fd) {
  if (reload_fd < 0) return false;
  char buf[64];
  bool any = false;
  while (::read(reload_fd, buf, sizeof(buf)) > 0) any = true;
  return any;
}

Result<StopSignals> StopSignals::install() {
  if (g_read_fd >= 0) return StopSignals(g_read_fd, g_reload_read_fd);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return errno_error("creating the signal pipe");
  g_read_fd = fds[0];
  g_write_fd = fds[1];
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM}) {
    if (::sigaction(sig, &sa, nullptr) != 0) return errno_error("installing a signal handler");
  }
  // A closed HTTP client or log pipe must not kill the daemon.
  ::signal(SIGPIPE, SIG_IGN);
  int rfds[2];
  if (::pipe2(rfds, O_CLOEXEC | O_NONBLOCK) != 0) return errno_error("creating the reload pipe");
  g_reload_read_fd = rfds[0];
  g_reload_write_fd = rfds[1];
  struct sigaction hup {};
  hup.sa_handler = on_reload_signal;
  sigemptyset(&hup.sa_mask);
  hup.sa_flags = SA_RESTART;
  if (::sigaction(SIGHUP, &hup, nullptr) != 0) return errno_error("installing the SIGHUP handler");
  return StopSignals(g_read_fd, g_reload_read_fd);
}

}  // namespace zernel::daemon
