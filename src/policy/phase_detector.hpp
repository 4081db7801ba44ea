#pragma once
// Phase detection: from a task's measured signals to the phase it is in.
//
// classify() applies seven rules in order, the first that matches wins:
//   1. not an ML process                                          -> Unknown
//   2. NCCL detection on, nccl_active and futex_wait_count > 0    -> NcclCollective
//   3. io_wait > io_thr and gpu_util < idle_thr                   -> DataLoading
//   4. gpu_util > active_thr and cpu_burst == 0                   -> GpuCompute
//   5. 0 < cpu_burst < optimizer_burst_max and last_gpu_sync > 0  -> OptimizerStep
//   6. io_wait > io_thr * 0.5 and idle_thr < gpu_util < active_thr -> DataLoading (prefetch overlap)
//   7. otherwise                                                  -> Unknown
// and one rule the earlier implementation lacked, between 1 and 2, for DataLoader workers (which
// it never recognised): a worker that used at least kWorkerBusyFraction of a CPU in the last
// interval, or waited on block I/O above io_thr, is DataLoading (producing a batch); an idle
// worker (its prefetch queue full) is Unknown. Tasks that are not workers never reach it, so the
// seven rules, and the benchmark folds, are unchanged.
// (io_thr * 0.5 is computed in single precision, as the earlier implementation did, so the
// benchmark folds of bench-workload.md match bit for bit.)
//
// detect() debounces: the task keeps a candidate phase and a count of equal raw results in a row.
// The committed phase changes only when the count reaches phase_stability_count; with a stability
// of 1 or less every raw result is committed at once. Worked example with stability 3 and a task in
// Unknown: raw GpuCompute, GpuCompute -> still Unknown; a third GpuCompute -> GpuCompute (one
// transition); raw DataLoading once, then GpuCompute -> the candidate restarts, nothing commits.
//
// Known weakness: a phase shorter than stability ticks is never committed when the inputs are
// polled (100 ms ticks x 3 = 300 ms). The event-driven signals from BPF probes are the way past it;
// the debounce itself is kept exactly, since the phase detector's behaviour is specified.
//
// Phases from events: a task whose event_phase is set (the daemon sets it for processes the BPF
// event rules follow, bpf/probes.bpf.c) gets that phase committed at once, with no rule and no
// debounce here; the rules above remain for the periodic mode and for processes without events.
//
// The debounce state lives in TaskState, not in a side table keyed by pid, so re-registering a pid
// resets it together with the rest of the task (the earlier implementation kept a stale count).

#include <cstdint>

#include "policy/options.hpp"
#include "policy/task_state.hpp"

namespace zernel::policy {

// A worker busy for a fifth of the interval is producing; below that it only wakes now and then.
inline constexpr float kWorkerBusyFraction = 0.2F;

class PhaseDetector {
 public:
  explicit PhaseDetector(const PhaseDetectionOptions& opts);

  // The raw phase for the current signals, no debounce.
  [[nodiscard]] Phase classify(const TaskState& s) const;

  // The phase to commit now: updates the task's debounce state and counts a transition when the
  // result differs from s.current_phase. Does not change s.current_phase (the caller commits).
  Phase detect(TaskState& s);

  [[nodiscard]] std::uint64_t transition_count() const { return transitions_; }
  [[nodiscard]] const PhaseDetectionOptions& options() const { return opts_; }

 private:
  PhaseDetectionOptions opts_;
  float io_half_;  // io_wait_threshold * 0.5, f32
  std::uint64_t transitions_ = 0;
};

}  // namespace zernel::policy
