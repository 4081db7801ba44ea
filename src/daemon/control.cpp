// The control socket's server (daemon/control.hpp): accepting, reading, refusing, answering.
#include "daemon/control.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

namespace zernel::daemon {
namespace {

using nlohmann::json;

// 0 when something accepts connections at `path`, else the errno of connect().
int probe(const sockaddr_un& addr) {
  const sys::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno;
  const int r = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  return r == 0 ? 0 : errno;
}

}  // namespace

ControlServer::ControlServer(std::string path, sys::UniqueFd listen_fd, sys::UniqueFd epoll_fd)
    : path_(std::move(path)), listen_fd_(std::move(listen_fd)), epoll_fd_(std::move(epoll_fd)) {}

// The descriptors close themselves; the socket file goes with the listening one.
ControlServer::~ControlServer() {
  if (listen_fd_.valid()) ::unlink(path_.c_str());
}

Result<std::unique_ptr<ControlServer>> ControlServer::listen(const std::string& path) {
  auto addr = unix_address(path);
  if (!addr) return addr.error();
  const std::string what = "control socket " + path;

  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec)) {
      std::filesystem::create_directories(dir, ec);
      if (ec) return Error(ec.value(), what + ": creating " + dir.string() + ": " + ec.message());
      ::chmod(dir.c_str(), 0700);  // root-only, like the journals in it (the unit: 0700 too)
    }
  }

  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Error(EEXIST, what + ": exists and is not a socket");
    const int err = probe(*addr);
    if (err == 0) {
      return Error(EADDRINUSE, what + ": another zernel-scheduler is already listening there");
    }
    if (err != ECONNREFUSED) return errno_error(what + ": checking the existing socket", err);
    ::unlink(path.c_str());  // stale: left by a daemon that did not exit cleanly
  }

  sys::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return errno_error(what + ": socket");
  const mode_t old_mask = ::umask(0177);  // the socket file is created 0600
  const int b = ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr));
  const int bind_err = errno;
  ::umask(old_mask);
  if (b != 0) return errno_error(what + ": bind", bind_err);
  ::chmod(path.c_str(), 0600);
  if (::listen(fd.get(), 64) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    return errno_error(what + ": listen", err);
  }
  sys::UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep.valid()) {
    const int err = errno;
    ::unlink(path.c_str());
    return errno_error(what + ": epoll_create1", err);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd.get();
  ::epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd.get(), &ev);
  return std::unique_ptr<ControlServer>(new ControlServer(path, std::move(fd), std::move(ep)));
}

void ControlServer::service(const Handler& handler, std::uint64_t now_ns) {
  epoll_event evs[64];
  const int n = ::epoll_wait(epoll_fd_.get(), evs, 64, 0);
  for (int i = 0; i < n; ++i) {
    const int fd = evs[i].data.fd;
    if (fd == listen_fd_.get()) {
      accept_all(now_ns);
      continue;
    }
    auto it = std::find_if(clients_.begin(), clients_.end(),
                           [fd](const Client& c) { return c.fd.get() == fd; });
    if (it == clients_.end()) continue;
    if (it->draining) {
      // Closing with unread input would reset the connection before the peer reads the reply.
      char sink[4096];
      ssize_t r = 0;
      while ((r = ::read(it->fd.get(), sink, sizeof(sink))) > 0) {
      }
      if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close_client(it->fd.get());
      }
    } else if (it->replying) {
      on_writable(*it);
    } else if (it->waiting) {
      // Watched with no events: only a hang-up or an error is reported (a peer that merely
      // shut down its sending side still waits for the answer).
      if ((evs[i].events & (EPOLLHUP | EPOLLERR)) != 0) close_client(it->fd.get());
    } else if ((evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) {
      on_readable(*it, handler, now_ns);
    }
  }
  expire(now_ns);
}

void ControlServer::expire(std::uint64_t now_ns) {
  for (Client& c : clients_) {
    if (c.fd.valid() && now_ns > c.deadline_ns) {
      ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
      c.fd.reset();
    }
  }
  std::erase_if(clients_, [](const Client& c) { return !c.fd.valid(); });
}

namespace {

// A refused peer gets its one-line answer without waiting for it (a socket buffer always takes
// a line) and is closed at once: it never holds a slot. Its pending input is read first, so that
// the close does not turn into a reset that could destroy the answer.
void refuse_now(sys::UniqueFd fd, const json& reply) {
  std::string line = reply.dump(-1, ' ', false, json::error_handler_t::replace);
  line.push_back('\n');
  (void)::send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(fd.get(), SHUT_WR);
  char sink[4096];
  (void)::recv(fd.get(), sink, sizeof(sink), MSG_DONTWAIT);
}

}  // namespace

void ControlServer::accept_all(std::uint64_t now_ns) {
  for (int k = 0; k < 64; ++k) {
    sys::UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) return;  // EAGAIN, or an error we cannot act on
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      ++refused_;
      refuse_now(std::move(fd),
                 error_reply("permission denied: cannot read the peer's credentials"));
      continue;
    }
    if (cred.uid != 0) {
      ++refused_;
      refuse_now(std::move(fd), error_reply("permission denied: uid " + std::to_string(cred.uid) +
                                            " is not root; the control socket accepts only uid 0"));
      continue;
    }
    if (clients_.size() >= kMaxClients) {
      // Root's new client wins over the oldest one still waiting for its request.
      auto oldest = clients_.end();
      for (auto it = clients_.begin(); it != clients_.end(); ++it) {
        if (!it->fd.valid() || it->replying || it->waiting) continue;
        if (oldest == clients_.end() || it->since_ns < oldest->since_ns) oldest = it;
      }
      if (oldest == clients_.end()) {
        refuse_now(std::move(fd), error_reply("busy: too many control connections"));
        continue;
      }
      close_client(oldest->fd.get());
      std::erase_if(clients_, [](const Client& c) { return !c.fd.valid(); });
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd.get();
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) continue;
    Client c;
    c.fd = std::move(fd);
    c.since_ns = now_ns;
    c.deadline_ns = now_ns + kClientTimeoutNs;
    c.ticket = next_ticket_++;
    clients_.push_back(std::move(c));
  }
}

void ControlServer::on_readable(Client& c, const Handler& handler, std::uint64_t now_ns) {
  char buf[1024];
  for (;;) {
    const std::size_t room = kMaxRequestBytes + 1 - c.in.size();
    const ssize_t r = ::read(c.fd.get(), buf, std::min(sizeof(buf), room));
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      close_client(c.fd.get());
      return;
    }
    if (r == 0) {  // EOF: the request is what came, if anything
      if (c.in.empty()) {
        close_client(c.fd.get());
        return;
      }
      break;
    }
    c.in.append(buf, static_cast<std::size_t>(r));
    if (c.in.find('\n') != std::string::npos) break;
    if (c.in.size() > kMaxRequestBytes) {
      reply(c, error_reply("request: larger than " + std::to_string(kMaxRequestBytes) + " bytes"));
      return;
    }
  }
  const std::size_t nl = c.in.find('\n');
  const std::string_view line =
      nl == std::string::npos ? std::string_view(c.in) : std::string_view(c.in).substr(0, nl + 1);
  ++requests_;
  auto req = parse_request(line);
  if (!req) {
    reply(c, error_reply(req.error().message()));
    return;
  }
  std::optional<json> out;
  try {
    out = handler(*req, c.ticket);
  } catch (const std::exception& e) {
    out = error_reply(std::string("internal error: ") + e.what());
  }
  if (out) {
    reply(c, *out);
    return;
  }
  c.waiting = true;
  c.deadline_ns = now_ns + kMaxDeferNs;
  epoll_event ev{};
  ev.events = 0;
  ev.data.fd = c.fd.get();
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
}

bool ControlServer::waiting(Ticket ticket) const {
  return std::any_of(clients_.begin(), clients_.end(), [ticket](const Client& c) {
    return c.fd.valid() && c.waiting && c.ticket == ticket;
  });
}

void ControlServer::answer(Ticket ticket, const json& reply_json, std::uint64_t now_ns) {
  for (Client& c : clients_) {
    if (!c.fd.valid() || !c.waiting || c.ticket != ticket) continue;
    c.waiting = false;
    // A long reply may take several wake-ups to write: the usual timeout, from now.
    c.deadline_ns = now_ns + kClientTimeoutNs;
    reply(c, reply_json);
    break;
  }
  std::erase_if(clients_, [](const Client& c) { return !c.fd.valid(); });
}

void ControlServer::reply(Client& c, const json& j) {
  c.out = j.dump(-1, ' ', false, json::error_handler_t::replace);
  c.out.push_back('\n');
  c.written = 0;
  c.replying = true;
  epoll_event ev{};
  ev.events = EPOLLOUT;
  ev.data.fd = c.fd.get();
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
  on_writable(c);
}

void ControlServer::on_writable(Client& c) {
  while (c.written < c.out.size()) {
    const ssize_t w =
        ::send(c.fd.get(), c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      break;
    }
    c.written += static_cast<std::size_t>(w);
  }
  if (c.written < c.out.size()) {  // the peer went away
    close_client(c.fd.get());
    return;
  }
  ::shutdown(c.fd.get(), SHUT_WR);
  c.draining = true;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = c.fd.get();
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
}

void ControlServer::close_client(int fd) {
  for (Client& c : clients_) {
    if (c.fd.valid() && c.fd.get() == fd) {
      ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
      c.fd.reset();  // erased at the end of service()
    }
  }
}

}  // namespace zernel::daemon
