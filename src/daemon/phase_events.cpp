// The BPF probes on the daemon's side (collect/probes): opened at start-up (the GPU sync probes,
// futex counts and the phase event rules), attached to the libcuda a GPU owner maps once
// discovery finds it, and the phases from events.
//
// Phases from events (docs/probes.md, "Phases from events"): the daemon's side of the BPF event
// rules. Discovery names each GPU owner (rank rules) and DataLoader worker (worker rules) to the
// probes; every tick the changes the BPF side made since the last one are drained from its ring
// buffer, in order. A process's phase is its main thread's (tid == pid): it goes to the engine as
// TaskUpdate::event_phase (committed at once) and to the phase log with the time of the event
// that made it; with --phase-log-threads every thread's change is logged too, with its "tid".
// Enforcement by the userspace backend follows per tick; the sched_ext scheduler reads the
// threads' phases itself.
#include <spdlog/spdlog.h>

#include "collect/wait_state.hpp"
#ifdef ZERNEL_HAVE_PROBES
#include "collect/probes/cuda_library.hpp"
#endif
#include "daemon/daemon.hpp"

namespace zernel::daemon {
#ifdef ZERNEL_HAVE_PROBES
namespace {

// The names of collect::PhaseCause, for traces.
std::string_view cause_name(std::uint8_t cause) {
  switch (static_cast<collect::PhaseCause>(cause)) {
    case collect::PhaseCause::sync_enter:
      return "sync_enter";
    case collect::PhaseCause::sync_return:
      return "sync_return";
    case collect::PhaseCause::long_sync:
      return "long_sync";
    case collect::PhaseCause::nccl_wait:
      return "nccl_wait";
    case collect::PhaseCause::nccl_done:
      return "nccl_done";
    case collect::PhaseCause::data_wait:
      return "data_wait";
    case collect::PhaseCause::worker_run:
      return "worker_run";
    case collect::PhaseCause::worker_idle:
      return "worker_idle";
    case collect::PhaseCause::optimizer_bound:
      return "optimizer_bound";
    case collect::PhaseCause::data_arrived:
      return "data_arrived";
    case collect::PhaseCause::not_driver:
      return "not_driver";
    case collect::PhaseCause::batch_wait:
      return "batch_wait";
    case collect::PhaseCause::optimizer_end:
      return "optimizer_end";
    case collect::PhaseCause::batch_taken:
      return "batch_taken";
  }
  return "event";
}

}  // namespace
#endif

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

void Daemon::set_event_role([[maybe_unused]] std::uint32_t pid, [[maybe_unused]] Tracked& t) {
#ifdef ZERNEL_HAVE_PROBES
  if (!phase_events_on_ || !probes_) return;
  collect::PhaseRole role{};
  if (t.role == collect::ProcessRole::gpu_owner) {
    role = collect::PhaseRole::rank;
  } else if (t.role == collect::ProcessRole::dataloader_worker) {
    role = collect::PhaseRole::worker;
  } else {
    return;  // matched by name or rule only: the periodic rules
  }
  if (auto r = probes_->set_phase_role(pid, role); !r) {
    count_error("probes");
    spdlog::debug("phases from events: pid {}: {}", pid, r.error().message());
    return;
  }
  t.event_role = true;
  // The BPF rules see a thread's next event; a rank already blocked waiting for its first batch
  // when it is named (discovery finds it once it has a GPU context) would read Unknown until the
  // batch came. Its main thread's wait now is the seed (an instant, as the periodic detector
  // samples it; the events take over from its next one): a read or poll (the workers' pipe), or
  // a futex wait (a pin-memory thread's queue, pin_memory=True; before its first step a driver
  // has nothing else to wait for that long).
  const auto wait = role == collect::PhaseRole::rank
                        ? collect::read_main_thread_wait(opts_.proc_root, pid)
                        : collect::MainThreadWait::unknown;
  if (wait == collect::MainThreadWait::input || wait == collect::MainThreadWait::futex) {
    const std::uint64_t now = monotonic_ns();
    thread_phases_.record(pid, pid, policy::Phase::data_loading, now);
    commit_event_phase(pid, policy::Phase::data_loading, now);
  }
#endif
}

// The process's phase is its main thread's: committed in the engine at the event's time (its
// phase times and transitions follow the events, not the ticks) and logged when it changed.
void Daemon::commit_event_phase(std::uint32_t pid, policy::Phase phase, std::uint64_t at_ns) {
  event_phase_[pid] = phase;
  const policy::TaskState* s = engine_.task(pid);
  if (s == nullptr || s->current_phase == phase) {
    engine_.record_event_phase(pid, phase, at_ns);  // sets the event phase only
    return;
  }
  engine_.record_event_phase(pid, phase, at_ns);
  phase_log_.write(at_ns, pid, phase);
}

int Daemon::phase_map_fd() const {
#ifdef ZERNEL_HAVE_PROBES
  if (phase_events_on_ && probes_) return probes_->phase_map_fd();
#endif
  return -1;
}

bool Daemon::phase_sync_kicks() const {
#ifdef ZERNEL_HAVE_PROBES
  if (phase_events_on_ && probes_) return probes_->sync_kicks();
#endif
  return false;
}

std::vector<std::pair<std::string, int>> Daemon::phase_shared_maps() const {
  std::vector<std::pair<std::string, int>> out;
#ifdef ZERNEL_HAVE_PROBES
  if (!phase_events_on_ || !probes_) return out;
  for (auto& m : probes_->shared_maps()) out.emplace_back(std::move(m.name), m.fd);
#endif
  return out;
}

void Daemon::place_switch_rules() {
#ifdef ZERNEL_HAVE_PROBES
  if (phase_events_on_ && probes_) {
    probes_->set_switch_carried(backend_.backend().carries_switch_rules());
  }
#endif
}

void Daemon::drain_phase_events() {
#ifdef ZERNEL_HAVE_PROBES
  if (!phase_events_on_ || !probes_) return;
  phase_events_.clear();
  probes_->drain_phase_events(phase_events_);
  drained_at_ns_ = monotonic_ns();  // after the drain: the events sent before are in
  for (const collect::PhaseEvent& e : phase_events_) {
    if (e.phase >= policy::kPhaseCount) continue;
    const auto phase = static_cast<policy::Phase>(e.phase);
    const auto it = tracked_.find(e.tgid);
    if (it == tracked_.end() || !it->second.event_role) continue;  // dropped meanwhile
    if (opts_.phase_log_threads) phase_log_.write_thread(e.t_ns, e.tgid, e.tid, phase);
    if (trace_) trace_phase(e.t_ns, e.tgid, e.tid, phase, cause_name(e.cause));
    thread_phases_.record(e.tgid, e.tid, phase, e.t_ns);
    if (e.tid == e.tgid) commit_event_phase(e.tgid, phase, e.t_ns);
  }
#endif
}

}  // namespace zernel::daemon
