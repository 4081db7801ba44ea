#pragma once
// A daemon for RuntimeControl's tests: a real (pure) engine and configuration, and a ControlHost
// whose processes are a map and which records what it was asked to do.

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "daemon/runtime_control.hpp"
#include "policy/engine.hpp"
#include "policy/topology.hpp"

namespace zernel::daemon::test {

inline constexpr std::uint32_t kSelfPid = 900;

class FakeHost final : public ControlHost {
 public:
  std::optional<LiveProcess> live_process(std::uint32_t pid) override {
    auto it = processes.find(pid);
    if (it == processes.end()) return std::nullopt;
    return it->second;
  }
  void drop_if_replaced(std::uint32_t pid, std::uint64_t starttime_ticks) override {
    replaced_checks.emplace_back(pid, starttime_ticks);
  }
  void track_assigned(std::uint32_t pid, std::uint64_t starttime_ticks) override {
    tracked.emplace_back(pid, starttime_ticks);
  }
  telemetry::Snapshot status_snapshot() override {
    telemetry::Snapshot s;
    s.backend = "fake";
    return s;
  }

  void add_process(std::uint32_t pid, std::string comm, std::uint64_t start = 1000,
                   std::uint32_t ppid = 100) {
    processes[pid] = LiveProcess{ppid, 0, std::move(comm), start};
  }

  std::map<std::uint32_t, LiveProcess> processes;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> replaced_checks;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> tracked;
};

inline config::TenantConfig tenant(std::string id, std::uint32_t gpus,
                                   std::vector<std::string> comm = {}) {
  config::TenantConfig t;
  t.spec.id = std::move(id);
  t.spec.gpus = gpus;
  t.match.comm = std::move(comm);
  return t;
}

// The running daemon's configuration and engine, with `initial` tenants registered as
// Daemon::create registers them; with a `state_path`, runtime changes are saved there
// (restore_saved_state() is the test's to call, once the fake processes are in place).
struct RunningDaemon {
  explicit RunningDaemon(std::vector<config::TenantConfig> initial = {},
                         std::string state_path = {})
      : config(with_tenants(std::move(initial))),
        engine(config::engine_options(config), policy::Topology::single_node(4)),
        control(config, engine, host,
                RuntimeControlOptions{kSelfPid, true, std::move(state_path)}) {
    for (const config::TenantConfig& t : config.tenants) (void)engine.upsert_tenant(t.spec);
  }

  [[nodiscard]] std::vector<std::string> registered() const {
    std::vector<std::string> ids;
    for (std::uint16_t slot : engine.tenants().slots())
      ids.push_back(engine.tenants().spec(slot).id);
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  static config::Config with_tenants(std::vector<config::TenantConfig> t) {
    config::Config c;
    c.tenants = std::move(t);
    return c;
  }

  config::Config config;
  policy::Engine engine;
  FakeHost host;
  RuntimeControl control;
};

}  // namespace zernel::daemon::test
