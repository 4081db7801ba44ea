// The control socket's protocol (daemon/control_protocol.hpp): parsing and writing requests,
// replies, the refusals of `tenant assign`, the socket's path and address.
#include "daemon/control_protocol.hpp"

#include <fnmatch.h>
#include <sys/socket.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "sys/procfs.hpp"
#include "telemetry/trace.hpp"

namespace zernel::daemon {
namespace {

using nlohmann::json;

Error bad_request(const std::string& msg) { return Error(EINVAL, "request: " + msg); }

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
  if (it == obj.end()) return bad_request(std::string("missing field \"") + key + "\"");
  if (!it->is_string()) {
    return bad_request(std::string("field \"") + key + "\": must be a string, got " + type_of(*it));
  }
  return it->get<std::string>();
}

// An integer in [lo, hi]; floats (even 2.0), booleans and strings are rejected.
Result<std::uint64_t> get_uint(const json& obj, const char* key, std::uint64_t lo,
                               std::uint64_t hi) {
  auto it = obj.find(key);
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  if (it == obj.end()) return bad_request(std::string("missing field \"") + key + "\"");
  if (!it->is_number_integer()) {
    return bad_request(std::string("field \"") + key + "\": must be an integer from " + range +
                       ", got " + (it->is_number() ? it->dump() : type_of(*it)));
  }
  if (it->is_number_unsigned()) {
    const auto v = it->get<std::uint64_t>();
    if (v >= lo && v <= hi) return v;
  }
  return bad_request(std::string("field \"") + key + "\": must be an integer from " + range +
                     ", got " + it->dump());
}

Result<void> only_fields(const json& obj, std::initializer_list<std::string_view> allowed,
                         std::string_view op) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string list;
      for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      return bad_request("unknown field \"" + key + "\" for op \"" + std::string(op) +
                         "\" (allowed: " + list + ")");
    }
  }
  return Ok{};
}

}  // namespace

std::string_view op_name(ControlOp op) {
  switch (op) {
    case ControlOp::tenant_add:
      return "tenant_add";
    case ControlOp::tenant_remove:
      return "tenant_remove";
    case ControlOp::tenant_list:
      return "tenant_list";
    case ControlOp::tenant_assign:
      return "tenant_assign";
    case ControlOp::status:
      return "status";
    case ControlOp::trace:
      return "trace";
  }
  return "status";
}

Result<ControlRequest> parse_request(std::string_view line) {
  if (line.size() > kMaxRequestBytes) {
    return bad_request("larger than " + std::to_string(kMaxRequestBytes) + " bytes (" +
                       std::to_string(line.size()) + ")");
  }
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find('\n') != std::string_view::npos) return bad_request("more than one line");
  if (line.find('\0') != std::string_view::npos) return bad_request("contains a NUL byte");
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded()) return bad_request("not valid JSON");
  if (!j.is_object()) return bad_request("must be a JSON object, got " + type_of(j));

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
        return bad_request("field \"cpu_weight\": must be a number, got " + type_of(*it));
      }
      const double w = it->get<double>();
      if (!std::isfinite(w) || w < double{policy::kMinExplicitWeight} ||
          w > double{policy::kMaxExplicitWeight}) {
        return bad_request("field \"cpu_weight\": must be between 0.01 and 100, got " + it->dump());
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
  return bad_request(
      "unknown op \"" + op +
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
    case ControlOp::tenant_remove:
      j["id"] = r.tenant.id;
      break;
    case ControlOp::tenant_assign:
      j["pid"] = r.pid;
      j["tenant"] = r.assign_to;
      break;
    case ControlOp::trace:
      j["seconds"] = r.seconds;
      break;
    case ControlOp::tenant_list:
    case ControlOp::status:
      break;
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

}  // namespace zernel::daemon
