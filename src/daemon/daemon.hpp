#pragma once
// The daemon: one process per node, one loop. Every phase_eval_interval_ms (a drift-free tick):
//   1. every gpu_poll_interval_ms: NVML (compute processes, utilisation) and process discovery;
//      new processes are registered (with their tenant from the match rules), gone ones dropped
//   2. per-process signals (io wait, CPU time, NCCL) for every tracked process, per-CPU load
//   3. one decision per tracked task from the engine, handed to the enforcement backend
//   4. committed phase changes to --phase-log; a snapshot for /metrics and /status
// Shutdown on SIGINT/SIGTERM (the stop fd): the backend restores what it changed, delay
// accounting is restored, the HTTP server stops.
//
// The Daemon orchestrates; the parts live in their own files, each subsystem's opener beside it:
//   daemon.cpp               start-up order, the loop and its ticks, decide, drop, stop
//   daemon_sampling.cpp      steps 1 and 2: NVML (opened there), discovery, then
//                            collect::TickBuilder (collect/tick_builder.hpp) merges the signals
//                            into task updates; the daemon gives them to the engine, drops the
//                            processes it says are gone and adds CPU time to tenants
//   phase_events.cpp         the BPF probes (opened there, attached per GPU owner) and the phases
//                            from events
//   backend_supervisor.hpp   step 3's backend: ejection, restart with backoff, fallback, restore
//   daemon_metrics.cpp       step 4: the HTTP server (opened there), snapshots, /metrics' extras
//   daemon_control.cpp       the control socket (opened there) and SIGHUP, served on this same
//                            loop thread between ticks through RuntimeControl
//                            (runtime_control.hpp), so the engine stays single-threaded
//   kubelet_tenants.cpp      [kubernetes]: the pod-resources collector (started there) as tenants
//   machine_settings.cpp     what a crashed daemon left, the settings journal, power management
//                            and kernel.task_delayacct (opened there, restored at stop)
//   trace_recording.cpp      `zernel-scheduler trace`: a recording kept only while its client
//                            waits, answered from the loop when it ends

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "collect/cpu_load.hpp"
#include "collect/discovery.hpp"
#include "collect/pod_resources.hpp"
#include "collect/proc_events.hpp"
#include "collect/signals.hpp"
#include "collect/tick_builder.hpp"
#include "sys/delayacct.hpp"
#include "sys/nvml.hpp"
#ifdef ZERNEL_HAVE_PROBES
#include "collect/probes/gpu_sync_probes.hpp"
#include "collect/probes/task_cpu_iter.hpp"
#endif
#include "common/result.hpp"
#include "config/config.hpp"
#include "daemon/backend_supervisor.hpp"
#include "daemon/control.hpp"
#include "daemon/runtime_control.hpp"
#include "daemon/table_full.hpp"
#include "daemon/ticker.hpp"
#include "enforce/backend.hpp"
#include "enforce/power.hpp"
#include "enforce/settings_journal.hpp"
#include "policy/engine.hpp"
#include "telemetry/http_server.hpp"
#include "telemetry/phase_log.hpp"
#include "telemetry/thread_phases.hpp"
#include "telemetry/trace.hpp"

namespace zernel::daemon {

struct DaemonOptions {
  config::Config config;
  std::string backend = "auto";
  std::string phase_log_path;      // empty: none
  bool phase_log_threads = false;  // the phase log also gets every thread's changes ("tid")
  std::string nvml_library;        // empty: libnvidia-ml.so.1 by soname
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
  bool serve_http = true;
  std::uint16_t http_port_override = 0;  // 0: config.telemetry.metrics_port
  // The file re-read on SIGHUP (empty: reload is refused); a missing file means the defaults
  // only when config_missing_ok (the built-in default path).
  std::string config_path;
  bool config_missing_ok = false;
  std::string control_socket;  // empty: no control socket
  // false (the built-in default path): a socket that cannot be created is logged and the daemon
  // runs without one, so a second daemon (tests, a private instance) still starts; true (a path
  // the user named): it is a start-up error.
  bool control_socket_required = true;
};

// How often the loop does each part of its work, from [general] and [telemetry].
struct Cadence {
  std::uint64_t period_ns = 100'000'000;  // phase_eval_interval_ms: one tick
  std::uint64_t poll_every = 5;           // ticks between discovery scans and power updates
  std::uint64_t publish_every = 10;       // ticks between snapshots for /metrics and /status
};
Cadence cadence_of(const config::Config& cfg);

// The Hostname label of /metrics' GPU series: $NODE_NAME when set and non-empty (the Kubernetes
// downward API's spec.nodeName, as DCGM exporter uses), else gethostname(), else "unknown".
std::string metrics_node_name();

struct DaemonStats {
  std::uint64_t ticks = 0;
  std::uint64_t skipped_ticks = 0;
  std::uint64_t scans = 0;       // full listings of /proc
  std::uint64_t updates = 0;     // discovery of the processes the events named only
  std::uint64_t nvml_lists = 0;  // queries of NVML's process list
  std::uint64_t cpu_load_reads = 0;  // reads of /proc/stat for the CPUs' loads
  std::uint64_t collector_errors = 0;
  std::uint64_t max_tick_ns = 0;
  std::uint64_t total_tick_ns = 0;
};

class Daemon final : private ControlHost {
 public:
  static Result<std::unique_ptr<Daemon>> create(DaemonOptions opts);
  ~Daemon() override;
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Runs until stop_fd becomes readable; reload_fd (>= 0) readable means SIGHUP: re-read the
  // configuration (drained with StopSignals::drain_reload). Returns an error only for a fatal
  // failure.
  Result<void> run(int stop_fd, int reload_fd = -1);

  [[nodiscard]] const config::Config& config() const { return opts_.config; }

  [[nodiscard]] const DaemonStats& stats() const { return stats_; }
  [[nodiscard]] std::uint16_t http_port() const;

 private:
  explicit Daemon(DaemonOptions opts, policy::Topology topo);
  // Start-up, in this order (create).
  Result<void> start();
  void replay_userspace_journal();
  void start_runtime_control();
  void open_nvml();
  void open_probes();
  Result<void> open_http();
  Result<void> open_control_socket();
  Result<void> open_machine_settings();
  void enable_delay_accounting(const std::shared_ptr<enforce::SettingsJournal>& journal);
  void open_process_events();
  // Every tick: the process events (when open), then discovery when something asks for it.
  void follow_processes(std::uint64_t now_ns, bool poll_tick);
  // Discovery: a scan of /proc (full), or an update from the process events.
  void poll_processes(std::uint64_t now_ns, bool full = true);
  void start_pod_resources();
  void apply_pod_resources();
  // Between scans: a process NVML lists, or a child of a GPU owner's main thread, that is not
  // tracked (nor already reported since the last scan) means a new job process: scan now.
  bool new_process_appeared();
  void read_nvml_processes();
  void track_discovered(const collect::DiscoveredProcess& p, std::uint64_t now_ns);
  void mark_worker_owners(const collect::DiscoveryResult& scan);
  void refresh_gpu_utilization();
  // poll_tick: the machine's CPU loads are read (/proc/stat) on poll ticks only; the ticks
  // between re-rank the CPUs with the last ones.
  void sample_signals(std::uint64_t now_ns, bool publish_tick, bool poll_tick);
  void decide(std::uint64_t now_ns);
  void publish(std::uint64_t now_ns);
  // /metrics' series beyond the engine's (daemon_metrics.cpp): build, backend and probe counters,
  // tenants' CPU time and achieved share, GPUs.
  void add_metrics(telemetry::Snapshot& s);
  void add_tenant_cpu(telemetry::Snapshot& s);
  void add_gpus(telemetry::Snapshot& s) const;
  // A tracked process's CPU time of the last interval, added to its tenant's (if it has one).
  void account_tenant_cpu(std::uint32_t pid, std::optional<std::uint64_t> cpu_time_ns);
  void drop(std::uint32_t pid);
  void shutdown();
  void service_wakeup(int reload_fd);
  void tick(const Ticker& ticker, std::uint64_t n, const Cadence& cadence);
  void stop_loop();
  // The engine's state with what the daemon knows of each task (comm, backend's tenant note).
  telemetry::Snapshot snapshot(std::uint64_t now_ns);
  [[nodiscard]] std::uint64_t known_until_ns() const;
  // ControlHost: what runtime control asks of the daemon.
  std::optional<LiveProcess> live_process(std::uint32_t pid) override;
  void drop_if_replaced(std::uint32_t pid, std::uint64_t starttime_ticks) override;
  void track_assigned(std::uint32_t pid, std::uint64_t starttime_ticks) override;
  telemetry::Snapshot status_snapshot() override;

  DaemonOptions opts_;
  policy::Engine engine_;
  BackendSupervisor backend_;
  std::unique_ptr<sys::Nvml> nvml_;
  std::unique_ptr<enforce::PowerManager> power_;  // after nvml_: destroyed (restoring) first
  telemetry::LatencyHistogram decision_latency_;
  std::uint64_t last_decision_ns_ = 0;
  std::map<std::string, std::uint64_t> collector_errors_;  // by collector name
  // The Hostname label of GPU series: $NODE_NAME (as DCGM exporter in Kubernetes), else the host
  // name; read at start.
  std::string node_name_;
  // CPU time of each tenant's processes since start, by tenant id, and its value at the previous
  // publish (for the achieved share); entries of removed tenants are dropped at publish.
  std::map<std::string, std::uint64_t, std::less<>> tenant_cpu_ns_;
  std::map<std::string, std::uint64_t, std::less<>> tenant_cpu_published_ns_;
  bool tenant_cpu_published_ = false;
  void count_error(const char* collector) {
    ++stats_.collector_errors;
    ++collector_errors_[collector];
  }
  std::optional<sys::DelayAcctGuard> delayacct_;
  collect::ProcessDiscovery discovery_;
  // The kernel's process events (null without them: discovery lists /proc every poll tick),
  // their scratch, what discovery last ran with, and when it lists all of /proc next.
  static constexpr std::uint64_t kRescanNs = 30'000'000'000;
  static constexpr std::uint32_t kAttrScansWithNvml = 4;  // see open_process_events()
  // NVML's list every tick while a process forked or exec'd within kNvmlEagerNs is alive, else
  // every poll tick (collect/proc_events.hpp, RecentSpawns). While short commands run back to
  // back (probes, agents' shell-outs) a process counts only once it has lived
  // kNvmlSpawnMinAgeNs, which they never do; elsewhere at once.
  static constexpr std::uint64_t kNvmlEagerNs = 30'000'000'000;
  static constexpr std::uint64_t kNvmlSpawnMinAgeNs = 100'000'000;
  collect::RecentSpawns recent_spawns_{kNvmlEagerNs, kNvmlSpawnMinAgeNs};
  std::unique_ptr<collect::ProcEvents> proc_events_;
  std::vector<collect::ProcEvent> proc_event_buf_;
  collect::GpuProcessMap discovered_nvml_;
  std::vector<config::TenantConfig> discovered_tenants_;
  std::uint64_t next_rescan_ns_ = 0;
  collect::TickBuilder tick_builder_;
  collect::CpuLoadSampler cpu_load_;
  std::vector<float> cpu_loads_;  // the last ones read (empty: none yet)
  telemetry::PhaseLog phase_log_;
  telemetry::SnapshotStore store_;
  std::unique_ptr<telemetry::HttpServer> http_;
  std::unique_ptr<ControlServer> control_;
  std::unique_ptr<RuntimeControl> runtime_;  // control requests and SIGHUP
  // [kubernetes] enabled: the kubelet's pods as tenants (collect/pod_resources.hpp), taken on
  // poll ticks; the mapping's problems are logged once each while they last.
  std::unique_ptr<collect::PodResourcesSource> pods_;
  std::set<std::string> pod_problems_;

  struct Tracked {
    std::string comm;
    std::optional<std::uint32_t> gpu;
    collect::ProcessRole role = collect::ProcessRole::matched;
    bool has_workers = false;  // a GPU owner with DataLoader workers
    bool probed = false;       // the GPU sync probes are attached to a libcuda it maps
    bool event_role = false;   // its phases come from the BPF event rules (phase_events.cpp)
    // /proc/PID/stat field 22 when registered: with the pid, the process's identity (0: unknown)
    std::uint64_t start = 0;
  };
#ifdef ZERNEL_HAVE_PROBES
  std::unique_ptr<collect::GpuSyncProbes> probes_;
  // The tenants' CPU time in one read a publish tick; null: /proc (no process events, no BPF).
  std::unique_ptr<collect::TaskCpuIterator> task_cpu_;
#endif
  void attach_probes(std::uint32_t pid, Tracked& t);
  [[nodiscard]] collect::SampleMode sample_mode(std::uint32_t pid, const Tracked& t,
                                                bool publish_tick) const;
  // Phases from events (phase_events.cpp): names a new process's role to the BPF rules; folds
  // the changes since the last tick into event_phase_ and writes them to the phase log.
  void set_event_role(std::uint32_t pid, Tracked& t);
  void drain_phase_events();
  void commit_event_phase(std::uint32_t pid, policy::Phase phase, std::uint64_t at_ns);
  // The probes' per-thread phase map for the sched_ext scheduler; -1 without phases from events.
  [[nodiscard]] int phase_map_fd() const;
  [[nodiscard]] bool phase_sync_kicks() const;
  // The probes' maps for the sched_ext scheduler to share (empty without phases from events),
  // and where the context-switch rules run: in the scheduler while it carries them, else in the
  // probes' tracepoint (GpuSyncProbes::set_switch_carried).
  [[nodiscard]] std::vector<std::pair<std::string, int>> phase_shared_maps() const;
  void place_switch_rules();
  // `zernel-scheduler trace` (trace_recording.cpp): the control request starts a recording
  // (nullopt: answered later) or refuses; every tick feeds it (drain_phase_events, decide) and
  // finish_trace answers its client once it is due, or drops it when the client has gone.
  std::optional<nlohmann::json> start_trace(const ControlRequest& req, ControlServer::Ticket who);
  void finish_trace();
  void trace_phase(std::uint64_t t_ns, std::uint32_t pid, std::uint32_t tid, policy::Phase phase,
                   std::string_view cause);
  std::unique_ptr<telemetry::TraceRecorder> trace_;
  ControlServer::Ticket trace_client_ = 0;
  bool phase_events_on_ = false;
  std::unordered_map<std::uint32_t, policy::Phase> event_phase_;  // main thread's, by pid
  telemetry::ThreadPhaseTimes thread_phases_;  // every thread's, from the same events
  std::uint64_t drained_at_ns_ = 0;            // when the phase events were last drained
  // What the tasks dropped so far had accounted in each phase (the per-phase seconds counter).
  std::array<std::uint64_t, policy::kPhaseCount> dropped_phase_ns_{};
#ifdef ZERNEL_HAVE_PROBES
  std::vector<collect::PhaseEvent> phase_events_;  // scratch
#endif
  std::unordered_map<std::uint32_t, Tracked> tracked_;
  std::vector<collect::TrackedProcess> tick_processes_;  // scratch
  std::vector<std::uint32_t> children_;                  // scratch
  std::unordered_set<std::uint32_t> reported_new_;  // new_process_appeared, since the last scan
  collect::TickResult tick_result_;                 // scratch
  std::vector<policy::Decision> decisions_;
  collect::GpuProcessMap nvml_procs_;
  bool nvml_procs_fresh_ = false;        // nvml_procs_ was read on this tick
  collect::GpuUtilization gpu_util_;     // NVML's utilisation this tick
  std::uint64_t tick_ns_ = 100'000'000;  // phase_eval_interval_ms in ns
  bool warned_cap_ = false;
  bool warned_scan_ = false;
  TableFullLog table_full_;  // logs each BPF table that filled, once
  DaemonStats stats_;
  bool shut_down_ = false;
};

}  // namespace zernel::daemon
