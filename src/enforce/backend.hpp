#pragma once
// Enforcement: carrying decisions out on the real system. Three backends share this interface:
//   observe    changes nothing (watch and report only)
//   userspace  nice/sched_setattr, cgroup CPU weights, CPU affinity (any Linux)
//   sched_ext  the project's BPF scheduler (kernels with CONFIG_SCHED_CLASS_EXT)
// Every backend must be reversible: shutdown() restores what it changed, and a crash of the
// daemon must leave nothing that the next start (or the kernel) does not undo.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.hpp"
#include "policy/decision.hpp"

namespace zernel::enforce {

class Backend {
 public:
  virtual ~Backend() = default;

  [[nodiscard]] virtual std::string_view name() const = 0;
  // Applies one tick's decisions (one per tracked task). A backend writes only what changed.
  virtual Result<void> apply(std::span<const policy::Decision> decisions) = 0;
  // A task left the table (exited, or no longer tracked): drop its state, restore what is left.
  virtual void forget(std::uint32_t pid) = 0;
  // Restores everything changed; called on exit and on SIGINT/SIGTERM. Idempotent.
  virtual Result<void> shutdown() = 0;

  // After apply() failed with ECANCELED (the kernel ejected the backend's scheduler): whether
  // the exit asks for a reload (now, or after a backoff) rather than giving up on this backend,
  // and a one-line description of the exit for the log.
  enum class Retry : std::uint8_t { no, now, with_backoff };
  [[nodiscard]] virtual Retry retry_after_failure() { return Retry::no; }
  [[nodiscard]] virtual std::string failure_summary() { return {}; }

  // How this backend carries the tenant weight of a tracked process, in words, for /status
  // (empty: nothing to say, e.g. the process has no tenant or the backend has no such notion).
  [[nodiscard]] virtual std::string tenant_share_note(std::uint32_t /*pid*/) const { return {}; }

  // The backend's own event counters since it was made, for /metrics: (name, value) pairs with
  // fixed names (sched_ext: every counter of bpf/intf.h's ZERNEL_STATS, "local", "run_ns_...").
  // Empty for a backend that keeps none; an error when they could not be read.
  struct Counter {
    std::string_view name;  // static storage
    std::uint64_t value = 0;
  };
  [[nodiscard]] virtual Result<std::vector<Counter>> counters() const {
    return std::vector<Counter>{};
  }
  // After apply() failed with ECANCELED: the kind of exit, as a fixed name (sched_ext: the
  // kernel's SCX_EXIT_ name without the prefix, "ERROR_STALL"); "UNKNOWN" when not known.
  [[nodiscard]] virtual std::string_view exit_kind() { return "UNKNOWN"; }
  // Whether the backend runs the probes' context-switch rules itself, now (sched_ext, while
  // its scheduler is attached and carries them: bpf/probes.bpf.c, WHERE THE SWITCH RULES RUN).
  [[nodiscard]] virtual bool carries_switch_rules() const { return false; }
};

// The observe-only backend: counts what it is given and changes nothing.
class ObserveBackend final : public Backend {
 public:
  [[nodiscard]] std::string_view name() const override { return "observe"; }
  Result<void> apply(std::span<const policy::Decision> decisions) override {
    applied_ += decisions.size();
    return Ok{};
  }
  void forget(std::uint32_t /*pid*/) override {}
  Result<void> shutdown() override { return Ok{}; }
  [[nodiscard]] std::uint64_t applied() const { return applied_; }

 private:
  std::uint64_t applied_ = 0;
};

}  // namespace zernel::enforce

namespace zernel::enforce {

// The backend for --backend KIND: "sched_ext" (the BPF scheduler; an error naming why when the
// kernel lacks sched_ext, another scheduler is loaded, or the build has no BPF), "userspace"
// (nice, cgroup CPU weights, affinity; an error without root/CAP_SYS_NICE or while another
// daemon's journal is live), "observe", or "auto" (sched_ext where it loads, else userspace,
// else observe, saying why).
//
// The userspace backend's journal path may be overridden (tests, a private instance) with this
// environment variable; default /run/zernel/userspace.journal (enforce/userspace/restore.hpp).
// (The journal of machine-wide settings, whatever the backend, is $ZERNEL_SETTINGS_JOURNAL:
// enforce/settings_journal.hpp.) The backend makes no cgroups of its own any more, so
// ZERNEL_USERSPACE_CGROUP, which named them, is ignored (the constant stays for scripts and tests
// that still set it).
inline constexpr const char* kUserspaceJournalEnv = "ZERNEL_USERSPACE_JOURNAL";
// Tests only: a number of milliseconds after which every sched_ext scheduler this process loads
// ends itself with scx_bpf_error() ("injected error (test)"; the BPF knob inject_error_after_ns,
// docs/sched-ext.md), so that the daemon's ejection handling and its fallback to the userspace
// backend can be shown end to end (tests/vm/daemon_scx_test.sh). Unset or empty: never. A value
// that is not a whole number of milliseconds (1 .. 86,400,000) is an error naming it.
inline constexpr const char* kScxInjectErrorEnv = "ZERNEL_TEST_SCX_INJECT_ERROR_MS";
inline constexpr const char* kUserspaceCgroupEnv = "ZERNEL_USERSPACE_CGROUP";

// What make_backend passes on from the configuration.
struct BackendSettings {
  std::uint32_t max_tasks = 0;            // [general] max_tracked_tasks (sched_ext map size)
  bool allow_unenforced_cpu_max = false;  // [sched_ext]
  int phase_map_fd = -1;  // the probes' per-thread phases (sched_ext follows them); -1: none
  bool phase_sync_kicks = false;  // the probes kick for a GPU sync's phase changes themselves
  // The probes' maps by name (GpuSyncProbes::shared_maps), for the scheduler to share, and
  // whether it should carry their context-switch rules (sched_ext, full switch).
  std::vector<std::pair<std::string, int>> shared_maps;
  bool switch_rules = false;
};

Result<std::unique_ptr<Backend>> make_backend(std::string_view kind,
                                              const BackendSettings& settings = {});

}  // namespace zernel::enforce
