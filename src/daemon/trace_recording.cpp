// `zernel-scheduler trace` on the daemon's side (telemetry/trace.hpp, docs/trace.md).
//
// The "trace" control request starts a recording and is answered only when it ends: the
// control server keeps the client waiting (ControlServer::answer) while the loop goes on. One
// recording at a time; nothing is recorded, and nothing costs anything, without one. While it
// lasts, drain_phase_events gives it every thread's phase change from the BPF rules and decide()
// gives it the decisions (kept when they change) and the periodic detector's committed changes.
// A thread is named (its comm, read once) when it first appears. At the first tick after the
// end, the recording is sent to the client; if the client has gone meanwhile (it hung up or was
// closed), the recording is dropped at the next tick: nothing is left running.
#include <ctime>
#include <string>

#include <spdlog/spdlog.h>

#include "common/clock.hpp"
#include "daemon/daemon.hpp"
#include "sys/file.hpp"

namespace zernel::daemon {
namespace {

std::string read_comm(const std::string& proc_root, std::uint32_t pid, std::uint32_t tid) {
  return sys::read_first_line(proc_root + "/" + std::to_string(pid) + "/task/" +
                              std::to_string(tid) + "/comm")
      .value_or(std::string());
}

// CLOCK_REALTIME - CLOCK_MONOTONIC, from the closest of a few pairs of readings.
std::int64_t realtime_offset_ns() {
  const auto ns = [](clockid_t id) { return static_cast<std::int64_t>(clock_ns(id)); };
  std::int64_t best_gap = INT64_MAX;
  std::int64_t offset = 0;
  for (int i = 0; i < 5; ++i) {
    const std::int64_t m0 = ns(CLOCK_MONOTONIC);
    const std::int64_t r = ns(CLOCK_REALTIME);
    const std::int64_t m1 = ns(CLOCK_MONOTONIC);
    if (m1 - m0 < best_gap) {
      best_gap = m1 - m0;
      offset = r - (m0 + (m1 - m0) / 2);
    }
  }
  return offset;
}

}  // namespace

std::optional<nlohmann::json> Daemon::start_trace(const ControlRequest& req,
                                                  ControlServer::Ticket who) {
  if (trace_ && control_ && control_->waiting(trace_client_)) {
    const std::uint64_t now = monotonic_ns();
    const std::uint64_t left =
        trace_->end_ns() > now ? (trace_->end_ns() - now) / 1'000'000'000 : 0;
    return error_reply("busy: another trace is being recorded (" + std::to_string(left + 1) +
                       " s left)");
  }
  const std::uint64_t start = monotonic_ns();
  trace_ = std::make_unique<telemetry::TraceRecorder>(
      start, start + std::uint64_t{req.seconds} * 1'000'000'000ULL);
  trace_client_ = who;
  // Each tracked process with its main thread's phase now, so its track starts at the start.
  for (const auto& [pid, t] : tracked_) {
    trace_->name_process(pid, t.comm, collect::role_name(t.role));
    policy::Phase phase = policy::Phase::unknown;
    if (auto it = event_phase_.find(pid); it != event_phase_.end()) {
      phase = it->second;
    } else if (const policy::TaskState* s = engine_.task(pid)) {
      phase = s->current_phase;
    }
    trace_->phase(start, pid, pid, phase, "start");
  }
  spdlog::info("control: recording a trace of {} s ({} tracked processes)", req.seconds,
               tracked_.size());
  return std::nullopt;
}

void Daemon::trace_phase(std::uint64_t t_ns, std::uint32_t pid, std::uint32_t tid,
                         policy::Phase phase, std::string_view cause) {
  if (!trace_->knows_thread(pid, tid)) {
    if (tid == pid) {
      const auto it = tracked_.find(pid);
      trace_->name_process(
          pid, it != tracked_.end() ? it->second.comm : read_comm(opts_.proc_root, pid, pid));
    } else {
      trace_->name_thread(pid, tid, read_comm(opts_.proc_root, pid, tid));
    }
  }
  trace_->phase(t_ns, pid, tid, phase, cause);
}

void Daemon::finish_trace() {
  if (!control_ || !control_->waiting(trace_client_)) {
    spdlog::info("control: trace dropped: its client has gone");
    trace_.reset();
    return;
  }
  const std::uint64_t now = monotonic_ns();
  if (now < trace_->end_ns()) return;
  const std::size_t events = trace_->events();
  telemetry::TraceData data = trace_->finish(realtime_offset_ns(), std::string(backend_.name()));
  trace_.reset();
  nlohmann::json reply = ok_reply();
  reply["trace"] = telemetry::trace_to_json(data);
  control_->answer(trace_client_, reply, now);
  spdlog::info("control: trace sent ({} changes, {} dropped)", events,
               data.dropped_phases + data.dropped_decisions);
}

}  // namespace zernel::daemon
