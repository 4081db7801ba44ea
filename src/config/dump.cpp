// Config -> TOML. Every key is written, defaults included, so the output is the whole effective
// configuration and a starting point for a config file. The key order is the one
// docs/configuration.md uses.

#include <fmt/format.h>

#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/format.hpp"

namespace zernel::config {
namespace {

using detail::format_float;
using detail::quote;

std::string flag(bool value) { return value ? "true" : "false"; }

template <typename T, typename Format>
std::string array(const std::vector<T>& items, Format format) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += format(items[i]);
  }
  return out + "]";
}

void general(std::string& out, const GeneralConfig& g) {
  out += "[general]\n";
  out += fmt::format("phase_eval_interval_ms = {}\n", g.phase_eval_interval_ms);
  out += fmt::format("gpu_poll_interval_ms = {}\n", g.gpu_poll_interval_ms);
  out += fmt::format("max_tracked_tasks = {}\n", g.max_tracked_tasks);
  out += fmt::format("log_level = {}\n", quote(g.log_level));
}

void phase_detection(std::string& out, const policy::PhaseDetectionOptions& p) {
  out += "\n[phase_detection]\n";
  out += fmt::format("mode = {}\n",
                     quote(p.mode == policy::PhaseSource::events ? "events" : "periodic"));
  out += fmt::format("event_sync_hysteresis_ns = {}\n", p.event_sync_hysteresis_ns);
  out += fmt::format("event_idle_hysteresis_ns = {}\n", p.event_idle_hysteresis_ns);
  out += fmt::format("event_optimizer_max_ns = {}\n", p.event_optimizer_max_ns);
  out += fmt::format("io_wait_threshold = {}\n", format_float(p.io_wait_threshold));
  out += fmt::format("optimizer_burst_max_ns = {}\n", p.optimizer_burst_max_ns);
  out += fmt::format("gpu_idle_threshold = {}\n", static_cast<unsigned>(p.gpu_idle_threshold));
  out += fmt::format("gpu_active_threshold = {}\n", static_cast<unsigned>(p.gpu_active_threshold));
  out += fmt::format("phase_stability_count = {}\n", p.phase_stability_count);
  out += fmt::format("nccl_detection_enabled = {}\n", flag(p.nccl_detection_enabled));
}

void numa(std::string& out, const policy::NumaOptions& n) {
  out += "\n[numa]\n";
  out += fmt::format("enabled = {}\n", flag(n.enabled));
  out += fmt::format("gpu_affinity = {}\n", flag(n.gpu_affinity));
  out += fmt::format("memory_affinity = {}\n", flag(n.memory_affinity));
}

void multi_tenant(std::string& out, const MultiTenantConfig& m) {
  out += "\n[multi_tenant]\n";
  out += fmt::format("enabled = {}\n", flag(m.enabled));
  out += fmt::format("default_priority_class = {}\n",
                     quote(policy::class_name(m.default_priority_class)));
  out += fmt::format("protected_comms = {}\n",
                     array(m.protected_comms, [](const std::string& s) { return quote(s); }));
  out += fmt::format("runtime_state_file = {}\n", quote(m.runtime_state_file));
}

void telemetry(std::string& out, const TelemetryConfig& t) {
  out += "\n[telemetry]\n";
  out += fmt::format("metrics_port = {}\n", t.metrics_port);
  out += fmt::format("metrics_address = {}\n", quote(t.metrics_address));
  out += fmt::format("push_interval_ms = {}\n", t.push_interval_ms);
}

void power(std::string& out, const PowerConfig& p) {
  out += "\n[power]\n";
  out += fmt::format("enabled = {}\n", flag(p.enabled));
  out += fmt::format("dry_run = {}\n", flag(p.dry_run));
  out += fmt::format("manage_gpu = {}\n", flag(p.manage_gpu));
  out += fmt::format("manage_cpu = {}\n", flag(p.manage_cpu));
}

void sched_ext(std::string& out, const SchedExtConfig& s) {
  out += "\n[sched_ext]\n";
  out += fmt::format("allow_unenforced_cpu_max = {}\n", flag(s.allow_unenforced_cpu_max));
}

void kubernetes(std::string& out, const KubernetesConfig& k) {
  out += "\n[kubernetes]\n";
  out += fmt::format("enabled = {}\n", flag(k.enabled));
  out += fmt::format("pod_resources_socket = {}\n", quote(k.pod_resources_socket));
  out += fmt::format("refresh_ms = {}\n", k.refresh_ms);
  out += fmt::format("timeout_ms = {}\n", k.timeout_ms);
  out += fmt::format("tenant_by = {}\n", quote(k.tenant_by == TenantBy::pod ? "pod" : "namespace"));
  std::string classes;
  for (const auto& [ns, c] : k.namespace_classes) {
    classes += fmt::format("{}{} = {}", classes.empty() ? "" : ", ", quote(ns),
                           quote(policy::class_name(c)));
  }
  out += fmt::format("namespace_classes = {{{}}}\n", classes.empty() ? "" : " " + classes + " ");
  out += fmt::format("max_pods = {}\n", k.max_pods);
  out += fmt::format("max_message_bytes = {}\n", k.max_message_bytes);
}

void tenant(std::string& out, const TenantConfig& t) {
  const auto strings = [](const std::vector<std::string>& v) {
    return array(v, [](const std::string& s) { return quote(s); });
  };
  out += "\n[[tenants]]\n";
  out += fmt::format("id = {}\n", quote(t.spec.id));
  out += fmt::format("gpus = {}\n", t.spec.gpus);
  out += fmt::format("class = {}\n", quote(policy::class_name(t.spec.priority_class)));
  if (t.spec.cpu_weight) {
    out += fmt::format("cpu_weight = {}\n", format_float(*t.spec.cpu_weight));
  } else {
    out += "# cpu_weight unset: the tenant's share follows its GPUs\n";
  }
  out += "[tenants.match]\n";
  out += fmt::format("comm = {}\n", strings(t.match.comm));
  out += fmt::format("cmdline = {}\n", strings(t.match.cmdline));
  out += fmt::format("cgroup = {}\n", strings(t.match.cgroup));
  out += fmt::format("uid = {}\n",
                     array(t.match.uid, [](std::uint32_t u) { return std::to_string(u); }));
}

constexpr std::string_view kNoTenantsComment =
    "\n# No tenants. Declare one per job or team sharing this server:\n"
    "# [[tenants]]\n"
    "# id = \"team-a\"\n"
    "# gpus = 4\n"
    "# class = \"training\"\n"
    "# [tenants.match]\n"
    "# cgroup = [\"/kubepods.slice/team-a\"]\n";

}  // namespace

std::string dump_config(const Config& config) {
  std::string out =
      "# zernel-scheduler effective configuration: every key with the value in force.\n"
      "# Reference: docs/configuration.md. Check a file with `zernel-scheduler check-config "
      "PATH`.\n\n";
  general(out, config.general);
  phase_detection(out, config.phase_detection);
  numa(out, config.numa);
  multi_tenant(out, config.multi_tenant);
  telemetry(out, config.telemetry);
  power(out, config.power);
  sched_ext(out, config.sched_ext);
  kubernetes(out, config.kubernetes);
  if (config.tenants.empty()) out += kNoTenantsComment;
  for (const TenantConfig& t : config.tenants) tenant(out, t);
  return out;
}

}  // namespace zernel::config
