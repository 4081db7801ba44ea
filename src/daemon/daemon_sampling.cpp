// The daemon's collectors, once per tick (daemon.hpp, steps 1 and 2): process discovery and
// NVML's process list (NVML and the process events opened here at start-up), GPU utilisation,
// the phases from events and CPU loads. The per-process merge (signals, schedstat, probes, main
// thread's wait) is collect::TickBuilder's (collect/tick_builder.hpp); the daemon hands it what
// it tracks and acts on what it returns.
//
// Following processes. With the kernel's process events (collect/proc_events.hpp) the daemon reads
// them every tick: an exit drops a tracked process at once; forks, execs and renames go to
// discovery, which re-reads only those processes, at the next poll tick, or at once when a tracked
// GPU owner forked (a DataLoader worker); NVML's list is read every tick while a process forked or
// exec'd within kNvmlEagerNs is still alive (while commands churn: and has lived
// kNvmlSpawnMinAgeNs), else every poll tick, and a new process in it is followed then; all of /proc
// is listed every kRescanNs only (a safety net), or at once when events were lost. A process whose
// phases come from events is not read at all unless it has a tenant, and then on publish ticks for
// its CPU time only, ranks included (SampleMode::cpu_time: all of them from one read of the BPF
// task iterator, collect/probes/task_cpu_iter.hpp, where it loads; else a single-threaded one's
// from its schedstat, its stat every tenth time); between publish ticks the tick builder is not
// even handed it (TickInputs::complete). Processes under the periodic rules are read every
// tick, those matched only by a rule less often while they sleep (SampleMode::idle_backoff).
// Without process events (no CAP_NET_ADMIN, another pid namespace) discovery lists /proc every poll
// tick and every tracked process is read every tick, as before.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "collect/tick_builder.hpp"
#include "collect/wait_state.hpp"
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

void Daemon::open_process_events() {
  auto pe = collect::ProcEvents::open();
  if (!pe) {
    spdlog::warn("{}: discovery lists /proc every {} ms instead", pe.error().message(),
                 opts_.config.general.gpu_poll_interval_ms);
    return;
  }
  proc_events_ = std::move(*pe);
  // The safety net's scans re-read each process's fd/ and rule attributes (what can change
  // without an event: a device opened late, a cgroup move, a rewritten command line) at every
  // scan, or every kAttrScansWithNvml-th one when NVML lists the GPU processes every poll tick:
  // fd/ listings were most of a scan's cost.
  const std::uint32_t attr_scans = nvml_ ? kAttrScansWithNvml : 1;
  discovery_.set_rescan_every(attr_scans);
  spdlog::info(
      "following processes by the kernel's process events{}; all of /proc every {} s, their "
      "descriptors and attributes every {} s",
      proc_events_->filtered() ? "" : " (unfiltered: a kernel before 6.6)",
      kRescanNs / 1'000'000'000, attr_scans * kRescanNs / 1'000'000'000);
#ifdef ZERNEL_HAVE_PROBES
  // The tenants' CPU time (SampleMode::cpu_time, which needs the process events) in one read.
  // Benchmarks only: $ZERNEL_TEST_NO_TASK_ITER=1 keeps the /proc reads, for a comparison of the
  // two in one build (bench/daemon_cpu.sh).
  if (const char* off = std::getenv("ZERNEL_TEST_NO_TASK_ITER");
      off != nullptr && std::string_view(off) == "1") {
    spdlog::info("$ZERNEL_TEST_NO_TASK_ITER=1: a tenant's processes' CPU time is read from /proc");
    return;
  }
  auto it = collect::TaskCpuIterator::open();
  if (!it) {
    spdlog::info("{}: a tenant's processes' CPU time is read from /proc, one read each",
                 it.error().message());
    return;
  }
  task_cpu_ = std::move(*it);
  spdlog::info("a tenant's processes' CPU time comes from a BPF task iterator, one read a tick");
#endif
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

bool Daemon::new_process_appeared() {
  bool found = false;
  auto consider = [&](std::uint32_t pid) {
    if (tracked_.contains(pid) || !reported_new_.insert(pid).second) return;
    found = true;
  };
  if (nvml_) {
    ++stats_.nvml_lists;
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

// Every tick: the process events, then discovery when they (or NVML, or the poll tick) ask.
void Daemon::follow_processes(std::uint64_t now_ns, bool poll_tick) {
  if (!proc_events_) {
    if (poll_tick || new_process_appeared()) poll_processes(now_ns);
    return;
  }
  proc_event_buf_.clear();
  const bool complete = proc_events_->drain(proc_event_buf_);
  bool urgent = !complete;
  for (const collect::ProcEvent& e : proc_event_buf_) {
    if (e.kind == collect::ProcEventKind::thread_exit) {
      thread_phases_.exited(e.pid, e.tid, e.t_ns);
    } else if (e.kind == collect::ProcEventKind::exit) {
      if (tracked_.contains(e.pid)) drop(e.pid);
    } else if (e.kind == collect::ProcEventKind::fork) {
      // A tracked process's child (a DataLoader worker of a GPU owner) is followed at once.
      urgent = urgent || tracked_.contains(e.ppid);
    } else if (tracked_.contains(e.pid)) {
      urgent = true;  // a tracked process exec'd or renamed itself
    }
  }
  discovery_.apply(proc_event_buf_, now_ns);
  // Lifetimes and ages against the clock now, not the tick's deadline: the events carry the
  // kernel's own times, and a late tick (a busy machine, a tracer on the daemon) would date every
  // event that came after its deadline at the deadline, ages and lifetimes off by up to its
  // lateness: under `strace -f` the short commands of a loop beside kept NVML's list at every
  // tick (docs/benchmarks.md).
  const std::uint64_t clock_ns = monotonic_ns();
  recent_spawns_.apply(proc_event_buf_, clock_ns);
  if (nvml_ && (poll_tick || recent_spawns_.any(clock_ns))) {
    // NVML's list every tick while a process forked or exec'd within kNvmlEagerNs is alive (a
    // new rank creates its GPU context in its first seconds: it is followed at once; a short
    // command leaves the window at its exit, and while such commands run back to back a process
    // counts only once it has lived kNvmlSpawnMinAgeNs: RecentSpawns), else every poll tick; and
    // at every discovery the events ask for (poll_processes reads it then).
    read_nvml_processes();
    nvml_procs_fresh_ = true;
    urgent = urgent || nvml_procs_ != discovered_nvml_;
  }
  const bool rules = opts_.config.tenants != discovered_tenants_;
  if (!complete || now_ns >= next_rescan_ns_) {
    if (!complete) spdlog::debug("process events were lost: listing /proc");
    poll_processes(now_ns);
  } else if (urgent || rules || (poll_tick && discovery_.pending(now_ns))) {
    poll_processes(now_ns, false);
  }
}

void Daemon::poll_processes(std::uint64_t now_ns, bool full) {
  if (full) {
    ++stats_.scans;
    next_rescan_ns_ = now_ns + kRescanNs;
  } else {
    ++stats_.updates;
  }
  reported_new_.clear();
  if (nvml_ && !nvml_procs_fresh_) read_nvml_processes();
  collect::DiscoveryInput in;
  in.nvml_processes = nvml_ ? &nvml_procs_ : nullptr;
  in.tenants = opts_.config.tenants;
  in.max_tracked_tasks = opts_.config.general.max_tracked_tasks;
  if (nvml_) discovered_nvml_ = nvml_procs_;
  discovered_tenants_ = opts_.config.tenants;
  auto scan = full ? discovery_.scan(in) : discovery_.update(in, now_ns);
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
  ++stats_.nvml_lists;
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

// How much of a tracked process to read this tick (collect/signals.hpp's SampleMode).
collect::SampleMode Daemon::sample_mode(std::uint32_t pid, const Tracked& t,
                                        bool publish_tick) const {
  using collect::SampleMode;
  if (!t.event_role) {
    // The periodic rules. NCCL's (rule 2) needs futex waits, which are counted for GPU owners
    // only: for other processes the NCCL check could never change their phase. A process that
    // is only matched by a rule (a pod's other processes, often asleep for long) is looked at
    // less often while it sleeps; GPU owners and their workers every tick.
    if (t.role == collect::ProcessRole::gpu_owner) return SampleMode::full;
    return t.role == collect::ProcessRole::matched ? SampleMode::idle_backoff : SampleMode::no_nccl;
  }
  // Phases from events: no signal of the periodic rules is needed. Without process events the
  // stat of every tick is how the daemon learns the process exited.
  if (!proc_events_) return SampleMode::stat_only;
  // Else nothing but a tenant's account of CPU time, on publish ticks (a rank's state and its
  // probes' figures would feed only the periodic rules, which do not run for it).
  if (!publish_tick) return SampleMode::skip;
  return engine_.tenant_of(pid) != nullptr ? SampleMode::cpu_time : SampleMode::skip;
}

void Daemon::sample_signals(std::uint64_t now_ns, bool publish_tick, bool poll_tick) {
  // Utilisation every tick, not every poll: NVML's per-process figure is "since the last call",
  // and a 500 ms lag would miss the detector's commit window (stability + 1 ticks) of a phase.
  if (nvml_) refresh_gpu_utilization();
  drain_phase_events();
  // Every tracked process on publish ticks; between them only those read this tick (with
  // process events, most of a node's tracked processes are ranks and workers whose phases come
  // from events, not read between publishes: the tick's work is then the periodic ones').
  tick_processes_.clear();
  for (const auto& [pid, t] : tracked_) {
    const collect::SampleMode mode = sample_mode(pid, t, publish_tick);
    if (!publish_tick && mode == collect::SampleMode::skip) continue;
    tick_processes_.push_back(
        {pid, t.role, t.gpu, t.start, t.has_workers, t.probed, t.event_role, mode});
  }
  collect::TickInputs in;
  in.processes = tick_processes_;
  in.complete = publish_tick;
  in.now_ns = now_ns;
  in.tick_ns = tick_ns_;
  in.gpu = nvml_ ? &gpu_util_ : nullptr;
  in.event_phases = &event_phase_;
#ifdef ZERNEL_HAVE_PROBES
  std::optional<SyncProbeSource> probes;
  if (probes_) in.probes = &probes.emplace(*probes_);
  in.task_cpu = task_cpu_.get();
#endif
  tick_builder_.build(in, tick_result_);
  for (std::uint32_t pid : tick_result_.gone) drop(pid);
  for (const collect::ProcessTick& p : tick_result_.updates) {
    engine_.update_task(p.pid, p.update);
    account_tenant_cpu(p.pid, p.cpu_time_ns);
  }
  // The CPUs' loads over the last poll interval. /proc/stat costs its reader a sum over every
  // CPU of every interrupt's count (38 us on this 2-CPU host; it grows with CPUs times
  // interrupts on a large node), so it is read every poll tick, not every tick; the engine
  // re-ranks the CPUs at every tick (which starts its placements afresh) with the last loads.
  if (poll_tick || cpu_loads_.empty()) {
    ++stats_.cpu_load_reads;
    if (auto loads = cpu_load_.sample()) {
      if (!loads->empty()) cpu_loads_ = std::move(*loads);
    } else {
      count_error("cpu_load");
    }
  }
  if (!cpu_loads_.empty()) engine_.set_cpu_loads(cpu_loads_);
}

}  // namespace zernel::daemon
