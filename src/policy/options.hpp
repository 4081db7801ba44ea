#pragma once
// The engine's knobs as plain values. config/ fills these from TOML and validates them; policy/
// trusts them (the config layer rejects out-of-range values before an Engine is built).

#include <cstdint>

namespace zernel::policy {

// Where phases come from: events (BPF, as they happen; the daemon falls back to periodic
// where the probes cannot run) or the periodic detector (sampled signals, debounced).
enum class PhaseSource : std::uint8_t { events = 0, periodic = 1 };

struct PhaseDetectionOptions {
  PhaseSource mode = PhaseSource::events;
  float io_wait_threshold = 0.3F;                    // fraction 0..1
  std::uint64_t optimizer_burst_max_ns = 5'000'000;  // ns
  std::uint8_t gpu_idle_threshold = 10;              // percent, < gpu_active_threshold
  std::uint8_t gpu_active_threshold = 80;            // percent, <= 100
  std::uint32_t phase_stability_count = 3;  // equal raw results needed to commit; <= 1: at once
  bool nccl_detection_enabled = true;       // rule 2; see docs/configuration.md
  // Events mode (bpf/probes.bpf.c): a GPU sync begun in OptimizerStep is GpuCompute only from
  // this length; a DataLoader worker is idle only after sleeping this long; OptimizerStep ends
  // after this much CPU.
  std::uint64_t event_sync_hysteresis_ns = 10'000'000;
  std::uint64_t event_idle_hysteresis_ns = 2'000'000;
  std::uint64_t event_optimizer_max_ns = 200'000'000;

  bool operator==(const PhaseDetectionOptions&) const = default;
};

struct NumaOptions {
  bool enabled = true;          // false: treat the machine as one node
  bool gpu_affinity = true;     // decisions carry a preferred CPU near the task's GPU
  bool memory_affinity = true;  // enforcement may bind memory to the GPU's node

  bool operator==(const NumaOptions&) const = default;
};

struct EngineOptions {
  PhaseDetectionOptions phase;
  NumaOptions numa;
  bool multi_tenant_enabled = false;
  std::uint32_t max_tracked_tasks = 65'536;

  bool operator==(const EngineOptions&) const = default;
};

// Upper bound for max_tracked_tasks: the kernel's largest pid_max.
inline constexpr std::uint32_t kMaxTrackedTasksLimit = 4'194'304;

}  // namespace zernel::policy
