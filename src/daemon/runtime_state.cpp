#include "daemon/runtime_state.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "daemon/control.hpp"
#include "sys/trusted_file.hpp"

namespace zernel::daemon {

namespace {

using nlohmann::json;

Error bad_state(const std::string& msg) { return Error(EINVAL, msg); }

// The entry as the control request it was (`op` added), checked by parse_request.
Result<ControlRequest> as_request(const json& entry, const char* op, const std::string& where) {
  if (!entry.is_object()) return bad_state(where + ": must be a JSON object");
  json j = entry;
  if (auto it = j.find("op"); it != j.end() && *it != op) {
    return bad_state(where + ": \"op\" must be \"" + op + "\"");
  }
  j["op"] = op;
  auto r = parse_request(j.dump());
  if (!r) return r.error().context(where);
  return r;
}

}  // namespace

std::string runtime_state_text(const RuntimeState& state) {
  json tenants = json::array();
  for (const policy::TenantSpec& t : state.tenants) {
    ControlRequest r;
    r.op = ControlOp::tenant_add;
    r.tenant = t;
    tenants.push_back(json::parse(request_line(r)));
  }
  json assigned = json::array();
  for (const AssignedProcess& a : state.assigned) {
    assigned.push_back({{"pid", a.pid}, {"start", a.starttime_ticks}, {"tenant", a.tenant}});
  }
  const json j{{"version", kRuntimeStateVersion}, {"tenants", tenants}, {"assigned", assigned}};
  return j.dump() + "\n";
}

Result<RuntimeState> parse_runtime_state(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return bad_state("not valid JSON (truncated?)");
  if (!j.is_object()) return bad_state("must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "version" && key != "tenants" && key != "assigned") {
      return bad_state("unknown field \"" + key + "\"");
    }
  }
  const auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || *version != kRuntimeStateVersion) {
    return bad_state(fmt::format("\"version\" must be {}", kRuntimeStateVersion));
  }
  RuntimeState state;
  if (auto it = j.find("tenants"); it != j.end()) {
    if (!it->is_array()) return bad_state("\"tenants\" must be an array");
    if (it->size() > policy::kMaxTenants) {
      return bad_state(fmt::format("more than {} tenants", policy::kMaxTenants));
    }
    for (std::size_t i = 0; i < it->size(); ++i) {
      auto r = as_request((*it)[i], "tenant_add", fmt::format("tenants[{}]", i));
      if (!r) return r.error();
      state.tenants.push_back(std::move(r->tenant));
    }
  }
  if (auto it = j.find("assigned"); it != j.end()) {
    if (!it->is_array()) return bad_state("\"assigned\" must be an array");
    for (std::size_t i = 0; i < it->size(); ++i) {
      const std::string where = fmt::format("assigned[{}]", i);
      json entry = (*it)[i];
      if (!entry.is_object()) return bad_state(where + ": must be a JSON object");
      const auto start = entry.find("start");
      if (start == entry.end() || !start->is_number_unsigned()) {
        return bad_state(where + ": \"start\" must be a whole number (the process's start time)");
      }
      const std::uint64_t ticks = start->get<std::uint64_t>();
      entry.erase("start");
      auto r = as_request(entry, "tenant_assign", where);
      if (!r) return r.error();
      state.assigned.push_back(AssignedProcess{r->pid, ticks, std::move(r->assign_to)});
    }
  }
  return state;
}

Result<std::optional<RuntimeState>> read_runtime_state(const std::string& path) {
  auto file = sys::read_trusted_file(path, kMaxRuntimeStateBytes);
  if (!file) return file.error();
  if (!file->has_value()) return std::optional<RuntimeState>{};
  auto state = parse_runtime_state((*file)->text);
  if (!state) return state.error().context(path);
  return std::optional<RuntimeState>(std::move(*state));
}

Result<void> write_runtime_state(const std::string& path, const RuntimeState& state) {
  return sys::write_trusted_file(path, runtime_state_text(state));
}

}  // namespace zernel::daemon
