#pragma once
// TickBuilder: one tick's signals of every tracked process, merged into the engine's updates.
// The daemon (daemon/daemon_sampling.cpp) hands it what it tracks and what it read this tick
// (NVML's utilisation, the probes, the phases from events); the builder reads /proc itself and
// returns, per process, the policy::TaskUpdate to give the engine, plus the processes the daemon
// must drop. It owns the collect state that spans ticks: the signal sampler's previous samples
// and the DataLoader workers' schedstat baselines. Nothing here knows the engine or the daemon.
//
// Per process and tick, in this order (each step may overwrite the previous one's field):
//   1. /proc/PID/stat and task/ (collect/signals.hpp): io wait, CPU time, NCCL mapped, state.
//      A pid whose process exited, or that a new process now holds (its start time is not the
//      registered one), is reported `gone` and gets no update.
//   2. the phase from events of its main thread, for processes the BPF rules follow
//   3. GPU utilisation: NVML's per-process figure when every device answered (a process NVML
//      did not list used 0 %); else the device's figure, for GPU owners only
//   4. cpu_fraction: CPU time over the tick; for DataLoader workers run + run-queue time from two
//      schedstat reads over the time between them, and 1.0 while running, runnable or in disk I/O
//   5. the GPU sync probes (collect/sync_signals.hpp): CPU burst, last sync, a GPU floor of 100
//      while blocked in a long sync, the process's futex waits; only for processes under the
//      periodic rules (what they give is the periodic detector's input)
//   6. GPU owners: the main thread's wait now (collect/wait_state.hpp): input wait (with
//      DataLoader workers) as io_wait_fraction 1.0; a futex wait (or the probes' recent one) as
//      futex_wait_count 1, replacing the probes' per-process count
// A process sampled stat_only gets steps 1 (CPU time and state only), 2, 3, 5 (when not from
// events) and the CPU fraction of a process that is not a worker; one sampled `skip` gets nothing
// and is not checked for being gone (the daemon learns that from its exit).
//
// A stat that cannot be parsed (truncated, garbled) leaves step 1's fields unset and the
// process in place (`stat_read` false); the other steps still run. A schedstat that cannot be
// parsed gives a worker no busy fraction for that tick and keeps its previous baseline.
// Not thread-safe: the daemon's loop thread owns it.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "collect/discovery.hpp"
#include "collect/probes/gpu_sync_probes.hpp"
#include "collect/signals.hpp"
#include "collect/task_cpu.hpp"
#include "policy/task_state.hpp"

namespace zernel::collect {

// What the daemon knows of one tracked process.
struct TrackedProcess {
  std::uint32_t pid = 0;
  ProcessRole role = ProcessRole::matched;
  std::optional<std::uint32_t> gpu;
  // /proc/PID/stat field 22 when registered (0: unknown): with the pid, the process's identity.
  std::uint64_t start = 0;
  bool has_workers = false;  // a GPU owner with DataLoader workers
  bool probed = false;       // the GPU sync probes are attached to a libcuda it maps
  bool event_role = false;   // its phases come from the BPF event rules
  // How much to read this tick (collect/signals.hpp): full; no_nccl; idle_backoff (no_nccl, a
  // sleeping process looked at less often); stat_only (CPU time and state, for a process whose
  // phase comes from events, where process events do not tell its exit); cpu_time (its CPU time
  // only); skip (no update this tick; its state is kept, so its next sample measures from its last
  // one).
  SampleMode sample = SampleMode::full;
};

// The GPU sync probes as the builder reads them: the daemon's GpuSyncProbes, or a test's fake.
class ProbeSource {
 public:
  ProbeSource() = default;
  virtual ~ProbeSource() = default;
  ProbeSource(const ProbeSource&) = delete;
  ProbeSource& operator=(const ProbeSource&) = delete;
  // One process's sample at now_ns; nullopt when it has none (not known to the probes).
  virtual std::optional<ProbeSample> read(std::uint32_t pid, std::uint64_t now_ns) = 0;
  // Whether futex waits are counted (ProbeSample::futex_waits_delta means something).
  [[nodiscard]] virtual bool counts_futex_waits() const = 0;
};

// NVML's answer of this tick.
struct GpuUtilization {
  // Every device answered the per-process query: a process missing from `per_process` used 0 %.
  bool per_process_ok = false;
  std::unordered_map<std::uint32_t, std::uint32_t> per_process;  // pid -> SM %, max over GPUs
  std::vector<std::uint32_t> device;                             // by device index, percent
};

struct TickInputs {
  std::span<const TrackedProcess> processes;
  // true: `processes` is every process followed, and what is kept for any other is dropped.
  // false: only those sampled this tick (none in SampleMode::skip; the daemon's ticks between
  // publishes, when a process whose phases come from events is not read), and what is kept for
  // the others stays: a tick's work grows with what it samples, not with what is followed.
  bool complete = true;
  std::uint64_t now_ns = 0;             // the tick's deadline (CLOCK_MONOTONIC)
  std::uint64_t tick_ns = 0;            // the tick's length: CPU time is a share of it
  const GpuUtilization* gpu = nullptr;  // null: no NVML
  ProbeSource* probes = nullptr;        // null: no probes
  // The CPU time of the processes sampled in SampleMode::cpu_time in one read; null: /proc.
  TaskCpuSource* task_cpu = nullptr;
  // The main thread's phase from events, by pid (processes with event_role); null: none.
  const std::unordered_map<std::uint32_t, policy::Phase>* event_phases = nullptr;
};

struct ProcessTick {
  std::uint32_t pid = 0;
  policy::TaskUpdate update;
  // CPU time of the whole process in the interval (for its tenant's account); nullopt on its
  // first sample or when stat was not read.
  std::optional<std::uint64_t> cpu_time_ns;
  bool stat_read = true;  // false: /proc/PID/stat could not be read or parsed this tick
};

struct TickResult {
  std::vector<ProcessTick> updates;  // by pid, ascending
  // Exited, or the pid now belongs to another process: the daemon drops them.
  std::vector<std::uint32_t> gone;
};

class TickBuilder {
 public:
  struct Options {
    SignalsOptions signals;
    // CLOCK_MONOTONIC now: the probes' stamps and the main thread's futex stamp are compared
    // with the time of the read, not the tick's deadline (a tick may run late). Tests fix it.
    std::function<std::uint64_t()> clock;  // empty: clock_gettime(CLOCK_MONOTONIC)
  };

  TickBuilder() : TickBuilder(Options{}) {}
  explicit TickBuilder(Options options);

  // One tick: `out` is cleared and filled. State of processes not in `in.processes` is dropped.
  void build(const TickInputs& in, TickResult& out);
  TickResult build(const TickInputs& in);

  // A process the daemon dropped (gone, replaced, removed by discovery): its next sample starts
  // afresh (no schedstat baseline).
  void forget(std::uint32_t pid);

  // Samples the signal sampler answered from schedstat alone (collect/signals.hpp).
  [[nodiscard]] std::uint64_t unchanged_samples() const { return signals_.unchanged_samples(); }

 private:
  struct Baseline {
    std::uint64_t busy_ns = 0;  // workers: run + run-queue wait at at_ns
    std::uint64_t at_ns = 0;
  };
  [[nodiscard]] std::uint64_t now() const;
  policy::TaskUpdate task_update(const TrackedProcess& t, const ProcessSignals& s,
                                 const TickInputs& in);
  void set_cpu_fraction(const TrackedProcess& t, const ProcessSignals& s, const TickInputs& in,
                        policy::TaskUpdate& u);
  std::optional<float> worker_busy_fraction(std::uint32_t pid, std::uint64_t now_ns);

  Options options_;
  SignalSampler signals_;
  std::unordered_map<std::uint32_t, Baseline> baselines_;
  std::vector<TrackedProcess> sorted_;   // scratch
  std::vector<std::uint32_t> pids_;      // scratch
  std::vector<SampleMode> modes_;        // scratch
  std::vector<ProcessSignals> samples_;  // scratch
};

// True when the sample says the pid no longer holds the registered process (`start`, 0 unknown;
// a discovered process, or one named by `tenant assign`): it exited, or a new process has it,
// whose tenant and state are not the old one's. Discovery registers the new one afresh if it
// qualifies.
bool is_another_process(const ProcessSignals& s, std::uint64_t start);

}  // namespace zernel::collect
