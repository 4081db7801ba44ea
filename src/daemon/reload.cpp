// SIGHUP: the configuration file re-read and applied to the running daemon (RuntimeControl).
// Checked whole first (tenant count with the runtime tenants, every tenant spec), then applied;
// so a file that fails changes nothing.

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/log.hpp"
#include "daemon/runtime_control.hpp"

namespace zernel::daemon {

namespace {

bool defines(const config::Config& c, std::string_view id) {
  return std::any_of(c.tenants.begin(), c.tenants.end(),
                     [id](const config::TenantConfig& t) { return t.spec.id == id; });
}

Result<void> check_tenants(const std::vector<config::TenantConfig>& tenants,
                           std::string_view source) {
  if (tenants.size() > policy::kMaxTenants) {
    return Error(std::string(source) + ": with the tenants added at run time, more than " +
                 std::to_string(policy::kMaxTenants) + " tenants");
  }
  for (const config::TenantConfig& t : tenants) {
    if (auto r = policy::validate_tenant(t.spec); !r) {
      return r.error().context(std::string(source) + ": tenant \"" + t.spec.id + "\"");
    }
  }
  return Ok{};
}

void log_restart_needed(const config::Config& cur, const config::Config& next,
                        std::string_view source) {
  const std::vector<std::string> restart = settings_needing_restart(cur, next);
  if (restart.empty()) return;
  std::string list;
  for (const std::string& r : restart) list += (list.empty() ? "" : ", ") + r;
  spdlog::warn(
      "{}: changed settings that take effect only after a restart (still running "
      "with the old values): {}",
      source, list);
}

}  // namespace

std::vector<std::string> settings_needing_restart(const config::Config& cur,
                                                  const config::Config& next) {
  std::vector<std::string> out;
  auto note = [&out](bool changed, const char* name) {
    if (changed) out.emplace_back(name);
  };
  note(next.general.phase_eval_interval_ms != cur.general.phase_eval_interval_ms,
       "[general] phase_eval_interval_ms");
  note(next.general.gpu_poll_interval_ms != cur.general.gpu_poll_interval_ms,
       "[general] gpu_poll_interval_ms");
  note(next.general.max_tracked_tasks != cur.general.max_tracked_tasks,
       "[general] max_tracked_tasks");
  note(next.phase_detection != cur.phase_detection, "[phase_detection]");
  note(next.numa != cur.numa, "[numa]");
  note(next.multi_tenant.enabled != cur.multi_tenant.enabled, "[multi_tenant] enabled");
  note(next.multi_tenant.runtime_state_file != cur.multi_tenant.runtime_state_file,
       "[multi_tenant] runtime_state_file");
  note(next.telemetry != cur.telemetry, "[telemetry]");
  note(next.power != cur.power, "[power]");
  note(next.sched_ext != cur.sched_ext, "[sched_ext]");
  note(next.kubernetes != cur.kubernetes, "[kubernetes]");
  return out;
}

Result<void> RuntimeControl::reload_file(const std::string& path, bool missing_ok) {
  if (path.empty()) return Error("no configuration file to reload");
  auto loaded = config::load_config_file(path, missing_ok);
  if (!loaded) return loaded.error();
  for (const std::string& w : loaded->warnings) spdlog::warn("{}", w);
  return reload(loaded->config, path);
}

// The file's tenants, plus those added with `tenant add` and those from the kubelet whose ids the
// file does not define.
std::vector<config::TenantConfig> RuntimeControl::tenants_after_reload(
    const config::Config& next) const {
  std::vector<config::TenantConfig> tenants = next.tenants;
  for (const config::TenantConfig& t : config_.tenants) {
    if ((runtime_tenants_.contains(t.spec.id) || kubelet_tenants_.contains(t.spec.id)) &&
        !defines(next, t.spec.id)) {
      tenants.push_back(t);
    }
  }
  return tenants;
}

// Removes first, so the registry never holds more than the final count; check_tenants has
// validated every spec and the count, so no upsert can fail (the registry's only refusals).
void RuntimeControl::apply_tenants(std::vector<config::TenantConfig> next) {
  std::vector<std::string> gone;
  for (std::uint16_t slot : engine_.tenants().slots()) {
    const std::string& id = engine_.tenants().spec(slot).id;
    if (std::none_of(next.begin(), next.end(),
                     [&id](const config::TenantConfig& t) { return t.spec.id == id; })) {
      gone.push_back(id);
    }
  }
  for (const std::string& id : gone) engine_.remove_tenant(id);
  for (const config::TenantConfig& t : next) {
    if (auto r = engine_.upsert_tenant(t.spec); !r) {
      spdlog::error("BUG: reload: tenant \"{}\" passed the checks but: {}", t.spec.id,
                    r.error().message());
    }
  }
  config_.tenants = std::move(next);
}

Result<void> RuntimeControl::reload(const config::Config& next, std::string_view source) {
  std::vector<config::TenantConfig> tenants = tenants_after_reload(next);
  if (auto r = check_tenants(tenants, source); !r) return r.error();

  const std::size_t before = config_.tenants.size();
  apply_tenants(std::move(tenants));
  const std::size_t runtime_before = runtime_tenants_.size();
  std::erase_if(runtime_tenants_, [&next](const std::string& id) { return defines(next, id); });
  if (runtime_tenants_.size() != runtime_before) save_state();
  std::erase_if(kubelet_tenants_, [&next](const std::string& id) { return defines(next, id); });
  config_.multi_tenant.default_priority_class = next.multi_tenant.default_priority_class;
  config_.multi_tenant.protected_comms = next.multi_tenant.protected_comms;
  if (next.general.log_level != config_.general.log_level) {
    if (auto level = log::parse_level(next.general.log_level)) spdlog::set_level(*level);
    config_.general.log_level = next.general.log_level;
  }
  spdlog::info("reloaded {}: {} tenant(s) (was {}); applied: tenants, match rules, log_level",
               source, config_.tenants.size(), before);
  log_restart_needed(config_, next, source);
  return Ok{};
}

}  // namespace zernel::daemon
