// The daemon's telemetry: the HTTP server of /metrics and /status it opens, the snapshot it
// publishes there every push_interval_ms, and its part of /metrics: what the engine does not know
// (telemetry/snapshot.hpp fills the rest). On the loop thread.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "common/fd_budget.hpp"
#include "daemon/daemon.hpp"
#include "intf.h"

namespace zernel::daemon {

namespace {

// GPU series are bounded: NVML lists at most this many on one node in practice (8 to 16 today);
// further GPUs are left out of /metrics.
constexpr std::size_t kMaxGpuSeries = 64;

// Every exit kind the kernel may report (bpf/intf.h) and "UNKNOWN", so that each ejection series
// exists at 0 from the start and an alert's increase() sees the first ejection.
constexpr std::string_view kExitKinds[] = {
#define ZERNEL_EXIT_KIND_NAME(NAME, value) #NAME,
    ZERNEL_EXIT_KINDS(ZERNEL_EXIT_KIND_NAME)
#undef ZERNEL_EXIT_KIND_NAME
        "UNKNOWN",
};

}  // namespace

std::string metrics_node_name() {
  if (const char* env = std::getenv("NODE_NAME"); env != nullptr && *env != '\0') return env;
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) == 0 && buf[0] != '\0') return buf;
  return "unknown";
}

void Daemon::account_tenant_cpu(std::uint32_t pid, std::optional<std::uint64_t> cpu_time_ns) {
  if (!cpu_time_ns || *cpu_time_ns == 0) return;
  const policy::TaskState* t = engine_.task(pid);
  if (t == nullptr || !engine_.tenants().valid(t->tenant)) return;
  const std::string& id = engine_.tenants().spec(t->tenant).id;
  if (auto it = tenant_cpu_ns_.find(id); it != tenant_cpu_ns_.end()) {
    it->second += *cpu_time_ns;
  } else {
    tenant_cpu_ns_.emplace(id, *cpu_time_ns);
  }
}

void Daemon::add_metrics(telemetry::Snapshot& s) {
  s.hostname = node_name_;

  if (auto c = backend_.counters()) {
    for (const auto& [name, value] : *c) s.backend_counters.push_back({name, value});
    for (const std::string& line : table_full_.check(s.backend_counters)) spdlog::warn("{}", line);
  } else {
    count_error("backend");
    spdlog::debug("backend counters: {}", c.error().message());
  }
  for (std::string_view kind : kExitKinds) {
    const auto it = backend_.ejections().find(kind);
    s.backend_ejections.push_back(
        {std::string(kind), it == backend_.ejections().end() ? 0 : it->second});
  }
  s.discovery_runs = {{"proc_scan", stats_.scans},
                      {"proc_update", stats_.updates},
                      {"nvml_list", stats_.nvml_lists}};
  s.backend_restarts = backend_.restarts();
  s.backend_restarts_failed = backend_.failed_restarts();
#ifdef ZERNEL_HAVE_PROBES
  if (probes_) {
    const collect::ProbeStats p = probes_->stats();
    s.probe_counters = {{"sync_enter", p.sync_enter},
                        {"sync_return", p.sync_return},
                        {"sync_nested", p.sync_nested},
                        {"return_miss", p.return_miss},
                        {"depth_overflow", p.depth_overflow},
                        {"thread_map_full", p.thread_map_full},
                        {"proc_map_full", p.proc_map_full},
                        {"exit_in_sync", p.exit_in_sync},
                        {"futex_waits", p.futex_waits},
                        {"futex_untracked", p.futex_untracked},
                        {"phase_events", p.phase_events},
                        {"phase_events_lost", p.phase_events_lost},
                        {"phase_events_recovered", p.phase_recovered},
                        {"phase_unsent_failed", p.unsent_failed},
                        {"phase_no_storage", p.phase_no_storage},
                        {"nccl_checks", p.nccl_checks},
                        {"nccl_checks_missed", p.nccl_missed},
                        {"wake_unseen", p.wake_unseen},
                        {"sync_kicks", p.sync_kicks}};
    for (const std::string& line : table_full_.check(s.probe_counters)) spdlog::warn("{}", line);
    if (phase_events_on_)
      s.switch_rules_in = probes_->switch_carried() ? "sched_ext" : "tracepoint";
  }
#endif
  add_tenant_cpu(s);
  add_gpus(s);
}

void Daemon::add_tenant_cpu(telemetry::Snapshot& s) {
  // Tenants removed since the last publish: their totals go (a tenant added again later starts
  // from zero, which Prometheus reads as a counter reset).
  std::erase_if(tenant_cpu_ns_, [&](const auto& e) {
    return std::none_of(s.tenants.begin(), s.tenants.end(),
                        [&](const telemetry::TenantView& t) { return t.id == e.first; });
  });
  std::uint64_t interval_total = 0;
  for (const auto& [id, ns] : tenant_cpu_ns_) {
    const auto prev = tenant_cpu_published_ns_.find(id);
    interval_total += ns - (prev == tenant_cpu_published_ns_.end() ? 0 : prev->second);
  }
  for (telemetry::TenantView& t : s.tenants) {
    const auto it = tenant_cpu_ns_.find(t.id);
    t.cpu_time_ns = it == tenant_cpu_ns_.end() ? 0 : it->second;
    if (!tenant_cpu_published_ || interval_total == 0) continue;
    const auto prev = tenant_cpu_published_ns_.find(t.id);
    const std::uint64_t delta =
        t.cpu_time_ns - (prev == tenant_cpu_published_ns_.end() ? 0 : prev->second);
    t.achieved_share = static_cast<double>(delta) / static_cast<double>(interval_total);
  }
  tenant_cpu_published_ns_ = tenant_cpu_ns_;
  tenant_cpu_published_ = true;
}

void Daemon::add_gpus(telemetry::Snapshot& s) const {
  if (!nvml_) return;
  const bool has_util = nvml_->has(sys::NvmlFeature::device_utilization);
  for (const sys::GpuDevice& d : nvml_->devices()) {
    if (s.gpus.size() == kMaxGpuSeries) break;
    telemetry::GpuView g;
    g.index = d.index;
    g.uuid = d.uuid;
    g.bus_id = d.bus_id;
    if (has_util && d.index < gpu_util_.device.size()) {
      g.utilization_pct = gpu_util_.device[d.index];
    }
    for (const telemetry::TaskView& t : s.tasks) {
      if (t.gpu_id < 0 || static_cast<std::uint32_t>(t.gpu_id) != d.index) continue;
      ++g.phase_tasks[policy::index_of(t.phase)];
      if (!t.tenant.empty()) g.tenants.push_back(t.tenant);
    }
    std::sort(g.tenants.begin(), g.tenants.end());
    g.tenants.erase(std::unique(g.tenants.begin(), g.tenants.end()), g.tenants.end());
    s.gpus.push_back(std::move(g));
  }
}

// common/fd_budget.hpp: the whole descriptor limit for the daemon (the signal sampler keeps up
// to half of it open), connections a bounded share.
Result<void> Daemon::open_http() {
  const std::uint64_t nofile = raise_nofile_limit();
  if (!opts_.serve_http) return Ok{};
  const config::TelemetryConfig& tc = opts_.config.telemetry;
  const FdBudget budget = fd_budget(nofile);
  telemetry::HttpLimits limits;
  limits.max_connections = budget.http_connections;
  limits.max_per_peer = budget.http_per_peer;
  spdlog::info("descriptors: limit {}; at most {} HTTP and {} control connections", nofile,
               budget.http_connections, ControlServer::kMaxClients);
  http_ = std::make_unique<telemetry::HttpServer>(store_, limits);
  const std::uint16_t port =
      opts_.http_port_override != 0 ? opts_.http_port_override : tc.metrics_port;
  if (auto r = http_->start(tc.metrics_address, port); !r) return r.error();
  spdlog::info("serving /metrics and /status on http://{}:{}", tc.metrics_address, http_->port());
  return Ok{};
}

std::uint16_t Daemon::http_port() const { return http_ ? http_->port() : 0; }

void Daemon::publish(std::uint64_t now_ns) {
  telemetry::Snapshot s = snapshot(now_ns);
  s.last_decision_latency_ns = last_decision_ns_;
  s.decision_latency = decision_latency_;
  for (const char* c : {"nvml", "discovery", "cpu_load", "backend", "probes"}) {
    s.collector_errors.push_back({c, collector_errors_[c]});
  }
  if (power_) s.collector_errors.push_back({"power", power_->errors()});
  add_metrics(s);
  store_.publish(std::move(s));
}

telemetry::Snapshot Daemon::snapshot(std::uint64_t now_ns) {
  telemetry::Snapshot s = telemetry::take_snapshot(engine_, now_ns, true);
  s.backend = std::string(backend_.name());
  s.backend_requested = backend_.requested();
  s.backend_state = BackendSupervisor::mode_name(backend_.mode());
  s.backend_reason = backend_.reason();
  for (telemetry::TaskView& v : s.tasks) {
    if (auto it = tracked_.find(v.pid); it != tracked_.end()) v.comm = it->second.comm;
    v.tenant_share = backend_.backend().tenant_share_note(v.pid);
    v.threads = thread_phases_.threads(v.pid, now_ns);
  }
  for (std::size_t i = 0; i < s.phase_time_total_ns.size(); ++i) {
    s.phase_time_total_ns[i] += dropped_phase_ns_[i];
  }
  return s;
}

telemetry::Snapshot Daemon::status_snapshot() { return snapshot(known_until_ns()); }

// Snapshots describe the tasks up to the last drain of the phase events (the phase in progress
// counts until then): a later time would extend phases that events already drained since have
// ended. Not the tick's deadline either: events drained in the tick may be dated after it.
std::uint64_t Daemon::known_until_ns() const {
  return phase_events_on_ && drained_at_ns_ != 0 ? drained_at_ns_ : monotonic_ns();
}

}  // namespace zernel::daemon
