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
  }
  return "event";
}

}  // namespace
#endif

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
  // samples it; the events take over from its next one).
  if (role == collect::PhaseRole::rank &&
      collect::read_main_thread_wait(opts_.proc_root, pid) == collect::MainThreadWait::input) {
    event_phase_[pid] = policy::Phase::data_loading;
    phase_log_.write(monotonic_ns(), pid, policy::Phase::data_loading);
  }
#endif
}

int Daemon::phase_map_fd() const {
#ifdef ZERNEL_HAVE_PROBES
  if (phase_events_on_ && probes_) return probes_->phase_map_fd();
#endif
  return -1;
}

void Daemon::drain_phase_events() {
#ifdef ZERNEL_HAVE_PROBES
  if (!phase_events_on_ || !probes_) return;
  phase_events_.clear();
  probes_->drain_phase_events(phase_events_);
  for (const collect::PhaseEvent& e : phase_events_) {
    if (e.phase >= policy::kPhaseCount) continue;
    const auto phase = static_cast<policy::Phase>(e.phase);
    const auto it = tracked_.find(e.tgid);
    if (it == tracked_.end() || !it->second.event_role) continue;  // dropped meanwhile
    if (opts_.phase_log_threads) phase_log_.write_thread(e.t_ns, e.tgid, e.tid, phase);
    if (trace_) trace_phase(e.t_ns, e.tgid, e.tid, phase, cause_name(e.cause));
    if (e.tid != e.tgid) continue;
    auto [pit, added] = event_phase_.try_emplace(e.tgid, policy::Phase::unknown);
    if (!added && pit->second == phase) continue;
    pit->second = phase;
    phase_log_.write(e.t_ns, e.tgid, phase);
  }
#endif
}

}  // namespace zernel::daemon
