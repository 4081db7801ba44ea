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
// histogram) and zernel_scheduler_collector_errors_total{collector=...}; the build, the backend's
// restarts and ejections, the sched_ext scheduler's and the probes' counters, each tenant's
// entitled and achieved CPU share, and per-GPU series with DCGM exporter's labels. Every family
// with its labels and the bound on its series: docs/operations.md, "Metrics".

#include <string>
#include <string_view>

#include "telemetry/snapshot.hpp"

namespace zernel::telemetry {

std::string render_prometheus(const Snapshot& s);

// Escapes a label value: backslash, double quote and newline; a byte that is not part of
// well-formed UTF-8 becomes U+FFFD (Prometheus refuses the whole scrape otherwise).
std::string escape_label_value(std::string_view v);

// A sysfs PCI address ("0000:1b:00.0") in the form NVML and DCGM exporter print
// ("00000000:1B:00.0"): domain widened to 8 digits, upper case. Anything else is returned as is.
std::string dcgm_pci_bus_id(std::string_view sysfs_bus_id);

}  // namespace zernel::telemetry
