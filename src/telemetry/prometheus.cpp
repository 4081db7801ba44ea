#include "telemetry/prometheus.hpp"

#include <fmt/format.h>

namespace zernel::telemetry {

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
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

namespace {

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
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

  header(out, "zernel_scheduler_tenant_cpu_weight", "gauge",
         "A tenant's CPU weight (1.0 = an average tenant's share).");
  for (const TenantView& t : s.tenants) {
    fmt::format_to(it, "zernel_scheduler_tenant_cpu_weight{{tenant=\"{}\"}} {}\n",
                   escape_label_value(t.id), t.weight);
  }
  header(out, "zernel_scheduler_tenant_tasks", "gauge", "Tracked tasks assigned to a tenant.");
  for (const TenantView& t : s.tenants) {
    fmt::format_to(it, "zernel_scheduler_tenant_tasks{{tenant=\"{}\"}} {}\n",
                   escape_label_value(t.id), t.tasks);
  }

  header(out, "zernel_scheduler_backend_info", "gauge", "The enforcement backend in use.");
  fmt::format_to(it, "zernel_scheduler_backend_info{{backend=\"{}\"}} 1\n",
                 escape_label_value(s.backend));

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

  header(out, "zernel_scheduler_collector_errors_total", "counter",
         "Errors of each collector (and of the backend and power management) since start.");
  for (const CollectorErrors& e : s.collector_errors) {
    fmt::format_to(it, "zernel_scheduler_collector_errors_total{{collector=\"{}\"}} {}\n",
                   escape_label_value(e.collector), e.errors);
  }
  return out;
}

}  // namespace zernel::telemetry
