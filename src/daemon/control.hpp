#pragma once
// Run-time control of the daemon through a Unix stream socket (docs/operations.md).
//
// The protocol (requests, replies, the socket path) is daemon/control_protocol.hpp's; this is its
// server, which the daemon runs on its loop, and its client, which the CLI uses.
//
// "trace" is answered when its recording ends, `seconds` later (telemetry/trace.hpp): the
// handler defers it (returns nullopt) and the daemon answers it with ControlServer::answer from
// its loop. Meanwhile the connection is only watched for a hang-up: a client that goes away is
// closed at once (waiting() turns false, and the daemon drops the recording). A waiting client
// is never the one evicted for a new client, and is closed kMaxDeferNs after its request if no
// answer came.
//
// Only root may talk to the daemon: the server reads the peer's credentials (SO_PEERCRED) and
// refuses any other uid with an error reply naming it, whatever the socket file's mode; a refused
// peer is closed at once and never holds one of the kMaxClients slots. When every slot is taken,
// a new (root) client takes the slot of the oldest one that has not been answered yet, so that
// idle clients cannot lock root out; every client is closed kClientTimeoutNs after it connected,
// whether or not anything else wakes the server (expire(), every tick). Requests
// run on the daemon's loop thread (the engine is single-threaded); a request that fails changes
// nothing.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.hpp"
#include "daemon/control_protocol.hpp"
#include "sys/unique_fd.hpp"

namespace zernel::daemon {

class ControlServer {
 public:
  // Identifies one client for a deferred answer; never reused.
  using Ticket = std::uint64_t;
  // Runs one valid request and returns its reply (with "ok"); called on the loop thread. nullopt
  // defers it: the client waits for answer(ticket, reply).
  using Handler =
      std::function<std::optional<nlohmann::json>(const ControlRequest&, Ticket ticket)>;

  // Creates the directory (0700) when missing and listens at `path` (mode 0600). A stale socket
  // file (nothing accepts on it) is replaced; a live one, or a file that is not a socket, is an
  // error.
  static Result<std::unique_ptr<ControlServer>> listen(const std::string& path);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Readable (poll/epoll) when service() has something to do.
  [[nodiscard]] int fd() const { return epoll_fd_.get(); }
  [[nodiscard]] const std::string& path() const { return path_; }

  // Non-blocking: accepts, reads, runs complete requests through `handler`, writes replies, and
  // closes connections idle for more than kClientTimeoutNs.
  void service(const Handler& handler, std::uint64_t now_ns);
  // Closes connections older than kClientTimeoutNs. The daemon calls it every tick, so a client
  // that connects and sends nothing is closed on time even when nothing else wakes the server.
  void expire(std::uint64_t now_ns);

  // Whether the client of a deferred request is still connected and waiting for its answer.
  [[nodiscard]] bool waiting(Ticket ticket) const;
  // Sends the answer of a deferred request (nothing when its client is gone).
  void answer(Ticket ticket, const nlohmann::json& reply_json, std::uint64_t now_ns);

  [[nodiscard]] std::uint64_t requests() const { return requests_; }
  [[nodiscard]] std::uint64_t refused() const { return refused_; }

  static constexpr std::uint64_t kClientTimeoutNs = 5'000'000'000ULL;
  static constexpr std::size_t kMaxClients = 32;
  // The longest a deferred request waits for its answer: the longest trace and a margin.
  static constexpr std::uint64_t kMaxDeferNs = 660'000'000'000ULL;

 private:
  struct Client {
    sys::UniqueFd fd;
    std::uint64_t since_ns = 0;
    std::uint64_t deadline_ns = 0;  // closed after this (since_ns + kClientTimeoutNs at first)
    Ticket ticket = 0;
    std::string in;
    std::string out;
    std::size_t written = 0;
    bool replying = false;
    bool draining = false;  // reply sent: discard input until the peer's EOF, then close
    bool waiting = false;   // deferred: watched for a hang-up only until answer()
  };
  ControlServer(std::string path, sys::UniqueFd listen_fd, sys::UniqueFd epoll_fd);
  void accept_all(std::uint64_t now_ns);
  void on_readable(Client& c, const Handler& handler, std::uint64_t now_ns);
  void on_writable(Client& c);
  void reply(Client& c, const nlohmann::json& j);
  void close_client(int fd);

  std::string path_;
  sys::UniqueFd listen_fd_;
  sys::UniqueFd epoll_fd_;
  std::vector<Client> clients_;
  std::uint64_t requests_ = 0;
  std::uint64_t refused_ = 0;
  Ticket next_ticket_ = 1;
};

// Client side: sends one request and returns the daemon's reply. A daemon that cannot be reached
// is the error "cannot reach the daemon at PATH: <reason>".
Result<nlohmann::json> control_call(const std::string& path, const std::string& request_line,
                                    int timeout_ms = 5000);

}  // namespace zernel::daemon
