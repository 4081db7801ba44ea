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
//
// It also holds, per rank, the words of that rank's NCCL-like proxy thread (--helpers,
// helpers.hpp): the rank posts each collective it enters and marks it finished when it leaves; the
// proxy waits for a post (idle, futex waits of up to kProxyIdleWaitNs), then progresses the
// collective (short CPU bursts between futex waits of up to 1 ms on the finished word) until the
// rank's collective has finished, as NCCL's proxy threads progress a collective's network work.

#include <cstdint>
#include <string>

#include "common/result.hpp"

namespace zernel::workload {

inline constexpr std::uint64_t kWaitSliceNs = 5'000'000;
inline constexpr int kMaxRanks = 256;
inline constexpr std::uint64_t kProxyIdleWaitNs = 500'000'000;

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

  // The proxy words of `rank` (0 <= rank < kMaxRanks). The rank: post() as it enters a
  // collective, finish() as it leaves, wake_proxy() to make an idle proxy look at its stop flag.
  void post(int rank);
  void finish(int rank);
  void wake_proxy(int rank);
  // The proxy: waits up to timeout_ns for a post after `seen` (its last); returns the post count.
  std::uint32_t wait_posted(int rank, std::uint32_t seen, std::uint64_t timeout_ns);
  // The proxy: waits up to timeout_ns for the rank to finish collective `posted`; true once it has.
  bool wait_finished(int rank, std::uint32_t posted, std::uint64_t timeout_ns);

 private:
  NcclComm(NcclShared* shared, int ranks) : shared_(shared), ranks_(ranks) {}
  void wait_slice(std::uint32_t expected, std::uint64_t max_ns);

  NcclShared* shared_;
  int ranks_;
  std::uint64_t futex_waits_ = 0;
};

}  // namespace zernel::workload
