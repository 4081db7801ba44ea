#pragma once
// The `GET /status` document (docs/operations.md; scripts depend on its keys):
//   {"backend": "...", "backend_requested": "...", "backend_state": "...", "backend_reason": "...",
//    "taken_at_ns": N, "decisions": N, "transitions": N, "tasks_total": N, "tasks_ml": N,
//    "tenants": [{"id", "gpus", "class", "weight", "tasks"}],
//    "tasks": [{"pid", "comm", "phase", "priority", "weight", "tenant", "gpu_id",
//               "preferred_cpu", "phase_time_ms": {"DataLoading": ms, ...},
//               "threads": [{"tid", "phase", "exited", "phase_time_ms"}]}]}
// backend is the backend acting; backend_state whether the one asked for (--backend) acts
// ("requested") or why not ("reloading", "fallback", "observing"; daemon/backend_supervisor.hpp),
// backend_reason the sentence that says why (null when it acts).
// taken_at_ns is the snapshot's CLOCK_MONOTONIC time (the phase log's clock); phase_time_ms holds
// each phase's time up to it. "threads" is there only for processes whose phases come from events:
// the threads the BPF rules gave a phase, with their own times (telemetry/thread_phases.hpp).
// Absent values (no tenant, no GPU, no preferred CPU) are null. A comm that is not valid UTF-8
// (any user can name a process "\xff") has U+FFFD for each invalid byte: the document always
// serialises.

#include <string>

#include <nlohmann/json.hpp>

#include "telemetry/snapshot.hpp"

namespace zernel::telemetry {

nlohmann::json status_json(const Snapshot& s);

}  // namespace zernel::telemetry
