#pragma once
// `zernel-scheduler trace`: a few seconds of what the daemon saw and did, per thread, as a
// picture (docs/trace.md).
//
// The daemon records (TraceRecorder) only while a client asks for a trace: each thread's phase
// changes (from the BPF event rules, or the periodic detector's committed change of a process's
// main thread), and each change of a process's decision (weight, slice, latency target, CPU...).
// The recording is bounded: at most TraceLimits::max_events changes and about max_bytes of
// reply; what does not fit is counted, not stored, and the counts go into the trace's metadata.
// The daemon sends the recording as compact JSON (trace_to_json); the client turns it back into
// TraceData (trace_from_json, which checks every field: the reply crossed a socket) and writes
//   - chrome_trace_json: the Chrome trace-event format (Perfetto, chrome://tracing): one track
//     per thread, an "X" span per phase (Unknown is left as a gap), the decisions as instant
//     events on the process's main thread and its weight as a counter track; "M" events name the
//     processes and threads. Times are microseconds of CLOCK_REALTIME (the clock of a PyTorch
//     profiler trace: Kineto stamps with the system clock since the Unix epoch) or, with
//     TraceClock::monotonic, of CLOCK_MONOTONIC (the clock of --phase-log and zernel-workload's
//     --truth-log).
//   - trace_svg: the same timeline as one self-contained SVG: a row per thread, coloured phase
//     spans, decision marks, a time axis and a legend. Names are escaped; at most kSvgMaxRows rows.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.hpp"
#include "policy/decision.hpp"
#include "policy/phase.hpp"

namespace zernel::telemetry {

inline constexpr std::uint32_t kTraceMinSeconds = 1;
inline constexpr std::uint32_t kTraceMaxSeconds = 600;

struct TraceLimits {
  std::size_t max_events = 1'000'000;  // phase changes + decision changes
  std::size_t max_bytes = 96U << 20;   // the reply's approximate size
  std::size_t max_threads = 16'384;    // named threads (their changes beyond are dropped)
};

// One thread entered `phase` at t_ns (CLOCK_MONOTONIC).
struct TracePhase {
  std::uint64_t t_ns = 0;
  std::uint32_t pid = 0;
  std::uint32_t tid = 0;
  policy::Phase phase = policy::Phase::unknown;
  std::string cause;  // what made it: a BPF rule ("sync_enter", ...), "periodic", "start"
  bool operator==(const TracePhase&) const = default;
};

// A process's decision took these values at t_ns.
struct TraceDecision {
  std::uint64_t t_ns = 0;
  std::uint32_t pid = 0;
  policy::Phase phase = policy::Phase::unknown;
  std::int32_t priority = 0;
  std::uint32_t weight = 0;
  std::uint32_t tenant_weight = 0;
  std::uint32_t latency_target_us = 0;  // 0: none
  std::uint64_t slice_ns = 0;
  std::int32_t preferred_cpu = -1;  // -1: none
  bool preempt = false;
  bool operator==(const TraceDecision&) const = default;
};

struct TraceThread {
  std::uint32_t pid = 0;
  std::uint32_t tid = 0;  // == pid: the process's main thread
  std::string name;       // comm; bytes from the system, not necessarily UTF-8
  std::string role;       // processes: how the daemon found it ("gpu_owner", ...); may be empty
  bool operator==(const TraceThread&) const = default;
};

struct TraceData {
  std::uint64_t start_ns = 0;  // CLOCK_MONOTONIC
  std::uint64_t end_ns = 0;
  std::int64_t realtime_offset_ns = 0;  // CLOCK_REALTIME - CLOCK_MONOTONIC at the end
  std::string backend;
  std::vector<TraceThread> processes;  // tid == pid
  std::vector<TraceThread> threads;
  std::vector<TracePhase> phases;
  std::vector<TraceDecision> decisions;
  std::uint64_t dropped_phases = 0;
  std::uint64_t dropped_decisions = 0;
  std::uint64_t dropped_threads = 0;
  bool operator==(const TraceData&) const = default;
};

// The daemon's recording, fed on its loop thread. Pure: no I/O.
class TraceRecorder {
 public:
  TraceRecorder(std::uint64_t start_ns, std::uint64_t end_ns, TraceLimits limits = {});

  [[nodiscard]] std::uint64_t end_ns() const { return data_.end_ns; }
  [[nodiscard]] bool knows_thread(std::uint32_t pid, std::uint32_t tid) const;
  // Names a process (its main thread too) or a thread; the first name given wins.
  void name_process(std::uint32_t pid, std::string_view name, std::string_view role = {});
  void name_thread(std::uint32_t pid, std::uint32_t tid, std::string_view name);
  // A change outside [start, end] is ignored; one that does not fit the limits is counted.
  void phase(std::uint64_t t_ns, std::uint32_t pid, std::uint32_t tid, policy::Phase phase,
             std::string_view cause);
  // Recorded when it differs from the process's previous recorded decision.
  void decision(std::uint64_t t_ns, const policy::Decision& d);
  // The recording, with its clocks' offset; the recorder is left empty.
  TraceData finish(std::int64_t realtime_offset_ns, std::string backend);

  [[nodiscard]] std::size_t events() const { return data_.phases.size() + data_.decisions.size(); }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  bool fits(std::size_t bytes) const;
  TraceData data_;
  TraceLimits limits_;
  std::size_t bytes_ = 0;
  std::unordered_map<std::uint64_t, std::size_t> threads_;  // (pid << 32 | tid) -> index
  std::unordered_set<std::uint32_t> processes_;             // named processes
  std::unordered_map<std::uint32_t, TraceDecision> last_decision_;
};

// The wire form the daemon replies with, and back. trace_from_json rejects anything malformed
// with an error naming the field.
nlohmann::json trace_to_json(const TraceData& t);
Result<TraceData> trace_from_json(const nlohmann::json& j);

enum class TraceClock : std::uint8_t { realtime, monotonic };

// One thread's phases as closed spans [start, end), in time order, Unknown left out: each change
// lasts until the thread's next change or the end of the trace; a change before the start is
// cut at the start.
struct PhaseSpan {
  std::uint32_t pid = 0;
  std::uint32_t tid = 0;
  policy::Phase phase = policy::Phase::unknown;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::string cause;
};
std::vector<PhaseSpan> phase_spans(const TraceData& t);

// The Chrome trace-event JSON document (an object with "traceEvents"), as text.
std::string chrome_trace_json(const TraceData& t, TraceClock clock);

inline constexpr std::size_t kSvgMaxRows = 400;
// The SVG document, as text.
std::string trace_svg(const TraceData& t, TraceClock clock);

// `s` as XML character data or attribute value: &, <, >, " and ' escaped, invalid UTF-8 and the
// control characters XML 1.0 forbids replaced by U+FFFD.
std::string xml_escape(std::string_view s);

}  // namespace zernel::telemetry
