// The daemon's collectors, once per tick (daemon.hpp, steps 1 and 2): process discovery and
// NVML's process list, GPU utilisation, per-process signals, the GPU-sync probes and CPU loads,
// turned into task updates for the engine.

#include <spdlog/spdlog.h>

#include <algorithm>

#include "collect/sync_signals.hpp"
#include "collect/wait_state.hpp"
#ifdef ZERNEL_HAVE_PROBES
#include "collect/probes/cuda_library.hpp"
#endif
#include "daemon/daemon.hpp"
#include "daemon/ticker.hpp"
#include "sys/procfs.hpp"

namespace zernel::daemon {

#ifdef ZERNEL_HAVE_PROBES
namespace {

collect::SyncState sync_state(const collect::ProbeSample& p, bool runnable,
                              std::optional<std::uint32_t> nvml_util) {
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
  return st;
}

}  // namespace
#endif

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
  if (nvml_ && !nvml_procs_fresh_) read_nvml_processes();
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
  for (const collect::DiscoveredProcess& p : scan->processes) track_discovered(p, now_ns);
  for (auto& [pid, t] : tracked_) {
    if (t.role == collect::ProcessRole::gpu_owner && !t.probed) attach_probes(pid, t);
  }
  mark_worker_owners(*scan);
  if (scan->dropped > 0 && !warned_cap_) {
    spdlog::warn("{} processes qualify beyond max_tracked_tasks ({}): not tracked", scan->dropped,
                 opts_.config.general.max_tracked_tasks);
    warned_cap_ = true;
  }
}

void Daemon::read_nvml_processes() {
  nvml_procs_.clear();
  if (auto procs = nvml_->compute_processes()) {
    nvml_procs_ = std::move(*procs);
  } else {
    count_error("nvml");
  }
}

// One process of a scan: a known one may have changed GPUs; a new one (or a new process that
// reuses a tracked pid) is registered with its tenant and role.
void Daemon::track_discovered(const collect::DiscoveredProcess& p, std::uint64_t now_ns) {
  if (p.change == collect::ProcessChange::unchanged) {
    tracked_[p.pid].gpu = p.gpu;
    // A tenant that appeared after the process (a pod's, from the kubelet): assign it now. A
    // process with a tenant keeps it (`tenant assign` is not undone by the rules).
    if (p.tenant && *p.tenant < opts_.config.tenants.size() &&
        engine_.tenant_of(p.pid) == nullptr) {
      (void)engine_.assign_pid(p.pid, opts_.config.tenants[*p.tenant].spec.id);
    }
    if (p.gpu) {
      policy::TaskUpdate u;
      u.gpu_id = p.gpu;
      engine_.update_task(p.pid, u);
    }
    return;
  }
  if (p.change == collect::ProcessChange::replaced) drop(p.pid);
  if (auto r = engine_.register_task(p.pid, p.is_ml, p.gpu, now_ns); !r) {
    count_error("discovery");
    return;
  }
  if (p.tenant && *p.tenant < opts_.config.tenants.size()) {
    (void)engine_.assign_pid(p.pid, opts_.config.tenants[*p.tenant].spec.id);
  }
  tracked_[p.pid] = Tracked{p.comm, p.gpu, p.role};
  tracked_[p.pid].start = p.starttime_ticks;
  set_event_role(p.pid, tracked_[p.pid]);
  if (p.role == collect::ProcessRole::dataloader_worker) {
    policy::TaskUpdate u;
    u.dataloader_worker = true;
    engine_.update_task(p.pid, u);
  }
}

// GPU owners with DataLoader workers: their main thread is sampled for input waits.
void Daemon::mark_worker_owners(const collect::DiscoveryResult& scan) {
  for (auto& [pid, t] : tracked_) t.has_workers = false;
  for (const collect::DiscoveredProcess& p : scan.processes) {
    if (p.role != collect::ProcessRole::dataloader_worker) continue;
    if (auto it = tracked_.find(p.ppid); it != tracked_.end()) it->second.has_workers = true;
  }
}

// Per-process utilisation where NVML gives it; an empty answer (no process used the GPU since
// the last call) is a measurement of 0 for everyone, not a reason to fall back to the device's
// figure: that one is averaged over up to a second and would make a GPU owner that has just
// stopped using its GPU look busy for that long.
void Daemon::refresh_gpu_utilization() {
  proc_util_.clear();
  proc_util_ok_ = !nvml_->devices().empty();
  for (const sys::GpuDevice& dev : nvml_->devices()) {
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
  drain_phase_events();
  pids_.clear();
  for (const auto& [pid, t] : tracked_) pids_.push_back(pid);
  std::sort(pids_.begin(), pids_.end());
  signals_.sample(pids_, now_ns, samples_);
  for (const collect::ProcessSignals& s : samples_) {
    if (is_another_process(s)) {
      if (!s.gone) spdlog::debug("pid {} was reused by a new process: dropped", s.pid);
      drop(s.pid);
      continue;
    }
    engine_.update_task(s.pid, task_update(s, now_ns));
    account_tenant_cpu(s);
  }
  if (auto loads = cpu_load_.sample()) {
    if (!loads->empty()) engine_.set_cpu_loads(*loads);
  } else {
    count_error("cpu_load");
  }
}

// A pid whose process is not the one registered (tracked_[pid].start; a discovered one, or one
// named by `tenant assign`) belongs to a new process: the old one's tenant and state are not
// its. Discovery registers it afresh if it qualifies.
bool Daemon::is_another_process(const collect::ProcessSignals& s) {
  const std::uint64_t start = tracked_[s.pid].start;
  return s.gone || s.restarted || (s.starttime != 0 && start != 0 && s.starttime != start);
}

policy::TaskUpdate Daemon::task_update(const collect::ProcessSignals& s, std::uint64_t now_ns) {
  policy::TaskUpdate u = s.update();
  const Tracked& t = tracked_[s.pid];
  if (t.event_role) {
    const auto it = event_phase_.find(s.pid);
    u.event_phase = it != event_phase_.end() ? it->second : policy::Phase::unknown;
  }
  const GpuUtil util = gpu_utilization_of(s.pid, t);
  u.gpu_utilization = static_cast<std::uint8_t>(std::min<std::uint32_t>(util.pct, 100));
  set_cpu_fraction(s, now_ns, u);
  std::uint64_t main_futex_wait_ns = 0;
  apply_probes(s.pid, t, now_ns, s.state == 'R',
               util.measured ? std::optional(util.pct) : std::nullopt, u, main_futex_wait_ns);
  if (t.role == collect::ProcessRole::gpu_owner) {
    apply_main_thread_wait(s.pid, t, main_futex_wait_ns, u);
  }
  if (spdlog::should_log(spdlog::level::trace)) trace_update(s, t, u);
  return u;
}

Daemon::GpuUtil Daemon::gpu_utilization_of(std::uint32_t pid, const Tracked& t) const {
  if (auto it = proc_util_.find(pid); it != proc_util_.end()) return {it->second, true};
  // NVML measures per process and saw none of this one's work.
  if (proc_util_ok_) return {0, true};
  // No per-process figures: the device's, for its owners.
  if (t.gpu && t.role == collect::ProcessRole::gpu_owner && *t.gpu < device_util_.size()) {
    return {device_util_[*t.gpu], false};
  }
  return {0, false};
}

void Daemon::set_cpu_fraction(const collect::ProcessSignals& s, std::uint64_t now_ns,
                              policy::TaskUpdate& u) {
  if (tracked_[s.pid].role != collect::ProcessRole::dataloader_worker) {
    if (s.cpu_time_ns) {
      u.cpu_fraction =
          static_cast<float>(static_cast<double>(*s.cpu_time_ns) / static_cast<double>(tick_ns_));
    }
    return;
  }
  // A worker wanting the CPU is producing, also while it waits for one: time on the CPU plus
  // time runnable on a run queue (/proc/PID/schedstat), so contention does not hide it. And as
  // it stands now: running or runnable (R) or in disk I/O (D) is producing this instant, which
  // the interval's share (none yet on a first sample) may not show for a tick.
  const auto busy = worker_busy_fraction(s.pid, now_ns);
  const bool busy_now = s.state == 'R' || s.state == 'D';
  if (busy_now) {
    u.cpu_fraction = 1.0F;
  } else if (busy) {
    u.cpu_fraction = busy;
  }
}

// collect/wait_state.hpp: what a GPU owner's main thread is blocked in now. On its workers'
// queue: waiting for data. In futex, or running between the short waits of a wait loop (the
// probes' stamp of its last futex wait): a collective's wait; this beats the probes'
// per-process futex count, which every helper thread's lock adds to.
void Daemon::apply_main_thread_wait(std::uint32_t pid, const Tracked& t,
                                    std::uint64_t main_futex_wait_ns, policy::TaskUpdate& u) {
  const collect::MainThreadWait w = collect::read_main_thread_wait(opts_.proc_root, pid);
  if (t.has_workers && w == collect::MainThreadWait::input) u.io_wait_fraction = 1.0F;
  if (w != collect::MainThreadWait::unknown) {
    u.futex_wait_count =
        collect::main_thread_in_futex_wait(w, main_futex_wait_ns, monotonic_now_ns()) ? 1U : 0U;
  }
}

void Daemon::trace_update(const collect::ProcessSignals& s, const Tracked& t,
                          const policy::TaskUpdate& u) {
  spdlog::trace(
      "signals pid {} role {}: gpu {} io {:.2f} burst {} sync {} futex {} nccl {} "
      "cpu {:.2f} state {}",
      s.pid, static_cast<int>(t.role), u.gpu_utilization.value_or(255),
      u.io_wait_fraction.value_or(-1.0F), u.cpu_burst_duration_ns.value_or(0),
      u.last_gpu_sync_ns.value_or(0), u.futex_wait_count.value_or(0),
      u.nccl_active ? (*u.nccl_active ? 1 : 0) : -1, u.cpu_fraction.value_or(-1.0F), s.state);
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
  // The probes' stamps are real CLOCK_MONOTONIC times, and the tick may run late: compare with
  // the time of this read, not the tick's deadline.
  const collect::SyncSignals sig =
      collect::sync_signals(sync_state(p, runnable, nvml_util), monotonic_now_ns(), tick_ns_);
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

}  // namespace zernel::daemon
