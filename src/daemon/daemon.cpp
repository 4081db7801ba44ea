#include "daemon/daemon.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "collect/topology_reader.hpp"
#include "daemon/ticker.hpp"
#include "telemetry/snapshot.hpp"

namespace zernel::daemon {

namespace {

policy::Topology read_topology_or_single(const DaemonOptions& opts) {
  auto info = collect::read_topology(opts.sys_root, opts.proc_root);
  if (!info) {
    spdlog::warn("topology: {}; assuming one node with one CPU", info.error().message());
    return policy::Topology::single_node(1);
  }
  for (const std::string& w : info->warnings) spdlog::warn("topology: {}", w);
  spdlog::info("topology: {} NUMA node(s), {} CPUs, {} NVIDIA GPU(s) in sysfs",
               info->topology.nodes().size(), info->topology.total_cpus(), info->gpus.size());
  return std::move(info->topology);
}

}  // namespace

Daemon::Daemon(DaemonOptions opts, policy::Topology topo)
    : opts_(std::move(opts)),
      engine_(config::engine_options(opts_.config), std::move(topo)),
      discovery_(opts_.proc_root),
      cpu_load_(opts_.proc_root) {}

Daemon::~Daemon() { shutdown(); }

Result<std::unique_ptr<Daemon>> Daemon::create(DaemonOptions opts) {
  policy::Topology topo = read_topology_or_single(opts);
  std::unique_ptr<Daemon> d(new Daemon(std::move(opts), std::move(topo)));
  const config::Config& cfg = d->opts_.config;

  for (const config::TenantConfig& t : cfg.tenants) {
    if (auto r = d->engine_.upsert_tenant(t.spec); !r) return r.error();
  }

  auto backend = enforce::make_backend(d->opts_.backend);
  if (!backend) return backend.error().context("--backend");
  d->backend_ = std::move(*backend);
  spdlog::info("enforcement backend: {}", d->backend_->name());

  auto nvml = collect::Nvml::load(d->opts_.nvml_library);
  if (nvml) {
    d->nvml_ = std::move(*nvml);
    spdlog::info("NVML {} ({}): {} GPU(s)", d->nvml_->driver_version(), d->nvml_->library(),
                 d->nvml_->devices().size());
    d->device_util_.assign(d->nvml_->devices().size() + 1, 0);
  } else {
    spdlog::warn("{}", nvml.error().message());
  }

  auto acct = collect::DelayAcctGuard::enable(d->opts_.proc_root);
  collect::SignalsOptions sig;
  sig.proc_root = d->opts_.proc_root;
  if (acct) {
    if (acct->changed()) spdlog::info("turned on kernel.task_delayacct (restored on exit)");
    d->delayacct_.emplace(std::move(*acct));
  } else {
    spdlog::warn("io wait is not measured: {}", acct.error().message());
    sig.measure_io_wait = false;
  }
  d->signals_ = collect::SignalSampler(sig);

  if (!d->opts_.phase_log_path.empty()) {
    if (auto r = d->phase_log_.open(d->opts_.phase_log_path); !r) return r.error();
  }
  if (d->opts_.serve_http) {
    d->http_ = std::make_unique<telemetry::HttpServer>(d->store_);
    const std::uint16_t port = d->opts_.http_port_override != 0 ? d->opts_.http_port_override
                                                                : cfg.telemetry.metrics_port;
    if (auto r = d->http_->start(cfg.telemetry.metrics_address, port); !r) return r.error();
    spdlog::info("serving /metrics and /status on http://{}:{}", cfg.telemetry.metrics_address,
                 d->http_->port());
  }
  return d;
}

std::uint16_t Daemon::http_port() const { return http_ ? http_->port() : 0; }

Result<void> Daemon::run(int stop_fd) {
  const config::GeneralConfig& g = opts_.config.general;
  const std::uint64_t period = std::uint64_t{g.phase_eval_interval_ms} * 1'000'000;
  // Config validation guarantees gpu_poll_interval_ms >= phase_eval_interval_ms > 0.
  const std::uint64_t poll_every =
      std::max<std::uint64_t>(1, g.gpu_poll_interval_ms / g.phase_eval_interval_ms);
  const std::uint64_t publish_every = std::max<std::uint64_t>(
      1, opts_.config.telemetry.push_interval_ms / g.phase_eval_interval_ms);

  const std::uint64_t start = monotonic_now_ns();
  poll_processes(start);
  Ticker ticker(period, start);
  std::uint64_t n = 0;
  while (ticker.wait(stop_fd)) {
    const std::uint64_t now = ticker.deadline_ns();
    const std::uint64_t t0 = monotonic_now_ns();
    if (++n % poll_every == 0) poll_processes(now);
    sample_signals(now);
    decide(now);
    if (n % publish_every == 0) publish(now);
    const std::uint64_t spent = monotonic_now_ns() - t0;
    stats_.ticks = ticker.ticks();
    stats_.skipped_ticks = ticker.skipped();
    stats_.max_tick_ns = std::max(stats_.max_tick_ns, spent);
    stats_.total_tick_ns += spent;
  }
  spdlog::info("stopping after {} ticks ({} skipped), {} decisions", stats_.ticks,
               stats_.skipped_ticks, engine_.decisions_made());
  shutdown();
  return Ok{};
}

void Daemon::poll_processes(std::uint64_t now_ns) {
  ++stats_.scans;
  nvml_procs_.clear();
  if (nvml_) {
    if (auto procs = nvml_->compute_processes()) {
      nvml_procs_ = std::move(*procs);
    } else {
      ++stats_.collector_errors;
    }
    refresh_gpu_utilization();
  }
  collect::DiscoveryInput in;
  in.nvml_processes = nvml_ ? &nvml_procs_ : nullptr;
  in.tenants = opts_.config.tenants;
  in.max_tracked_tasks = opts_.config.general.max_tracked_tasks;
  auto scan = discovery_.scan(in);
  if (!scan) {
    ++stats_.collector_errors;
    if (!warned_scan_) spdlog::error("process discovery: {}", scan.error().message());
    warned_scan_ = true;
    return;
  }
  for (std::uint32_t pid : scan->removed) drop(pid);
  for (const collect::DiscoveredProcess& p : scan->processes) {
    if (p.change == collect::ProcessChange::unchanged) {
      tracked_[p.pid].gpu = p.gpu;
      if (p.gpu) {
        policy::TaskUpdate u;
        u.gpu_id = *p.gpu;
        engine_.update_task(p.pid, u);
      }
      continue;
    }
    if (p.change == collect::ProcessChange::replaced) drop(p.pid);
    if (auto r = engine_.register_task(p.pid, p.is_ml, p.gpu, now_ns); !r) {
      ++stats_.collector_errors;
      continue;
    }
    if (p.tenant && *p.tenant < opts_.config.tenants.size()) {
      (void)engine_.assign_pid(p.pid, opts_.config.tenants[*p.tenant].spec.id);
    }
    tracked_[p.pid] = Tracked{p.comm, p.gpu, p.role};
  }
  if (scan->dropped > 0 && !warned_cap_) {
    spdlog::warn("{} processes qualify beyond max_tracked_tasks ({}): not tracked",
                 scan->dropped, opts_.config.general.max_tracked_tasks);
    warned_cap_ = true;
  }
}

void Daemon::refresh_gpu_utilization() {
  proc_util_.clear();
  for (const collect::GpuDevice& dev : nvml_->devices()) {
    if (auto u = nvml_->utilization(dev.index)) {
      if (dev.index < device_util_.size()) device_util_[dev.index] = u->gpu_percent;
    }
    if (auto per = nvml_->process_utilization(dev.index)) {
      for (const auto& [pid, sm] : *per) proc_util_[pid] = std::max(proc_util_[pid], sm);
    }
  }
}

void Daemon::sample_signals(std::uint64_t now_ns) {
  pids_.clear();
  for (const auto& [pid, t] : tracked_) pids_.push_back(pid);
  std::sort(pids_.begin(), pids_.end());
  signals_.sample(pids_, now_ns, samples_);
  for (const collect::ProcessSignals& s : samples_) {
    if (s.gone) {
      drop(s.pid);
      continue;
    }
    policy::TaskUpdate u = s.update();
    const Tracked& t = tracked_[s.pid];
    std::uint32_t util = 0;
    if (auto it = proc_util_.find(s.pid); it != proc_util_.end()) {
      util = it->second;
    } else if (t.gpu && t.role == collect::ProcessRole::gpu_owner && *t.gpu < device_util_.size() &&
               proc_util_.empty()) {
      util = device_util_[*t.gpu];  // no per-process figures: the device's, for its owners
    }
    u.gpu_utilization = static_cast<std::uint8_t>(std::min<std::uint32_t>(util, 100));
    engine_.update_task(s.pid, u);
  }
  if (auto loads = cpu_load_.sample()) {
    if (!loads->empty()) engine_.set_cpu_loads(*loads);
  } else {
    ++stats_.collector_errors;
  }
}

void Daemon::decide(std::uint64_t now_ns) {
  engine_.schedule_all(now_ns, decisions_);
  for (const policy::Decision& d : decisions_) {
    if (d.phase_changed) phase_log_.write(now_ns, d.pid, d.phase);
  }
  if (auto r = backend_->apply(decisions_); !r) {
    ++stats_.collector_errors;
    spdlog::error("{} backend: {}", backend_->name(), r.error().message());
  }
}

void Daemon::publish(std::uint64_t now_ns) {
  telemetry::Snapshot s = telemetry::take_snapshot(engine_, now_ns, true);
  s.backend = std::string(backend_->name());
  for (telemetry::TaskView& v : s.tasks) {
    if (auto it = tracked_.find(v.pid); it != tracked_.end()) v.comm = it->second.comm;
  }
  store_.publish(std::move(s));
}

void Daemon::drop(std::uint32_t pid) {
  engine_.unregister_task(pid);
  backend_->forget(pid);
  tracked_.erase(pid);
}

void Daemon::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (backend_) {
    if (auto r = backend_->shutdown(); !r) {
      spdlog::error("{} backend shutdown: {}", backend_->name(), r.error().message());
    }
  }
  if (delayacct_) {
    if (auto r = delayacct_->restore(); !r) spdlog::error("{}", r.error().message());
  }
  if (http_) http_->stop();
}

}  // namespace zernel::daemon
