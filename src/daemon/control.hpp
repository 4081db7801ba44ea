#pragma once
// Run-time control of the daemon through a Unix stream socket (docs/operations.md).
//
// Protocol: one connection per request. The client sends one JSON object on one line (at most
// kMaxRequestBytes, newline included; a request ended by EOF without a newline is accepted too),
// the daemon answers with one JSON object on one line and closes the connection:
//   {"op":"tenant_add","id":"team-a","gpus":4,"class":"training","cpu_weight":1.5}
//   {"op":"tenant_remove","id":"team-a"}
//   {"op":"tenant_list"}
//   {"op":"tenant_assign","pid":1234,"tenant":"team-a"}
//   {"op":"status"}
//   {"op":"trace","seconds":3}
// Replies: {"ok":true, ...op-specific fields} or {"ok":false,"error":"reason"}.
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
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.hpp"
#include "policy/tenant.hpp"
#include "sys/unique_fd.hpp"

namespace zernel::daemon {

inline constexpr std::string_view kDefaultControlSocket = "/run/zernel/scheduler.sock";
// Overrides the default socket path for both the daemon and the clients (not --socket).
inline constexpr std::string_view kControlSocketEnv = "ZERNEL_SCHEDULER_SOCKET";
inline constexpr std::size_t kMaxRequestBytes = 4096;
inline constexpr std::uint32_t kMaxPid = 4'194'304;

enum class ControlOp : std::uint8_t {
  tenant_add,
  tenant_remove,
  tenant_list,
  tenant_assign,
  status,
  trace,
};

std::string_view op_name(ControlOp op);

struct ControlRequest {
  ControlOp op = ControlOp::status;
  policy::TenantSpec tenant;  // tenant_add: the whole spec; tenant_remove: tenant.id
  std::uint32_t pid = 0;      // tenant_assign
  std::string assign_to;      // tenant_assign: the tenant id
  std::uint32_t seconds = 0;  // trace: kTraceMinSeconds..kTraceMaxSeconds

  bool operator==(const ControlRequest&) const = default;
};

// Parses and validates one request line (a trailing "\n" or "\r\n" is allowed). Pure. Rejects:
// more than kMaxRequestBytes, anything but one JSON object, a missing or unknown "op", unknown
// fields, wrong types, and values out of range (tenant fields by policy::validate_tenant, pid
// 1..kMaxPid, trace seconds 1..600). The error names the field.
Result<ControlRequest> parse_request(std::string_view line);

// The request as its JSON line (no newline); parse_request(request_line(r)) == r.
std::string request_line(const ControlRequest& r);

// Why `tenant assign` must not take this process, or nullopt when it may: pid 1, a kernel thread
// (PF_KTHREAD in /proc/PID/stat's flags, or a child of kthreadd: pid 2 or ppid 2 outside a pid
// namespace), the daemon itself (`self_pid`), or a comm matching one of `protected_comms` (globs,
// [multi_tenant] protected_comms). Renicing or pinning any of these harms the machine, not a job.
struct AssignTarget {
  std::uint32_t pid = 0;
  std::uint32_t ppid = 0;
  std::uint32_t flags = 0;  // /proc/PID/stat field 9
  std::string comm;
};
std::optional<std::string> assign_refusal(const AssignTarget& t, std::uint32_t self_pid,
                                          bool host_pid_namespace,
                                          const std::vector<std::string>& protected_comms);

nlohmann::json ok_reply();
nlohmann::json error_reply(std::string_view message);

// The socket path: `explicit_path` when set, else $ZERNEL_SCHEDULER_SOCKET when non-empty, else
// kDefaultControlSocket.
std::string resolve_control_socket(const std::optional<std::string>& explicit_path);

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
