#pragma once
// Per-thread phase times from the phases from events (daemon/phase_events.cpp): every change the
// BPF rules made to a thread, at its event's time, so that /status can say how long each thread
// of a followed process spent in each phase (the engine keeps the process's, its main thread's).
//
// A thread enters the record at its first change (before it, the rules gave it no phase, and no
// time is counted) and stays until its process is forgotten; when the daemon learns that it
// exited (a thread exit from the process events), its phase in progress ends there and it stops
// counting. Without that news a thread that exited keeps counting its last phase until its
// process goes.
//
// Bounded: at most kMaxThreadsPerProcess threads per process. A new thread beyond it takes the
// place of the one whose last change is oldest (an exited one first); `evicted()` counts them.
//
// Example: rank 100's main thread goes DataLoading at 10 ms, GpuCompute at 20 ms, OptimizerStep
// at 80 ms; a helper thread 101 goes DataLoading at 30 ms and exits at 50 ms. At 100 ms thread 100
// holds DataLoading 10 ms, GpuCompute 60 ms, OptimizerStep 20 ms; thread 101 DataLoading 20 ms.

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "policy/phase.hpp"

namespace zernel::telemetry {

struct ThreadView {
  std::uint32_t tid = 0;
  policy::Phase phase = policy::Phase::unknown;  // its last change (its phase now, unless exited)
  bool exited = false;
  std::array<std::uint64_t, policy::kPhaseCount> phase_time_ns{};
};

class ThreadPhaseTimes {
 public:
  static constexpr std::size_t kMaxThreadsPerProcess = 256;

  // A change of thread `tid` of process `tgid` to `phase` at `at_ns` (CLOCK_MONOTONIC). A change
  // dated before the thread's last one counts as made at that one.
  void record(std::uint32_t tgid, std::uint32_t tid, policy::Phase phase, std::uint64_t at_ns);
  // The thread exited at `at_ns`: its phase in progress ends there. Unknown threads are ignored.
  void exited(std::uint32_t tgid, std::uint32_t tid, std::uint64_t at_ns);
  // Drops the process's threads (it exited or is no longer followed).
  void forget(std::uint32_t tgid);

  // The process's threads with their times up to `now_ns`, by tid; empty when it has none.
  [[nodiscard]] std::vector<ThreadView> threads(std::uint32_t tgid, std::uint64_t now_ns) const;
  [[nodiscard]] std::size_t processes() const { return by_process_.size(); }
  [[nodiscard]] std::uint64_t evicted() const { return evicted_; }

 private:
  struct Thread {
    std::uint32_t tid = 0;
    policy::Phase phase = policy::Phase::unknown;
    bool exited = false;
    std::uint64_t since_ns = 0;  // when the phase in progress began (its end, once exited)
    std::array<std::uint64_t, policy::kPhaseCount> time_ns{};
  };
  Thread* find(std::uint32_t tgid, std::uint32_t tid);
  Thread& add(std::vector<Thread>& threads, std::uint32_t tid);

  std::unordered_map<std::uint32_t, std::vector<Thread>> by_process_;
  std::uint64_t evicted_ = 0;
};

}  // namespace zernel::telemetry
