#pragma once
// TaskCpuIterator: the CPU time, timeslices and threads of a set of processes from one BPF task
// iterator read (bpf/task_cpu.bpf.c), the TaskCpuSource the daemon hands its signal sampler
// (collect/task_cpu.hpp). It attaches nothing to any event: the iterator's program runs only
// while read() reads its file, once a tick, where /proc costs a read per process or more.
//
// follow() keeps the BPF map of wanted processes equal to `pids` (inserting and deleting only
// the difference, when the set changed); read() opens the iterator, reads its records and sums
// them per process. A read walks every task of the node (the iterator's last call says how
// many), so worth_reading() says yes only when the processes it answers would cost more to read
// from /proc: a /proc read costs about as much as walking kWalkPerProcRead tasks. A process over
// the map's size (ZERNEL_TASK_CPU_MAX_PROCS) or one the map refused is not answered (the sampler
// reads /proc for it); a failed read answers none.
//
// Only built with the BPF toolchain (ZERNEL_HAVE_PROBES); open() fails without root (CAP_BPF
// and CAP_PERFMON), BTF or iterator support (Linux 5.8), and the daemon reads /proc instead. Not
// thread-safe: the daemon's collect step owns it.

#include <cstddef>
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

  void follow(std::span<const std::uint32_t> pids) override;
  [[nodiscard]] bool worth_reading(std::size_t wanted) const override;
  bool read(std::vector<TaskCpu>& out) override;

  // Tasks the last read walked (the node's tasks then); 0 before the first read.
  [[nodiscard]] std::uint64_t tasks_walked() const { return tasks_walked_; }
  // Reads that failed (opening or reading the iterator), since open().
  [[nodiscard]] std::uint64_t failed_reads() const { return failed_reads_; }
  // Processes the map could not take (full, or refused), since open().
  [[nodiscard]] std::uint64_t refused() const { return refused_; }

  // A /proc read (a system call on a process's stat or schedstat) costs about as much as the
  // iterator's walk over this many tasks (docs/benchmarks.md, "The tenants' CPU time").
  static constexpr std::uint64_t kWalkPerProcRead = 8;
  // Before the first read, worth_reading() says yes from this many processes on.
  static constexpr std::size_t kFirstReadAt = 32;

 private:
  struct Impl;
  explicit TaskCpuIterator(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  std::vector<std::uint32_t> followed_;  // follow()'s last set, sorted
  std::vector<std::uint32_t> in_map_;    // the map's keys, sorted (followed_ less refused ones)
  std::vector<std::uint32_t> changed_;
  std::vector<char> buf_;
  std::uint64_t tasks_walked_ = 0;
  std::uint64_t walked_total_ = 0;  // the BPF side's count at the last read
  std::uint64_t failed_reads_ = 0;
  std::uint64_t refused_ = 0;
};

}  // namespace zernel::collect
