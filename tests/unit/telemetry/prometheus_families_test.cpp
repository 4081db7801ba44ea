// The exposition as a whole: every family declared once with HELP and TYPE before its samples,
// counters named *_total, label values escaped; and the series of issue 14 (build, backend and
// probe counters, tenants' shares, GPUs with DCGM exporter's labels).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>

#include "telemetry/prometheus.hpp"

namespace zernel::telemetry {
namespace {

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// Every field filled, with hostile label values where a value may come from outside.
Snapshot full_snapshot() {
  Snapshot s;
  s.backend = "sched_ext";
  s.hostname = "node\"1\\\n";
  s.version = "0.1.0";
  s.commit = "abc123";
  s.tasks_total = 3;
  s.decision_latency.observe(1'000);
  s.collector_errors = {{"nvml", 1}};
  TenantView a;
  a.id = "team-a";
  a.k8s_namespace = "ml";
  a.k8s_pod = "trainer-0";
  a.cgroup_weight = 300;
  a.entitled_share = 0.75;
  a.cpu_time_ns = 2'500'000'000;
  a.achieved_share = 0.5;
  TenantView b;
  b.id = "team-b";
  b.entitled_share = 0.25;
  s.tenants = {a, b};
  s.backend_counters = {{"local", 5},
                        {"starve_rescue", 2},
                        {"run_ns_gpu_compute", 1'500'000'000},
                        {"run_ns_undecided", 0}};
  s.probe_counters = {{"sync_enter", 9}, {"thread_map_full", 0}};
  s.switch_rules_in = "sched_ext";
  s.backend_ejections = {{"ERROR_STALL", 1}, {"UNKNOWN", 0}};
  s.backend_restarts = 3;
  s.backend_restarts_failed = 1;
  GpuView g;
  g.index = 1;
  g.uuid = "GPU-0a1b";
  g.bus_id = "0000:1b:00.0";
  g.utilization_pct = 87;
  g.phase_tasks[policy::index_of(policy::Phase::gpu_compute)] = 2;
  g.tenants = {"team-a", "gone"};
  s.gpus = {g};
  return s;
}

TEST(PrometheusFamilies, every_sample_follows_its_familys_help_and_type_and_counters_end_in_total) {
  const std::string text = render_prometheus(full_snapshot());
  std::map<std::string, std::string> types;  // family -> type
  std::set<std::string> helped;
  std::set<std::string> sampled;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty());
    if (line.starts_with("# HELP ")) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(helped.insert(name).second) << "HELP twice: " << name;
      continue;
    }
    if (line.starts_with("# TYPE ")) {
      const std::string rest = line.substr(7);
      const std::string name = rest.substr(0, rest.find(' '));
      const std::string type = rest.substr(rest.find(' ') + 1);
      EXPECT_TRUE(helped.contains(name)) << "TYPE before HELP: " << name;
      EXPECT_TRUE(types.emplace(name, type).second) << "TYPE twice: " << name;
      EXPECT_FALSE(sampled.contains(name)) << "TYPE after samples: " << name;
      EXPECT_EQ(type == "counter", name.ends_with("_total")) << name << " " << type;
      continue;
    }
    ASSERT_NE(line[0], '#') << line;
    std::string name = line.substr(0, line.find_first_of("{ "));
    if (!types.contains(name)) {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        if (name.ends_with(suffix)) {
          const std::string base = name.substr(0, name.size() - std::string(suffix).size());
          if (types.contains(base) && types[base] == "histogram") name = base;
        }
      }
    }
    ASSERT_TRUE(types.contains(name)) << "sample without TYPE: " << line;
    sampled.insert(name);
  }
  for (const char* family :
       {"zernel_scheduler_build_info", "zernel_scheduler_bpf_events_total",
        "zernel_scheduler_bpf_cpu_seconds_total", "zernel_scheduler_probe_events_total",
        "zernel_scheduler_backend_ejections_total", "zernel_scheduler_backend_restarts_total",
        "zernel_scheduler_tenant_entitled_share", "zernel_scheduler_tenant_achieved_share",
        "zernel_scheduler_tenant_cpu_seconds_total", "zernel_scheduler_gpu_utilization_percent",
        "zernel_scheduler_gpu_tasks", "zernel_scheduler_gpu_tenant_info",
        "zernel_scheduler_switch_rules"}) {
    EXPECT_TRUE(sampled.contains(family)) << family;
  }
}

TEST(PrometheusFamilies, renders_the_build_backend_and_probe_counters) {
  const std::string text = render_prometheus(full_snapshot());
  EXPECT_TRUE(contains(text,
                       "zernel_scheduler_build_info{version=\"0.1.0\",commit=\"abc123\",backend="
                       "\"sched_ext\"} 1\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_bpf_events_total{kind=\"local\"} 5\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_bpf_events_total{kind=\"starve_rescue\"} 2\n"));
  EXPECT_FALSE(contains(text, "kind=\"run_ns_")) << text;
  EXPECT_TRUE(
      contains(text, "zernel_scheduler_bpf_cpu_seconds_total{phase=\"gpu_compute\"} 1.5\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_bpf_cpu_seconds_total{phase=\"undecided\"} 0\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_probe_events_total{kind=\"sync_enter\"} 9\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_switch_rules{in=\"sched_ext\"} 1\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_backend_ejections_total{kind=\"ERROR_STALL\"} 1\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_backend_restarts_total{result=\"loaded\"} 2\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_backend_restarts_total{result=\"failed\"} 1\n"));
}

TEST(PrometheusFamilies,
     labels_tenant_series_with_namespace_and_pod_empty_when_not_from_kubernetes) {
  const std::string text = render_prometheus(full_snapshot());
  EXPECT_TRUE(contains(text,
                       "zernel_scheduler_tenant_entitled_share{tenant=\"team-a\","
                       "namespace=\"ml\",pod=\"trainer-0\"} 0.750000\n"))
      << text;
  EXPECT_TRUE(contains(text,
                       "zernel_scheduler_tenant_entitled_share{tenant=\"team-b\","
                       "namespace=\"\",pod=\"\"} 0.250000\n"));
  EXPECT_TRUE(contains(text,
                       "zernel_scheduler_tenant_achieved_share{tenant=\"team-a\","
                       "namespace=\"ml\",pod=\"trainer-0\"} 0.500000\n"));
  // No achieved share yet for team-b: no sample rather than a made-up 0.
  EXPECT_FALSE(contains(text, "zernel_scheduler_tenant_achieved_share{tenant=\"team-b\""));
  EXPECT_TRUE(contains(text,
                       "zernel_scheduler_tenant_cpu_seconds_total{tenant=\"team-a\","
                       "namespace=\"ml\",pod=\"trainer-0\"} 2.5\n"));
  EXPECT_TRUE(contains(text,
                       "zernel_scheduler_tenant_tasks{tenant=\"team-b\",namespace=\"\","
                       "pod=\"\"} 0\n"));
}

TEST(PrometheusFamilies, labels_gpu_series_as_dcgm_exporter_with_escaped_hostname) {
  const std::string text = render_prometheus(full_snapshot());
  const std::string labels =
      R"(gpu="1",UUID="GPU-0a1b",pci_bus_id="00000000:1B:00.0",Hostname="node\"1\\\n")";
  EXPECT_TRUE(contains(text, "zernel_scheduler_gpu_utilization_percent{" + labels + "} 87\n"))
      << text;
  EXPECT_TRUE(
      contains(text, "zernel_scheduler_gpu_tasks{" + labels + ",phase=\"gpu_compute\"} 2\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_gpu_tasks{" + labels + ",phase=\"unknown\"} 0\n"));
  EXPECT_TRUE(contains(text, "zernel_scheduler_gpu_tenant_info{" + labels +
                                 ",tenant=\"team-a\",namespace=\"ml\",pod=\"trainer-0\"} 1\n"));
  // A tenant removed between the task table and the tenant list keeps its id, empty origin.
  EXPECT_TRUE(contains(text, "zernel_scheduler_gpu_tenant_info{" + labels +
                                 ",tenant=\"gone\",namespace=\"\",pod=\"\"} 1\n"));
}

TEST(PrometheusFamilies, escape_replaces_bytes_that_are_not_utf8) {
  EXPECT_EQ(escape_label_value("caf\xC3\xA9"), "caf\xC3\xA9");  // well-formed: kept
  EXPECT_EQ(escape_label_value("a\xFF"
                               "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(escape_label_value("\xC3"), "\xEF\xBF\xBD");                  // truncated sequence
  EXPECT_EQ(escape_label_value("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
  EXPECT_EQ(escape_label_value("\xED\xA0\x80"),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(escape_label_value("\t\x01q\"\\\n"), "\t\x01q\\\"\\\\\\n");
}

TEST(PrometheusFamilies, pci_bus_id_in_nvmls_form) {
  EXPECT_EQ(dcgm_pci_bus_id("0000:1b:00.0"), "00000000:1B:00.0");
  EXPECT_EQ(dcgm_pci_bus_id("00000000:1B:00.0"), "00000000:1B:00.0");
  EXPECT_EQ(dcgm_pci_bus_id("nonsense"), "nonsense");
}

TEST(PrometheusFamilies, entitled_share_is_the_weight_over_all_tenants_weights) {
  policy::EngineOptions o;
  o.multi_tenant_enabled = true;
  policy::Engine engine(o, policy::Topology::single_node(4));
  ASSERT_TRUE(engine.upsert_tenant({"a", 3, policy::PriorityClass::training, {}, {}, {}}).ok());
  ASSERT_TRUE(engine.upsert_tenant({"b", 1, policy::PriorityClass::training, {}, {}, {}}).ok());
  const Snapshot s = take_snapshot(engine, 1'000, false);
  ASSERT_EQ(s.tenants.size(), 2U);
  double sum = 0;
  for (const TenantView& t : s.tenants) {
    sum += t.entitled_share;
    EXPECT_NEAR(t.entitled_share,
                static_cast<double>(t.cgroup_weight) /
                    static_cast<double>(s.tenants[0].cgroup_weight + s.tenants[1].cgroup_weight),
                1e-12);
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_GT(s.tenants[0].entitled_share, s.tenants[1].entitled_share);  // 3 GPUs against 1
}

}  // namespace
}  // namespace zernel::telemetry
