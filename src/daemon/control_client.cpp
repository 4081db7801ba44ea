// The control socket's client (daemon/control.hpp): one request, one reply.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/clock.hpp"
#include "daemon/control.hpp"

namespace zernel::daemon {

using nlohmann::json;

namespace {

void set_nonblock_cloexec(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

}  // namespace

Result<json> control_call(const std::string& path, const std::string& request_line,
                          int timeout_ms) {
  const std::string where = "cannot reach the daemon at " + path;
  auto addr = unix_address(path);
  if (!addr) return addr.error().context(where);
  const sys::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno_error(where);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    return errno_error(where);
  }
  set_nonblock_cloexec(fd.get());
  const std::uint64_t timeout_ns =
      std::uint64_t{1'000'000} * static_cast<unsigned>(std::max(timeout_ms, 0));
  const std::uint64_t deadline = monotonic_ns() + timeout_ns;
  auto wait_for = [&](short events) -> bool {
    const std::uint64_t now = monotonic_ns();
    if (now >= deadline) return false;
    pollfd p{fd.get(), events, 0};
    return ::poll(&p, 1, static_cast<int>((deadline - now) / std::uint64_t{1'000'000}) + 1) > 0;
  };
  std::string req = request_line;
  req.push_back('\n');
  std::size_t sent = 0;
  // A refused peer may be answered (and closed) before the request is read: a failed send is
  // not fatal as long as a reply can be read.
  while (sent < req.size()) {
    const ssize_t w = ::send(fd.get(), req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && wait_for(POLLOUT)) continue;
      break;
    }
    sent += static_cast<std::size_t>(w);
  }
  std::string in;
  char buf[65536];
  constexpr std::size_t kMaxReply = 256U << 20;
  for (;;) {
    const ssize_t r = ::read(fd.get(), buf, sizeof(buf));
    if (r > 0) {
      in.append(buf, static_cast<std::size_t>(r));
      if (in.size() > kMaxReply) break;
      continue;
    }
    if (r == 0) break;
    if (errno == EINTR) continue;
    if ((errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (wait_for(POLLIN)) continue;
      return Error(ETIMEDOUT, "no reply from the daemon at " + path + " within " +
                                  std::to_string(timeout_ms) + " ms");
    }
    return errno_error("reading the reply from " + path);
  }
  if (const std::size_t nl = in.find('\n'); nl != std::string::npos) in.resize(nl);
  if (in.empty()) return Error(EPROTO, "the daemon at " + path + " closed without a reply");
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("ok") || !j["ok"].is_boolean()) {
    return Error(EPROTO, "the daemon at " + path + " sent a malformed reply");
  }
  return j;
}

}  // namespace zernel::daemon
