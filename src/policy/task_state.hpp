#pragma once
// Per-task state: the detector's inputs (filled by collectors through TaskUpdate), the committed
// phase with the time spent in each phase, the detector's debounce state, the tenant assignment
// and the last decision. One flat struct, stored by value in TaskTable.

#include <array>
#include <cstdint>
#include <optional>

#include "policy/phase.hpp"

namespace zernel::policy {

inline constexpr std::int32_t kNoGpu = -1;
inline constexpr std::uint16_t kNoTenant = 0xFFFF;
inline constexpr std::int32_t kNoCpu = -1;

struct TaskState {
  std::uint32_t pid = 0;
  bool is_ml_process = false;
  Phase current_phase = Phase::unknown;
  std::uint8_t gpu_utilization = 0;  // percent 0..100
  bool nccl_active = false;
  std::int32_t gpu_id = kNoGpu;      // driver's GPU index, kNoGpu when not bound
  float io_wait_fraction = 0.0F;     // 0..1 of the last interval
  std::uint32_t futex_wait_count = 0;  // futex waits in the last interval
  std::uint64_t last_gpu_sync_ns = 0;  // CLOCK_MONOTONIC ns of the last GPU sync return, 0 = never
  std::uint64_t cpu_burst_duration_ns = 0;  // CPU time since that return; 0 while blocked in one
  // A DataLoader worker (a descendant of a GPU process with no GPU context of its own), and the
  // CPUs it used in the last interval (1.0 = one CPU all the time). Workers never touch the GPU,
  // so the GPU-based rules cannot see them; PhaseDetector has a rule of their own.
  bool dataloader_worker = false;
  float cpu_fraction = 0.0F;
  // How the process waits for its GPU, as last seen inside a long synchronisation: true when
  // it blocks (sleeps until the work is done), false when it spins (runnable while its GPU is
  // busy: CUDA's spin and yield modes) or when that was never seen. Engine: a GpuCompute task
  // that blocks keeps kBlockedGpuWaitPriority instead of GpuCompute's yield.
  bool gpu_wait_blocks = false;
  // The phase the BPF event rules gave the process's main thread (phases from events): when
  // set, the detector commits it at once instead of classifying the signals above.
  std::optional<Phase> event_phase;

  // Phase-time accounting.
  std::uint64_t phase_start_ns = 0;
  std::array<std::uint64_t, kPhaseCount> phase_time_ns{};

  // Debounce (PhaseDetector): the last raw phase and how many times in a row it was seen.
  Phase candidate_phase = Phase::unknown;
  std::uint32_t candidate_count = 0;

  // Tenant slot in TenantRegistry, kNoTenant when unassigned.
  std::uint16_t tenant = kNoTenant;

  // The last decision, for status views.
  std::int32_t last_priority = 0;
  std::uint32_t last_weight = 0;
  std::int32_t last_preferred_cpu = kNoCpu;

  [[nodiscard]] std::optional<std::uint32_t> gpu() const {
    if (gpu_id < 0) return std::nullopt;
    return static_cast<std::uint32_t>(gpu_id);
  }

  // Commits `next` at `now_ns`: the old phase is credited with now - phase_start_ns when
  // phase_start_ns > 0 and now > phase_start_ns, then the new phase starts at now.
  void transition_phase(Phase next, std::uint64_t now_ns) {
    if (phase_start_ns > 0 && now_ns > phase_start_ns) {
      phase_time_ns[index_of(current_phase)] += now_ns - phase_start_ns;
    }
    current_phase = next;
    phase_start_ns = now_ns;
  }

  // Time in phase p up to now, including the phase in progress.
  [[nodiscard]] std::uint64_t time_in_phase(Phase p, std::uint64_t now_ns) const {
    std::uint64_t t = phase_time_ns[index_of(p)];
    if (p == current_phase && phase_start_ns > 0 && now_ns > phase_start_ns) {
      t += now_ns - phase_start_ns;
    }
    return t;
  }
};

// A partial update from the collectors: only the fields that are set change.
struct TaskUpdate {
  std::optional<std::uint8_t> gpu_utilization;
  std::optional<float> io_wait_fraction;
  std::optional<std::uint64_t> cpu_burst_duration_ns;
  std::optional<std::uint64_t> last_gpu_sync_ns;
  std::optional<bool> nccl_active;
  std::optional<std::uint32_t> futex_wait_count;
  std::optional<std::uint32_t> gpu_id;
  std::optional<float> cpu_fraction;
  std::optional<bool> dataloader_worker;
  std::optional<bool> gpu_wait_blocks;
  std::optional<Phase> event_phase;
};

}  // namespace zernel::policy
