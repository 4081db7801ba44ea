#pragma once
// --phase-log: one JSON object per line for every committed phase change of a process,
//   {"t_ns": 123456789, "pid": 42, "phase": "GpuCompute"}
// and, with --phase-log-threads (phases from events), every change of one of its threads,
//   {"t_ns": 123456789, "pid": 42, "tid": 43, "phase": "NcclCollective"}
// (a process line is its main thread's change: the main thread's own line has tid == pid).
// t_ns is CLOCK_MONOTONIC, the same clock as zernel-workload's --truth-log, so the two can be
// compared line by line. The file is opened for appending (created 0644 when absent), and each
// line goes out in one write(), so a reader never sees half a line.

#include <cstdint>
#include <string>

#include "common/result.hpp"
#include "policy/phase.hpp"

namespace zernel::telemetry {

class PhaseLog {
 public:
  PhaseLog() = default;
  ~PhaseLog();
  PhaseLog(const PhaseLog&) = delete;
  PhaseLog& operator=(const PhaseLog&) = delete;

  Result<void> open(const std::string& path);
  [[nodiscard]] bool is_open() const { return fd_ >= 0; }
  // Writes one line; errors are counted, not fatal (the scheduler keeps running).
  void write(std::uint64_t t_ns, std::uint32_t pid, policy::Phase phase);
  void write_thread(std::uint64_t t_ns, std::uint32_t pid, std::uint32_t tid, policy::Phase phase);
  [[nodiscard]] std::uint64_t errors() const { return errors_; }
  [[nodiscard]] std::uint64_t lines() const { return lines_; }

 private:
  void emit(const char* buf, std::size_t n);
  int fd_ = -1;
  std::uint64_t errors_ = 0;
  std::uint64_t lines_ = 0;
};

}  // namespace zernel::telemetry
