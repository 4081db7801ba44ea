#include "telemetry/prometheus.hpp"

#include <gtest/gtest.h>

#include "telemetry/status_json.hpp"

namespace zernel::telemetry {
namespace {

using policy::Engine;
using policy::EngineOptions;
using policy::Topology;

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

struct Fixture {
  Engine engine{[] {
                  EngineOptions o;
                  o.multi_tenant_enabled = true;
                  o.phase.phase_stability_count = 1;
                  return o;
                }(),
                Topology::single_node(4)};
  Fixture() {
    EXPECT_TRUE(
        engine.upsert_tenant({"team-a", 2, policy::PriorityClass::training, {}, {}, {}}).ok());
    // Quotes are not valid in ids, so label values never need more than escaping backslashes.
    EXPECT_FALSE(
        engine.upsert_tenant({"team\"b", 6, policy::PriorityClass::inference, {}, {}, {}}).ok());
    EXPECT_TRUE(engine.register_task(100, true, 0U, 1'000).ok());
    EXPECT_TRUE(engine.register_task(200, false, std::nullopt, 1'000).ok());
    EXPECT_TRUE(engine.assign_pid(100, "team-a").ok());
    policy::TaskUpdate u;
    u.gpu_utilization = 95;
    engine.update_task(100, u);
    engine.schedule(100, 2'000);
    engine.schedule(200, 2'000);
  }
};

TEST(Prometheus, renders_the_seed_metric_names_with_phase_labels) {
  Fixture f;
  const std::string text = render_prometheus(take_snapshot(f.engine, 3'000, false));
  EXPECT_TRUE(contains(text, "zernel_scheduler_tasks{type=\"total\"} 2\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_tasks{type=\"ml\"} 1\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_decisions_total 2\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_phase_transitions_total 1\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_phase_tasks{phase=\"gpu_compute\"} 1\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_phase_tasks{phase=\"unknown\"} 1\n"));
  for (const char* label : {"data_loading", "gpu_compute", "nccl_collective", "optimizer_step",
                            "unknown"}) {
    EXPECT_TRUE(contains(text, std::string("zernel_scheduler_phase_time_pct{phase=\"") + label))
        << label;
  }
  EXPECT_TRUE(contains(text, "# TYPE zernel_scheduler_decisions_total counter\n"));
  EXPECT_TRUE(contains(
      text, "zernel_scheduler_tenant_tasks{tenant=\"team-a\",namespace=\"\",pod=\"\"} 1\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_backend_info{backend=\"observe\"} 1\n"));
}

TEST(Prometheus, phase_time_pct_divides_accounted_time) {
  Fixture f;
  // pid 100: Unknown 1000..2000 (1000 ns), GpuCompute 2000..3000; pid 200: Unknown 1000..3000.
  const Snapshot s = take_snapshot(f.engine, 3'000, false);
  const auto pct = phase_time_pct(s);
  EXPECT_DOUBLE_EQ(pct[policy::index_of(policy::Phase::gpu_compute)], 25.0);
  EXPECT_DOUBLE_EQ(pct[policy::index_of(policy::Phase::unknown)], 75.0);
}

TEST(Prometheus, escapes_label_values) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(StatusJson, lists_tasks_with_nulls_for_absent_values) {
  Fixture f;
  const auto j = status_json(take_snapshot(f.engine, 3'000, true));
  EXPECT_EQ(j["decisions"], 2);
  ASSERT_EQ(j["tasks"].size(), 2U);
  const auto& t0 = j["tasks"][0];
  EXPECT_EQ(t0["pid"], 100);
  EXPECT_EQ(t0["phase"], "GpuCompute");
  EXPECT_EQ(t0["tenant"], "team-a");
  EXPECT_EQ(t0["gpu_id"], 0);
  EXPECT_EQ(t0["priority"], -5);  // GpuCompute; the class (training) is in the tenant weight
  const auto& t1 = j["tasks"][1];
  EXPECT_TRUE(t1["tenant"].is_null());
  EXPECT_TRUE(t1["gpu_id"].is_null());
  EXPECT_EQ(j["tenants"][0]["id"], "team-a");
  EXPECT_EQ(j["tenants"][0]["class"], "training");
}

TEST(Prometheus, phase_seconds_total_counts_the_time_of_tasks_no_longer_tracked_too) {
  Fixture f;
  Snapshot s = take_snapshot(f.engine, 3'000, false);
  EXPECT_EQ(s.phase_time_total_ns, s.phase_time_ns);
  s.phase_time_total_ns[policy::index_of(policy::Phase::gpu_compute)] += 2'000'000'000;
  const std::string text = render_prometheus(s);
  EXPECT_TRUE(contains(text, "# TYPE zernel_scheduler_phase_seconds_total counter\n"));
  EXPECT_TRUE(
      contains(text, "zernel_scheduler_phase_seconds_total{phase=\"gpu_compute\"} 2.000001\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_phase_seconds_total{phase=\"unknown\"} 0.000003\n"));
}

TEST(StatusJson, carries_the_snapshot_time_and_the_threads_of_processes_with_events) {
  Fixture f;
  Snapshot s = take_snapshot(f.engine, 3'000, true);
  ThreadView th;
  th.tid = 101;
  th.phase = policy::Phase::data_loading;
  th.exited = true;
  th.phase_time_ns[policy::index_of(policy::Phase::data_loading)] = 2'000'000;
  s.tasks[0].threads = {th};
  const auto j = status_json(s);
  EXPECT_EQ(j["taken_at_ns"], 3'000);
  ASSERT_EQ(j["tasks"][0]["threads"].size(), 1U);
  const auto& t = j["tasks"][0]["threads"][0];
  EXPECT_EQ(t["tid"], 101);
  EXPECT_EQ(t["phase"], "DataLoading");
  EXPECT_EQ(t["exited"], true);
  EXPECT_DOUBLE_EQ(t["phase_time_ms"]["DataLoading"].get<double>(), 2.0);
  EXPECT_FALSE(j["tasks"][1].contains("threads"));
}

TEST(StatusJson, says_which_backend_acts_and_why) {
  Snapshot s;
  s.backend = "userspace";
  s.backend_requested = "sched_ext";
  s.backend_state = "fallback";
  s.backend_reason = "sched_ext ended 3 times within 600 s; the userspace backend acts instead";
  auto j = status_json(s);
  EXPECT_EQ(j["backend"], "userspace");
  EXPECT_EQ(j["backend_requested"], "sched_ext");
  EXPECT_EQ(j["backend_state"], "fallback");
  EXPECT_EQ(j["backend_reason"], s.backend_reason);

  s.backend_state = "requested";
  s.backend_reason.clear();
  j = status_json(s);
  EXPECT_TRUE(j["backend_reason"].is_null()) << "no reason while the requested backend acts";
}

TEST(Prometheus, renders_the_backend_state_as_one_series_per_state) {
  Snapshot s;
  s.backend = "userspace";
  s.backend_requested = "sched_ext";
  s.backend_state = "fallback";
  const std::string text = render_prometheus(s);
  EXPECT_TRUE(contains(text, "# TYPE zernel_scheduler_backend_state gauge\n"));
  EXPECT_TRUE(contains(
      text, "zernel_scheduler_backend_state{requested=\"sched_ext\",state=\"fallback\"} 1\n"));
  for (const char* other : {"requested", "reloading", "observing"}) {
    EXPECT_TRUE(contains(text, std::string("zernel_scheduler_backend_state{requested=\"sched_ext\""
                                           ",state=\"") +
                                   other + "\"} 0\n"))
        << other;
  }
  EXPECT_TRUE(contains(text, "zernel_scheduler_backend_info{backend=\"userspace\"} 1\n"));
}

}  // namespace
}  // namespace zernel::telemetry
