#include "telemetry/http_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <exception>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.hpp"
#include "telemetry/http_request.hpp"
#include "telemetry/prometheus.hpp"
#include "telemetry/status_json.hpp"

namespace zernel::telemetry {

void SnapshotStore::publish(Snapshot s) {
  auto next = std::make_shared<const Snapshot>(std::move(s));
  std::lock_guard<std::mutex> lock(mu_);
  latest_ = std::move(next);
}

std::shared_ptr<const Snapshot> SnapshotStore::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

std::string_view close_reason_label(HttpClose r) {
  switch (r) {
    case HttpClose::deadline:
      return "deadline";
    case HttpClose::idle:
      return "idle";
    case HttpClose::evicted:
      return "evicted";
    case HttpClose::refused:
      return "refused";
    case HttpClose::malformed:
      return "malformed";
    case HttpClose::write_timeout:
      return "write_timeout";
    case HttpClose::nr:
      break;
  }
  return "unknown";
}

namespace {

std::string status_line(int code) {
  switch (code) {
    case 200:
      return "HTTP/1.1 200 OK\r\n";
    case 400:
      return "HTTP/1.1 400 Bad Request\r\n";
    case 404:
      return "HTTP/1.1 404 Not Found\r\n";
    case 405:
      return "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\n";
    case 413:
      return "HTTP/1.1 413 Content Too Large\r\n";
    case 431:
      return "HTTP/1.1 431 Request Header Fields Too Large\r\n";
    case 503:
      return "HTTP/1.1 503 Service Unavailable\r\n";
    default:
      return "HTTP/1.1 500 Internal Server Error\r\n";
  }
}

std::shared_ptr<const std::string> text(std::string s) {
  return std::make_shared<const std::string>(std::move(s));
}

}  // namespace

class HttpServer::Loop {
 public:
  Loop(const SnapshotStore& store, const HttpLimits& limits, int listen_fd, int epoll_fd,
       int wake_fd)
      : store_(store), lim_(limits), listen_fd_(listen_fd), ep_(epoll_fd), wake_fd_(wake_fd) {}

  ~Loop() {
    for (auto& [fd, c] : conns_) ::close(fd);
    ::close(listen_fd_);
    ::close(ep_);
    ::close(wake_fd_);
  }

  void run();
  void wake() const {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }

  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> open{0};
  std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(HttpClose::nr)> closed{};

 private:
  struct Conn {
    std::string peer;      // the address's bytes: the per-peer cap's key
    std::string in;        // received, not yet parsed
    // The response being written: head, the shared body, then a tail of its own (/metrics: the
    // server's counters, current at the request).
    std::string out_head;
    std::shared_ptr<const std::string> body;
    std::string out_tail;
    std::size_t sent = 0;
    bool writing = false;
    bool close_after = false;
    bool got_bytes = false;              // since waiting_since_ms
    bool peer_done = false;              // the client shut its side: nothing more will come
    bool lingering = false;              // answered for the last time; draining until EOF
    std::size_t drained = 0;             // bytes read and dropped while lingering
    std::uint64_t waiting_since_ms = 0;  // accept, or the end of the last response
    std::uint64_t request_since_ms = 0;  // the head's deadline counts from here
    std::uint64_t write_since_ms = 0;
    std::uint32_t served = 0;
  };

  void accept_ready(std::uint64_t now);
  bool make_room(const std::string& peer, int newcomer);
  // Accepts per pass of the loop: well under a peer's share, so that a connection accepted in
  // one pass has its request read in the next before a flood's accepts could evict it.
  static constexpr int kAcceptBatch = 16;
  void on_event(int fd, std::uint32_t events, std::uint64_t now);
  void process(int fd, Conn& c, std::uint64_t now);
  void respond(int fd, Conn& c, const HttpRequestHead& req);
  void fail(int fd, Conn& c, int code);
  void start_write(int fd, Conn& c, std::string head, std::shared_ptr<const std::string> body,
                   std::string tail = {});
  // False when the connection was closed.
  bool write_more(int fd, Conn& c, std::uint64_t now);
  void close_conn(int fd, std::optional<HttpClose> why);
  // After the last response: shut the writing side (the client sees the response, then EOF)
  // and read and drop what the client still sends until it closes, kLingerMs pass or
  // kLingerBytes were dropped. A close() with unread input sends a reset, which can destroy the
  // response in flight and fails a client still sending (the reply to an oversized head, a
  // body, a pipelined request). The byte cap keeps a client that streams without end (2 million
  // headers) from having us read it for the whole 2 s.
  void linger(int fd, Conn& c);
  static constexpr std::uint64_t kLingerMs = 2000;
  static constexpr std::size_t kLingerBytes = std::size_t{1} << 20;
  void sweep(std::uint64_t now);
  void count(HttpClose why) { closed[static_cast<std::size_t>(why)].fetch_add(1); }
  std::shared_ptr<const std::string> metrics_body();
  std::string server_counters() const;
  std::shared_ptr<const std::string> status_body();
  void render_failed(const char* what, const std::exception& e);

  const SnapshotStore& store_;
  const HttpLimits lim_;
  int listen_fd_;
  int ep_;
  int wake_fd_;
  std::unordered_map<int, Conn> conns_;
  std::unordered_map<std::string, std::uint32_t> per_peer_;
  bool accept_paused_ = false;
  std::uint64_t resume_accept_ms_ = 0;
  std::uint64_t last_sweep_ms_ = 0;
  // Rendered once per published snapshot, shared by every connection that asks for it.
  std::shared_ptr<const Snapshot> metrics_for_;
  std::shared_ptr<const std::string> metrics_;
  std::shared_ptr<const Snapshot> status_for_;
  std::shared_ptr<const std::string> status_;
  std::uint64_t render_errors_ = 0;
};

void HttpServer::Loop::run() {
  std::array<epoll_event, 64> evs{};
  while (!stopping.load()) {
    // With no connection and accepting, nothing is due until an event (a client, or wake() at
    // stop): the thread sleeps. Else it wakes every 100 ms for the deadlines (sweep) and the
    // pause of accept.
    const int timeout_ms = conns_.empty() && !accept_paused_ ? -1 : 100;
    const int n = ::epoll_wait(ep_, evs.data(), static_cast<int>(evs.size()), timeout_ms);
    const std::uint64_t now = monotonic_ms();
    bool accept = false;
    for (int i = 0; i < n; ++i) {
      const int fd = evs[static_cast<std::size_t>(i)].data.fd;
      if (fd == wake_fd_) {
        std::uint64_t v = 0;
        (void)!::read(wake_fd_, &v, sizeof(v));
      } else if (fd == listen_fd_) {
        accept = true;
      } else {
        on_event(fd, evs[static_cast<std::size_t>(i)].events, now);
      }
    }
    // New connections last: the requests of those accepted before are read first.
    if (accept) accept_ready(now);
    if (accept_paused_ && now >= resume_accept_ms_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = listen_fd_;
      if (::epoll_ctl(ep_, EPOLL_CTL_ADD, listen_fd_, &ev) == 0) accept_paused_ = false;
    }
    // A fresh clock for the deadlines: handling the events above took time, and set the times
    // of the connections it touched (a lingering one's start, a write's) later than `now`.
    if (const std::uint64_t at = monotonic_ms(); elapsed(at, last_sweep_ms_) >= 50) {
      sweep(at);
      last_sweep_ms_ = at;
    }
  }
}

void HttpServer::Loop::accept_ready(std::uint64_t now) {
  for (int k = 0; k < kAcceptBatch; ++k) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Level-triggered: the pending connection would wake us at once, forever. Stop
        // listening for a moment; the descriptors other parts of the daemon need come first.
        ::epoll_ctl(ep_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        accept_paused_ = true;
        resume_accept_ms_ = now + 100;
      }
      return;
    }
    std::string peer;
    if (addr.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
      peer.assign(reinterpret_cast<const char*>(&a->sin_addr), sizeof(a->sin_addr));
    } else if (addr.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
      peer.assign(reinterpret_cast<const char*>(&a->sin6_addr), sizeof(a->sin6_addr));
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    if (::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    Conn& c = conns_[fd];
    c.peer = peer;
    c.waiting_since_ms = now;
    c.request_since_ms = now;
    ++per_peer_[c.peer];
    open.store(conns_.size());
    // A scraper's request arrives with its connection: it is served now, before this connection
    // needs a slot, so a table full of an attacker's connections never stands in its way (one
    // descriptor over the cap, for the length of this call).
    on_event(fd, EPOLLIN, now);
    if (conns_.contains(fd) && !make_room(peer, fd)) {
      close_conn(fd, HttpClose::refused);
    }
  }
}

// Keeps the table (and `peer`'s share of it) within its cap now that `newcomer` is in it. The
// victim: a connection that has sent nothing of a request (idle, or kept alive between
// requests) before one that has, and among those the one waiting longest. Never the newcomer,
// nor a connection with a response in flight (its write deadline bounds it). So a flood of
// empty connections churns among itself, and a client whose request is arriving is not evicted
// by it. False when nothing can go: the newcomer must.
bool HttpServer::Loop::make_room(const std::string& peer, int newcomer) {
  for (;;) {
    const auto peer_it = per_peer_.find(peer);
    const bool peer_full = peer_it != per_peer_.end() && peer_it->second > lim_.max_per_peer;
    const bool table_full = conns_.size() > lim_.max_connections;
    if (!peer_full && !table_full) return true;
    int victim = -1;
    std::pair<bool, std::uint64_t> best{true, UINT64_MAX};
    for (const auto& [fd, c] : conns_) {
      if (fd == newcomer || c.writing) continue;
      if (!table_full && c.peer != peer) continue;  // the peer's own share is what is full
      // A lingering connection has had its answer: it goes first (time 0).
      const std::pair<bool, std::uint64_t> key{c.got_bytes, c.lingering   ? 0
                                                            : c.got_bytes ? c.request_since_ms
                                                                          : c.waiting_since_ms};
      if (victim < 0 || key < best) {
        best = key;
        victim = fd;
      }
    }
    if (victim < 0) return false;
    // Its request may be waiting unread in the kernel (this pass of the loop has not reached
    // it yet): read and serve it instead, and look again.
    int pending = 0;
    if (!best.first && !conns_.at(victim).lingering && ::ioctl(victim, FIONREAD, &pending) == 0 &&
        pending > 0) {
      on_event(victim, EPOLLIN, monotonic_ms());
      continue;
    }
    close_conn(victim, HttpClose::evicted);
  }
}

void HttpServer::Loop::on_event(int fd, std::uint32_t events, std::uint64_t now) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  if (c.lingering) {
    char buf[16384];
    for (;;) {
      const ssize_t r = ::read(fd, buf, sizeof(buf));
      if (r > 0) c.drained += static_cast<std::size_t>(r);
      if (r > 0 && c.drained <= kLingerBytes) continue;
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      // EOF or an error: nothing unread is left. Past kLingerBytes: enough, the rest may reset.
      close_conn(fd, std::nullopt);
      return;
    }
  }
  if (c.writing) {
    if ((events & (EPOLLERR | EPOLLHUP)) != 0) {
      close_conn(fd, std::nullopt);
      return;
    }
    if (!write_more(fd, c, now)) return;
    if (!c.writing) process(fd, c, now);  // pipelined requests already buffered
    return;
  }
  // Read what the head buffer has room for; the rest waits in the kernel.
  bool eof = false;
  for (;;) {
    const std::size_t cap = lim_.max_head_bytes * std::size_t{2};
    if (c.in.size() >= cap) break;
    char buf[16384];
    const ssize_t r = ::read(fd, buf, std::min(sizeof(buf), cap - c.in.size()));
    if (r > 0) {
      if (!c.got_bytes) {
        c.got_bytes = true;
        if (c.served > 0) c.request_since_ms = now;
      }
      c.in.append(buf, static_cast<std::size_t>(r));
      continue;
    }
    if (r == 0) {
      eof = true;
      c.peer_done = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    close_conn(fd, std::nullopt);
    return;
  }
  process(fd, c, now);
  // A peer that finished sending: what it asked for is answered (above), then it is closed.
  if (eof) {
    auto again = conns_.find(fd);
    if (again != conns_.end() && !again->second.writing)
      close_conn(fd, std::nullopt);
    else if (again != conns_.end())
      again->second.close_after = true;
  }
}

void HttpServer::Loop::process(int fd, Conn& c, std::uint64_t now) {
  while (!c.writing) {
    if (c.in.empty()) return;
    HttpRequestHead req;
    std::size_t consumed = 0;
    switch (parse_head(c.in, lim_, req, consumed)) {
      case HttpParse::incomplete:
        return;
      case HttpParse::too_large:
        fail(fd, c, 431);
        return;
      case HttpParse::bad_request:
        fail(fd, c, 400);
        return;
      case HttpParse::bad_method:
        fail(fd, c, 405);
        return;
      case HttpParse::has_body:
        fail(fd, c, 413);
        return;
      case HttpParse::complete:
        break;
    }
    requests.fetch_add(1);
    ++c.served;
    if (c.served >= lim_.max_requests_per_connection) req.keep_alive = false;
    // Copy the path out: erasing the consumed bytes invalidates the view.
    const std::string path(req.path);
    req.path = path;
    respond(fd, c, req);
    c.in.erase(0, consumed);
    c.got_bytes = !c.in.empty();
    c.request_since_ms = now;
    if (!write_more(fd, c, now)) return;  // closed
  }
}

void HttpServer::Loop::respond(int fd, Conn& c, const HttpRequestHead& req) {
  int code = 200;
  std::shared_ptr<const std::string> body;
  std::string tail;
  std::string_view type = "text/plain; charset=utf-8";
  if (req.path == "/metrics") {
    body = metrics_body();
    if (body) tail = server_counters();
    type = "text/plain; version=0.0.4; charset=utf-8";
  } else if (req.path == "/status") {
    body = status_body();
    type = "application/json";
  } else if (req.path == "/") {
    static const auto kIndex =
        text("zernel-scheduler: GET /metrics (Prometheus) or /status (JSON)\n");
    body = kIndex;
  } else {
    static const auto kNotFound = text("not found: try /metrics or /status\n");
    code = 404;
    body = kNotFound;
  }
  if (!body) {
    static const auto kInternal = text("internal error\n");
    code = 500;
    body = kInternal;
  }
  c.close_after = !req.keep_alive;
  std::string head = status_line(code);
  head +=
      fmt::format("Content-Type: {}\r\nContent-Length: {}\r\n", type, body->size() + tail.size());
  head += c.close_after ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n";
  if (req.head_only) {
    body.reset();
    tail.clear();
  }
  start_write(fd, c, std::move(head), std::move(body), std::move(tail));
}

void HttpServer::Loop::fail(int fd, Conn& c, int code) {
  count(HttpClose::malformed);
  const char* msg = code == 405   ? "only GET and HEAD\n"
                    : code == 413 ? "no request bodies\n"
                    : code == 431 ? "request head too large\n"
                                  : "bad request\n";
  std::string head = status_line(code);
  head += fmt::format("Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                      std::strlen(msg));
  c.close_after = true;
  c.in.clear();
  start_write(fd, c, std::move(head), text(msg));
  (void)write_more(fd, c, monotonic_ms());
}

void HttpServer::Loop::start_write(int fd, Conn& c, std::string head,
                                   std::shared_ptr<const std::string> body, std::string tail) {
  c.out_head = std::move(head);
  c.body = std::move(body);
  c.out_tail = std::move(tail);
  c.sent = 0;
  c.writing = true;
  c.write_since_ms = monotonic_ms();
  (void)fd;
}

bool HttpServer::Loop::write_more(int fd, Conn& c, std::uint64_t now) {
  const std::array<std::string_view, 3> parts{
      c.out_head, c.body ? std::string_view(*c.body) : std::string_view(), c.out_tail};
  const std::size_t total = parts[0].size() + parts[1].size() + parts[2].size();
  while (c.sent < total) {
    std::array<iovec, 3> iov{};
    std::size_t n = 0;
    std::size_t skip = c.sent;  // bytes of the parts already sent
    for (const std::string_view part : parts) {
      if (skip >= part.size()) {
        skip -= part.size();
        continue;
      }
      iov[n++] = {const_cast<char*>(part.data() + skip), part.size() - skip};
      skip = 0;
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = n;
    const ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        epoll_event ev{};
        ev.events = EPOLLOUT;
        ev.data.fd = fd;
        ::epoll_ctl(ep_, EPOLL_CTL_MOD, fd, &ev);
        return true;
      }
      close_conn(fd, std::nullopt);
      return false;
    }
    c.sent += static_cast<std::size_t>(w);
  }
  if (c.close_after) {
    linger(fd, c);
    return false;
  }
  c.writing = false;
  c.body.reset();
  c.out_head.clear();
  c.out_tail.clear();
  c.waiting_since_ms = now;
  c.request_since_ms = now;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  ::epoll_ctl(ep_, EPOLL_CTL_MOD, fd, &ev);
  return true;
}

void HttpServer::Loop::close_conn(int fd, std::optional<HttpClose> why) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  if (why) count(*why);
  if (auto p = per_peer_.find(it->second.peer); p != per_peer_.end() && --p->second == 0) {
    per_peer_.erase(p);
  }
  ::epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
  conns_.erase(it);
  open.store(conns_.size());  // before the close: a client that sees it closed sees the count
  // With unread input this close() sends a reset: after a final response that is avoided by
  // lingering first (linger()); what is closed here at once was abandoned (a deadline, an
  // eviction, an error) or has nothing unread.
  ::close(fd);
}

void HttpServer::Loop::linger(int fd, Conn& c) {
  // Nothing more can arrive, or the socket cannot be half-closed: a plain close sends no reset.
  if (c.peer_done || ::shutdown(fd, SHUT_WR) != 0) {
    close_conn(fd, std::nullopt);
    return;
  }
  c.lingering = true;
  c.writing = false;
  c.got_bytes = false;
  c.body.reset();
  c.out_head.clear();
  c.out_tail.clear();
  c.in.clear();
  c.waiting_since_ms = monotonic_ms();
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  ::epoll_ctl(ep_, EPOLL_CTL_MOD, fd, &ev);
  on_event(fd, EPOLLIN, c.waiting_since_ms);  // what is already waiting; may close it
}

void HttpServer::Loop::sweep(std::uint64_t now) {
  std::vector<std::pair<int, std::optional<HttpClose>>> expired;
  for (const auto& [fd, c] : conns_) {
    if (c.lingering) {
      if (elapsed(now, c.waiting_since_ms) > kLingerMs) expired.emplace_back(fd, std::nullopt);
    } else if (c.writing) {
      if (elapsed(now, c.write_since_ms) > lim_.write_deadline_ms) {
        expired.emplace_back(fd, HttpClose::write_timeout);
      }
    } else if (c.served == 0 || c.got_bytes) {
      if (elapsed(now, c.request_since_ms) > lim_.head_deadline_ms) {
        expired.emplace_back(fd, HttpClose::deadline);
      }
    } else if (elapsed(now, c.waiting_since_ms) > lim_.idle_timeout_ms) {
      expired.emplace_back(fd, HttpClose::idle);
    }
  }
  for (const auto& [fd, why] : expired) close_conn(fd, why);
}

void HttpServer::Loop::render_failed(const char* what, const std::exception& e) {
  // Logged, never sent: the text may name internals. Once per 100 so a hostile process name
  // (or whatever broke rendering) cannot flood the log at scrape rate.
  if (render_errors_++ % 100 == 0) {
    spdlog::error("HTTP {}: rendering failed ({} so far): {}", what, render_errors_, e.what());
  }
}

std::shared_ptr<const std::string> HttpServer::Loop::metrics_body() {
  auto snap = store_.latest();
  if (snap != metrics_for_ || !metrics_) {
    try {
      std::string out = render_prometheus(*snap);
      metrics_ = text(std::move(out));
      metrics_for_ = snap;
    } catch (const std::exception& e) {
      render_failed("/metrics", e);
      return nullptr;
    }
  }
  return metrics_;
}

// The server's own counters: current at each request, so sent after the shared rendering.
std::string HttpServer::Loop::server_counters() const {
  std::string out;
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "# HELP zernel_scheduler_http_connections Open HTTP connections.\n"
                 "# TYPE zernel_scheduler_http_connections gauge\n"
                 "zernel_scheduler_http_connections {}\n"
                 "# HELP zernel_scheduler_http_connections_limit The HTTP connection cap.\n"
                 "# TYPE zernel_scheduler_http_connections_limit gauge\n"
                 "zernel_scheduler_http_connections_limit {}\n"
                 "# HELP zernel_scheduler_http_closed_total HTTP connections the server closed, "
                 "by reason.\n"
                 "# TYPE zernel_scheduler_http_closed_total counter\n",
                 open.load(), lim_.max_connections);
  for (std::size_t i = 0; i < closed.size(); ++i) {
    fmt::format_to(it, "zernel_scheduler_http_closed_total{{reason=\"{}\"}} {}\n",
                   close_reason_label(static_cast<HttpClose>(i)), closed[i].load());
  }
  return out;
}

std::shared_ptr<const std::string> HttpServer::Loop::status_body() {
  auto snap = store_.latest();
  if (snap == status_for_ && status_) return status_;
  try {
    // Invalid UTF-8 (a process name is any bytes) becomes U+FFFD instead of an exception.
    std::string out =
        status_json(*snap).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    out += '\n';
    status_ = text(std::move(out));
    status_for_ = snap;
  } catch (const std::exception& e) {
    render_failed("/status", e);
    return nullptr;
  }
  return status_;
}

// ---- HttpServer ----

HttpServer::HttpServer(const SnapshotStore& store, HttpLimits limits)
    : store_(store), limits_(limits) {
  limits_.max_connections = std::max<std::uint32_t>(limits_.max_connections, 1);
  limits_.max_per_peer =
      std::clamp<std::uint32_t>(limits_.max_per_peer, 1, limits_.max_connections);
  limits_.max_head_bytes = std::max<std::uint32_t>(limits_.max_head_bytes, 256);
}

HttpServer::~HttpServer() { stop(); }

Result<void> HttpServer::start(const std::string& address, std::uint16_t port) {
  if (loop_) return Error(EBUSY, "HTTP server already started");
  const std::string where = "HTTP: cannot listen on " + address + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* res = nullptr;
  if (::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 ||
      res == nullptr) {
    return Error(EINVAL, where + " (not an IP address)");
  }
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(res);
    return errno_error(where + ": socket");
  }
  // SO_REUSEADDR only, never SO_REUSEPORT: that would let a second daemon bind the same port and
  // silently take half of the scrapes.
  int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  // The kernel hands over a connection when its first data arrives (or after a few seconds):
  // a scraper's request is then there at accept and served at once, and connections that never
  // send wait in the kernel's queue instead of in the table, where they could evict a client
  // that connected but had not yet sent its request.
  int defer_s = static_cast<int>(std::max<std::uint32_t>(limits_.head_deadline_ms / 1000, 1));
  ::setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof(defer_s));
  const int b = ::bind(fd, res->ai_addr, res->ai_addrlen);
  const int bind_err = errno;
  ::freeaddrinfo(res);
  // A deep accept queue: during a connection flood a scraper's SYN must not wait for a
  // retransmission (1 s) because the queue overflowed between two passes of the loop.
  if (b != 0 || ::listen(fd, 1024) != 0) {
    const int err = b != 0 ? bind_err : errno;
    ::close(fd);
    return Error(err, where + " (address in use, or not an address of this machine: " +
                          std::strerror(err) + ")");
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  const int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ep < 0 || wake < 0) {
    const int err = errno;
    ::close(fd);
    if (ep >= 0) ::close(ep);
    if (wake >= 0) ::close(wake);
    return errno_error("HTTP: epoll/eventfd", err);
  }
  for (const int f : {fd, wake}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = f;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, f, &ev);
  }
  loop_ = std::make_unique<Loop>(store_, limits_, fd, ep, wake);
  thread_ = std::thread([l = loop_.get()] { l->run(); });
  return Ok{};
}

void HttpServer::stop() {
  if (!loop_) return;
  loop_->stopping.store(true);
  loop_->wake();
  if (thread_.joinable()) thread_.join();
  loop_.reset();
}

std::uint64_t HttpServer::requests() const { return loop_ ? loop_->requests.load() : 0; }

HttpStats HttpServer::stats() const {
  HttpStats s;
  if (!loop_) return s;
  s.requests = loop_->requests.load();
  s.open_connections = loop_->open.load();
  for (std::size_t i = 0; i < s.closed.size(); ++i) s.closed[i] = loop_->closed[i].load();
  return s;
}

}  // namespace zernel::telemetry
