#include "daemon/control.hpp"

#include <fcntl.h>
#include <fnmatch.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include "daemon/ticker.hpp"
#include "sys/procfs.hpp"
#include "telemetry/trace.hpp"

namespace zernel::daemon {
namespace {

using nlohmann::json;

Error bad(const std::string& msg) { return Error(EINVAL, "request: " + msg); }

std::string type_of(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

Result<std::string> get_string(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return bad(std::string("missing field \"") + key + "\"");
  if (!it->is_string()) {
    return bad(std::string("field \"") + key + "\": must be a string, got " + type_of(*it));
  }
  return it->get<std::string>();
}

// An integer in [lo, hi]; floats (even 2.0), booleans and strings are rejected.
Result<std::uint64_t> get_uint(const json& obj, const char* key, std::uint64_t lo,
                               std::uint64_t hi) {
  auto it = obj.find(key);
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  if (it == obj.end()) return bad(std::string("missing field \"") + key + "\"");
  if (!it->is_number_integer()) {
    return bad(std::string("field \"") + key + "\": must be an integer from " + range + ", got " +
               (it->is_number() ? it->dump() : type_of(*it)));
  }
  if (it->is_number_unsigned()) {
    const auto v = it->get<std::uint64_t>();
    if (v >= lo && v <= hi) return v;
  }
  return bad(std::string("field \"") + key + "\": must be an integer from " + range + ", got " +
             it->dump());
}

Result<void> only_fields(const json& obj, std::initializer_list<std::string_view> allowed,
                         std::string_view op) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string list;
      for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      return bad("unknown field \"" + key + "\" for op \"" + std::string(op) + "\" (allowed: " +
                 list + ")");
    }
  }
  return Ok{};
}

void set_nonblock_cloexec(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

Result<sockaddr_un> unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return Error(ENAMETOOLONG, "control socket path \"" + path + "\": empty or longer than " +
                                   std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// 0 when something accepts connections at `path`, else the errno of connect().
int probe(const sockaddr_un& addr) {
  const sys::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno;
  const int r = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  return r == 0 ? 0 : errno;
}

}  // namespace

std::string_view op_name(ControlOp op) {
  switch (op) {
    case ControlOp::tenant_add: return "tenant_add";
    case ControlOp::tenant_remove: return "tenant_remove";
    case ControlOp::tenant_list: return "tenant_list";
    case ControlOp::tenant_assign: return "tenant_assign";
    case ControlOp::status: return "status";
    case ControlOp::trace:
      return "trace";
  }
  return "status";
}

Result<ControlRequest> parse_request(std::string_view line) {
  if (line.size() > kMaxRequestBytes) {
    return bad("larger than " + std::to_string(kMaxRequestBytes) + " bytes (" +
               std::to_string(line.size()) + ")");
  }
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find('\n') != std::string_view::npos) return bad("more than one line");
  if (line.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded()) return bad("not valid JSON");
  if (!j.is_object()) return bad("must be a JSON object, got " + type_of(j));

  auto op_s = get_string(j, "op");
  if (!op_s) return op_s.error();
  ControlRequest r;
  const std::string& op = *op_s;
  if (op == "tenant_add") {
    r.op = ControlOp::tenant_add;
    if (auto ok = only_fields(j, {"op", "id", "gpus", "class", "cpu_weight"}, op); !ok) {
      return ok.error();
    }
    auto id = get_string(j, "id");
    if (!id) return id.error();
    r.tenant.id = std::move(*id);
    auto gpus = get_uint(j, "gpus", 0, 4096);
    if (!gpus) return gpus.error();
    r.tenant.gpus = static_cast<std::uint32_t>(*gpus);
    auto cls = get_string(j, "class");
    if (!cls) return cls.error();
    auto pc = policy::parse_priority_class(*cls);
    if (!pc) return pc.error().context("request: field \"class\"");
    r.tenant.priority_class = *pc;
    if (auto it = j.find("cpu_weight"); it != j.end() && !it->is_null()) {
      if (!it->is_number()) {
        return bad("field \"cpu_weight\": must be a number, got " + type_of(*it));
      }
      const double w = it->get<double>();
      if (!std::isfinite(w) || w < double{policy::kMinExplicitWeight} ||
          w > double{policy::kMaxExplicitWeight}) {
        return bad("field \"cpu_weight\": must be between 0.01 and 100, got " + it->dump());
      }
      r.tenant.cpu_weight = static_cast<float>(w);
    }
    if (auto v = policy::validate_tenant(r.tenant); !v) return v.error().context("request");
    return r;
  }
  if (op == "tenant_remove") {
    r.op = ControlOp::tenant_remove;
    if (auto ok = only_fields(j, {"op", "id"}, op); !ok) return ok.error();
    auto id = get_string(j, "id");
    if (!id) return id.error();
    r.tenant.id = std::move(*id);
    if (auto v = policy::validate_tenant(r.tenant); !v) return v.error().context("request");
    return r;
  }
  if (op == "tenant_list" || op == "status") {
    r.op = op == "status" ? ControlOp::status : ControlOp::tenant_list;
    if (auto ok = only_fields(j, {"op"}, op); !ok) return ok.error();
    return r;
  }
  if (op == "trace") {
    r.op = ControlOp::trace;
    if (auto ok = only_fields(j, {"op", "seconds"}, op); !ok) return ok.error();
    auto secs = get_uint(j, "seconds", telemetry::kTraceMinSeconds, telemetry::kTraceMaxSeconds);
    if (!secs) return secs.error();
    r.seconds = static_cast<std::uint32_t>(*secs);
    return r;
  }
  if (op == "tenant_assign") {
    r.op = ControlOp::tenant_assign;
    if (auto ok = only_fields(j, {"op", "pid", "tenant"}, op); !ok) return ok.error();
    auto pid = get_uint(j, "pid", 1, kMaxPid);
    if (!pid) return pid.error();
    r.pid = static_cast<std::uint32_t>(*pid);
    auto t = get_string(j, "tenant");
    if (!t) return t.error();
    policy::TenantSpec probe_spec;
    probe_spec.id = *t;
    if (auto v = policy::validate_tenant(probe_spec); !v) {
      return v.error().context("request: field \"tenant\"");
    }
    r.assign_to = std::move(*t);
    return r;
  }
  return bad("unknown op \"" + op +
             "\" (valid: tenant_add, tenant_remove, tenant_list, tenant_assign, status, trace)");
}

std::string request_line(const ControlRequest& r) {
  json j{{"op", op_name(r.op)}};
  switch (r.op) {
    case ControlOp::tenant_add:
      j["id"] = r.tenant.id;
      j["gpus"] = r.tenant.gpus;
      j["class"] = policy::class_name(r.tenant.priority_class);
      if (r.tenant.cpu_weight) j["cpu_weight"] = *r.tenant.cpu_weight;
      break;
    case ControlOp::tenant_remove: j["id"] = r.tenant.id; break;
    case ControlOp::tenant_assign:
      j["pid"] = r.pid;
      j["tenant"] = r.assign_to;
      break;
    case ControlOp::trace:
      j["seconds"] = r.seconds;
      break;
    case ControlOp::tenant_list:
    case ControlOp::status: break;
  }
  return j.dump();
}

std::optional<std::string> assign_refusal(const AssignTarget& t, std::uint32_t self_pid,
                                          bool host_pid_namespace,
                                          const std::vector<std::string>& protected_comms) {
  const std::string who = "pid " + std::to_string(t.pid) + " (" + t.comm + ")";
  if (t.pid == 1) return who + " is init: it is never assigned to a tenant";
  if ((t.flags & sys::kPfKthread) != 0 || (host_pid_namespace && (t.pid == 2 || t.ppid == 2))) {
    return who + " is a kernel thread: only user processes can be assigned to a tenant";
  }
  if (t.pid == self_pid) return who + " is this zernel-scheduler daemon itself";
  for (const std::string& pattern : protected_comms) {
    if (::fnmatch(pattern.c_str(), t.comm.c_str(), 0) == 0) {
      return who + " is a protected system process (comm matches \"" + pattern +
             "\" in [multi_tenant] protected_comms)";
    }
  }
  return std::nullopt;
}

json ok_reply() { return json{{"ok", true}}; }
json error_reply(std::string_view message) {
  return json{{"ok", false}, {"error", std::string(message)}};
}

std::string resolve_control_socket(const std::optional<std::string>& explicit_path) {
  if (explicit_path) return *explicit_path;
  if (const char* env = std::getenv(std::string(kControlSocketEnv).c_str());
      env != nullptr && *env != '\0') {
    return env;
  }
  return std::string(kDefaultControlSocket);
}

// ---- server ----

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

  struct stat st {};
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
      reply(c, error_reply("request: larger than " + std::to_string(kMaxRequestBytes) +
                           " bytes"));
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

// ---- client ----

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
  const std::uint64_t timeout_ns = std::uint64_t{1'000'000} * static_cast<unsigned>(std::max(timeout_ms, 0));
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
