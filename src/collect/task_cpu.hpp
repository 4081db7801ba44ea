#pragma once
// TaskCpuSource: the CPU time, timeslices and thread count of many processes in one call, where
// the kernel can tell them more cheaply than /proc reads per process
// (collect/probes/task_cpu_iter.hpp: a BPF task iterator). The signal sampler asks it once per
// sample for every process it samples: a tenant's account (SampleMode::cpu_time) is answered
// from it, and a process none of whose threads has run since its last read from /proc is
// answered as unchanged without a read; /proc answers the rest.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace zernel::collect {

// One process at one read.
struct TaskCpu {
  std::uint32_t pid = 0;
  std::uint32_t threads = 0;     // live threads
  std::uint64_t cpu_ns = 0;      // CPU time since it started, its exited threads included
  std::uint64_t timeslices = 0;  // times its live threads were switched in (schedstat field 3)
};

class TaskCpuSource {
 public:
  TaskCpuSource() = default;
  virtual ~TaskCpuSource() = default;
  TaskCpuSource(const TaskCpuSource&) = delete;
  TaskCpuSource& operator=(const TaskCpuSource&) = delete;
  // The processes to answer about (sorted, distinct). The sampler names every process it
  // tracks, sampled this time or not, so that the set changes only as processes come and go.
  virtual void follow(std::span<const std::uint32_t> pids) = 0;
  // Whether one read that answers `wanted` processes costs less than reading them from /proc.
  [[nodiscard]] virtual bool worth_reading(std::size_t wanted) const = 0;
  // Fills `out` (cleared first), sorted by pid, for the followed processes it found. False when
  // it could not read at all: the caller reads /proc for every one then.
  virtual bool read(std::vector<TaskCpu>& out) = 0;
};

}  // namespace zernel::collect
