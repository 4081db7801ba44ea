// The daemon's collectors, once per tick (daemon.hpp, steps 1 and 2): process discovery and
// NVML's process list, GPU utilisation, the phases from events and CPU loads. The per-process
// merge (signals, schedstat, probes, main thread's wait) is collect::TickBuilder's
// (collect/tick_builder.hpp); the daemon hands it what it tracks and acts on what it returns.

#include <spdlog/spdlog.h>

#include <algorithm>

#include "collect/tick_builder.hpp"
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

// The tick builder's view of the GPU sync probes.
class SyncProbeSource final : public collect::ProbeSource {
 public:
  explicit SyncProbeSource(collect::GpuSyncProbes& probes) : probes_(probes) {}
  std::optional<collect::ProbeSample> read(std::uint32_t pid, std::uint64_t now_ns) override {
    auto sample = probes_.read(pid, now_ns);
    if (!sample) return std::nullopt;
    return *sample;
  }
  [[nodiscard]] bool counts_futex_waits() const override { return probes_.has_futex(); }

 private:
  collect::GpuSyncProbes& probes_;
};

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

// Per-process utilisation where NVML gives it, and each device's (how the tick builder uses
// them: collect/tick_builder.hpp).
void Daemon::refresh_gpu_utilization() {
  gpu_util_.per_process.clear();
  gpu_util_.per_process_ok = !nvml_->devices().empty();
  for (const sys::GpuDevice& dev : nvml_->devices()) {
    if (auto u = nvml_->utilization(dev.index)) {
      if (dev.index < gpu_util_.device.size()) gpu_util_.device[dev.index] = u->gpu_percent;
    }
    if (auto per = nvml_->process_utilization(dev.index)) {
      for (const auto& [pid, sm] : *per) {
        std::uint32_t& pct = gpu_util_.per_process[pid];
        pct = std::max(pct, sm);
      }
    } else {
      gpu_util_.per_process_ok = false;
    }
  }
}

void Daemon::sample_signals(std::uint64_t now_ns) {
  // Utilisation every tick, not every poll: NVML's per-process figure is "since the last call",
  // and a 500 ms lag would miss the detector's commit window (stability + 1 ticks) of a phase.
  if (nvml_) refresh_gpu_utilization();
  drain_phase_events();
  tick_processes_.clear();
  for (const auto& [pid, t] : tracked_) {
    tick_processes_.push_back({pid, t.role, t.gpu, t.start, t.has_workers, t.probed, t.event_role});
  }
  collect::TickInputs in;
  in.processes = tick_processes_;
  in.now_ns = now_ns;
  in.tick_ns = tick_ns_;
  in.gpu = nvml_ ? &gpu_util_ : nullptr;
  in.event_phases = &event_phase_;
#ifdef ZERNEL_HAVE_PROBES
  std::optional<SyncProbeSource> probes;
  if (probes_) in.probes = &probes.emplace(*probes_);
#endif
  tick_builder_.build(in, tick_result_);
  for (std::uint32_t pid : tick_result_.gone) drop(pid);
  for (const collect::ProcessTick& p : tick_result_.updates) {
    engine_.update_task(p.pid, p.update);
    account_tenant_cpu(p.pid, p.cpu_time_ns);
  }
  if (auto loads = cpu_load_.sample()) {
    if (!loads->empty()) engine_.set_cpu_loads(*loads);
  } else {
    count_error("cpu_load");
  }
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
    // Nothing newly attached: either no libcuda mapped yet, or its files are attached in it.
    auto maps = collect::probes::read_libcuda_mappings(opts_.proc_root, pid);
    if (!maps || maps->empty()) return;
  }
  t.probed = true;
  if (probes_->has_futex()) (void)probes_->track(pid);
#endif
}

}  // namespace zernel::daemon
