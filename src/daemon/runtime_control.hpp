#pragma once
// Changes to the running daemon, made on its loop thread between ticks (the engine stays
// single-threaded): the control socket's requests (daemon/control.hpp) and SIGHUP's reload of
// the configuration file.
//
// Both change the engine's tenants and the daemon's configuration (its tenant list with the
// match rules discovery reads, protected_comms, the default class, log_level) and nothing else.
// A request or a reload that fails changes nothing: each is checked whole before any of it is
// applied. Tenants added with `tenant add` are the "runtime" tenants: a reload keeps them unless
// the file now defines their id.
//
// With a state file (RuntimeControlOptions::state_path), the runtime tenants and the processes
// assigned with `tenant assign` survive a restart: the file is rewritten after every change
// (add, remove, assign, and a reload that drops a runtime tenant) and restore_saved_state()
// applies it at start-up, after the configuration's tenants are registered. The configuration
// wins: a saved tenant whose id the file defines is not restored (as a reload drops it).
//
// What the daemon itself must do for a request (read a process, track a process assigned to a
// tenant, take a status snapshot) goes through ControlHost, so tests run the requests on a fake.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/result.hpp"
#include "config/config.hpp"
#include "daemon/control.hpp"
#include "daemon/runtime_state.hpp"
#include "policy/engine.hpp"
#include "telemetry/snapshot.hpp"

namespace zernel::daemon {

// A live process as /proc/PID/stat shows it.
struct LiveProcess {
  std::uint32_t ppid = 0;
  std::uint32_t flags = 0;  // PF_*
  std::string comm;
  std::uint64_t starttime_ticks = 0;  // with the pid, the process's identity
};

class ControlHost {
 public:
  virtual ~ControlHost() = default;
  // The process with this pid; nullopt when there is none (or only its zombie).
  virtual std::optional<LiveProcess> live_process(std::uint32_t pid) = 0;
  // Before `tenant assign`: a tracked process with this pid but another start time is gone (a new
  // one has the pid now): stop tracking it, so the new one does not inherit its state.
  virtual void drop_if_replaced(std::uint32_t pid, std::uint64_t starttime_ticks) = 0;
  // After `tenant assign`: the engine now tracks pid; sample it each tick and drop it when it
  // exits (nothing to do when it is tracked already).
  virtual void track_assigned(std::uint32_t pid, std::uint64_t starttime_ticks) = 0;
  // The daemon's state now, as /status shows it.
  virtual telemetry::Snapshot status_snapshot() = 0;
};

struct RuntimeControlOptions {
  std::uint32_t self_pid = 0;      // refused by `tenant assign`
  bool host_pid_namespace = true;  // see assign_refusal
  std::string state_path;          // runtime_state.hpp; "" keeps runtime changes in memory only
};

class RuntimeControl {
 public:
  // `config` and `engine` are the running daemon's; both outlive this object.
  RuntimeControl(config::Config& config, policy::Engine& engine, ControlHost& host,
                 RuntimeControlOptions opts);

  // Runs one control request; the reply has "ok" (and "error" when refused).
  nlohmann::json handle(const ControlRequest& req);

  // SIGHUP: re-reads `path` and applies it (reload()). An empty path, an unreadable or invalid
  // file is the error and changes nothing.
  Result<void> reload_file(const std::string& path, bool missing_ok);
  // Applies what can change at run time from `next` (tenants and their match rules,
  // protected_comms, default_priority_class, log_level), all or nothing; other changed settings
  // are logged as taking effect only after a restart. `source` names the file in messages.
  Result<void> reload(const config::Config& next, std::string_view source);

  // Start-up: the state file's tenants (those the configuration does not define) and its
  // assigned processes that still run (same pid and start time, a registered tenant, not
  // refused by assign_refusal). A missing file is nothing to restore; an unreadable, forged or
  // invalid one is logged and ignored (the daemon starts with its configuration's tenants).
  void restore_saved_state();

  // Tenants from the kubelet (config/pod_tenants.hpp), replacing the previous kubelet tenants:
  // new ones are added, changed ones updated, those of vanished pods removed. A kubelet tenant
  // whose id the file or `tenant add` has is skipped (logged once): the file wins, then the
  // runtime tenants, then the kubelet. Past kMaxTenants in all, the rest are skipped and logged.
  // Returns whether anything changed.
  bool apply_kubelet_tenants(std::vector<config::TenantConfig> next);
  [[nodiscard]] const std::unordered_set<std::string>& kubelet_tenants() const {
    return kubelet_tenants_;
  }

  // The registered tenants as the control socket lists them.
  [[nodiscard]] nlohmann::json tenant_list() const;
  [[nodiscard]] const std::unordered_set<std::string>& runtime_tenants() const {
    return runtime_tenants_;
  }

 private:
  nlohmann::json tenant_add(const policy::TenantSpec& spec);
  nlohmann::json tenant_remove(const std::string& id);
  nlohmann::json tenant_assign(std::uint32_t pid, const std::string& tenant);
  nlohmann::json status();
  [[nodiscard]] std::vector<config::TenantConfig> tenants_after_reload(
      const config::Config& next) const;
  void apply_tenants(std::vector<config::TenantConfig> next);
  // tenant_assign's checks and effect, for a process whose identity is `p`; the error is the
  // reply's message.
  Result<void> assign(std::uint32_t pid, const LiveProcess& p, const std::string& tenant);
  // Rewrites the state file (nothing without one); a failure is logged, the change stays made.
  void save_state();

  config::Config& config_;
  policy::Engine& engine_;
  ControlHost& host_;
  RuntimeControlOptions opts_;
  std::unordered_set<std::string> runtime_tenants_;    // added by `tenant add`, kept on reload
  std::map<std::uint32_t, AssignedProcess> assigned_;  // by `tenant assign`, for the state file
  std::unordered_set<std::string> kubelet_tenants_;    // from pod-resources, kept on reload
  std::unordered_set<std::string> kubelet_conflicts_;  // skipped ids, logged once each
};

// The settings that differ between `cur` and `next` and take effect only after a restart (fixed
// when the engine, the loop and the HTTP server were built), named as in the file:
// "[general] phase_eval_interval_ms", "[numa]", ...
std::vector<std::string> settings_needing_restart(const config::Config& cur,
                                                  const config::Config& next);

}  // namespace zernel::daemon
