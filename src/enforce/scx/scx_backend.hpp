#pragma once
// The sched_ext backend: loads the zernel BPF scheduler (bpf/zernel.bpf.c) and writes decisions
// into its maps. Built only with -DZERNEL_BPF=ON, which defines ZERNEL_HAVE_SCX.
//
// Lifecycle. create() checks /sys/kernel/sched_ext (absent: ENOTSUP; another scheduler loaded:
// EBUSY), then opens, loads (the verifier runs here) and attaches the scheduler. By default it is
// a full switch: every normal task runs under it. Options::partial sets SCX_OPS_SWITCH_PARTIAL
// and moves only the processes it is given decisions for (sched_setattr(SCHED_EXT) of each
// thread; restored on forget() and shutdown()); in partial mode they rank below every normal
// task, since the ext class sits below the fair class.
//
// The struct_ops link is owned by this process and never pinned: if the daemon dies, the kernel
// closes the link and returns every task to the default scheduler.
//
// Decisions. apply() compares each decision's map value with the one it last wrote and writes
// only those that changed, in one bpf_map_update_batch() call (element by element where the
// kernel lacks batch ops); forget() deletes the entry.
//
// Ejection. The kernel may unload the scheduler at any time (a runtime error, scx_bpf_error(),
// the watchdog, sysrq-S). The BPF side records the exit in the UEI; exit_info() returns it, and
// apply() fails with ECANCELED once it has happened. restart_advice(exit) says whether to reload
// (with or without backoff) or to fall back to observe.

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/result.hpp"
#include "enforce/backend.hpp"
#include "enforce/scx/decision_map.hpp"
#include "enforce/scx/exit_info.hpp"

struct zernel_scx;  // skel_shim.h

namespace zernel::enforce::scx {

struct Options {
  // SCX_OPS_SWITCH_PARTIAL: only the processes given decisions move to sched_ext.
  bool partial = false;
  // Starvation bound in ns; 0 = the default of intf.h (1 s).
  std::uint64_t starve_ns = 0;
  // Entries of the decision map ([general] max_tracked_tasks); 0 = ZERNEL_MAX_TASKS.
  std::uint32_t max_tasks = 0;
  // A full switch on a kernel that cannot hand cpu.max limits to a sched_ext scheduler (before
  // 6.17, or without CONFIG_EXT_GROUP_SCHED) is refused while some cgroup has a cpu.max quota,
  // since the quota would stop applying; true starts anyway, with a warning.
  bool allow_unenforced_cpu_max = false;
  // Tests only: the BPF side calls scx_bpf_error() this long after loading (0 = never), so that
  // the ejection path can be tested.
  std::uint64_t inject_error_after_ns = 0;
  // Phases of threads: the GPU sync probes' per-thread phase map (phases from events), whose
  // phases the scheduler then applies at each wakeup and enqueue; -1: decisions only.
  int phase_map_fd = -1;
  // The probes kick the CPU for a GPU sync's entry and return themselves (GpuSyncProbes::
  // sync_kicks()): the scheduler's phase timer then does not poll while a thread is in a sync.
  bool phase_sync_kicks = false;
  // The probes' maps by name, for the scheduler's maps of the same names (bpf/probes/
  // rules.bpf.h), and whether it carries the probes' context-switch rules in ops.stopping and
  // ops.running (full switch only; where the kernel refuses the rules' helpers to a struct_ops
  // program, the scheduler loads without them and says so).
  std::vector<std::pair<std::string, int>> shared_maps;
  bool switch_rules = false;
  std::filesystem::path sys_root = "/sys";
  std::filesystem::path proc_root = "/proc";
  // Where the kernel's config-<release> is looked for (its CONFIG_HZ: the tick, see bpf/).
  std::filesystem::path boot_root = "/boot";
};

// CONFIG_HZ from a kernel config file; nullopt when the file is missing or has no valid line.
std::optional<std::uint32_t> read_config_hz(const std::filesystem::path& config);
// CONFIG_<name>=y in a kernel config file: true, false ("is not set" or absent), nullopt when
// the file cannot be read.
std::optional<bool> read_config_bool(const std::filesystem::path& config, std::string_view name);
// The first cgroup (path relative to cgroup_root) whose cpu.max has a quota, under a cgroup v2
// mount; nullopt when none has (or there is no cgroup v2 tree there). Looks at most max_dirs
// cgroups.
std::optional<std::string> find_cpu_max_quota(const std::filesystem::path& cgroup_root,
                                              std::size_t max_dirs = 100000);

// Per-CPU counters summed over CPUs, indexed by enum zernel_stat (names in kStatNames).
using Stats = std::array<std::uint64_t, ZERNEL_STAT_NR>;

// What this backend has written (for logs and tests of "writes only what changed").
struct WriteCounters {
  std::uint64_t written = 0;    // decision map entries written
  std::uint64_t unchanged = 0;  // decisions skipped because the map already held them
  std::uint64_t deleted = 0;    // entries deleted by forget()
  std::uint64_t batches = 0;    // bpf_map_update_batch() calls
  std::uint64_t tenant_writes = 0;
};

class ScxBackend final : public Backend {
 public:
  static Result<std::unique_ptr<ScxBackend>> create(const Options& options = {});
  ~ScxBackend() override;
  ScxBackend(const ScxBackend&) = delete;
  ScxBackend& operator=(const ScxBackend&) = delete;

  [[nodiscard]] std::string_view name() const override { return "sched_ext"; }
  Result<void> apply(std::span<const policy::Decision> decisions) override;
  void forget(std::uint32_t pid) override;
  // Detaches (the kernel records UNREG) and restores partial-mode tasks. Idempotent. The exit
  // info and the counters stay readable afterwards.
  Result<void> shutdown() override;
  // From exit_info() and restart_advice().
  [[nodiscard]] Retry retry_after_failure() override;
  [[nodiscard]] std::string failure_summary() override;
  // stats() by kStatNames, and exit_info()'s kind by exit_kind_name().
  [[nodiscard]] Result<std::vector<Counter>> counters() const override;
  [[nodiscard]] std::string_view exit_kind() override;
  [[nodiscard]] bool carries_switch_rules() const override;

  // How the scheduler ended, once it has (ejected by the kernel, or after shutdown()).
  [[nodiscard]] std::optional<ExitInfo> exit_info();
  // The kernel's debug dump of an error exit (empty if none).
  [[nodiscard]] std::string exit_dump() const;
  // Attached and not ejected.
  [[nodiscard]] bool running();
  [[nodiscard]] Result<Stats> stats() const;
  // The BPF task storage of a live thread (run time, bursts, wakeups, vtime); nullopt when the
  // thread is gone or has none.
  [[nodiscard]] std::optional<zernel_task_ctx> task_ctx(std::uint32_t tid) const;
  [[nodiscard]] const WriteCounters& write_counters() const { return counters_; }
  [[nodiscard]] bool partial() const { return options_.partial; }

 private:
  void log_exit_counters() const noexcept;
  ScxBackend(Options options, ::zernel_scx* handle);
  Result<void> write_batch(const std::vector<std::uint32_t>& keys,
                           const std::vector<zernel_decision>& values);
  void move_to_ext(std::uint32_t pid);
  void restore_policy(std::uint32_t pid);

  struct SavedPolicy {
    std::uint32_t tid;
    std::uint32_t policy;
  };

  Options options_;
  ::zernel_scx* handle_;
  bool attached_ = false;
  bool exit_logged_ = false;
  int decisions_fd_ = -1;
  int tenants_fd_ = -1;
  std::unordered_map<std::uint32_t, zernel_decision> written_;
  std::array<std::uint32_t, ZERNEL_MAX_TENANTS> tenant_weights_{};     // 0 = never written
  std::unordered_map<std::uint32_t, std::vector<SavedPolicy>> moved_;  // partial mode
  WriteCounters counters_;
  bool batch_supported_ = true;
};

}  // namespace zernel::enforce::scx
