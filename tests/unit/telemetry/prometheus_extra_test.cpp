// The series added beyond the seed names: decision latency and collector errors.
#include <gtest/gtest.h>

#include <string>

#include "telemetry/prometheus.hpp"

namespace zernel::telemetry {
namespace {

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(Prometheus, renders_the_decision_latency_histogram_cumulatively) {
  Snapshot s;
  s.last_decision_latency_ns = 1'500'000;  // 1.5 ms
  s.decision_latency.observe(40'000);      // 40 us: first bucket
  s.decision_latency.observe(1'500'000);   // le 0.0025
  s.decision_latency.observe(3'000'000'000);  // 3 s: only +Inf
  const std::string text = render_prometheus(s);
  EXPECT_TRUE(contains(text, "# TYPE zernel_scheduler_decision_latency_seconds histogram\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_last_decision_latency_seconds 0.0015\n")) << text;
  EXPECT_TRUE(contains(text, "zernel_scheduler_decision_latency_seconds_bucket{le=\"5e-05\"} 1\n"))
      << text;
  EXPECT_TRUE(contains(text, "zernel_scheduler_decision_latency_seconds_bucket{le=\"0.001\"} 1\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_decision_latency_seconds_bucket{le=\"0.0025\"} 2\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_decision_latency_seconds_bucket{le=\"1\"} 2\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_decision_latency_seconds_bucket{le=\"+Inf\"} 3\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_decision_latency_seconds_count 3\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_decision_latency_seconds_sum 3.00154\n")) << text;
}

TEST(Prometheus, renders_collector_errors_by_name) {
  Snapshot s;
  s.collector_errors = {{"nvml", 2}, {"discovery", 0}, {"po\"wer", 1}};
  const std::string text = render_prometheus(s);
  EXPECT_TRUE(contains(text, "# TYPE zernel_scheduler_collector_errors_total counter\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_collector_errors_total{collector=\"nvml\"} 2\n"));
  EXPECT_TRUE(
      contains(text, "zernel_scheduler_collector_errors_total{collector=\"discovery\"} 0\n"));
  EXPECT_TRUE(
      contains(text, "zernel_scheduler_collector_errors_total{collector=\"po\\\"wer\"} 1\n"));
}

TEST(Prometheus, renders_discovery_runs_by_kind) {
  Snapshot s;
  s.discovery_runs = {{"proc_scan", 3}, {"proc_update", 0}, {"nvml_list", 41}};
  const std::string text = render_prometheus(s);
  EXPECT_TRUE(contains(text, "# TYPE zernel_scheduler_discovery_runs_total counter\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_discovery_runs_total{kind=\"proc_scan\"} 3\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_discovery_runs_total{kind=\"proc_update\"} 0\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_discovery_runs_total{kind=\"nvml_list\"} 41\n"));
}

}  // namespace
}  // namespace zernel::telemetry
