#include "collect/cpu_load.hpp"

#include <algorithm>
#include <utility>

namespace zernel::collect {

std::vector<float> cpu_loads_between(std::span<const std::optional<sys::CpuTimes>> before,
                                     std::span<const std::optional<sys::CpuTimes>> after) {
  std::vector<float> loads(after.size(), 0.0F);
  for (std::size_t cpu = 0; cpu < after.size() && cpu < before.size(); ++cpu) {
    if (!after[cpu] || !before[cpu]) continue;
    const sys::CpuTimes& a = *after[cpu];
    const sys::CpuTimes& b = *before[cpu];
    const std::uint64_t idle_a = a.idle_total();
    const std::uint64_t idle_b = b.idle_total();
    const std::uint64_t busy_a = a.total() - idle_a;
    const std::uint64_t busy_b = b.total() - idle_b;
    const std::uint64_t busy = busy_a > busy_b ? busy_a - busy_b : 0;
    const std::uint64_t idle = idle_a > idle_b ? idle_a - idle_b : 0;
    if (busy + idle == 0) continue;
    const double load = static_cast<double>(busy) / static_cast<double>(busy + idle);
    loads[cpu] = static_cast<float>(std::clamp(load, 0.0, 1.0));
  }
  return loads;
}

CpuLoadSampler::CpuLoadSampler(std::string proc_root) : proc_root_(std::move(proc_root)) {}

Result<std::vector<float>> CpuLoadSampler::sample() {
  auto now = sys::read_proc_stat_cpus(proc_root_);
  if (!now) return now.error();
  std::vector<float> loads;
  if (have_previous_) loads = cpu_loads_between(previous_, *now);
  previous_ = std::move(*now);
  have_previous_ = true;
  return loads;
}

}  // namespace zernel::collect
