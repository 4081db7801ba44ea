#pragma once
// The daemon: one process per node, one loop. Every phase_eval_interval_ms (a drift-free tick):
//   1. every gpu_poll_interval_ms: NVML (compute processes, utilisation) and process discovery;
//      new processes are registered (with their tenant from the match rules), gone ones dropped
//   2. per-process signals (io wait, CPU time, NCCL) for every tracked process, per-CPU load
//   3. one decision per tracked task from the engine, handed to the enforcement backend
//   4. committed phase changes to --phase-log; a snapshot for /metrics and /status
// Shutdown on SIGINT/SIGTERM (the stop fd): the backend restores what it changed, delay
// accounting is restored, the HTTP server stops.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collect/cpu_load.hpp"
#include "collect/delayacct.hpp"
#include "collect/discovery.hpp"
#include "collect/nvml.hpp"
#include "collect/signals.hpp"
#include "common/result.hpp"
#include "config/config.hpp"
#include "enforce/backend.hpp"
#include "policy/engine.hpp"
#include "telemetry/http_server.hpp"
#include "telemetry/phase_log.hpp"

namespace zernel::daemon {

struct DaemonOptions {
  config::Config config;
  std::string backend = "auto";
  std::string phase_log_path;     // empty: none
  std::string nvml_library;       // empty: libnvidia-ml.so.1 by soname
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
  bool serve_http = true;
  std::uint16_t http_port_override = 0;  // 0: config.telemetry.metrics_port
};

struct DaemonStats {
  std::uint64_t ticks = 0;
  std::uint64_t skipped_ticks = 0;
  std::uint64_t scans = 0;
  std::uint64_t collector_errors = 0;
  std::uint64_t max_tick_ns = 0;
  std::uint64_t total_tick_ns = 0;
};

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> create(DaemonOptions opts);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Runs until stop_fd becomes readable. Returns an error only for a fatal failure.
  Result<void> run(int stop_fd);

  [[nodiscard]] const DaemonStats& stats() const { return stats_; }
  [[nodiscard]] std::uint16_t http_port() const;

 private:
  explicit Daemon(DaemonOptions opts, policy::Topology topo);
  void poll_processes(std::uint64_t now_ns);
  void refresh_gpu_utilization();
  void sample_signals(std::uint64_t now_ns);
  void decide(std::uint64_t now_ns);
  void publish(std::uint64_t now_ns);
  void drop(std::uint32_t pid);
  void shutdown();

  DaemonOptions opts_;
  policy::Engine engine_;
  std::unique_ptr<enforce::Backend> backend_;
  std::unique_ptr<collect::Nvml> nvml_;
  std::optional<collect::DelayAcctGuard> delayacct_;
  collect::ProcessDiscovery discovery_;
  collect::SignalSampler signals_;
  collect::CpuLoadSampler cpu_load_;
  telemetry::PhaseLog phase_log_;
  telemetry::SnapshotStore store_;
  std::unique_ptr<telemetry::HttpServer> http_;

  struct Tracked {
    std::string comm;
    std::optional<std::uint32_t> gpu;
    collect::ProcessRole role = collect::ProcessRole::matched;
  };
  std::unordered_map<std::uint32_t, Tracked> tracked_;
  std::vector<std::uint32_t> pids_;  // scratch
  std::vector<collect::ProcessSignals> samples_;
  std::vector<policy::Decision> decisions_;
  collect::GpuProcessMap nvml_procs_;
  std::unordered_map<std::uint32_t, std::uint32_t> proc_util_;  // pid -> SM %
  std::vector<std::uint32_t> device_util_;                       // by device index
  bool warned_cap_ = false;
  bool warned_scan_ = false;
  DaemonStats stats_;
  bool shut_down_ = false;
};

}  // namespace zernel::daemon
