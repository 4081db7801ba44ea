#pragma once
// The truth log: the phase each thread of the job is really in, as JSON lines in the format of
// the scheduler's --phase-log-threads, with the thread's role,
//   {"t_ns": CLOCK_MONOTONIC ns, "pid": N, "tid": N, "phase": "GpuCompute", "role": "main"}
// (a process's own line is its main thread's, tid == pid: what --phase-log compares with).
//
// The launcher creates (truncates) the file; every thread that writes (a rank's or a worker's main
// thread, a rank's helper threads) opens it itself with O_APPEND and writes each line with a
// single write(), which the kernel appends atomically for a regular file, so lines from different
// threads never interleave. A thread writes a line when it starts (Unknown) and at every true
// change of its phase, with the CLOCK_MONOTONIC time taken at the transition itself: just before
// it blocks for a phase that is a wait, just after a wait returns. Writing the same phase twice in
// a row is a no-op, so the log holds changes only, except a helper thread's closing line
// (close_line), which marks its exit. The launcher is not an ML process and writes nothing.

#include <sys/types.h>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.hpp"
#include "policy/phase.hpp"

namespace zernel::workload {

using policy::Phase;

class TruthLog {
 public:
  // Disabled: every call is a no-op.
  TruthLog() = default;
  TruthLog(const TruthLog&) = delete;
  TruthLog& operator=(const TruthLog&) = delete;
  TruthLog(TruthLog&& other) noexcept;
  TruthLog& operator=(TruthLog&& other) noexcept;
  ~TruthLog();

  // Creates or truncates `path` (the launcher, once, before any process writes).
  static Result<void> create(const std::string& path);

  // Opens `path` for appending in the calling thread, a thread of role `role` ("main", "worker",
  // "pin_memory", "nccl_proxy", "reader", ...: bench/phase_accuracy.py's roles), and records its
  // start in Unknown. An empty path gives a disabled log.
  static Result<TruthLog> open(const std::string& path, std::string_view role);

  // Records that the process entered `p` at `t_ns` (default: now), unless it is already in `p`.
  void enter(Phase p);
  void enter(Phase p, std::uint64_t t_ns);

  // The thread's closing line: its phase now, written even if unchanged (a helper's exit).
  void close_line();

  [[nodiscard]] Phase current() const { return current_; }

 private:
  void write_line(Phase p, std::uint64_t t_ns);

  int fd_ = -1;
  pid_t pid_ = 0;
  pid_t tid_ = 0;
  std::string_view role_;  // one of the static role names
  Phase current_ = Phase::unknown;
  bool warned_ = false;
};

}  // namespace zernel::workload
