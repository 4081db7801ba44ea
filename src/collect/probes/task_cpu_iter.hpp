#pragma once
// TaskCpuIterator: the CPU time, timeslices and threads of a set of processes from one BPF task
// iterator read (bpf/task_cpu.bpf.c), the TaskCpuSource the daemon hands its signal sampler
// (collect/task_cpu.hpp). It attaches nothing to any event: the iterator's program runs only
// while read() reads its file, once a tick, where /proc costs a read per process or more.
//
// read() keeps the BPF map of wanted processes equal to `pids` (inserting and deleting only the
// difference from the previous call), opens the iterator, reads its records and sums them per
// process. A process over the map's size (ZERNEL_TASK_CPU_MAX_PROCS) or one the map refused is
// not answered (the sampler reads /proc for it); a failed read answers none.
//
// Only built with the BPF toolchain (ZERNEL_HAVE_PROBES); open() fails without root (CAP_BPF
// and CAP_PERFMON), BTF or iterator support (Linux 5.8), and the daemon reads /proc instead. Not
// thread-safe: the daemon's collect step owns it.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "collect/task_cpu.hpp"
#include "common/result.hpp"

namespace zernel::collect {

class TaskCpuIterator final : public TaskCpuSource {
 public:
  static Result<std::unique_ptr<TaskCpuIterator>> open();
  ~TaskCpuIterator() override;

  bool read(std::span<const std::uint32_t> pids, std::vector<TaskCpu>& out) override;

  // Reads that failed (opening or reading the iterator), since open().
  [[nodiscard]] std::uint64_t failed_reads() const { return failed_reads_; }
  // Processes the map could not take (full, or refused), since open().
  [[nodiscard]] std::uint64_t refused() const { return refused_; }

 private:
  struct Impl;
  explicit TaskCpuIterator(std::unique_ptr<Impl> impl);
  bool sync_map(std::span<const std::uint32_t> pids);

  std::unique_ptr<Impl> impl_;
  std::vector<std::uint32_t> in_map_;  // the map's keys, sorted
  std::vector<std::uint32_t> changed_;
  std::vector<char> buf_;
  std::uint64_t failed_reads_ = 0;
  std::uint64_t refused_ = 0;
};

}  // namespace zernel::collect
