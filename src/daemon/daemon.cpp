#include "daemon/daemon.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "daemon/ticker.hpp"
#include "sys/topology_reader.hpp"

namespace zernel::daemon {

namespace {

enforce::BackendSettings backend_settings(const config::Config& cfg) {
  enforce::BackendSettings s;
  s.max_tasks = cfg.general.max_tracked_tasks;
  s.allow_unenforced_cpu_max = cfg.sched_ext.allow_unenforced_cpu_max;
  return s;
}

policy::Topology read_topology_or_single(const DaemonOptions& opts) {
  auto info = sys::read_topology(opts.sys_root, opts.proc_root);
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

Cadence cadence_of(const config::Config& cfg) {
  const config::GeneralConfig& g = cfg.general;
  Cadence c;
  c.period_ns = std::uint64_t{g.phase_eval_interval_ms} * 1'000'000;
  // Config validation guarantees gpu_poll_interval_ms >= phase_eval_interval_ms > 0.
  c.poll_every = std::max<std::uint64_t>(1, g.gpu_poll_interval_ms / g.phase_eval_interval_ms);
  c.publish_every =
      std::max<std::uint64_t>(1, cfg.telemetry.push_interval_ms / g.phase_eval_interval_ms);
  return c;
}

Daemon::Daemon(DaemonOptions opts, policy::Topology topo)
    : opts_(std::move(opts)),
      engine_(config::engine_options(opts_.config), std::move(topo)),
      backend_([this, settings = backend_settings(opts_.config)](std::string_view kind) {
        enforce::BackendSettings s = settings;
        s.phase_map_fd = phase_map_fd();  // probes open first (start)
        s.phase_sync_kicks = s.phase_map_fd >= 0 && phase_sync_kicks();
        s.shared_maps = phase_shared_maps();
        s.switch_rules = s.phase_map_fd >= 0 && !s.shared_maps.empty();
        return enforce::make_backend(kind, s);
      }),
      discovery_(opts_.proc_root),
      cpu_load_(opts_.proc_root) {}

Daemon::~Daemon() { shutdown(); }

Result<std::unique_ptr<Daemon>> Daemon::create(DaemonOptions opts) {
  policy::Topology topo = read_topology_or_single(opts);
  std::unique_ptr<Daemon> d(new Daemon(std::move(opts), std::move(topo)));
  if (auto r = d->start(); !r) return r.error();
  return d;
}

// The order matters: the machine-wide settings come last, so that a second daemon stops at its
// port or socket (saying so) before it touches any.
Result<void> Daemon::start() {
  for (const config::TenantConfig& t : opts_.config.tenants) {
    if (auto r = engine_.upsert_tenant(t.spec); !r) return r.error();
  }
  start_runtime_control();
  start_pod_resources();
  // What a userspace backend that did not stop cleanly left changed (nice, affinity, cgroup
  // weights), whatever this run's backend: a restart with observe or sched_ext must not leave
  // processes reniced (enforce/userspace/restore.hpp). A journal whose daemon still runs is that
  // daemon's (the userspace backend then refuses to start; other backends leave it alone); an
  // unprivileged daemon may not read root's /run/zernel and cannot restore anything anyway.
  replay_userspace_journal();
  // The probes before the backend: the sched_ext scheduler shares their per-thread phases.
  open_probes();
  if (auto r = backend_.start(opts_.backend); !r) return r.error().context("--backend");
  spdlog::info("enforcement backend: {}", backend_.name());
  place_switch_rules();
  open_nvml();
  open_process_events();
  node_name_ = metrics_node_name();
  if (!opts_.phase_log_path.empty()) {
    if (auto r = phase_log_.open(opts_.phase_log_path); !r) return r.error();
  }
  if (auto r = open_http(); !r) return r;
  if (auto r = open_control_socket(); !r) return r;
  return open_machine_settings();
}

Result<void> Daemon::run(int stop_fd, int reload_fd) {
  const Cadence cadence = cadence_of(opts_.config);
  tick_ns_ = cadence.period_ns;
  const std::uint64_t start = monotonic_ns();
  poll_processes(start);
  Ticker ticker(cadence.period_ns, start);
  auto wake = WakeSet::make(stop_fd, reload_fd, control_ ? control_->fd() : -1);
  if (!wake) return wake.error();
  for (std::uint64_t n = 1;; ++n) {
    while (!ticker.wait(wake->fd())) {
      if (wake->stop_requested()) {
        stop_loop();
        return Ok{};
      }
      service_wakeup(reload_fd);
    }
    tick(ticker, n, cadence);
  }
}

void Daemon::tick(const Ticker& ticker, std::uint64_t n, const Cadence& cadence) {
  const std::uint64_t now = ticker.deadline_ns();
  const std::uint64_t t0 = monotonic_ns();
  nvml_procs_fresh_ = false;
  if (n % cadence.poll_every == 0) apply_pod_resources();
  follow_processes(now, n % cadence.poll_every == 0);
  sample_signals(now, n % cadence.publish_every == 0, n % cadence.poll_every == 0);
  backend_.maybe_restart(now);
  if (control_) control_->expire(monotonic_ns());
  decide(now);
  // After the tick's backend changes (maybe_restart, and apply() finding the scheduler ejected):
  // the tracepoint runs the rules whenever the scheduler does not.
  place_switch_rules();
  if (trace_) finish_trace();
  last_decision_ns_ = monotonic_ns() - t0;
  decision_latency_.observe(last_decision_ns_);
  if (n % cadence.poll_every == 0) enforce::apply_power(power_.get(), engine_);
  if (n % cadence.publish_every == 0) publish(known_until_ns());
  const std::uint64_t spent = monotonic_ns() - t0;
  stats_.ticks = ticker.ticks();
  stats_.skipped_ticks = ticker.skipped();
  stats_.max_tick_ns = std::max(stats_.max_tick_ns, spent);
  stats_.total_tick_ns += spent;
}

void Daemon::stop_loop() {
  spdlog::info("stopping after {} ticks ({} skipped), {} decisions", stats_.ticks,
               stats_.skipped_ticks, engine_.decisions_made());
  shutdown();
}

void Daemon::decide(std::uint64_t now_ns) {
  engine_.schedule_all(now_ns, decisions_);
  // The log gets the time the change was committed, not the tick's deadline: a late tick
  // (a busy machine) samples later than its deadline, and the log must not claim it knew sooner.
  const std::uint64_t committed_ns = phase_log_.is_open() || trace_ ? monotonic_ns() : now_ns;
  for (const policy::Decision& d : decisions_) {
    if (trace_) trace_->decision(committed_ns, d);
    if (!d.phase_changed) continue;
    // Processes with phases from events are logged as their events come (drain_phase_events).
    const auto it = tracked_.find(d.pid);
    if (it == tracked_.end() || !it->second.event_role) {
      phase_log_.write(committed_ns, d.pid, d.phase);
      if (trace_) trace_phase(committed_ns, d.pid, d.pid, d.phase, "periodic");
    }
  }
  if (!backend_.apply(decisions_, now_ns)) count_error("backend");
}

void Daemon::drop(std::uint32_t pid) {
#ifdef ZERNEL_HAVE_PROBES
  if (probes_) {
    // A probed or roled process is followed by the probes until forgotten (docs/probes.md).
    if (auto it = tracked_.find(pid);
        it != tracked_.end() && (it->second.probed || it->second.event_role)) {
      probes_->forget(pid);
      (void)probes_->untrack(pid);
    }
  }
#endif
  if (const policy::TaskState* s = engine_.task(pid)) {
    const std::uint64_t now = monotonic_ns();
    for (policy::Phase p : policy::kAllPhases) {
      dropped_phase_ns_[policy::index_of(p)] += s->time_in_phase(p, now);
    }
  }
  engine_.unregister_task(pid);
  backend_.forget(pid);
  tick_builder_.forget(pid);
  tracked_.erase(pid);
  event_phase_.erase(pid);
  thread_phases_.forget(pid);
}

void Daemon::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (pods_) pods_->stop();
  backend_.stop();
  if (power_) {
    if (auto r = power_->restore(); !r) spdlog::error("power: {}", r.error().message());
  }
  if (delayacct_) {
    if (auto r = delayacct_->restore(); !r) spdlog::error("{}", r.error().message());
  }
  if (http_) http_->stop();
  if (trace_ && control_) {  // a waiting `trace` client hears why, rather than a bare close
    control_->answer(trace_client_,
                     error_reply("the daemon is stopping; the trace was not completed"),
                     monotonic_ns());
    trace_.reset();
  }
  control_.reset();  // closes and removes the socket
}

}  // namespace zernel::daemon
