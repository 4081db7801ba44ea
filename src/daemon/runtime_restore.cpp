// The runtime tenants' state file (daemon/runtime_state.hpp) kept by RuntimeControl: rewritten
// after each runtime change, applied once at start-up.

#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/runtime_control.hpp"

namespace zernel::daemon {

namespace {

bool defines(const std::vector<config::TenantConfig>& tenants, std::string_view id) {
  return std::any_of(tenants.begin(), tenants.end(),
                     [id](const config::TenantConfig& t) { return t.spec.id == id; });
}

// The assigned process itself, while it runs: the same pid and start time (a pid reused by a
// later process is not it).
std::optional<LiveProcess> same_process(ControlHost& host, const AssignedProcess& a) {
  std::optional<LiveProcess> p = host.live_process(a.pid);
  if (p && p->starttime_ticks != a.starttime_ticks) p.reset();
  return p;
}

}  // namespace

// Assigned processes that exited (or whose pid another process has now) and those whose tenant
// is gone are dropped here, so the file does not grow with every pid ever assigned.
void RuntimeControl::save_state() {
  if (opts_.state_path.empty()) return;
  std::erase_if(assigned_, [this](const auto& kv) {
    const AssignedProcess& a = kv.second;
    return !engine_.tenants().find(a.tenant) || !same_process(host_, a);
  });
  RuntimeState state;
  for (const config::TenantConfig& t : config_.tenants) {
    if (runtime_tenants_.contains(t.spec.id)) state.tenants.push_back(t.spec);
  }
  for (const auto& [pid, a] : assigned_) state.assigned.push_back(a);
  if (auto r = write_runtime_state(opts_.state_path, state); !r) {
    spdlog::error("runtime tenants: not saved ({}); they are lost at a restart",
                  r.error().message());
  }
}

void RuntimeControl::restore_saved_state() {
  if (opts_.state_path.empty()) return;
  const std::string& path = opts_.state_path;
  auto read = read_runtime_state(path);
  if (!read) {
    spdlog::error(
        "runtime tenants: {}; ignored: starting with the configuration's tenants only "
        "(the file is replaced at the next `tenant add`, `remove` or `assign`)",
        read.error().message());
    return;
  }
  if (!read->has_value()) {
    spdlog::info("runtime tenants: no {} (none saved)", path);
    return;
  }
  const RuntimeState& state = **read;
  std::size_t tenants = 0;
  std::size_t processes = 0;
  std::size_t skipped = 0;
  for (const policy::TenantSpec& spec : state.tenants) {
    if (defines(config_.tenants, spec.id)) {
      spdlog::info(
          "runtime tenants: \"{}\" is defined by the configuration, which wins; the "
          "saved one is dropped",
          spec.id);
      ++skipped;
      continue;
    }
    if (auto r = engine_.upsert_tenant(spec); !r) {
      spdlog::warn("runtime tenants: \"{}\" not restored: {}", spec.id, r.error().message());
      ++skipped;
      continue;
    }
    config_.tenants.push_back(config::TenantConfig{spec, {}});
    runtime_tenants_.insert(spec.id);
    ++tenants;
  }
  for (const AssignedProcess& a : state.assigned) {
    const std::optional<LiveProcess> p = same_process(host_, a);
    if (!p) {
      spdlog::debug("runtime tenants: pid {} (tenant \"{}\") exited; not restored", a.pid,
                    a.tenant);
      ++skipped;
      continue;
    }
    if (!engine_.tenants().find(a.tenant)) {
      spdlog::warn("runtime tenants: pid {} not restored: tenant \"{}\" is not registered", a.pid,
                   a.tenant);
      ++skipped;
      continue;
    }
    if (auto r = assign(a.pid, *p, a.tenant); !r) {
      spdlog::warn("runtime tenants: pid {} not restored to tenant \"{}\": {}", a.pid, a.tenant,
                   r.error().message());
      ++skipped;
      continue;
    }
    ++processes;
  }
  spdlog::info(
      "runtime tenants: restored {} tenant(s) and {} assigned process(es) from {}; "
      "skipped {}",
      tenants, processes, path, skipped);
}

}  // namespace zernel::daemon
