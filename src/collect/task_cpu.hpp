#pragma once
// TaskCpuSource: the CPU time of many processes in one call, where the kernel can tell it more
// cheaply than one /proc read per process (collect/probes/task_cpu_iter.hpp: a BPF task
// iterator). The signal sampler asks it once per sample for the processes it reads in
// SampleMode::cpu_time (a tenant's account) and reads /proc for any it does not answer.

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace zernel::collect {

class TaskCpuSource {
 public:
  TaskCpuSource() = default;
  virtual ~TaskCpuSource() = default;
  TaskCpuSource(const TaskCpuSource&) = delete;
  TaskCpuSource& operator=(const TaskCpuSource&) = delete;
  // Fills `out` (cleared first) with (pid, CPU time in ns since that process started, all its
  // threads, exited ones included), sorted by pid, for those of `pids` (sorted, distinct) it
  // found. False when it could not read at all: the caller reads /proc for every one then.
  virtual bool read(std::span<const std::uint32_t> pids,
                    std::vector<std::pair<std::uint32_t, std::uint64_t>>& out) = 0;
};

}  // namespace zernel::collect
