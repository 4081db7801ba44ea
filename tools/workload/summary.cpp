#include "workload/summary.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace zernel::workload {
namespace {

// Rounds to `scale` (10, 100, ...) steps per unit; dividing, not multiplying by 1/scale, gives the
// double nearest the decimal, which the JSON writer prints short ("93.701", not
// "93.70100000000001").
double round_to(double x, double scale) { return std::round(x * scale) / scale; }

}  // namespace

Result<RankReport> parse_rank_report(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Error(EPROTO, "unreadable rank report");
  RankReport r;
  try {
    r.rank = j.value("rank", -1);
    r.pid = j.value("pid", 0);
    if (j.contains("error")) r.error = j["error"].get<std::string>();
    if (j.contains("step_ns")) r.step_ns = j["step_ns"].get<std::vector<std::uint64_t>>();
    if (j.contains("data_wait_ns")) {
      r.data_wait_ns = j["data_wait_ns"].get<std::vector<std::uint64_t>>();
    }
    if (r.data_wait_ns.size() != r.step_ns.size()) {
      return Error(EPROTO, "malformed rank report: step_ns and data_wait_ns differ in length");
    }
    r.measured_start_ns = j.value("measured_start_ns", std::uint64_t{0});
    r.end_ns = j.value("end_ns", std::uint64_t{0});
    r.reads_direct = j.value("reads_direct", std::uint64_t{0});
    r.reads_buffered = j.value("reads_buffered", std::uint64_t{0});
    r.futex_waits = j.value("futex_waits", std::uint64_t{0});
    r.device = j.value("device", -1);
    r.device_count = j.value("device_count", 0);
    r.interrupted = j.value("interrupted", false);
    if (j.contains("helpers") && j["helpers"].is_object()) r.helpers = j["helpers"];
    r.pinned = j.value("pinned", std::uint64_t{0});
  } catch (const nlohmann::json::exception& e) {
    return Error(EPROTO, std::string("malformed rank report: ") + e.what());
  }
  return r;
}

double percentile_ms(const std::vector<std::uint64_t>& sorted_ns, double p) {
  if (sorted_ns.empty()) return 0;
  const double n = static_cast<double>(sorted_ns.size());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * n));
  rank = std::clamp<std::size_t>(rank, 1, sorted_ns.size());
  return static_cast<double>(sorted_ns[rank - 1]) / 1e6;
}

nlohmann::ordered_json job_summary(const JobOptions& opts, const std::vector<RankReport>& ranks,
                                   bool interrupted) {
  std::size_t steps = ranks.empty() ? 0 : std::numeric_limits<std::size_t>::max();
  std::size_t steps_total = 0;
  std::size_t measured_global = std::numeric_limits<std::size_t>::max();
  std::uint64_t first_start = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t last_end = 0;
  std::uint64_t reads_direct = 0;
  std::uint64_t reads_buffered = 0;
  std::vector<std::uint64_t> measured;
  std::vector<std::uint64_t> waits;
  const auto warmup = static_cast<std::size_t>(opts.warmup_steps);
  for (const RankReport& r : ranks) {
    steps = std::min(steps, r.step_ns.size());
    steps_total += r.step_ns.size();
    const std::size_t m = r.step_ns.size() > warmup ? r.step_ns.size() - warmup : 0;
    measured_global = std::min(measured_global, m);
    if (m > 0) {
      measured.insert(measured.end(), r.step_ns.begin() + static_cast<std::ptrdiff_t>(warmup),
                      r.step_ns.end());
      waits.insert(waits.end(), r.data_wait_ns.begin() + static_cast<std::ptrdiff_t>(warmup),
                   r.data_wait_ns.end());
      first_start = std::min(first_start, r.measured_start_ns);
      last_end = std::max(last_end, r.end_ns);
    }
    reads_direct += r.reads_direct;
    reads_buffered += r.reads_buffered;
  }
  if (ranks.empty()) measured_global = 0;
  std::sort(measured.begin(), measured.end());
  std::sort(waits.begin(), waits.end());
  const double elapsed_s = last_end > first_start && !measured.empty()
                               ? static_cast<double>(last_end - first_start) / 1e9
                               : 0;
  const auto mean_of = [](const std::vector<std::uint64_t>& v) {
    double ms = 0;
    for (std::uint64_t ns : v) ms += static_cast<double>(ns) / 1e6;
    return v.empty() ? 0.0 : ms / static_cast<double>(v.size());
  };

  nlohmann::ordered_json j;
  j["steps"] = steps;
  j["steps_total"] = steps_total;
  j["steps_per_s"] =
      elapsed_s > 0 ? round_to(static_cast<double>(measured_global) / elapsed_s, 1e4) : 0.0;
  j["step_p50_ms"] = round_to(percentile_ms(measured, 50), 1e3);
  j["step_p99_ms"] = round_to(percentile_ms(measured, 99), 1e3);
  j["step_mean_ms"] = round_to(mean_of(measured), 1e3);
  j["step_max_ms"] =
      round_to(measured.empty() ? 0.0 : static_cast<double>(measured.back()) / 1e6, 1e3);
  j["data_wait_mean_ms"] = round_to(mean_of(waits), 1e3);
  j["data_wait_p99_ms"] = round_to(percentile_ms(waits, 99), 1e3);
  j["measured_steps"] = measured_global;
  j["warmup_steps"] = opts.warmup_steps;
  j["elapsed_s"] = round_to(elapsed_s, 1e4);
  j["ranks"] = opts.ranks;
  j["workers"] = opts.workers;
  j["reads_direct"] = reads_direct;
  j["reads_buffered"] = reads_buffered;
  j["emulated_gpu"] = opts.emulated_gpu;
  if (opts.helpers) {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    for (const RankReport& r : ranks) {
      if (!r.helpers.is_object()) continue;
      for (const auto& [key, value] : r.helpers.items()) {
        if (!value.is_number_unsigned()) continue;
        h[key] = h.value(key, std::uint64_t{0}) + value.get<std::uint64_t>();
      }
    }
    j["helpers"] = h;
  }
  if (opts.pin_memory) {
    std::uint64_t pinned = 0;
    for (const RankReport& r : ranks) pinned += r.pinned;
    j["pinned"] = pinned;
  }
  j["interrupted"] = interrupted;
  return j;
}

std::string step_log_lines(const JobOptions& opts, const std::vector<RankReport>& ranks) {
  std::string out;
  for (const RankReport& r : ranks) {
    for (std::size_t i = 0; i < r.step_ns.size(); ++i) {
      nlohmann::ordered_json j;
      j["rank"] = r.rank;
      j["step"] = i;
      j["step_ms"] = round_to(static_cast<double>(r.step_ns[i]) / 1e6, 1e3);
      j["data_wait_ms"] = round_to(static_cast<double>(r.data_wait_ns[i]) / 1e6, 1e3);
      j["warmup"] = i < static_cast<std::size_t>(opts.warmup_steps);
      out += j.dump();
      out += '\n';
    }
  }
  return out;
}

}  // namespace zernel::workload
