#pragma once
// Per-CPU load from /proc/stat: for each CPU, the busy share of the ticks it accounted between two
// readings, busy = total - idle - iowait (steal counts as busy: the CPU was not ours to give).
//
// The result is indexed by CPU id; CPUs missing from either reading (offline, or just brought
// online) read 0.0, as do CPUs whose counters did not move. Busy and idle are differenced
// separately and a counter that went backwards counts as no change: iowait is known to decrease
// on NO_HZ kernels, and a CPU that went offline and came back may restart its counters.

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "sys/procfs.hpp"

namespace zernel::collect {

// Loads in [0, 1] between two /proc/stat readings, sized like `after`.
std::vector<float> cpu_loads_between(std::span<const std::optional<sys::CpuTimes>> before,
                                     std::span<const std::optional<sys::CpuTimes>> after);

class CpuLoadSampler {
 public:
  explicit CpuLoadSampler(std::string proc_root = "/proc");

  // Reads PROC/stat and returns the loads since the previous successful call; the first call
  // returns an empty vector (no interval yet). A failed read keeps the previous reading.
  Result<std::vector<float>> sample();

 private:
  std::string proc_root_;
  std::vector<std::optional<sys::CpuTimes>> previous_;
  bool have_previous_ = false;
};

}  // namespace zernel::collect
