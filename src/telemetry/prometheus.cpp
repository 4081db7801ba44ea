#include "telemetry/prometheus.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "common/utf8.hpp"

namespace zernel::telemetry {

std::string escape_label_value(std::string_view v) {
  // Prometheus refuses a whole scrape with a label value that is not UTF-8.
  const std::string text = valid_utf8(v);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string dcgm_pci_bus_id(std::string_view sysfs_bus_id) {
  const auto colon = sysfs_bus_id.find(':');
  if (colon > 8) return std::string(sysfs_bus_id);  // no colon (npos), or not a domain
  std::string out(8 - colon, '0');
  out += sysfs_bus_id;
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

namespace {

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// tenant="...",namespace="...",pod="..." (empty namespace and pod for tenants not from Kubernetes:
// every tenant series has the same label names).
std::string tenant_labels(const TenantView& t) {
  return fmt::format(R"(tenant="{}",namespace="{}",pod="{}")", escape_label_value(t.id),
                     escape_label_value(t.k8s_namespace), escape_label_value(t.k8s_pod));
}

// gpu="0",UUID="GPU-...",pci_bus_id="00000000:1B:00.0",Hostname="node-1": DCGM exporter's labels.
std::string gpu_labels(const GpuView& g, std::string_view hostname) {
  return fmt::format(R"(gpu="{}",UUID="{}",pci_bus_id="{}",Hostname="{}")", g.index,
                     escape_label_value(g.uuid), escape_label_value(dcgm_pci_bus_id(g.bus_id)),
                     escape_label_value(hostname));
}

constexpr std::string_view kRunNsPrefix = "run_ns_";

void render_backend(std::string& out, const Snapshot& s) {
  auto it = std::back_inserter(out);
  header(out, "zernel_scheduler_build_info", "gauge",
         "Always 1; the labels name the daemon's version, its git commit and the backend in use.");
  fmt::format_to(
      it, "zernel_scheduler_build_info{{version=\"{}\",commit=\"{}\",backend=\"{}\"}} 1\n",
      escape_label_value(s.version), escape_label_value(s.commit), escape_label_value(s.backend));

  header(out, "zernel_scheduler_backend_restarts_total", "counter",
         "Reloads of an ejected backend, by result (loaded, failed).");
  fmt::format_to(it, "zernel_scheduler_backend_restarts_total{{result=\"loaded\"}} {}\n",
                 s.backend_restarts - std::min(s.backend_restarts, s.backend_restarts_failed));
  fmt::format_to(it, "zernel_scheduler_backend_restarts_total{{result=\"failed\"}} {}\n",
                 s.backend_restarts_failed);
  header(
      out, "zernel_scheduler_backend_ejections_total", "counter",
      "Times the kernel ended the backend's scheduler, by exit kind (SCX_EXIT_ without prefix).");
  for (const NamedCounter& e : s.backend_ejections) {
    fmt::format_to(it, "zernel_scheduler_backend_ejections_total{{kind=\"{}\"}} {}\n",
                   escape_label_value(e.name), e.value);
  }

  // The sched_ext scheduler's per-CPU counters (bpf/intf.h ZERNEL_STATS), summed over CPUs and
  // over restarts: run_ns_<phase> as CPU seconds by phase, every other one as an event kind.
  header(out, "zernel_scheduler_bpf_events_total", "counter",
         "Events counted by the sched_ext scheduler, by kind (bpf/intf.h ZERNEL_STATS).");
  for (const NamedCounter& c : s.backend_counters) {
    if (c.name.starts_with(kRunNsPrefix)) continue;
    fmt::format_to(it, "zernel_scheduler_bpf_events_total{{kind=\"{}\"}} {}\n",
                   escape_label_value(c.name), c.value);
  }
  header(out, "zernel_scheduler_bpf_cpu_seconds_total", "counter",
         "CPU time run by tasks under the sched_ext scheduler, by their phase (undecided: no "
         "decision).");
  for (const NamedCounter& c : s.backend_counters) {
    if (!c.name.starts_with(kRunNsPrefix)) continue;
    fmt::format_to(it, "zernel_scheduler_bpf_cpu_seconds_total{{phase=\"{}\"}} {}\n",
                   escape_label_value(std::string_view(c.name).substr(kRunNsPrefix.size())),
                   static_cast<double>(c.value) / 1e9);
  }
  if (!s.switch_rules_in.empty()) {
    header(out, "zernel_scheduler_switch_rules", "gauge",
           "1 for where the per-thread phase rules of a context switch run: sched_ext (the "
           "scheduler's own callbacks) or tracepoint (the probes' sched_switch program).");
    fmt::format_to(it, "zernel_scheduler_switch_rules{{in=\"{}\"}} 1\n",
                   escape_label_value(s.switch_rules_in));
  }
  header(out, "zernel_scheduler_probe_events_total", "counter",
         "Events counted by the GPU sync probes, by kind (enum zernel_probe_stat).");
  for (const NamedCounter& c : s.probe_counters) {
    fmt::format_to(it, "zernel_scheduler_probe_events_total{{kind=\"{}\"}} {}\n",
                   escape_label_value(c.name), c.value);
  }
}

void render_tenants(std::string& out, const Snapshot& s) {
  auto it = std::back_inserter(out);
  header(out, "zernel_scheduler_tenant_cpu_weight", "gauge",
         "A tenant's CPU weight (1.0 = an average tenant's share).");
  for (const TenantView& t : s.tenants) {
    fmt::format_to(it, "zernel_scheduler_tenant_cpu_weight{{{}}} {}\n", tenant_labels(t), t.weight);
  }
  header(out, "zernel_scheduler_tenant_tasks", "gauge", "Tracked tasks assigned to a tenant.");
  for (const TenantView& t : s.tenants) {
    fmt::format_to(it, "zernel_scheduler_tenant_tasks{{{}}} {}\n", tenant_labels(t), t.tasks);
  }
  header(out, "zernel_scheduler_tenant_entitled_share", "gauge",
         "A tenant's entitled share of the CPUs: its scheduled weight over all tenants' (0..1).");
  for (const TenantView& t : s.tenants) {
    fmt::format_to(it, "zernel_scheduler_tenant_entitled_share{{{}}} {:.6f}\n", tenant_labels(t),
                   t.entitled_share);
  }
  header(out, "zernel_scheduler_tenant_achieved_share", "gauge",
         "A tenant's share of all tenants' CPU time over the last publish interval (0..1).");
  for (const TenantView& t : s.tenants) {
    if (!t.achieved_share) continue;
    fmt::format_to(it, "zernel_scheduler_tenant_achieved_share{{{}}} {:.6f}\n", tenant_labels(t),
                   *t.achieved_share);
  }
  header(out, "zernel_scheduler_tenant_cpu_seconds_total", "counter",
         "CPU time (user + system) of a tenant's tracked processes while they were its.");
  for (const TenantView& t : s.tenants) {
    fmt::format_to(it, "zernel_scheduler_tenant_cpu_seconds_total{{{}}} {}\n", tenant_labels(t),
                   static_cast<double>(t.cpu_time_ns) / 1e9);
  }
}

void render_gpus(std::string& out, const Snapshot& s) {
  auto it = std::back_inserter(out);
  header(out, "zernel_scheduler_gpu_utilization_percent", "gauge",
         "A GPU's utilisation (time a kernel ran) as the daemon last read it from NVML.");
  for (const GpuView& g : s.gpus) {
    if (!g.utilization_pct) continue;
    fmt::format_to(it, "zernel_scheduler_gpu_utilization_percent{{{}}} {}\n",
                   gpu_labels(g, s.hostname), *g.utilization_pct);
  }
  header(out, "zernel_scheduler_gpu_tasks", "gauge", "Tracked tasks bound to a GPU, by phase.");
  for (const GpuView& g : s.gpus) {
    const std::string labels = gpu_labels(g, s.hostname);
    for (policy::Phase p : policy::kAllPhases) {
      fmt::format_to(it, "zernel_scheduler_gpu_tasks{{{},phase=\"{}\"}} {}\n", labels,
                     policy::phase_label(p), g.phase_tasks[policy::index_of(p)]);
    }
  }
  header(out, "zernel_scheduler_gpu_tenant_info", "gauge",
         "1 for each tenant with tracked tasks on a GPU (joins GPU series to tenants and pods).");
  for (const GpuView& g : s.gpus) {
    const std::string labels = gpu_labels(g, s.hostname);
    for (const std::string& id : g.tenants) {
      // A tenant removed since the task table was read keeps its id, with no origin.
      TenantView origin;
      origin.id = id;
      for (const TenantView& v : s.tenants) {
        if (v.id == id) origin = v;
      }
      fmt::format_to(it, "zernel_scheduler_gpu_tenant_info{{{},{}}} 1\n", labels,
                     tenant_labels(origin));
    }
  }
}

}  // namespace

std::string render_prometheus(const Snapshot& s) {
  std::string out;
  auto it = std::back_inserter(out);

  header(out, "zernel_scheduler_tasks", "gauge", "Tracked tasks (processes).");
  fmt::format_to(it, "zernel_scheduler_tasks{{type=\"total\"}} {}\n", s.tasks_total);
  fmt::format_to(it, "zernel_scheduler_tasks{{type=\"ml\"}} {}\n", s.tasks_ml);

  header(out, "zernel_scheduler_decisions_total", "counter", "Scheduling decisions made.");
  fmt::format_to(it, "zernel_scheduler_decisions_total {}\n", s.decisions_total);

  header(out, "zernel_scheduler_phase_transitions_total", "counter",
         "Committed phase changes over all tasks.");
  fmt::format_to(it, "zernel_scheduler_phase_transitions_total {}\n", s.phase_transitions_total);

  header(out, "zernel_scheduler_phase_tasks", "gauge", "Tracked tasks now in each phase.");
  for (policy::Phase p : policy::kAllPhases) {
    fmt::format_to(it, "zernel_scheduler_phase_tasks{{phase=\"{}\"}} {}\n", policy::phase_label(p),
                   s.phase_tasks[policy::index_of(p)]);
  }

  header(out, "zernel_scheduler_phase_time_pct", "gauge",
         "Percent of the tracked tasks' accounted time spent in each phase.");
  const auto pct = phase_time_pct(s);
  for (policy::Phase p : policy::kAllPhases) {
    fmt::format_to(it, "zernel_scheduler_phase_time_pct{{phase=\"{}\"}} {:.3f}\n",
                   policy::phase_label(p), pct[policy::index_of(p)]);
  }

  header(out, "zernel_scheduler_phase_seconds_total", "counter",
         "Time tracked tasks spent in each phase, summed over tasks (also those no longer "
         "tracked); with phases from events, as the events dated the changes.");
  for (policy::Phase p : policy::kAllPhases) {
    fmt::format_to(it, "zernel_scheduler_phase_seconds_total{{phase=\"{}\"}} {:.6f}\n",
                   policy::phase_label(p),
                   static_cast<double>(s.phase_time_total_ns[policy::index_of(p)]) / 1e9);
  }

  render_tenants(out, s);

  header(out, "zernel_scheduler_backend_info", "gauge", "The enforcement backend in use.");
  fmt::format_to(it, "zernel_scheduler_backend_info{{backend=\"{}\"}} 1\n",
                 escape_label_value(s.backend));
  header(out, "zernel_scheduler_backend_state", "gauge",
         "1 for the state the backend asked for (--backend, label requested) is in: requested (it "
         "acts), reloading (the kernel ended it; observing until its reload), fallback (given up "
         "on after ejections a reload does not cure; the userspace backend acts), observing "
         "(ended, not reloaded, nothing stands in); 0 for the others.");
  for (std::string_view st : {"requested", "reloading", "fallback", "observing"}) {
    fmt::format_to(it, "zernel_scheduler_backend_state{{requested=\"{}\",state=\"{}\"}} {}\n",
                   escape_label_value(s.backend_requested), st, s.backend_state == st ? 1 : 0);
  }

  header(out, "zernel_scheduler_last_decision_latency_seconds", "gauge",
         "Time the last tick took from its start to its decisions handed to the backend.");
  fmt::format_to(it, "zernel_scheduler_last_decision_latency_seconds {}\n",
                 static_cast<double>(s.last_decision_latency_ns) / 1e9);
  header(out, "zernel_scheduler_decision_latency_seconds", "histogram",
         "Time each tick took from its start to its decisions handed to the backend.");
  std::uint64_t cumulative = 0;
  const LatencyHistogram& h = s.decision_latency;
  for (std::size_t i = 0; i < LatencyHistogram::kBoundsSeconds.size(); ++i) {
    cumulative += h.buckets[i];
    fmt::format_to(it, "zernel_scheduler_decision_latency_seconds_bucket{{le=\"{}\"}} {}\n",
                   LatencyHistogram::kBoundsSeconds[i], cumulative);
  }
  fmt::format_to(it, "zernel_scheduler_decision_latency_seconds_bucket{{le=\"+Inf\"}} {}\n",
                 h.count);
  fmt::format_to(it, "zernel_scheduler_decision_latency_seconds_sum {}\n", h.sum_seconds);
  fmt::format_to(it, "zernel_scheduler_decision_latency_seconds_count {}\n", h.count);

  header(out, "zernel_scheduler_discovery_runs_total", "counter",
         "Times the daemon looked for processes to follow since start, by kind (proc_scan: all "
         "of /proc; proc_update: the processes the kernel's events named; nvml_list: NVML's "
         "process list).");
  for (const NamedCounter& c : s.discovery_runs) {
    fmt::format_to(it, "zernel_scheduler_discovery_runs_total{{kind=\"{}\"}} {}\n",
                   escape_label_value(c.name), c.value);
  }
  header(out, "zernel_scheduler_collector_errors_total", "counter",
         "Errors of each collector (and of the backend and power management) since start.");
  for (const CollectorErrors& e : s.collector_errors) {
    fmt::format_to(it, "zernel_scheduler_collector_errors_total{{collector=\"{}\"}} {}\n",
                   escape_label_value(e.collector), e.errors);
  }
  render_backend(out, s);
  render_gpus(out, s);
  return out;
}

}  // namespace zernel::telemetry
