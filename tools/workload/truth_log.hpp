#pragma once
// The truth log: the phase each process of the job is really in, as JSON lines in the format of
// the scheduler's --phase-log, {"t_ns": CLOCK_MONOTONIC ns, "pid": N, "phase": "GpuCompute"}.
//
// The launcher creates (truncates) the file; every rank and worker process then opens it itself
// with O_APPEND and writes each line with a single write(), which the kernel appends atomically
// for a regular file, so lines from different processes never interleave. A process writes a line
// when it starts (Unknown) and at every true change of its phase, with the CLOCK_MONOTONIC time
// taken at the transition itself: just before it blocks for a phase that is a wait, just after a
// wait returns. Writing the same phase twice in a row is a no-op, so the log holds changes only.
// The launcher is not an ML process and writes nothing.

#include <cstdint>
#include <string>
#include <sys/types.h>

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

  // Opens `path` for appending in the calling process and records its start in Unknown.
  // An empty path gives a disabled log.
  static Result<TruthLog> open(const std::string& path);

  // Records that the process entered `p` at `t_ns` (default: now), unless it is already in `p`.
  void enter(Phase p);
  void enter(Phase p, std::uint64_t t_ns);

  [[nodiscard]] Phase current() const { return current_; }

 private:
  void write_line(Phase p, std::uint64_t t_ns);

  int fd_ = -1;
  pid_t pid_ = 0;
  Phase current_ = Phase::unknown;
  bool warned_ = false;
};

}  // namespace zernel::workload
