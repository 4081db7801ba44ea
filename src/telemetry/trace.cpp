#include "telemetry/trace.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "common/utf8.hpp"

namespace zernel::telemetry {
namespace {

using nlohmann::json;

constexpr std::uint64_t thread_key(std::uint32_t pid, std::uint32_t tid) {
  return (std::uint64_t{pid} << 32) | tid;
}

// Approximate bytes of each record in the reply (its JSON array and separators).
constexpr std::size_t kPhaseBytes = 56;
constexpr std::size_t kDecisionBytes = 96;
constexpr std::size_t kThreadBytes = 32;

}  // namespace

// ---- recorder ----

TraceRecorder::TraceRecorder(std::uint64_t start_ns, std::uint64_t end_ns, TraceLimits limits)
    : limits_(limits) {
  data_.start_ns = start_ns;
  data_.end_ns = std::max(start_ns, end_ns);
}

bool TraceRecorder::knows_thread(std::uint32_t pid, std::uint32_t tid) const {
  return threads_.contains(thread_key(pid, tid));
}

bool TraceRecorder::fits(std::size_t bytes) const {
  return events() < limits_.max_events && bytes_ + bytes <= limits_.max_bytes;
}

void TraceRecorder::name_process(std::uint32_t pid, std::string_view name, std::string_view role) {
  const std::size_t b = kThreadBytes + name.size() + role.size();
  if (processes_.insert(pid).second && bytes_ + b <= limits_.max_bytes) {
    data_.processes.push_back({pid, pid, std::string(name), std::string(role)});
    bytes_ += b;
  }
  name_thread(pid, pid, name);
}

void TraceRecorder::name_thread(std::uint32_t pid, std::uint32_t tid, std::string_view name) {
  if (knows_thread(pid, tid)) return;
  if (threads_.size() >= limits_.max_threads ||
      bytes_ + kThreadBytes + name.size() > limits_.max_bytes) {
    ++data_.dropped_threads;
    return;
  }
  threads_.emplace(thread_key(pid, tid), data_.threads.size());
  data_.threads.push_back({pid, tid, std::string(name), {}});
  bytes_ += kThreadBytes + name.size();
}

void TraceRecorder::phase(std::uint64_t t_ns, std::uint32_t pid, std::uint32_t tid,
                          policy::Phase phase, std::string_view cause) {
  if (t_ns > data_.end_ns) return;
  if (!knows_thread(pid, tid)) name_thread(pid, tid, "");
  const std::size_t b = kPhaseBytes + cause.size();
  if (!knows_thread(pid, tid) || !fits(b)) {
    ++data_.dropped_phases;
    return;
  }
  data_.phases.push_back({t_ns, pid, tid, phase, std::string(cause)});
  bytes_ += b;
}

void TraceRecorder::decision(std::uint64_t t_ns, const policy::Decision& d) {
  if (t_ns > data_.end_ns) return;
  TraceDecision r;
  r.t_ns = t_ns;
  r.pid = d.pid;
  r.phase = d.phase;
  r.priority = d.priority;
  r.weight = d.weight;
  r.tenant_weight = d.tenant_weight;
  r.latency_target_us = d.latency_target_us;
  r.slice_ns = d.slice_ns;
  r.preferred_cpu = d.preferred_cpu < 0 ? -1 : d.preferred_cpu;
  r.preempt = d.preempt;
  auto [it, added] = last_decision_.try_emplace(d.pid, r);
  if (!added) {
    TraceDecision same = r;
    same.t_ns = it->second.t_ns;
    if (same == it->second) return;
  }
  if (!fits(kDecisionBytes)) {
    ++data_.dropped_decisions;
    return;
  }
  it->second = r;
  data_.decisions.push_back(r);
  bytes_ += kDecisionBytes;
}

TraceData TraceRecorder::finish(std::int64_t realtime_offset_ns, std::string backend) {
  data_.realtime_offset_ns = realtime_offset_ns;
  data_.backend = std::move(backend);
  TraceData out = std::move(data_);
  data_ = TraceData{};
  threads_.clear();
  processes_.clear();
  last_decision_.clear();
  bytes_ = 0;
  return out;
}

// ---- wire form ----

json trace_to_json(const TraceData& t) {
  json procs = json::array();
  for (const TraceThread& p : t.processes) {
    procs.push_back({p.pid, valid_utf8(p.name), valid_utf8(p.role)});
  }
  json threads = json::array();
  for (const TraceThread& th : t.threads) threads.push_back({th.pid, th.tid, valid_utf8(th.name)});
  json phases = json::array();
  for (const TracePhase& p : t.phases) {
    phases.push_back({p.t_ns, p.pid, p.tid, policy::index_of(p.phase), valid_utf8(p.cause)});
  }
  json decisions = json::array();
  for (const TraceDecision& d : t.decisions) {
    decisions.push_back({d.t_ns, d.pid, policy::index_of(d.phase), d.priority, d.weight,
                         d.tenant_weight, d.latency_target_us, d.slice_ns, d.preferred_cpu,
                         d.preempt});
  }
  return json{{"version", 1},
              {"start_ns", t.start_ns},
              {"end_ns", t.end_ns},
              {"realtime_offset_ns", t.realtime_offset_ns},
              {"backend", valid_utf8(t.backend)},
              {"processes", std::move(procs)},
              {"threads", std::move(threads)},
              {"phases", std::move(phases)},
              {"decisions", std::move(decisions)},
              {"dropped",
               {{"phases", t.dropped_phases},
                {"decisions", t.dropped_decisions},
                {"threads", t.dropped_threads}}}};
}

namespace {

Error bad_trace(const std::string& what) { return Error(EPROTO, "trace reply: " + what); }

Result<std::uint64_t> as_u64(const json& v, const std::string& what,
                             std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
  // A non-negative integer may be stored signed (built in memory rather than parsed).
  const bool non_negative =
      v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
  if (!non_negative || v.get<std::uint64_t>() > max) {
    return bad_trace(what + ": not an integer from 0 to " + std::to_string(max));
  }
  return v.get<std::uint64_t>();
}

Result<std::int64_t> as_i64(const json& v, const std::string& what, std::int64_t min,
                            std::int64_t max) {
  if (!v.is_number_integer()) return bad_trace(what + ": not an integer");
  if (v.is_number_unsigned() &&
      v.get<std::uint64_t>() >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return bad_trace(what + ": out of range");
  }
  const auto x = v.get<std::int64_t>();
  if (x < min || x > max) return bad_trace(what + ": out of range");
  return x;
}

Result<std::string> as_string(const json& v, const std::string& what) {
  if (!v.is_string()) return bad_trace(what + ": not a string");
  return v.get<std::string>();
}

Result<const json*> array_field(const json& j, const char* key, std::size_t row_size) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) {
    return bad_trace(std::string("\"") + key + "\": missing or not an array");
  }
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& row = (*it)[i];
    if (!row.is_array() || row.size() != row_size) {
      return bad_trace(fmt::format("\"{}\"[{}]: not an array of {}", key, i, row_size));
    }
  }
  return &*it;
}

Result<policy::Phase> as_phase(const json& v, const std::string& what) {
  auto n = as_u64(v, what, policy::kPhaseCount - 1);
  if (!n) return n.error();
  return static_cast<policy::Phase>(*n);
}

constexpr std::uint64_t kU32 = std::numeric_limits<std::uint32_t>::max();
constexpr std::int64_t kI32Min = std::numeric_limits<std::int32_t>::min();
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();

// The member `key` of the reply, or null when it has none.
const json& trace_member(const json& j, const char* key) {
  static const json kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// start_ns, end_ns, realtime_offset_ns and backend.
Result<void> parse_trace_header(const json& j, TraceData& t) {
  auto start = as_u64(trace_member(j, "start_ns"), "\"start_ns\"");
  if (!start) return start.error();
  auto end = as_u64(trace_member(j, "end_ns"), "\"end_ns\"");
  if (!end) return end.error();
  if (*end < *start) return bad_trace("\"end_ns\" is before \"start_ns\"");
  t.start_ns = *start;
  t.end_ns = *end;
  auto off =
      as_i64(trace_member(j, "realtime_offset_ns"), "\"realtime_offset_ns\"",
             std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
  if (!off) return off.error();
  t.realtime_offset_ns = *off;
  auto backend = as_string(trace_member(j, "backend"), "\"backend\"");
  if (!backend) return backend.error();
  t.backend = std::move(*backend);
  return Ok{};
}

// "processes": rows of [pid, name, role].
Result<void> parse_trace_processes(const json& j, TraceData& t) {
  auto procs = array_field(j, "processes", 3);
  if (!procs) return procs.error();
  for (const json& row : **procs) {
    auto pid = as_u64(row[0], "process pid", kU32);
    auto name = as_string(row[1], "process name");
    auto role = as_string(row[2], "process role");
    if (!pid) return pid.error();
    if (!name) return name.error();
    if (!role) return role.error();
    const auto p = static_cast<std::uint32_t>(*pid);
    t.processes.push_back({p, p, std::move(*name), std::move(*role)});
  }
  return Ok{};
}

// "threads": rows of [pid, tid, name].
Result<void> parse_trace_threads(const json& j, TraceData& t) {
  auto threads = array_field(j, "threads", 3);
  if (!threads) return threads.error();
  for (const json& row : **threads) {
    auto pid = as_u64(row[0], "thread pid", kU32);
    auto tid = as_u64(row[1], "thread tid", kU32);
    auto name = as_string(row[2], "thread name");
    if (!pid) return pid.error();
    if (!tid) return tid.error();
    if (!name) return name.error();
    t.threads.push_back(
        {static_cast<std::uint32_t>(*pid), static_cast<std::uint32_t>(*tid), std::move(*name), {}});
  }
  return Ok{};
}

// "phases": rows of [t_ns, pid, tid, phase, cause].
Result<void> parse_trace_phases(const json& j, TraceData& t) {
  auto phases = array_field(j, "phases", 5);
  if (!phases) return phases.error();
  for (const json& row : **phases) {
    TracePhase p;
    auto ts = as_u64(row[0], "phase t_ns");
    auto pid = as_u64(row[1], "phase pid", kU32);
    auto tid = as_u64(row[2], "phase tid", kU32);
    auto ph = as_phase(row[3], "phase");
    auto cause = as_string(row[4], "phase cause");
    if (!ts) return ts.error();
    if (!pid) return pid.error();
    if (!tid) return tid.error();
    if (!ph) return ph.error();
    if (!cause) return cause.error();
    p.t_ns = *ts;
    p.pid = static_cast<std::uint32_t>(*pid);
    p.tid = static_cast<std::uint32_t>(*tid);
    p.phase = *ph;
    p.cause = std::move(*cause);
    t.phases.push_back(std::move(p));
  }
  return Ok{};
}

// One row of "decisions": [t_ns, pid, phase, priority, weight, tenant_weight,
// latency_target_us, slice_ns, preferred_cpu, preempt].
Result<TraceDecision> parse_trace_decision_row(const json& row) {
  TraceDecision d;
  auto ts = as_u64(row[0], "decision t_ns");
  auto pid = as_u64(row[1], "decision pid", kU32);
  auto ph = as_phase(row[2], "decision phase");
  auto prio = as_i64(row[3], "decision priority", kI32Min, kI32Max);
  auto w = as_u64(row[4], "decision weight", kU32);
  auto tw = as_u64(row[5], "decision tenant_weight", kU32);
  auto lat = as_u64(row[6], "decision latency_target_us", kU32);
  auto slice = as_u64(row[7], "decision slice_ns");
  auto cpu = as_i64(row[8], "decision preferred_cpu", -1, kI32Max);
  if (!ts) return ts.error();
  if (!pid) return pid.error();
  if (!ph) return ph.error();
  if (!prio) return prio.error();
  if (!w) return w.error();
  if (!tw) return tw.error();
  if (!lat) return lat.error();
  if (!slice) return slice.error();
  if (!cpu) return cpu.error();
  if (!row[9].is_boolean()) return bad_trace("decision preempt: not a boolean");
  d.t_ns = *ts;
  d.pid = static_cast<std::uint32_t>(*pid);
  d.phase = *ph;
  d.priority = static_cast<std::int32_t>(*prio);
  d.weight = static_cast<std::uint32_t>(*w);
  d.tenant_weight = static_cast<std::uint32_t>(*tw);
  d.latency_target_us = static_cast<std::uint32_t>(*lat);
  d.slice_ns = *slice;
  d.preferred_cpu = static_cast<std::int32_t>(*cpu);
  d.preempt = row[9].get<bool>();
  return d;
}

Result<void> parse_trace_decisions(const json& j, TraceData& t) {
  auto decisions = array_field(j, "decisions", 10);
  if (!decisions) return decisions.error();
  for (const json& row : **decisions) {
    auto d = parse_trace_decision_row(row);
    if (!d) return d.error();
    t.decisions.push_back(*d);
  }
  return Ok{};
}

// "dropped": {"phases", "decisions", "threads"} counts.
Result<void> parse_trace_dropped(const json& j, TraceData& t) {
  const json& dropped = trace_member(j, "dropped");
  if (!dropped.is_object()) return bad_trace("\"dropped\": missing or not an object");
  for (auto [key, dst] : {std::pair<const char*, std::uint64_t*>{"phases", &t.dropped_phases},
                          {"decisions", &t.dropped_decisions},
                          {"threads", &t.dropped_threads}}) {
    auto it = dropped.find(key);
    if (it == dropped.end()) return bad_trace(std::string("\"dropped\": no \"") + key + "\"");
    auto n = as_u64(*it, std::string("\"dropped\".") + key);
    if (!n) return n.error();
    *dst = *n;
  }
  return Ok{};
}

}  // namespace

Result<TraceData> trace_from_json(const json& j) {
  if (!j.is_object()) return bad_trace("not a JSON object");
  // j.value() would throw on a "version" that is not a number (a forged reply): test the type.
  const auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || *version != 1) {
    return bad_trace("unknown \"version\" (expected 1)");
  }
  TraceData t;
  for (const auto parse : {parse_trace_header, parse_trace_processes, parse_trace_threads,
                           parse_trace_phases, parse_trace_decisions, parse_trace_dropped}) {
    if (auto r = parse(j, t); !r) return r.error();
  }
  return t;
}

// ---- spans ----

std::vector<PhaseSpan> phase_spans(const TraceData& t) {
  // By thread, in time order; equal times keep their recorded order (the later change wins).
  std::vector<const TracePhase*> order;
  order.reserve(t.phases.size());
  for (const TracePhase& p : t.phases) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(), [](const TracePhase* a, const TracePhase* b) {
    return std::tie(a->pid, a->tid, a->t_ns) < std::tie(b->pid, b->tid, b->t_ns);
  });
  std::vector<PhaseSpan> out;
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j < order.size() && order[j]->pid == order[i]->pid && order[j]->tid == order[i]->tid) {
      ++j;
    }
    // [i, j): one thread.
    for (std::size_t k = i; k < j; ++k) {
      const TracePhase& p = *order[k];
      std::size_t next = k + 1;
      while (next < j && order[next]->phase == p.phase) ++next;  // a repeat extends the span
      const std::uint64_t until = next < j ? order[next]->t_ns : t.end_ns;
      const std::uint64_t s = std::max(p.t_ns, t.start_ns);
      const std::uint64_t e = std::min(until, t.end_ns);
      if (p.phase != policy::Phase::unknown && e > s) {
        out.push_back({p.pid, p.tid, p.phase, s, e, p.cause});
      }
      k = next - 1;
    }
    i = j;
  }
  return out;
}

// ---- Chrome trace-event JSON ----

namespace {

double ts_us(std::uint64_t t_ns, const TraceData& t, TraceClock clock) {
  if (clock == TraceClock::monotonic) return static_cast<double>(t_ns) / 1e3;
  const std::int64_t real = static_cast<std::int64_t>(t_ns) + t.realtime_offset_ns;
  // Whole microseconds exactly, then the fraction: a double holds epoch µs to ~0.25 µs.
  const std::int64_t whole_us = real / 1000;  // exact: the whole microseconds first
  return static_cast<double>(whole_us) + static_cast<double>(real % 1000) / 1e3;
}

// Names by thread and by process, looked up once per track.
class Names {
 public:
  explicit Names(const TraceData& t) {
    for (const TraceThread& th : t.threads) {
      if (!th.name.empty()) threads_.try_emplace({th.pid, th.tid}, th.name);
    }
    for (const TraceThread& p : t.processes) {
      if (!p.name.empty()) processes_.try_emplace(p.pid, p.name);
      if (!p.role.empty()) roles_.try_emplace(p.pid, p.role);
    }
  }
  [[nodiscard]] std::string role(std::uint32_t pid) const {
    auto it = roles_.find(pid);
    return it != roles_.end() ? it->second : std::string();
  }
  [[nodiscard]] std::string thread(std::uint32_t pid, std::uint32_t tid) const {
    auto it = threads_.find({pid, tid});
    if (it != threads_.end()) return it->second;
    return tid == pid ? "main" : "thread";
  }
  [[nodiscard]] std::string process(std::uint32_t pid) const {
    auto it = processes_.find(pid);
    return it != processes_.end() ? it->second : "pid";
  }

 private:
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::string> threads_;
  std::map<std::uint32_t, std::string> processes_;
  std::map<std::uint32_t, std::string> roles_;
};

// Every (pid, tid) the trace mentions, main threads first within a process.
std::vector<std::pair<std::uint32_t, std::uint32_t>> all_threads(const TraceData& t) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> v;
  v.reserve(t.processes.size() + t.threads.size() + t.phases.size() + t.decisions.size());
  for (const TraceThread& p : t.processes) v.emplace_back(p.pid, p.pid);
  for (const TraceThread& th : t.threads) v.emplace_back(th.pid, th.tid);
  for (const TracePhase& p : t.phases) v.emplace_back(p.pid, p.tid);
  for (const TraceDecision& d : t.decisions) v.emplace_back(d.pid, d.pid);
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.first, a.second != a.first, a.second) <
           std::make_tuple(b.first, b.second != b.first, b.second);
  });
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

std::string chrome_trace_json(const TraceData& t, TraceClock clock) {
  const Names names(t);
  json events = json::array();
  std::uint32_t last_pid = 0;
  bool first = true;
  for (const auto& [pid, tid] : all_threads(t)) {
    if (first || pid != last_pid) {
      events.push_back({{"ph", "M"},
                        {"name", "process_name"},
                        {"pid", pid},
                        {"tid", pid},
                        {"args", {{"name", valid_utf8(names.process(pid))}}}});
      if (const std::string role = names.role(pid); !role.empty()) {
        events.push_back({{"ph", "M"},
                          {"name", "process_labels"},
                          {"pid", pid},
                          {"tid", pid},
                          {"args", {{"labels", valid_utf8(role)}}}});
      }
      first = false;
      last_pid = pid;
    }
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", {{"name", valid_utf8(names.thread(pid, tid))}}}});
  }
  for (const PhaseSpan& s : phase_spans(t)) {
    events.push_back({{"ph", "X"},
                      {"cat", "phase"},
                      {"name", policy::phase_name(s.phase)},
                      {"pid", s.pid},
                      {"tid", s.tid},
                      // Both ends on the same grid (a double holds epoch microseconds to a
                      // quarter): a span then ends exactly where the next one starts.
                      {"ts", ts_us(s.start_ns, t, clock)},
                      {"dur", ts_us(s.end_ns, t, clock) - ts_us(s.start_ns, t, clock)},
                      {"args", {{"cause", valid_utf8(s.cause)}}}});
  }
  for (const TraceDecision& d : t.decisions) {
    const double ts = ts_us(std::max(d.t_ns, t.start_ns), t, clock);
    json args = {{"phase", policy::phase_name(d.phase)},
                 {"priority", d.priority},
                 {"weight", d.weight},
                 {"tenant_weight", d.tenant_weight},
                 {"slice_us", static_cast<double>(d.slice_ns) / 1e3},
                 {"preempt", d.preempt}};
    args["latency_target_us"] =
        d.latency_target_us == 0 ? json(nullptr) : json(d.latency_target_us);
    args["preferred_cpu"] = d.preferred_cpu < 0 ? json(nullptr) : json(d.preferred_cpu);
    events.push_back({{"ph", "i"},
                      {"s", "t"},
                      {"cat", "decision"},
                      {"name", "decision"},
                      {"pid", d.pid},
                      {"tid", d.pid},
                      {"ts", ts},
                      {"args", std::move(args)}});
    events.push_back({{"ph", "C"},
                      {"name", "weight"},
                      {"pid", d.pid},
                      {"tid", d.pid},
                      {"ts", ts},
                      {"args", {{"weight", d.weight}}}});
  }
  json doc = {{"traceEvents", std::move(events)},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"generator", "zernel-scheduler trace"},
                {"clock", clock == TraceClock::realtime ? "CLOCK_REALTIME (Unix epoch, us)"
                                                        : "CLOCK_MONOTONIC (us)"},
                {"backend", valid_utf8(t.backend)},
                {"start_monotonic_ns", t.start_ns},
                {"end_monotonic_ns", t.end_ns},
                {"realtime_minus_monotonic_ns", t.realtime_offset_ns},
                {"dropped_phase_changes", t.dropped_phases},
                {"dropped_decisions", t.dropped_decisions},
                {"dropped_threads", t.dropped_threads}}}};
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

// ---- SVG ----

std::string xml_escape(std::string_view s) {
  const std::string valid = valid_utf8(s);
  std::string out;
  out.reserve(valid.size());
  for (std::size_t i = 0; i < valid.size(); ++i) {
    const auto c = static_cast<unsigned char>(valid[i]);
    switch (c) {
      case '&':
        out += "&amp;";
        continue;
      case '<':
        out += "&lt;";
        continue;
      case '>':
        out += "&gt;";
        continue;
      case '"':
        out += "&quot;";
        continue;
      case '\'':
        out += "&apos;";
        continue;
      default:
        break;
    }
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
      out += "\xEF\xBF\xBD";
      continue;
    }
    // U+FFFE and U+FFFF are not XML characters either.
    if (c == 0xEF && i + 2 < valid.size() && static_cast<unsigned char>(valid[i + 1]) == 0xBF &&
        (static_cast<unsigned char>(valid[i + 2]) == 0xBE ||
         static_cast<unsigned char>(valid[i + 2]) == 0xBF)) {
      out += "\xEF\xBF\xBD";
      i += 2;
      continue;
    }
    out.push_back(static_cast<char>(c));
  }
  return out;
}

namespace {

struct PhaseStyle {
  policy::Phase phase;
  const char* fill;
};
// The colours of `top`'s timeline (D blue, G green, N magenta, O yellow).
constexpr std::array<PhaseStyle, 4> kStyles = {{{policy::Phase::data_loading, "#4e79a7"},
                                                {policy::Phase::gpu_compute, "#59a14f"},
                                                {policy::Phase::nccl_collective, "#b07aa1"},
                                                {policy::Phase::optimizer_step, "#e8b730"}}};

const char* fill_of(policy::Phase p) {
  for (const PhaseStyle& s : kStyles) {
    if (s.phase == p) return s.fill;
  }
  return "#bab0ac";
}

// A round step (1, 2 or 5 x 10^k ns) giving 5 to 10 ticks over `span_ns`.
std::uint64_t tick_step(std::uint64_t span_ns) {
  std::uint64_t step = 1'000'000;  // 1 ms at least
  for (;;) {
    for (std::uint64_t m : {1U, 2U, 5U}) {
      if (span_ns / (step * m) <= 10) return step * m;
    }
    step *= 10;
  }
}

std::string tick_label(std::uint64_t ns, std::uint64_t step) {
  if (step >= 1'000'000'000) return fmt::format("{} s", ns / 1'000'000'000);
  if (step >= 100'000'000) return fmt::format("{:.1f} s", static_cast<double>(ns) / 1e9);
  return fmt::format("{} ms", ns / 1'000'000);
}

// Where things go on the SVG: a row per thread under a time axis, then the legend.
struct SvgTraceLayout {
  static constexpr double kWidth = 1200;
  static constexpr double kLabelW = 300;
  static constexpr double kPlotX = kLabelW + 10;
  static constexpr double kPlotW = kWidth - kPlotX - 20;
  static constexpr double kRowH = 16;
  static constexpr double kTop = 56;

  SvgTraceLayout(const TraceData& t,
                 const std::vector<std::pair<std::uint32_t, std::uint32_t>>& threads)
      : start_ns(t.start_ns),
        end_ns(t.end_ns),
        span(std::max<std::uint64_t>(t.end_ns - t.start_ns, 1)),
        rows(std::min(threads.size(), kSvgMaxRows)),
        legend_y(kTop + static_cast<double>(rows) * kRowH + 24) {
    for (std::size_t i = 0; i < rows; ++i) row_of[threads[i]] = i;
  }
  [[nodiscard]] double x_of(std::uint64_t ns) const {
    const std::uint64_t c = std::clamp(ns, start_ns, end_ns) - start_ns;
    return kPlotX + kPlotW * static_cast<double>(c) / static_cast<double>(span);
  }
  [[nodiscard]] static double row_y(std::size_t row) {
    return kTop + static_cast<double>(row) * kRowH;
  }

  std::uint64_t start_ns;
  std::uint64_t end_ns;
  std::uint64_t span;
  std::size_t rows;
  double legend_y;
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::size_t> row_of;
};

// ", from <UTC date>" or ", from CLOCK_MONOTONIC <s>": when the trace starts.
std::string svg_trace_start_label(const TraceData& t, TraceClock clock) {
  if (clock != TraceClock::realtime) {
    return fmt::format(", from CLOCK_MONOTONIC {:.3f} s", static_cast<double>(t.start_ns) / 1e9);
  }
  const std::int64_t real_s =
      (static_cast<std::int64_t>(t.start_ns) + t.realtime_offset_ns) / 1'000'000'000;
  const auto tt = static_cast<std::time_t>(real_s);
  std::tm tm{};
  if (::gmtime_r(&tt, &tm) == nullptr) return {};
  return fmt::format(", from {:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

// Row backgrounds, then the time axis with its grid lines over them.
void svg_trace_axis(std::string& o, const SvgTraceLayout& l) {
  using L = SvgTraceLayout;
  for (std::size_t i = 0; i < l.rows; i += 2) {
    o += fmt::format("<rect x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f4f4f4\"/>\n",
                     L::row_y(i), L::kWidth, L::kRowH);
  }
  const std::uint64_t step = tick_step(l.span);
  const double axis_y = L::kTop - 8;
  o += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>\n", L::kPlotX,
                   axis_y, L::kPlotX + L::kPlotW, axis_y);
  for (std::uint64_t at = 0; at <= l.span; at += step) {
    const double x = l.x_of(l.start_ns + at);
    o += fmt::format(
        "<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{0:.2f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        x, axis_y, L::row_y(l.rows), axis_y - 4, tick_label(at, step));
  }
}

// Row labels: "comm pid" on a process's main thread, "  name tid" on its other threads.
void svg_trace_row_labels(std::string& o, const SvgTraceLayout& l, const Names& names,
                          const std::vector<std::pair<std::uint32_t, std::uint32_t>>& threads) {
  using L = SvgTraceLayout;
  for (std::size_t i = 0; i < l.rows; ++i) {
    const auto [pid, tid] = threads[i];
    const double y = L::row_y(i);
    std::string label;
    if (tid == pid) {
      const std::string role = names.role(pid);
      label = fmt::format("{} [{}]{}", names.process(pid), pid, role.empty() ? "" : " " + role);
    } else {
      label = fmt::format("\u00a0\u00a0{} [{}]", names.thread(pid, tid), tid);
    }
    o += fmt::format("<text x=\"8\" y=\"{:.1f}\"{}>{}</text>\n", y + L::kRowH - 4,
                     tid == pid ? " font-weight=\"bold\"" : "", xml_escape(label));
  }
}

// Phase spans, each with a tooltip; decisions as a dark mark at the top of the process's
// main-thread row.
void svg_trace_marks(std::string& o, const SvgTraceLayout& l, const TraceData& t) {
  using L = SvgTraceLayout;
  for (const PhaseSpan& s : phase_spans(t)) {
    auto it = l.row_of.find({s.pid, s.tid});
    if (it == l.row_of.end()) continue;
    const double x0 = l.x_of(s.start_ns);
    const double w = std::max(l.x_of(s.end_ns) - x0, 0.5);
    const double y = L::row_y(it->second) + 2;
    o += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\">"
        "<title>{} {:.1f} ms at +{:.1f} ms ({})</title></rect>\n",
        x0, y, w, L::kRowH - 4, fill_of(s.phase), policy::phase_name(s.phase),
        static_cast<double>(s.end_ns - s.start_ns) / 1e6,
        static_cast<double>(s.start_ns - t.start_ns) / 1e6, xml_escape(s.cause));
  }
  for (const TraceDecision& d : t.decisions) {
    auto it = l.row_of.find({d.pid, d.pid});
    if (it == l.row_of.end()) continue;
    const double x = l.x_of(d.t_ns);
    const double y = L::row_y(it->second);
    o += fmt::format(
        "<path d=\"M{0:.2f} {1} l-3 -0 l3 5 l3 -5 z\" fill=\"#222\"><title>decision at +{2:.1f} "
        "ms: {3}, priority {4}, weight {5}, slice {6:.1f} ms</title></path>\n",
        x, y, static_cast<double>(std::max(d.t_ns, t.start_ns) - t.start_ns) / 1e6,
        policy::phase_name(d.phase), d.priority, d.weight, static_cast<double>(d.slice_ns) / 1e6);
  }
}

// The legend, and a note of what is not drawn (rows over the cap, dropped records, nothing).
void svg_trace_legend(std::string& o, const SvgTraceLayout& l, const TraceData& t,
                      std::size_t thread_count) {
  using L = SvgTraceLayout;
  double lx = L::kPlotX;
  for (const PhaseStyle& s : kStyles) {
    o += fmt::format(
        "<rect x=\"{0}\" y=\"{1}\" width=\"12\" height=\"12\" fill=\"{2}\"/>"
        "<text x=\"{3}\" y=\"{4}\">{5}</text>\n",
        lx, l.legend_y, s.fill, lx + 16, l.legend_y + 10, policy::phase_name(s.phase));
    lx += 130;
  }
  o += fmt::format(
      "<path d=\"M{0} {1} l-3 0 l3 5 l3 -5 z\" fill=\"#222\"/><text x=\"{2}\" y=\"{3}\">"
      "decision changed</text>\n<text x=\"{4}\" y=\"{3}\" fill=\"#555\">gap: Unknown or no "
      "phase</text>\n",
      lx + 3, l.legend_y + 3, lx + 12, l.legend_y + 10, lx + 130);
  std::string note;
  if (thread_count > l.rows)
    note += fmt::format("{} more threads not drawn; ", thread_count - l.rows);
  if (t.dropped_phases + t.dropped_decisions + t.dropped_threads > 0) {
    note += fmt::format("dropped (buffer full): {} phase changes, {} decisions, {} threads; ",
                        t.dropped_phases, t.dropped_decisions, t.dropped_threads);
  }
  if (thread_count == 0) note += "no tracked process changed phase or decision; ";
  if (!note.empty()) {
    note.resize(note.size() - 2);
    o += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#a00\">{}</text>\n", L::kPlotX,
                     l.legend_y + 32, xml_escape(note));
  }
}

}  // namespace

std::string trace_svg(const TraceData& t, TraceClock clock) {
  const Names names(t);
  const auto threads = all_threads(t);
  const SvgTraceLayout layout(t, threads);
  const double height = layout.legend_y + 48;

  std::string o;
  o += fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n",
      SvgTraceLayout::kWidth, height);
  o += fmt::format(
      "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">zernel-scheduler trace: "
      "{:.1f} s{}, backend {}, {} thread{}</text>\n",
      static_cast<double>(layout.span) / 1e9, xml_escape(svg_trace_start_label(t, clock)),
      xml_escape(t.backend), threads.size(), threads.size() == 1 ? "" : "s");
  svg_trace_axis(o, layout);
  svg_trace_row_labels(o, layout, names, threads);
  svg_trace_marks(o, layout, t);
  svg_trace_legend(o, layout, t, threads.size());
  o += "</svg>\n";
  return o;
}

}  // namespace zernel::telemetry
