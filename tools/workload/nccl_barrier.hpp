#pragma once
// An NCCL-like collective between the ranks of a job, over a shared-memory segment named like
// NCCL's own (/dev/shm/nccl-*), so that the scheduler's "NCCL is active" signal sees it mapped.
//
// all_reduce(d) models one all-reduce that takes `d` once every rank has arrived: a rank arrives
// and waits for the others (a barrier), the last to arrive sets the moment the reduction finishes
// (now + d) and wakes everyone, and every rank then waits until that moment. All waits are futex
// waits on the segment's generation word (shared, not private, futexes: the ranks are processes)
// in slices of at most kWaitSliceNs, so a rank in a collective makes a steady stream of futex
// waits, as NCCL's host threads do, and notices a stop request within a slice.
//
// Worked example, 2 ranks, d = 600 ms: rank 0 arrives at t=0 and waits; rank 1 arrives at
// t=30 ms, sets release = 630 ms, bumps the generation and wakes rank 0; both leave at ~630 ms.
// Rank 0 was in the collective 630 ms, rank 1 600 ms.
//
// The segment is created and initialised by the launcher before it forks the ranks, and unlinked
// by the launcher at exit; ranks map it after the fork.

#include <cstdint>
#include <string>

#include "common/result.hpp"

namespace zernel::workload {

inline constexpr std::uint64_t kWaitSliceNs = 5'000'000;

struct NcclShared;

// The launcher's handle: creates the segment, unlinks it when destroyed.
class NcclSegment {
 public:
  NcclSegment(const NcclSegment&) = delete;
  NcclSegment& operator=(const NcclSegment&) = delete;
  NcclSegment(NcclSegment&& other) noexcept;
  NcclSegment& operator=(NcclSegment&&) = delete;
  ~NcclSegment();

  // shm_open(name) with O_EXCL, sized and initialised for `ranks` ranks. `name` starts with '/'.
  static Result<NcclSegment> create(const std::string& name, int ranks);

  [[nodiscard]] const std::string& name() const { return name_; }

  // Unlinks the segment now (idempotent); also done by the destructor.
  void unlink();

 private:
  explicit NcclSegment(std::string name) : name_(std::move(name)) {}
  std::string name_;
  bool linked_ = false;
};

// A rank's handle: maps the segment.
class NcclComm {
 public:
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  NcclComm(NcclComm&& other) noexcept;
  NcclComm& operator=(NcclComm&&) = delete;
  ~NcclComm();

  static Result<NcclComm> attach(const std::string& name, int ranks);

  // Waits for every rank, then for `duration_ns` more. False when a stop was requested meanwhile.
  bool all_reduce(std::uint64_t duration_ns);

  // Futex waits made so far by this rank.
  [[nodiscard]] std::uint64_t futex_waits() const { return futex_waits_; }

 private:
  NcclComm(NcclShared* shared, int ranks) : shared_(shared), ranks_(ranks) {}
  void wait_slice(std::uint32_t expected, std::uint64_t max_ns);

  NcclShared* shared_;
  int ranks_;
  std::uint64_t futex_waits_ = 0;
};

}  // namespace zernel::workload
