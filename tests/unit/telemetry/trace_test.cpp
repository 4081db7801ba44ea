#include "telemetry/trace.hpp"

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace zernel::telemetry {
namespace {

using nlohmann::json;
using policy::Phase;

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kStart = 1'000 * kMs;

// A job: process 100 ("trainer") with its main thread and a worker thread 101, process 200 with
// an awkward name; 1 s recorded.
TraceData sample() {
  TraceRecorder r(kStart, kStart + 1000 * kMs);
  r.name_process(100, "trainer", "gpu_owner");
  r.name_thread(100, 101, "pt_data_worker");
  r.name_process(200, "a<b>&\"c'\xff\x01");
  r.phase(kStart - 50 * kMs, 100, 100, Phase::data_loading, "data_wait");  // before: cut
  r.phase(kStart + 100 * kMs, 100, 100, Phase::gpu_compute, "sync_enter");
  r.phase(kStart + 150 * kMs, 100, 100, Phase::gpu_compute, "long_sync");  // a repeat
  r.phase(kStart + 400 * kMs, 100, 100, Phase::unknown, "optimizer_bound");
  r.phase(kStart + 600 * kMs, 100, 100, Phase::optimizer_step, "sync_return");
  r.phase(kStart + 10 * kMs, 100, 101, Phase::data_loading, "worker_run");
  r.phase(kStart + 20 * kMs, 200, 200, Phase::nccl_collective, "periodic");
  policy::Decision d;
  d.pid = 100;
  d.phase = Phase::gpu_compute;
  d.weight = 300;
  r.decision(kStart + 100 * kMs, d);
  r.decision(kStart + 200 * kMs, d);  // unchanged: not recorded
  d.weight = 500;
  d.latency_target_us = 250;
  d.preferred_cpu = 3;
  r.decision(kStart + 300 * kMs, d);
  return r.finish(1'700'000'000'000'000'000LL, "observe");
}

TEST(TraceRecorder, keeps_changes_in_the_window_and_decisions_only_when_they_change) {
  TraceData t = sample();
  EXPECT_EQ(t.phases.size(), 7U);
  ASSERT_EQ(t.decisions.size(), 2U);
  EXPECT_EQ(t.decisions[1].weight, 500U);
  EXPECT_EQ(t.processes.size(), 2U);
  EXPECT_EQ(t.threads.size(), 3U);  // two main threads and the worker
  EXPECT_EQ(t.backend, "observe");

  TraceRecorder r(kStart, kStart + kMs);
  r.phase(kStart + 2 * kMs, 1, 1, Phase::gpu_compute, "late");  // after the end: ignored
  EXPECT_EQ(r.events(), 0U);
}

TEST(TraceRecorder, counts_what_does_not_fit_its_limits) {
  TraceLimits lim;
  lim.max_events = 3;
  lim.max_threads = 2;
  TraceRecorder r(0, 1000 * kMs, lim);
  for (std::uint32_t i = 0; i < 5; ++i) r.phase(i * kMs, 1, 1, Phase::gpu_compute, "x");
  r.phase(kMs, 1, 2, Phase::gpu_compute, "x");
  r.phase(kMs, 1, 3, Phase::gpu_compute, "x");  // a third thread: over max_threads
  policy::Decision d;
  d.pid = 1;
  r.decision(kMs, d);
  const TraceData t = r.finish(0, "observe");
  EXPECT_EQ(t.phases.size(), 3U);
  EXPECT_EQ(t.dropped_phases, 4U);
  EXPECT_EQ(t.dropped_decisions, 1U);
  EXPECT_EQ(t.dropped_threads, 1U);

  TraceLimits small;
  small.max_bytes = 200;
  TraceRecorder b(0, 1000 * kMs, small);
  for (std::uint32_t i = 0; i < 10; ++i) b.phase(i * kMs, 1, 1, Phase::gpu_compute, "cause");
  EXPECT_LE(b.bytes(), 200U);
  EXPECT_GT(b.finish(0, "").dropped_phases, 0U);
}

TEST(TraceWire, round_trips_and_rejects_malformed_replies) {
  const TraceData t = sample();
  auto back = trace_from_json(json::parse(trace_to_json(t).dump()));
  ASSERT_TRUE(back.ok()) << back.error().message();
  // Names cross as valid UTF-8: the one invalid byte became U+FFFD.
  TraceData expect = t;
  expect.processes[1].name = "a<b>&\"c'\xEF\xBF\xBD\x01";
  for (TraceThread& th : expect.threads) {
    if (th.pid == 200) th.name = expect.processes[1].name;
  }
  EXPECT_EQ(*back, expect);

  const auto broken = [&](auto edit) {
    json j = trace_to_json(t);
    edit(j);
    auto r = trace_from_json(j);
    return r.ok() ? std::string() : r.error().message();
  };
  EXPECT_NE(broken([](json& j) { j.erase("start_ns"); }).find("start_ns"), std::string::npos);
  EXPECT_NE(broken([](json& j) { j["end_ns"] = 1; }).find("before"), std::string::npos);
  EXPECT_NE(broken([](json& j) { j["phases"][0][3] = 9; }).find("phase"), std::string::npos);
  EXPECT_NE(broken([](json& j) { j["phases"][0] = json::array({1, 2}); }).find("\"phases\"[0]"),
            std::string::npos);
  EXPECT_NE(broken([](json& j) { j["decisions"][0][1] = -4; }).find("decision pid"),
            std::string::npos);
  EXPECT_NE(broken([](json& j) { j["phases"][0][1] = 1ULL << 33; }).find("phase pid"),
            std::string::npos);
  EXPECT_NE(broken([](json& j) { j["threads"] = "x"; }).find("threads"), std::string::npos);
  EXPECT_NE(broken([](json& j) { j["dropped"].erase("phases"); }).find("dropped"),
            std::string::npos);
  EXPECT_NE(broken([](json& j) { j["version"] = 2; }).find("version"), std::string::npos);
  // Not a number: an error, not json's type_error out of trace_from_json (`trace` crashed).
  EXPECT_NE(broken([](json& j) { j["version"] = "x"; }).find("version"), std::string::npos);
  EXPECT_NE(broken([](json& j) { j["version"] = 1.5; }).find("version"), std::string::npos);
  EXPECT_FALSE(trace_from_json(json::array()).ok());
}

TEST(PhaseSpans, are_per_thread_ordered_closed_and_cut_to_the_window) {
  const TraceData t = sample();
  const auto spans = phase_spans(t);
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<PhaseSpan>> by;
  for (const PhaseSpan& s : spans) by[{s.pid, s.tid}].push_back(s);
  const auto& main = by[{100, 100}];
  ASSERT_EQ(main.size(), 3U);
  // DataLoading from before the start, cut at the start, until GpuCompute.
  EXPECT_EQ(main[0].phase, Phase::data_loading);
  EXPECT_EQ(main[0].start_ns, kStart);
  EXPECT_EQ(main[0].end_ns, kStart + 100 * kMs);
  // The repeated GpuCompute is one span; Unknown is a gap.
  EXPECT_EQ(main[1].phase, Phase::gpu_compute);
  EXPECT_EQ(main[1].end_ns, kStart + 400 * kMs);
  EXPECT_EQ(main[1].cause, "sync_enter");
  // The last change lasts until the end.
  EXPECT_EQ(main[2].phase, Phase::optimizer_step);
  EXPECT_EQ(main[2].end_ns, t.end_ns);
  for (const auto& [key, v] : by) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      EXPECT_LT(v[i].start_ns, v[i].end_ns);
      EXPECT_NE(v[i].phase, Phase::unknown);
      if (i > 0) {
        EXPECT_LE(v[i - 1].end_ns, v[i].start_ns);
      }
    }
  }

  // Changes given out of order come out in order.
  TraceData u;
  u.start_ns = 0;
  u.end_ns = 100;
  u.phases = {{50, 1, 1, Phase::gpu_compute, ""}, {10, 1, 1, Phase::data_loading, ""}};
  const auto s2 = phase_spans(u);
  ASSERT_EQ(s2.size(), 2U);
  EXPECT_EQ(s2[0].phase, Phase::data_loading);
  EXPECT_EQ(s2[0].end_ns, 50U);
  EXPECT_EQ(s2[1].end_ns, 100U);
}

TEST(ChromeTrace, is_valid_json_with_named_tracks_spans_and_decisions) {
  const TraceData t = sample();
  const json doc = json::parse(chrome_trace_json(t, TraceClock::realtime));
  ASSERT_TRUE(doc["traceEvents"].is_array());
  std::map<std::pair<int, int>, std::string> thread_names;
  std::map<int, std::string> process_names;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> spans;
  int instants = 0;
  int counters = 0;
  for (const json& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "thread_name") {
      thread_names[{e["pid"], e["tid"]}] = e["args"]["name"];
    } else if (ph == "M" && e["name"] == "process_name") {
      process_names[e["pid"]] = e["args"]["name"];
    } else if (ph == "X") {
      spans[{e["pid"], e["tid"]}].emplace_back(e["ts"].get<double>(), e["dur"].get<double>());
      EXPECT_EQ(e["cat"], "phase");
    } else if (ph == "i") {
      ++instants;
      EXPECT_EQ(e["tid"], e["pid"]);  // on the main thread's track
    } else if (ph == "M" && e["name"] == "process_labels") {
      EXPECT_EQ(e["pid"], 100);
      EXPECT_EQ(e["args"]["labels"], "gpu_owner");
    } else if (ph == "C") {
      ++counters;
    }
  }
  EXPECT_EQ(process_names[100], "trainer");
  EXPECT_EQ(process_names[200], "a<b>&\"c'\xEF\xBF\xBD\x01");
  EXPECT_EQ((thread_names[{100, 101}]), "pt_data_worker");
  EXPECT_EQ((thread_names[{100, 100}]), "trainer");
  EXPECT_EQ(instants, 2);
  EXPECT_EQ(counters, 2);
  ASSERT_EQ((spans[{100, 100}].size()), 3U);
  // Realtime microseconds: (monotonic + offset) / 1000.
  const double start_us = static_cast<double>(kStart + 1'700'000'000'000'000'000ULL) / 1e3;
  EXPECT_NEAR((spans[{100, 100}][0].first), start_us, 1.0);
  EXPECT_NEAR((spans[{100, 100}][0].second), 100'000.0, 1e-6);
  for (const auto& [key, v] : spans) {
    for (std::size_t i = 1; i < v.size(); ++i) {
      EXPECT_LE(v[i - 1].first + v[i - 1].second, v[i].first + 1e-3);
    }
  }
  EXPECT_EQ(doc["otherData"]["dropped_phase_changes"], 0);
  EXPECT_NE(doc["otherData"]["clock"].get<std::string>().find("REALTIME"), std::string::npos);

  const json mono = json::parse(chrome_trace_json(t, TraceClock::monotonic));
  for (const json& e : mono["traceEvents"]) {
    if (e["ph"] == "X" && e["tid"] == 101) {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), static_cast<double>(kStart + 10 * kMs) / 1e3);
    }
  }
}

TEST(ChromeTrace, empty_trace_is_a_valid_document) {
  TraceRecorder r(kStart, kStart + kMs);
  const json doc = json::parse(chrome_trace_json(r.finish(0, "observe"), TraceClock::realtime));
  EXPECT_TRUE(doc["traceEvents"].is_array());
  EXPECT_TRUE(doc["traceEvents"].empty());
}

// A small well-formedness check: balanced tags, quoted attributes, known entities, no raw '<'
// or '&' in text. Returns "" when well-formed, else what is wrong.
std::string xml_problem(const std::string& x) {
  std::vector<std::string> stack;
  std::size_t i = 0;
  if (x.rfind("<?xml", 0) == 0) i = x.find("?>") + 2;
  while (i < x.size()) {
    if (x[i] == '&') {
      const std::size_t semi = x.find(';', i);
      const std::string ent = x.substr(i, semi == std::string::npos ? 8 : semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;") {
        return "bad entity " + ent + " at " + std::to_string(i);
      }
      i = semi + 1;
      continue;
    }
    if (x[i] != '<') {
      if (static_cast<unsigned char>(x[i]) < 0x20 && x[i] != '\n' && x[i] != '\t') {
        return "control character at " + std::to_string(i);
      }
      ++i;
      continue;
    }
    const std::size_t end = x.find('>', i);
    if (end == std::string::npos) return "unclosed tag at " + std::to_string(i);
    std::string tag = x.substr(i + 1, end - i - 1);
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return "odd quotes in <" + tag + ">";
    if (tag.find('<') != std::string::npos) return "'<' inside <" + tag + ">";
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return "mismatched </" + name + ">";
      stack.pop_back();
    } else if (tag.back() != '/') {
      stack.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
    i = end + 1;
  }
  return stack.empty() ? "" : "unclosed <" + stack.back() + ">";
}

TEST(TraceSvg, is_well_formed_with_escaped_names_a_row_per_thread_and_a_legend) {
  const TraceData t = sample();
  const std::string svg = trace_svg(t, TraceClock::realtime);
  EXPECT_EQ(xml_problem(svg), "") << svg;
  EXPECT_NE(svg.find("a&lt;b&gt;&amp;&quot;c&apos;\xEF\xBF\xBD\xEF\xBF\xBD [200]"),
            std::string::npos);
  EXPECT_NE(svg.find("trainer [100] gpu_owner"), std::string::npos);
  EXPECT_NE(svg.find("pt_data_worker [101]"), std::string::npos);
  for (const char* phase : {"DataLoading", "GpuCompute", "NcclCollective", "OptimizerStep"}) {
    EXPECT_NE(svg.find(std::string(">") + phase + "</text>"), std::string::npos) << phase;
  }
  // The time axis: 1 s in steps of 100 ms.
  EXPECT_NE(svg.find(">0.0 s</text>"), std::string::npos);
  EXPECT_NE(svg.find(">0.5 s</text>"), std::string::npos);
  // One rect per span (3 + 1 + 1) with a tooltip.
  std::size_t titles = 0;
  for (std::size_t p = svg.find("ms at +"); p != std::string::npos;
       p = svg.find("ms at +", p + 1)) {
    ++titles;
  }
  EXPECT_EQ(titles, 5U);

  TraceRecorder r(kStart, kStart + kMs);
  const std::string empty = trace_svg(r.finish(0, "observe"), TraceClock::monotonic);
  EXPECT_EQ(xml_problem(empty), "");
  EXPECT_NE(empty.find("no tracked process"), std::string::npos);
}

TEST(XmlEscape, escapes_markup_and_replaces_what_xml_forbids) {
  EXPECT_EQ(xml_escape("a&b<c>\"'"), "a&amp;b&lt;c&gt;&quot;&apos;");
  EXPECT_EQ(xml_escape(std::string("x\x01y", 3)), "x\xEF\xBF\xBDy");
  EXPECT_EQ(xml_escape("\xff"), "\xEF\xBF\xBD");
  EXPECT_EQ(xml_escape("\xEF\xBF\xBE"), "\xEF\xBF\xBD");  // U+FFFE
  EXPECT_EQ(xml_escape("caf\xC3\xA9\tok"), "caf\xC3\xA9\tok");
}

}  // namespace
}  // namespace zernel::telemetry
