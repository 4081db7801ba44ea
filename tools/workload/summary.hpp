#pragma once
// The closing summary: what each rank reports, and the one JSON line the launcher prints.
//
//   {"steps": 10, "steps_total": 20, "steps_per_s": 0.49, "step_p50_ms": 2003.1,
//    "step_p99_ms": 2810.4, ...}
// steps: steps completed by every rank (the job's global steps); steps_total: summed over ranks;
// steps_per_s: measured global steps per second of wall time, from the start of the first
// measured step (after --warmup-steps) of the earliest rank to the end of the last rank's last
// step; step_p50_ms/step_p99_ms: nearest-rank percentiles of the wall time of every measured
// step of every rank; data_wait_mean_ms/data_wait_p99_ms: the same for the part of each step spent
// getting the batch (how much of the step the DataLoader is on the critical path). With --helpers,
// "helpers" sums what every rank's helper threads did ({"checkpoints", "hashed_bytes",
// "log_flushes", "scrapes", "collectives"}); with --pin-memory, "pinned" counts the batches that
// went through the ranks' pin-memory threads.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.hpp"
#include "workload/options.hpp"

namespace zernel::workload {

struct RankReport {
  int rank = 0;
  int pid = 0;
  std::vector<std::uint64_t> step_ns;  // wall time of each completed step, in order
  // Per completed step: wall time of its first part, getting the batch (waiting for the worker's
  // queue, or loading it with --workers 0). Same length as step_ns.
  std::vector<std::uint64_t> data_wait_ns;
  std::uint64_t measured_start_ns = 0;  // start of step --warmup-steps; 0 if never reached
  std::uint64_t end_ns = 0;             // end of the last completed step
  std::uint64_t reads_direct = 0;
  std::uint64_t reads_buffered = 0;
  std::uint64_t futex_waits = 0;
  int device = -1;
  int device_count = 0;
  bool interrupted = false;
  std::optional<std::string> error;
  nlohmann::json helpers;    // --helpers: what the helper threads did (helpers.hpp), else null
  std::uint64_t pinned = 0;  // --pin-memory: batches through the pin-memory thread
};

// Parses the JSON object a rank writes on its result pipe.
Result<RankReport> parse_rank_report(std::string_view text);

// Nearest-rank percentile (p in (0, 100]) of `sorted_ns` (ascending), in ms; 0 when empty.
double percentile_ms(const std::vector<std::uint64_t>& sorted_ns, double p);

nlohmann::ordered_json job_summary(const JobOptions& opts, const std::vector<RankReport>& ranks,
                                   bool interrupted);

// --step-log: one JSON line per completed step of every rank, ranks in order, for example
//   {"rank": 0, "step": 3, "step_ms": 52.1, "data_wait_ms": 2.4, "warmup": false}
std::string step_log_lines(const JobOptions& opts, const std::vector<RankReport>& ranks);

}  // namespace zernel::workload
