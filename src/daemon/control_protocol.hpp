#pragma once
// The control socket's protocol (daemon/control.hpp has its server and its client).
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

#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.hpp"
#include "policy/tenant.hpp"

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

// The Unix socket address of `path`; an empty path, or one longer than sun_path holds, is an
// error naming it.
Result<sockaddr_un> unix_address(const std::string& path);

}  // namespace zernel::daemon
