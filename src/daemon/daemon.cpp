#include "daemon/daemon.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "common/fd_budget.hpp"
#include "daemon/signals.hpp"
#include "daemon/ticker.hpp"
#include "enforce/userspace/restore.hpp"
#include "sys/cgroup.hpp"
#include "sys/file.hpp"
#include "sys/procfs.hpp"
#include "sys/topology_reader.hpp"
#include "sys/unique_fd.hpp"
#include "telemetry/snapshot.hpp"

namespace zernel::daemon {

namespace {

enforce::BackendSettings backend_settings(const config::Config& cfg) {
  return {cfg.general.max_tracked_tasks, cfg.sched_ext.allow_unenforced_cpu_max};
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

void replay_userspace_journal(const std::string& proc_root) {
  const std::string path = enforce::userspace::userspace_journal_path();
  auto rep = enforce::userspace::replay_journal(path, proc_root);
  if (!rep) {
    if (rep.error().code() == EBUSY) {
      spdlog::info("userspace journal: {}", rep.error().message());
    } else if (rep.error().code() == EACCES) {
      // Not root: nothing it could restore anyway; root's next start (or `restore`) does it.
      spdlog::info("userspace journal: {}: left for root", rep.error().message());
    } else {
      spdlog::warn("userspace journal: {}: not restored", rep.error().message());
    }
    return;
  }
  if (rep->corrupt) {
    spdlog::error("userspace journal: cannot use {} ({}); moved it to {}; values it listed are NOT "
                  "restored",
                  path, rep->corrupt_error, rep->moved_to);
    return;
  }
  if (!rep->found) return;
  for (const std::string& line : rep->lines) spdlog::info("userspace journal: {}", line);
  spdlog::warn("userspace journal: zernel-scheduler pid {} did not stop cleanly; {}",
               rep->owner_pid, rep->summary());
}

// kernel.task_delayacct's original in the settings journal (none without a journal).
sys::DelayAcctJournal delayacct_journal(const std::shared_ptr<enforce::SettingsJournal>& journal) {
  sys::DelayAcctJournal j;
  if (!journal) return j;
  j.record = [journal](bool original) {
    enforce::SettingsOriginals o;
    o.delayacct = original;
    return journal->record(o);
  };
  j.forget = [journal] {
    enforce::SettingsOriginals o;
    o.delayacct = false;  // names the setting; the value does not matter
    return journal->forget(o);
  };
  // Shared with any other daemon on this machine (sys/delayacct_share.hpp).
  j.holders_path = enforce::delayacct_holders_path();
  return j;
}

// What the ticker waits on besides its deadline: the stop fd alone, or an epoll set of the stop
// fd, the reload fd and the control socket's fd. When the set wakes it early without a stop,
// the loop serves the control requests and SIGHUP, then waits for the same deadline again.
class WakeSet {
 public:
  static Result<WakeSet> make(int stop_fd, int reload_fd, int control_fd) {
    WakeSet w(stop_fd);
    if (reload_fd < 0 && control_fd < 0) return w;
    w.epoll_ = sys::UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
    if (!w.epoll_.valid()) return errno_error("epoll_create1");
    for (int fd : {stop_fd, reload_fd, control_fd}) {
      if (fd < 0) continue;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (::epoll_ctl(w.epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return errno_error("epoll_ctl");
    }
    return w;
  }

  [[nodiscard]] int fd() const { return epoll_.valid() ? epoll_.get() : stop_fd_; }
  // After the ticker woke early: whether it was for a stop.
  [[nodiscard]] bool stop_requested() const {
    if (!epoll_.valid()) return true;  // it waits on the stop fd alone
    if (stop_fd_ < 0) return false;
    pollfd p{stop_fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

 private:
  explicit WakeSet(int stop_fd) : stop_fd_(stop_fd) {}
  int stop_fd_;
  sys::UniqueFd epoll_;
};

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
  replay_userspace_journal(opts_.proc_root);
  // The probes before the backend: the sched_ext scheduler shares their per-thread phases.
  open_probes();
  if (auto r = backend_.start(opts_.backend); !r) return r.error().context("--backend");
  spdlog::info("enforcement backend: {}", backend_.name());
  open_nvml();
  node_name_ = metrics_node_name();
  if (!opts_.phase_log_path.empty()) {
    if (auto r = phase_log_.open(opts_.phase_log_path); !r) return r.error();
  }
  if (auto r = open_http(); !r) return r;
  if (auto r = open_control_socket(); !r) return r;
  return open_machine_settings();
}

void Daemon::start_runtime_control() {
  // pid 2 is kthreadd only in the initial pid namespace (our /proc's pid 1 has ppid 0 there
  // and so does pid 2); in a container's namespace it is an ordinary process.
  const auto kthreadd = sys::read_stat(opts_.proc_root, 2);
  RuntimeControlOptions o;
  o.self_pid = static_cast<std::uint32_t>(::getpid());
  o.host_pid_namespace = kthreadd && kthreadd->is_kernel_thread();
  o.state_path = opts_.config.multi_tenant.runtime_state_file;
  ControlHost& host = *this;  // a private base: converted here, where it is accessible
  runtime_ = std::make_unique<RuntimeControl>(opts_.config, engine_, host, o);
  runtime_->restore_saved_state();
}

void Daemon::start_pod_resources() {
  const config::KubernetesConfig& k = opts_.config.kubernetes;
  if (!k.enabled) return;
  // Pods' cgroups are looked for in the unified (v2) hierarchy, where /proc/PID/cgroup's "0::"
  // paths live: /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host.
  std::string cgroup_root = opts_.sys_root + "/fs/cgroup";
  if (auto info = sys::read_file(opts_.proc_root + "/self/mountinfo")) {
    for (const sys::CgroupMount& m : sys::parse_cgroup_mounts(*info)) {
      if (m.version == sys::CgroupVersion::v2 && m.mount_root == "/") {
        cgroup_root = m.mount_point;
        break;
      }
    }
  }
  pods_ = std::make_unique<collect::PodResourcesSource>(k, cgroup_root, opts_.proc_root);
  pods_->start();
  spdlog::info("kubernetes: tenants from {} every {} ms, one per {}; pod cgroups under {}",
               k.pod_resources_socket, k.refresh_ms,
               k.tenant_by == config::TenantBy::pod ? "pod" : "namespace", cgroup_root);
}

// The latest good answer of the kubelet, if a new one came, as tenants.
void Daemon::apply_pod_resources() {
  if (!pods_) return;
  std::optional<config::PodSnapshot> snap = pods_->take();
  if (!snap) return;
  config::PodTenants t = config::pod_tenants(*snap, opts_.config.kubernetes,
                                             opts_.config.multi_tenant.default_priority_class);
  std::set<std::string> now(t.problems.begin(), t.problems.end());
  for (const std::string& p : now) {
    if (!pod_problems_.contains(p)) spdlog::warn("kubernetes: {}", p);
  }
  pod_problems_ = std::move(now);
  runtime_->apply_kubelet_tenants(std::move(t.tenants));
}

void Daemon::open_nvml() {
  auto nvml = sys::Nvml::load(opts_.nvml_library);
  if (!nvml) {
    spdlog::warn("{}", nvml.error().message());
    return;
  }
  nvml_ = std::move(*nvml);
  spdlog::info("NVML {} ({}): {} GPU(s)", nvml_->driver_version(), nvml_->library(),
               nvml_->devices().size());
  gpu_util_.device.assign(nvml_->devices().size() + 1, 0);
}

void Daemon::open_probes() {
#ifdef ZERNEL_HAVE_PROBES
  const policy::PhaseDetectionOptions& pd = opts_.config.phase_detection;
  collect::GpuSyncProbes::Options popts;
  popts.proc_root = opts_.proc_root;
  popts.phase_events = pd.mode == policy::PhaseSource::events;
  popts.sync_hysteresis_ns = pd.event_sync_hysteresis_ns;
  popts.idle_hysteresis_ns = pd.event_idle_hysteresis_ns;
  popts.optimizer_max_ns = pd.event_optimizer_max_ns;
  auto probes = collect::GpuSyncProbes::open(popts);
  if (!probes) {
    spdlog::warn("GPU synchronisation probes are off (no CPU bursts or GPU sync times): {}",
                 probes.error().message());
    if (popts.phase_events) spdlog::warn("phases from events are off: the periodic detector runs");
    return;
  }
  probes_ = std::move(*probes);
  if (popts.phase_events) {
    phase_events_on_ = probes_->has_phase_events();
    if (phase_events_on_) {
      spdlog::info("phases from events (sync hysteresis {} us, idle {} us, optimizer bound {} ms)",
                   pd.event_sync_hysteresis_ns / 1000, pd.event_idle_hysteresis_ns / 1000,
                   pd.event_optimizer_max_ns / 1'000'000);
    } else {
      spdlog::warn("phases from events are off, the periodic detector runs: {}",
                   probes_->phase_events_error()->message());
    }
  }
  if (!probes_->has_futex()) {
    spdlog::warn("futex waits are not counted: {}", probes_->futex_error()->message());
  }
#else
  spdlog::warn("GPU synchronisation probes are not in this build (configured without BPF)");
#endif
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

Result<void> Daemon::open_control_socket() {
  if (opts_.control_socket.empty()) return Ok{};
  auto control = ControlServer::listen(opts_.control_socket);
  if (control) {
    control_ = std::move(*control);
    spdlog::info("control socket: {} (root only)", control_->path());
  } else if (opts_.control_socket_required) {
    return control.error();
  } else {
    spdlog::error(
        "{}; running without a control socket (tenant/status/top will not reach "
        "this daemon; use --control-socket PATH)",
        control.error().message());
  }
  return Ok{};
}

// First what a daemon that did not stop cleanly left changed, then this daemon's originals
// (enforce/settings_journal.hpp). An unprivileged daemon (observe mode) may not read root's
// /run/zernel; it cannot change a machine-wide setting either, so it runs without the journal
// instead of refusing to start.
Result<void> Daemon::open_machine_settings() {
  const std::string journal_path = enforce::settings_journal_path();
  std::shared_ptr<enforce::SettingsJournal> journal;
  auto recovered =
      enforce::recover_settings(journal_path, opts_.proc_root, opts_.sys_root, nvml_.get());
  if (!recovered && recovered.error().code() != EACCES) return recovered.error();
  if (recovered) {
    auto opened = enforce::SettingsJournal::open(journal_path, opts_.proc_root);
    if (!opened) return opened.error();
    journal = std::move(*opened);
  } else {
    spdlog::warn("{}: no crash recovery of machine-wide settings for this user",
                 recovered.error().message());
  }
  power_ = enforce::make_power_manager(opts_.config.power, nvml_.get(), opts_.sys_root, journal);
  enable_delay_accounting(journal);
  return Ok{};
}

void Daemon::enable_delay_accounting(const std::shared_ptr<enforce::SettingsJournal>& journal) {
  auto acct = sys::DelayAcctGuard::enable(opts_.proc_root, delayacct_journal(journal));
  collect::TickBuilder::Options tick;
  collect::SignalsOptions& sig = tick.signals;
  sig.proc_root = opts_.proc_root;
  if (acct) {
    if (acct->changed() && !acct->original()) {
      spdlog::info("turned on kernel.task_delayacct, or joined the daemons using it (set back "
                   "to 0 when the last zernel-scheduler using it exits)");
    }
    delayacct_.emplace(std::move(*acct));
  } else {
    spdlog::warn("io wait is not measured: {}", acct.error().message());
    sig.measure_io_wait = false;
  }
  tick_builder_ = collect::TickBuilder(std::move(tick));
}

std::uint16_t Daemon::http_port() const { return http_ ? http_->port() : 0; }

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
  if (n % cadence.poll_every == 0 || new_process_appeared()) poll_processes(now);
  sample_signals(now);
  backend_.maybe_restart(now);
  if (control_) control_->expire(monotonic_ns());
  decide(now);
  if (trace_) finish_trace();
  last_decision_ns_ = monotonic_ns() - t0;
  decision_latency_.observe(last_decision_ns_);
  if (n % cadence.poll_every == 0) enforce::apply_power(power_.get(), engine_);
  if (n % cadence.publish_every == 0) publish(now);
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
  engine_.unregister_task(pid);
  backend_.forget(pid);
  tick_builder_.forget(pid);
  tracked_.erase(pid);
  event_phase_.erase(pid);
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

// ---- run-time control (daemon/control.hpp) and SIGHUP ----

void Daemon::service_wakeup(int reload_fd) {
  if (StopSignals::drain_reload(reload_fd)) {
    spdlog::info("SIGHUP: reloading {}", opts_.config_path.empty() ? "(no file)" : opts_.config_path);
    if (auto r = runtime_->reload_file(opts_.config_path, opts_.config_missing_ok); !r) {
      spdlog::error("reload failed, keeping the running configuration: {}", r.error().message());
    }
  }
  if (control_) {
    control_->service(
        [this](const ControlRequest& req,
               ControlServer::Ticket who) -> std::optional<nlohmann::json> {
          if (req.op == ControlOp::trace) return start_trace(req, who);
          return runtime_->handle(req);
        },
        monotonic_ns());
  }
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
  }
  return s;
}

telemetry::Snapshot Daemon::status_snapshot() { return snapshot(monotonic_ns()); }

std::optional<LiveProcess> Daemon::live_process(std::uint32_t pid) {
  auto stat = sys::read_stat(opts_.proc_root, pid);
  if (!stat || stat->is_dead()) return std::nullopt;
  return LiveProcess{stat->ppid, stat->flags, stat->comm, stat->starttime_ticks};
}

void Daemon::drop_if_replaced(std::uint32_t pid, std::uint64_t starttime_ticks) {
  if (auto it = tracked_.find(pid);
      it != tracked_.end() && it->second.start != 0 && it->second.start != starttime_ticks) {
    drop(pid);  // the tracked process with this pid is gone: a new one has it now
  }
}

void Daemon::track_assigned(std::uint32_t pid, std::uint64_t starttime_ticks) {
  if (tracked_.contains(pid)) return;
  // The whole comm (it may hold spaces), as discovery reads it.
  std::string comm =
      sys::read_first_line(opts_.proc_root + "/" + std::to_string(pid) + "/comm").value_or("");
  tracked_[pid] = Tracked{comm, std::nullopt, collect::ProcessRole::matched};
  tracked_[pid].start = starttime_ticks;
}

}  // namespace zernel::daemon
