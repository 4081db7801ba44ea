#include "policy/phase_detector.hpp"

namespace zernel::policy {

PhaseDetector::PhaseDetector(const PhaseDetectionOptions& opts)
    : opts_(opts), io_half_(opts.io_wait_threshold * 0.5F) {}

Phase PhaseDetector::classify(const TaskState& s) const {
  if (!s.is_ml_process) return Phase::unknown;
  if (s.dataloader_worker) {
    const bool busy = s.cpu_fraction >= kWorkerBusyFraction || s.io_wait_fraction > opts_.io_wait_threshold;
    return busy ? Phase::data_loading : Phase::unknown;
  }
  if (opts_.nccl_detection_enabled && s.nccl_active && s.futex_wait_count > 0) {
    return Phase::nccl_collective;
  }
  const std::uint8_t gpu = s.gpu_utilization;
  const float io = s.io_wait_fraction;
  if (io > opts_.io_wait_threshold && gpu < opts_.gpu_idle_threshold) return Phase::data_loading;
  if (gpu > opts_.gpu_active_threshold && s.cpu_burst_duration_ns == 0) return Phase::gpu_compute;
  if (s.cpu_burst_duration_ns > 0 && s.cpu_burst_duration_ns < opts_.optimizer_burst_max_ns &&
      s.last_gpu_sync_ns > 0) {
    return Phase::optimizer_step;
  }
  if (io > io_half_ && gpu > opts_.gpu_idle_threshold && gpu < opts_.gpu_active_threshold) {
    return Phase::data_loading;
  }
  return Phase::unknown;
}

Phase PhaseDetector::detect(TaskState& s) {
  if (s.event_phase) {
    // Phases from events: the BPF rules already applied their own hysteresis.
    s.candidate_phase = *s.event_phase;
    s.candidate_count = 0;
    if (*s.event_phase != s.current_phase) ++transitions_;
    return *s.event_phase;
  }
  const Phase raw = classify(s);
  if (s.candidate_count > 0 && raw == s.candidate_phase) {
    if (s.candidate_count < UINT32_MAX) ++s.candidate_count;
  } else {
    s.candidate_phase = raw;
    s.candidate_count = 1;
  }
  if (s.candidate_count >= opts_.phase_stability_count && raw != s.current_phase) {
    ++transitions_;
    return raw;
  }
  return s.current_phase;
}

}  // namespace zernel::policy
