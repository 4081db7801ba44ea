#pragma once
// Prometheus text exposition (format 0.0.4) of a Snapshot. The metric names below are an
// interface: dashboards are built on them, so they are kept exactly:
//   zernel_scheduler_tasks{type="total"|"ml"}            gauge
//   zernel_scheduler_decisions_total                      counter
//   zernel_scheduler_phase_transitions_total              counter
//   zernel_scheduler_phase_tasks{phase=...}               gauge
//   zernel_scheduler_phase_time_pct{phase=...}            gauge, percent of accounted time
// and adds per-tenant series (cpu weight, task count), the backend in use, the decision latency
// (zernel_scheduler_last_decision_latency_seconds gauge, zernel_scheduler_decision_latency_seconds
// histogram) and zernel_scheduler_collector_errors_total{collector=...}.

#include <string>
#include <string_view>

#include "telemetry/snapshot.hpp"

namespace zernel::telemetry {

std::string render_prometheus(const Snapshot& s);

// Escapes a label value: backslash, double quote and newline.
std::string escape_label_value(std::string_view v);

}  // namespace zernel::telemetry
