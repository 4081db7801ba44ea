#include "daemon/daemon.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include <spdlog/spdlog.h>

#include "collect/sync_signals.hpp"
#include "collect/topology_reader.hpp"
#include "collect/wait_state.hpp"
#ifdef ZERNEL_HAVE_PROBES
#include "collect/probes/cuda_library.hpp"
#endif
#include "common/fd_budget.hpp"
#include "common/log.hpp"
#include "daemon/signals.hpp"
#include "daemon/ticker.hpp"
#include "enforce/userspace/restore.hpp"
#include "telemetry/snapshot.hpp"
#include "telemetry/status_json.hpp"

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
  const auto kthreadd = collect::read_stat(d->opts_.proc_root, 2);
  d->host_pid_namespace_ = kthreadd && kthreadd->is_kernel_thread();

  // What a userspace backend that did not stop cleanly left changed (nice, affinity, cgroup
  // weights), whatever this run's backend: a restart with observe or sched_ext must not leave
  // processes reniced (enforce/userspace/restore.hpp). A journal whose daemon still runs is that
  // daemon's (the userspace backend then refuses to start; other backends leave it alone); an
  // unprivileged daemon may not read root's /run/zernel and cannot restore anything anyway.
  replay_userspace_journal(d->opts_.proc_root);

  auto backend = enforce::make_backend(d->opts_.backend, d->backend_settings());
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

#ifdef ZERNEL_HAVE_PROBES
  collect::GpuSyncProbes::Options popts;
  popts.proc_root = d->opts_.proc_root;
  if (auto probes = collect::GpuSyncProbes::open(popts)) {
    d->probes_ = std::move(*probes);
    if (!d->probes_->has_futex()) {
      spdlog::warn("futex waits are not counted: {}", d->probes_->futex_error()->message());
    }
  } else {
    spdlog::warn("GPU synchronisation probes are off (no CPU bursts or GPU sync times): {}",
                 probes.error().message());
  }
#else
  spdlog::warn("GPU synchronisation probes are not in this build (configured without BPF)");
#endif

  if (!d->opts_.phase_log_path.empty()) {
    if (auto r = d->phase_log_.open(d->opts_.phase_log_path); !r) return r.error();
  }
  // common/fd_budget.hpp: the whole limit for the daemon (the signal sampler keeps up to half
  // of it open), connections a bounded share.
  const std::uint64_t nofile = raise_nofile_limit();
  if (d->opts_.serve_http) {
    const FdBudget budget = fd_budget(nofile);
    telemetry::HttpLimits limits;
    limits.max_connections = budget.http_connections;
    limits.max_per_peer = budget.http_per_peer;
    spdlog::info("descriptors: limit {}; at most {} HTTP and {} control connections", nofile,
                 budget.http_connections, ControlServer::kMaxClients);
    d->http_ = std::make_unique<telemetry::HttpServer>(d->store_, limits);
    const std::uint16_t port = d->opts_.http_port_override != 0 ? d->opts_.http_port_override
                                                                : cfg.telemetry.metrics_port;
    if (auto r = d->http_->start(cfg.telemetry.metrics_address, port); !r) return r.error();
    spdlog::info("serving /metrics and /status on http://{}:{}", cfg.telemetry.metrics_address,
                 d->http_->port());
  }
  if (!d->opts_.control_socket.empty()) {
    auto control = ControlServer::listen(d->opts_.control_socket);
    if (control) {
      d->control_ = std::move(*control);
      spdlog::info("control socket: {} (root only)", d->control_->path());
    } else if (d->opts_.control_socket_required) {
      return control.error();
    } else {
      spdlog::error("{}; running without a control socket (tenant/status/top will not reach "
                    "this daemon; use --control-socket PATH)",
                    control.error().message());
    }
  }

  // The machine-wide settings last: a second daemon stops at its port or socket above (saying
  // so) before it touches any. First what a daemon that did not stop cleanly left changed, then
  // this daemon's originals (enforce/settings_journal.hpp).
  // An unprivileged daemon (observe mode) may not read root's /run/zernel; it cannot change a
  // machine-wide setting either, so it runs without the journal instead of refusing to start.
  const std::string journal_path = enforce::settings_journal_path();
  std::shared_ptr<enforce::SettingsJournal> journal;
  auto recovered = enforce::recover_settings(journal_path, d->opts_.proc_root, d->opts_.sys_root,
                                             d->nvml_.get());
  if (!recovered && recovered.error().code() != EACCES) return recovered.error();
  if (recovered) {
    auto opened = enforce::SettingsJournal::open(journal_path, d->opts_.proc_root);
    if (!opened) return opened.error();
    journal = std::move(*opened);
  } else {
    spdlog::warn("{}: no crash recovery of machine-wide settings for this user",
                 recovered.error().message());
  }
  d->power_ = enforce::make_power_manager(cfg.power, d->nvml_.get(), d->opts_.sys_root, journal);

  collect::DelayAcctJournal acct_journal;
  if (journal) {
    acct_journal.record = [journal](bool original) {
      enforce::SettingsOriginals o;
      o.delayacct = original;
      return journal->record(o);
    };
    acct_journal.forget = [journal] {
      enforce::SettingsOriginals o;
      o.delayacct = false;  // names the setting; the value does not matter
      return journal->forget(o);
    };
    // Shared with any other daemon on this machine (collect/delayacct_share.hpp).
    acct_journal.holders_path = enforce::delayacct_holders_path();
  }
  auto acct = collect::DelayAcctGuard::enable(d->opts_.proc_root, std::move(acct_journal));
  collect::SignalsOptions sig;
  sig.proc_root = d->opts_.proc_root;
  if (acct) {
    if (acct->changed() && !acct->original()) {
      spdlog::info("turned on kernel.task_delayacct, or joined the daemons using it (set back "
                   "to 0 when the last zernel-scheduler using it exits)");
    }
    d->delayacct_.emplace(std::move(*acct));
  } else {
    spdlog::warn("io wait is not measured: {}", acct.error().message());
    sig.measure_io_wait = false;
  }
  d->signals_ = collect::SignalSampler(sig);
  return d;
}

std::uint16_t Daemon::http_port() const { return http_ ? http_->port() : 0; }

Result<void> Daemon::run(int stop_fd, int reload_fd) {
  const config::GeneralConfig& g = opts_.config.general;
  const std::uint64_t period = std::uint64_t{g.phase_eval_interval_ms} * 1'000'000;
  tick_ns_ = period;
  // Config validation guarantees gpu_poll_interval_ms >= phase_eval_interval_ms > 0.
  const std::uint64_t poll_every =
      std::max<std::uint64_t>(1, g.gpu_poll_interval_ms / g.phase_eval_interval_ms);
  const std::uint64_t publish_every = std::max<std::uint64_t>(
      1, opts_.config.telemetry.push_interval_ms / g.phase_eval_interval_ms);

  const std::uint64_t start = monotonic_now_ns();
  poll_processes(start);
  Ticker ticker(period, start);
  // The ticker waits on one fd: the stop fd alone, or an epoll set of the stop fd, the reload
  // fd and the control socket's fd. When the set wakes it early without a stop, the control
  // requests and SIGHUP are served here, then the wait for the same deadline resumes.
  int wake_fd = stop_fd;
  int epoll_fd = -1;
  if (reload_fd >= 0 || control_) {
    epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd < 0) return errno_error("epoll_create1");
    for (int fd : {stop_fd, reload_fd, control_ ? control_->fd() : -1}) {
      if (fd < 0) continue;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        const int err = errno;
        ::close(epoll_fd);
        return errno_error("epoll_ctl", err);
      }
    }
    wake_fd = epoll_fd;
  }
  auto stop_requested = [stop_fd] {
    if (stop_fd < 0) return false;
    pollfd p{stop_fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  };
  std::uint64_t n = 0;
  for (;;) {
    if (!ticker.wait(wake_fd)) {
      if (wake_fd == stop_fd || stop_requested()) break;
      service_wakeup(stop_fd, reload_fd);
      continue;
    }
    const std::uint64_t now = ticker.deadline_ns();
    const std::uint64_t t0 = monotonic_now_ns();
    nvml_procs_fresh_ = false;
    if (++n % poll_every == 0 || new_process_appeared()) poll_processes(now);
    sample_signals(now);
    maybe_restart_backend(now);
    if (control_) control_->expire(monotonic_now_ns());
    decide(now);
    last_decision_ns_ = monotonic_now_ns() - t0;
    decision_latency_.observe(last_decision_ns_);
    if (n % poll_every == 0) enforce::apply_power(power_.get(), engine_);
    if (n % publish_every == 0) publish(now);
    const std::uint64_t spent = monotonic_now_ns() - t0;
    stats_.ticks = ticker.ticks();
    stats_.skipped_ticks = ticker.skipped();
    stats_.max_tick_ns = std::max(stats_.max_tick_ns, spent);
    stats_.total_tick_ns += spent;
  }
  if (epoll_fd >= 0) ::close(epoll_fd);
  spdlog::info("stopping after {} ticks ({} skipped), {} decisions", stats_.ticks,
               stats_.skipped_ticks, engine_.decisions_made());
  shutdown();
  return Ok{};
}

bool Daemon::new_process_appeared() {
  bool found = false;
  auto consider = [&](std::uint32_t pid) {
    if (tracked_.contains(pid) || !reported_new_.insert(pid).second) return;
    found = true;
  };
  if (nvml_) {
    if (auto procs = nvml_->compute_processes()) {
      // Kept for poll_processes() on this tick: one NVML query per tick, not two.
      nvml_procs_ = std::move(*procs);
      nvml_procs_fresh_ = true;
      for (const auto& entry : nvml_procs_) consider(entry.first);
    }
  }
  for (const auto& [pid, t] : tracked_) {
    if (t.role != collect::ProcessRole::gpu_owner) continue;
    if (!collect::read_main_thread_children(opts_.proc_root, pid, children_)) continue;
    for (std::uint32_t child : children_) consider(child);
  }
  return found;
}

void Daemon::poll_processes(std::uint64_t now_ns) {
  ++stats_.scans;
  reported_new_.clear();
  if (nvml_ && !nvml_procs_fresh_) {
    nvml_procs_.clear();
    if (auto procs = nvml_->compute_processes()) {
      nvml_procs_ = std::move(*procs);
    } else {
      count_error("nvml");
    }
  }
  collect::DiscoveryInput in;
  in.nvml_processes = nvml_ ? &nvml_procs_ : nullptr;
  in.tenants = opts_.config.tenants;
  in.max_tracked_tasks = opts_.config.general.max_tracked_tasks;
  auto scan = discovery_.scan(in);
  if (!scan) {
    count_error("discovery");
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
        u.gpu_id = p.gpu;
        engine_.update_task(p.pid, u);
      }
      continue;
    }
    if (p.change == collect::ProcessChange::replaced) drop(p.pid);
    if (auto r = engine_.register_task(p.pid, p.is_ml, p.gpu, now_ns); !r) {
      count_error("discovery");
      continue;
    }
    if (p.tenant && *p.tenant < opts_.config.tenants.size()) {
      (void)engine_.assign_pid(p.pid, opts_.config.tenants[*p.tenant].spec.id);
    }
    tracked_[p.pid] = Tracked{p.comm, p.gpu, p.role};
    tracked_[p.pid].start = p.starttime_ticks;
    if (p.role == collect::ProcessRole::dataloader_worker) {
      policy::TaskUpdate u;
      u.dataloader_worker = true;
      engine_.update_task(p.pid, u);
    }
  }
  for (auto& [pid, t] : tracked_) {
    if (t.role == collect::ProcessRole::gpu_owner && !t.probed) attach_probes(pid, t);
  }
  // GPU owners with DataLoader workers: their main thread is sampled for input waits.
  for (auto& [pid, t] : tracked_) t.has_workers = false;
  for (const collect::DiscoveredProcess& p : scan->processes) {
    if (p.role != collect::ProcessRole::dataloader_worker) continue;
    if (auto it = tracked_.find(p.ppid); it != tracked_.end()) it->second.has_workers = true;
  }
  if (scan->dropped > 0 && !warned_cap_) {
    spdlog::warn("{} processes qualify beyond max_tracked_tasks ({}): not tracked",
                 scan->dropped, opts_.config.general.max_tracked_tasks);
    warned_cap_ = true;
  }
}

// Per-process utilisation where NVML gives it; an empty answer (no process used the GPU since
// the last call) is a measurement of 0 for everyone, not a reason to fall back to the device's
// figure: that one is averaged over up to a second and would make a GPU owner that has just
// stopped using its GPU look busy for that long.
void Daemon::refresh_gpu_utilization() {
  proc_util_.clear();
  proc_util_ok_ = !nvml_->devices().empty();
  for (const collect::GpuDevice& dev : nvml_->devices()) {
    if (auto u = nvml_->utilization(dev.index)) {
      if (dev.index < device_util_.size()) device_util_[dev.index] = u->gpu_percent;
    }
    if (auto per = nvml_->process_utilization(dev.index)) {
      for (const auto& [pid, sm] : *per) proc_util_[pid] = std::max(proc_util_[pid], sm);
    } else {
      proc_util_ok_ = false;
    }
  }
}

void Daemon::sample_signals(std::uint64_t now_ns) {
  // Utilisation every tick, not every poll: NVML's per-process figure is "since the last call",
  // and a 500 ms lag would miss the detector's commit window (stability + 1 ticks) of a phase.
  if (nvml_) refresh_gpu_utilization();
  pids_.clear();
  for (const auto& [pid, t] : tracked_) pids_.push_back(pid);
  std::sort(pids_.begin(), pids_.end());
  signals_.sample(pids_, now_ns, samples_);
  for (const collect::ProcessSignals& s : samples_) {
    // A pid whose process is not the one registered (tracked_[pid].start; a discovered one, or
    // one named by `tenant assign`) belongs to a new process: the old one's tenant and state are
    // not its. Discovery registers it afresh if it qualifies.
    if (s.gone || s.restarted || (s.starttime != 0 && tracked_[s.pid].start != 0 &&
                                  s.starttime != tracked_[s.pid].start)) {
      if (!s.gone) spdlog::debug("pid {} was reused by a new process: dropped", s.pid);
      drop(s.pid);
      continue;
    }
    policy::TaskUpdate u = s.update();
    const Tracked& t = tracked_[s.pid];
    std::uint32_t util = 0;
    bool proc_util_known = false;
    if (auto it = proc_util_.find(s.pid); it != proc_util_.end()) {
      util = it->second;
      proc_util_known = true;
    } else if (proc_util_ok_) {
      proc_util_known = true;  // NVML measures per process and saw none of this one's work
    } else if (t.gpu && t.role == collect::ProcessRole::gpu_owner && *t.gpu < device_util_.size()) {
      util = device_util_[*t.gpu];  // no per-process figures: the device's, for its owners
    }
    u.gpu_utilization = static_cast<std::uint8_t>(std::min<std::uint32_t>(util, 100));
    if (t.role == collect::ProcessRole::dataloader_worker) {
      // A worker wanting the CPU is producing, also while it waits for one: time on the CPU plus
      // time runnable on a run queue (/proc/PID/schedstat), so contention does not hide it. And
      // as it stands now: running or runnable (R) or in disk I/O (D) is producing this instant,
      // which the interval's share (none yet on a first sample) may not show for a tick.
      const auto busy = worker_busy_fraction(s.pid, now_ns);
      const bool busy_now = s.state == 'R' || s.state == 'D';
      if (busy_now) {
        u.cpu_fraction = 1.0F;
      } else if (busy) {
        u.cpu_fraction = busy;
      }
    } else if (s.cpu_time_ns) {
      u.cpu_fraction = static_cast<float>(static_cast<double>(*s.cpu_time_ns) /
                                          static_cast<double>(tick_ns_));
    }
    std::uint64_t main_futex_wait_ns = 0;
    apply_probes(s.pid, t, now_ns, s.state == 'R', proc_util_known ? std::optional(util) : std::nullopt,
                 u, main_futex_wait_ns);
    if (t.role == collect::ProcessRole::gpu_owner) {
      // collect/wait_state.hpp: what the main thread is blocked in now. On its workers' queue:
      // waiting for data. In futex, or running between the short waits of a wait loop (the
      // probes' stamp of its last futex wait): a collective's wait; this beats the probes'
      // per-process futex count, which every helper thread's lock adds to.
      const collect::MainThreadWait w = collect::read_main_thread_wait(opts_.proc_root, s.pid);
      if (t.has_workers && w == collect::MainThreadWait::input) u.io_wait_fraction = 1.0F;
      if (w != collect::MainThreadWait::unknown) {
        u.futex_wait_count =
            collect::main_thread_in_futex_wait(w, main_futex_wait_ns, monotonic_now_ns()) ? 1U
                                                                                          : 0U;
      }
    }
    if (spdlog::should_log(spdlog::level::trace)) {
      spdlog::trace("signals pid {} role {}: gpu {} io {:.2f} burst {} sync {} futex {} nccl {} "
                    "cpu {:.2f} state {}",
                    s.pid, static_cast<int>(t.role), u.gpu_utilization.value_or(255),
                    u.io_wait_fraction.value_or(-1.0F), u.cpu_burst_duration_ns.value_or(0),
                    u.last_gpu_sync_ns.value_or(0), u.futex_wait_count.value_or(0),
                    u.nccl_active ? (*u.nccl_active ? 1 : 0) : -1, u.cpu_fraction.value_or(-1.0F),
                    s.state);
    }
    engine_.update_task(s.pid, u);
  }
  if (auto loads = cpu_load_.sample()) {
    if (!loads->empty()) engine_.set_cpu_loads(*loads);
  } else {
    count_error("cpu_load");
  }
}

std::optional<float> Daemon::worker_busy_fraction(std::uint32_t pid, std::uint64_t now_ns) {
  auto st = collect::read_schedstat(opts_.proc_root, pid);
  Tracked& t = tracked_[pid];
  if (!st) return std::nullopt;
  const std::uint64_t busy = st->run_ns + st->wait_ns;
  std::optional<float> out;
  if (t.schedstat_at_ns != 0 && now_ns > t.schedstat_at_ns && busy >= t.schedstat_busy_ns) {
    out = static_cast<float>(static_cast<double>(busy - t.schedstat_busy_ns) /
                             static_cast<double>(now_ns - t.schedstat_at_ns));
  }
  t.schedstat_busy_ns = busy;
  t.schedstat_at_ns = now_ns;
  return out;
}

void Daemon::decide(std::uint64_t now_ns) {
  engine_.schedule_all(now_ns, decisions_);
  // The log gets the time the change was committed, not the tick's deadline: a late tick
  // (a busy machine) samples later than its deadline, and the log must not claim it knew sooner.
  const std::uint64_t committed_ns = phase_log_.is_open() ? monotonic_now_ns() : now_ns;
  for (const policy::Decision& d : decisions_) {
    if (d.phase_changed) phase_log_.write(committed_ns, d.pid, d.phase);
  }
  if (auto r = backend_->apply(decisions_); !r) {
    count_error("backend");
    if (r.error().code() == ECANCELED) {
      handle_backend_failure(now_ns);
    } else {
      spdlog::error("{} backend: {}", backend_->name(), r.error().message());
    }
  }
}

// The kernel ended our scheduler (sched_ext: a watchdog stall, scx_bpf_error, sysrq-S, hotplug).
// The machine is already back on the default scheduler; we observe at once and, when the exit
// asks for it, load the backend again: at once for a restart request, else after 1, 2, 4, 8 and
// 16 s. After kMaxBackendRestarts failures we stay in observe mode and say so.
void Daemon::handle_backend_failure(std::uint64_t now_ns) {
  const std::string name(backend_->name());
  const enforce::Backend::Retry retry = backend_->retry_after_failure();
  spdlog::error("{} backend: the kernel ended the scheduler: {}", name,
                backend_->failure_summary());
  if (auto r = backend_->shutdown(); !r) spdlog::error("{}: {}", name, r.error().message());
  backend_ = std::make_unique<enforce::ObserveBackend>();
  failed_backend_ = name;
  if (retry == enforce::Backend::Retry::no || backend_restarts_ >= kMaxBackendRestarts) {
    spdlog::error("{} backend: not restarting ({}); observing only from now on", name,
                  retry == enforce::Backend::Retry::no ? "the exit does not ask for it"
                                                       : "too many restarts");
    restart_at_ns_ = 0;
    return;
  }
  const std::uint64_t delay =
      retry == enforce::Backend::Retry::now ? 0 : 1'000'000'000ULL << backend_restarts_;
  restart_at_ns_ = std::max<std::uint64_t>(now_ns + delay, 1);
  spdlog::warn("{} backend: observing only; loading it again in {} ms (restart {} of {})", name,
               delay / 1'000'000, backend_restarts_ + 1, kMaxBackendRestarts);
}

void Daemon::maybe_restart_backend(std::uint64_t now_ns) {
  if (restart_at_ns_ == 0 || now_ns < restart_at_ns_) return;
  restart_at_ns_ = 0;
  ++backend_restarts_;
  auto b = enforce::make_backend(failed_backend_, backend_settings());
  if (!b) {
    spdlog::error("{} backend: restart failed: {}", failed_backend_, b.error().message());
    if (backend_restarts_ < kMaxBackendRestarts) {
      restart_at_ns_ = now_ns + (1'000'000'000ULL << backend_restarts_);
    } else {
      spdlog::error("{} backend: observing only from now on", failed_backend_);
    }
    return;
  }
  (void)backend_->shutdown();
  backend_ = std::move(*b);
  spdlog::info("{} backend: loaded again (restart {} of {})", backend_->name(), backend_restarts_,
               kMaxBackendRestarts);
}

void Daemon::publish(std::uint64_t now_ns) {
  telemetry::Snapshot s = telemetry::take_snapshot(engine_, now_ns, true);
  s.backend = std::string(backend_->name());
  for (telemetry::TaskView& v : s.tasks) {
    if (auto it = tracked_.find(v.pid); it != tracked_.end()) v.comm = it->second.comm;
    v.tenant_share = backend_->tenant_share_note(v.pid);
  }
  s.last_decision_latency_ns = last_decision_ns_;
  s.decision_latency = decision_latency_;
  for (const char* c : {"nvml", "discovery", "cpu_load", "backend", "probes"}) {
    s.collector_errors.push_back({c, collector_errors_[c]});
  }
  if (power_) s.collector_errors.push_back({"power", power_->errors()});
  store_.publish(std::move(s));
}

void Daemon::attach_probes([[maybe_unused]] std::uint32_t pid, [[maybe_unused]] Tracked& t) {
#ifdef ZERNEL_HAVE_PROBES
  if (!probes_) return;
  auto n = probes_->attach_process_libraries(pid);
  if (!n) {
    count_error("probes");
    spdlog::debug("probes: pid {}: {}", pid, n.error().message());
    return;
  }
  if (*n == 0) {
    // Nothing newly attached: either no libcuda mapped yet, or one attached for another process.
    auto maps = collect::probes::read_libcuda_mappings(opts_.proc_root, pid);
    if (!maps || maps->empty()) return;
  }
  t.probed = true;
  if (probes_->has_futex()) (void)probes_->track(pid);
#endif
}

// CPU burst and last GPU sync from the uprobes, as the process stands now
// (collect/sync_signals.hpp): 0 while blocked in a long sync, the burst before a short one, the
// CPU since the return otherwise; a GPU utilisation floor of 100 while blocked in a long sync
// (NVML's per-process figure trails by up to a tick here, a second on real drivers), else the
// share of the tick spent in syncs; futex waits of the whole process.
void Daemon::apply_probes([[maybe_unused]] std::uint32_t pid, [[maybe_unused]] const Tracked& t,
                          [[maybe_unused]] std::uint64_t now_ns, [[maybe_unused]] bool runnable,
                          [[maybe_unused]] std::optional<std::uint32_t> nvml_util,
                          [[maybe_unused]] policy::TaskUpdate& u,
                          [[maybe_unused]] std::uint64_t& main_futex_wait_ns) {
#ifdef ZERNEL_HAVE_PROBES
  if (!probes_ || !t.probed) return;
  auto sample = probes_->read(pid, now_ns);
  if (!sample) return;
  const collect::ProbeSample& p = *sample;
  main_futex_wait_ns = p.main_futex_wait_ns;
  collect::SyncState st;
  st.in_sync = p.in_sync;
  st.in_sync_since_ns = p.in_sync_since_ns;
  st.last_return_ns = p.last_sync_return_ns;
  st.burst_since_return_ns = p.cpu_burst_ns;
  st.last_burst_ns = p.last_burst_ns;
  st.sync_time_delta_ns = p.sync_time_delta_ns;
  st.interval_ns = p.interval_ns;
  st.runnable = runnable;
  st.nvml_util_pct = nvml_util;
  // The probes' stamps are real CLOCK_MONOTONIC times, and the tick may run late: compare with
  // the time of this read, not the tick's deadline.
  const collect::SyncSignals sig = collect::sync_signals(st, monotonic_now_ns(), tick_ns_);
  u.cpu_burst_duration_ns = sig.cpu_burst_ns;
  if (sig.wait_blocks) u.gpu_wait_blocks = sig.wait_blocks;
  if (p.last_sync_return_ns > 0) u.last_gpu_sync_ns = p.last_sync_return_ns;
  if (!u.gpu_utilization || *u.gpu_utilization < sig.gpu_floor_pct) {
    u.gpu_utilization = static_cast<std::uint8_t>(sig.gpu_floor_pct);
  }
  if (probes_->has_futex()) {
    u.futex_wait_count =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(p.futex_waits_delta, UINT32_MAX));
  }
#endif
}

void Daemon::drop(std::uint32_t pid) {
#ifdef ZERNEL_HAVE_PROBES
  if (probes_) {
    if (auto it = tracked_.find(pid); it != tracked_.end() && it->second.probed) {
      probes_->forget(pid);
      (void)probes_->untrack(pid);
    }
  }
#endif
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
  if (power_) {
    if (auto r = power_->restore(); !r) spdlog::error("power: {}", r.error().message());
  }
  if (delayacct_) {
    if (auto r = delayacct_->restore(); !r) spdlog::error("{}", r.error().message());
  }
  if (http_) http_->stop();
  control_.reset();  // closes and removes the socket
}

// ---- run-time control (daemon/control.hpp) and SIGHUP ----

void Daemon::service_wakeup(int /*stop_fd*/, int reload_fd) {
  if (StopSignals::drain_reload(reload_fd)) {
    spdlog::info("SIGHUP: reloading {}", opts_.config_path.empty() ? "(no file)" : opts_.config_path);
    if (auto r = reload_config(); !r) {
      spdlog::error("reload failed, keeping the running configuration: {}", r.error().message());
    }
  }
  if (control_) {
    control_->service([this](const ControlRequest& req) { return handle_control(req); },
                      monotonic_now_ns());
  }
}

nlohmann::json Daemon::tenant_list_json() const {
  nlohmann::json list = nlohmann::json::array();
  const policy::TenantRegistry& reg = engine_.tenants();
  for (std::uint16_t slot : reg.slots()) {
    const policy::TenantSpec& t = reg.spec(slot);
    list.push_back({{"id", t.id},
                    {"gpus", t.gpus},
                    {"class", policy::class_name(t.priority_class)},
                    {"cpu_weight", t.cpu_weight ? nlohmann::json(*t.cpu_weight) : nlohmann::json()},
                    {"weight", reg.weight(slot)},
                    {"cgroup_weight", reg.cgroup_weight(slot)},
                    {"tasks", engine_.tenant_task_count(slot)},
                    {"source", runtime_tenants_.contains(t.id) ? "runtime" : "config"}});
  }
  return list;
}

nlohmann::json Daemon::handle_control(const ControlRequest& req) {
  using nlohmann::json;
  std::vector<config::TenantConfig>& tenants = opts_.config.tenants;
  auto find_cfg = [&tenants](std::string_view id) {
    return std::find_if(tenants.begin(), tenants.end(),
                        [id](const config::TenantConfig& t) { return t.spec.id == id; });
  };
  switch (req.op) {
    case ControlOp::tenant_add: {
      const bool existed = engine_.tenants().find(req.tenant.id).has_value();
      if (auto r = engine_.upsert_tenant(req.tenant); !r) return error_reply(r.error().message());
      if (auto it = find_cfg(req.tenant.id); it != tenants.end()) {
        it->spec = req.tenant;  // keeps its match rules
      } else {
        tenants.push_back(config::TenantConfig{req.tenant, {}});
        runtime_tenants_.insert(req.tenant.id);
      }
      spdlog::info("control: tenant \"{}\" {} ({} GPUs, class {})", req.tenant.id,
                   existed ? "replaced" : "added", req.tenant.gpus,
                   policy::class_name(req.tenant.priority_class));
      json out = ok_reply();
      out["replaced"] = existed;
      out["tenants"] = tenant_list_json();
      return out;
    }
    case ControlOp::tenant_remove: {
      if (!engine_.remove_tenant(req.tenant.id)) {
        return error_reply("tenant \"" + req.tenant.id + "\" is not registered");
      }
      if (auto it = find_cfg(req.tenant.id); it != tenants.end()) tenants.erase(it);
      runtime_tenants_.erase(req.tenant.id);
      spdlog::info("control: tenant \"{}\" removed", req.tenant.id);
      return ok_reply();
    }
    case ControlOp::tenant_list: {
      json out = ok_reply();
      out["tenants"] = tenant_list_json();
      return out;
    }
    case ControlOp::tenant_assign: {
      if (!engine_.tenants().find(req.assign_to)) {
        return error_reply("tenant \"" + req.assign_to + "\" is not registered");
      }
      const std::string dir = opts_.proc_root + "/" + std::to_string(req.pid);
      // The process's identity (pid, start time), as for discovered ones: a later process that
      // reuses the pid does not inherit the tenant (sample_signals drops it).
      auto stat = collect::read_stat(opts_.proc_root, req.pid);
      if (!stat || stat->is_dead()) {
        return error_reply("no process with pid " + std::to_string(req.pid));
      }
      if (auto why = assign_refusal({req.pid, stat->ppid, stat->flags, stat->comm},
                                    static_cast<std::uint32_t>(::getpid()), host_pid_namespace_,
                                    opts_.config.multi_tenant.protected_comms)) {
        return error_reply("refused: " + *why);
      }
      if (auto it = tracked_.find(req.pid);
          it != tracked_.end() && it->second.start != 0 && it->second.start != stat->starttime_ticks) {
        drop(req.pid);  // the tracked process with this pid is gone: a new one has it now
      }
      if (auto r = engine_.assign_pid(req.pid, req.assign_to); !r) {
        return error_reply(r.error().message());
      }
      if (!tracked_.contains(req.pid)) {
        // Now tracked by the engine: sample it each tick and drop it when it exits.
        std::string comm;
        std::ifstream(dir + "/comm") >> comm;
        tracked_[req.pid] = Tracked{comm, std::nullopt, collect::ProcessRole::matched};
        tracked_[req.pid].start = stat->starttime_ticks;
      }
      spdlog::info("control: pid {} assigned to tenant \"{}\"", req.pid, req.assign_to);
      return ok_reply();
    }
    case ControlOp::status: {
      const std::uint64_t now = monotonic_now_ns();
      telemetry::Snapshot s = telemetry::take_snapshot(engine_, now, true);
      s.backend = std::string(backend_->name());
      for (telemetry::TaskView& v : s.tasks) {
        if (auto it = tracked_.find(v.pid); it != tracked_.end()) v.comm = it->second.comm;
        v.tenant_share = backend_->tenant_share_note(v.pid);
      }
      json out = ok_reply();
      out["status"] = telemetry::status_json(s);
      return out;
    }
  }
  return error_reply("unknown op");
}

Result<void> Daemon::apply_tenants(std::vector<config::TenantConfig> next) {
  if (next.size() > policy::kMaxTenants) {
    return Error("more than " + std::to_string(policy::kMaxTenants) + " tenants");
  }
  // Remove first, so the registry never holds more than the final count; the specs were
  // validated by the config parser, so the upserts cannot fail.
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
    if (auto r = engine_.upsert_tenant(t.spec); !r) return r.error();
  }
  opts_.config.tenants = std::move(next);
  return Ok{};
}

Result<void> Daemon::reload_config() {
  if (opts_.config_path.empty()) return Error("no configuration file to reload");
  auto loaded = config::load_config_file(opts_.config_path, opts_.config_missing_ok);
  if (!loaded) return loaded.error();
  for (const std::string& w : loaded->warnings) spdlog::warn("{}", w);
  const config::Config& next = loaded->config;
  config::Config& cur = opts_.config;

  // Tenants: the file's, plus those added with `tenant add` whose ids the file does not define.
  std::vector<config::TenantConfig> tenants = next.tenants;
  for (const config::TenantConfig& t : cur.tenants) {
    if (!runtime_tenants_.contains(t.spec.id)) continue;
    const bool in_file = std::any_of(next.tenants.begin(), next.tenants.end(),
                                     [&t](const config::TenantConfig& n) {
                                       return n.spec.id == t.spec.id;
                                     });
    if (!in_file) tenants.push_back(t);
  }
  if (tenants.size() > policy::kMaxTenants) {
    return Error(opts_.config_path + ": with the tenants added at run time, more than " +
                 std::to_string(policy::kMaxTenants) + " tenants");
  }
  const std::size_t before = cur.tenants.size();
  if (auto r = apply_tenants(std::move(tenants)); !r) return r.error();
  std::erase_if(runtime_tenants_, [&next](const std::string& id) {
    return std::any_of(next.tenants.begin(), next.tenants.end(),
                       [&id](const config::TenantConfig& n) { return n.spec.id == id; });
  });
  cur.multi_tenant.default_priority_class = next.multi_tenant.default_priority_class;
  cur.multi_tenant.protected_comms = next.multi_tenant.protected_comms;

  if (next.general.log_level != cur.general.log_level) {
    if (auto level = log::parse_level(next.general.log_level)) spdlog::set_level(*level);
    cur.general.log_level = next.general.log_level;
  }

  // Settings fixed when the engine, the loop and the HTTP server were built.
  std::vector<std::string> restart;
  if (next.general.phase_eval_interval_ms != cur.general.phase_eval_interval_ms) {
    restart.emplace_back("[general] phase_eval_interval_ms");
  }
  if (next.general.gpu_poll_interval_ms != cur.general.gpu_poll_interval_ms) {
    restart.emplace_back("[general] gpu_poll_interval_ms");
  }
  if (next.general.max_tracked_tasks != cur.general.max_tracked_tasks) {
    restart.emplace_back("[general] max_tracked_tasks");
  }
  if (next.phase_detection != cur.phase_detection) restart.emplace_back("[phase_detection]");
  if (next.numa != cur.numa) restart.emplace_back("[numa]");
  if (next.multi_tenant.enabled != cur.multi_tenant.enabled) {
    restart.emplace_back("[multi_tenant] enabled");
  }
  if (next.telemetry != cur.telemetry) restart.emplace_back("[telemetry]");
  if (next.power != cur.power) restart.emplace_back("[power]");
  if (next.sched_ext != cur.sched_ext) restart.emplace_back("[sched_ext]");
  spdlog::info("reloaded {}: {} tenant(s) (was {}); applied: tenants, match rules, log_level",
               opts_.config_path, opts_.config.tenants.size(), before);
  if (!restart.empty()) {
    std::string list;
    for (const std::string& r : restart) list += (list.empty() ? "" : ", ") + r;
    spdlog::warn("{}: changed settings that take effect only after a restart (still running "
                 "with the old values): {}",
                 opts_.config_path, list);
  }
  return Ok{};
}

}  // namespace zernel::daemon
