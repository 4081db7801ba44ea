#pragma once
// The userspace backend: carries decisions out with what every Linux has, for kernels without
// sched_ext (docs/userspace.md).
//
//   priority       -> nice of every thread of the process (setpriority on each tid of
//                     /proc/PID/task; nice = policy::nice_for_priority, -priority clamped),
//                     never above the thread's original nice (below)
//   tenant_weight  -> a cpu cgroup per tenant, <cpu mount>/<name>/tenant-<slot>, cpu.weight
//                     (v2, = tenant_weight) or cpu.shares (v1, = tenant_weight * 1024 / 100);
//                     the tenant's processes move there through cgroup.procs
//   preferred_cpu  -> for a task bound to a GPU (gpu_id), affinity of every thread: the CPUs of
//                     that CPU's NUMA node, within the thread's original affinity (a process an
//                     operator pinned stays inside its pin); nothing is written when that equals
//                     the original (one-node machines)
//
// Never weaker than before: a decision with a negative priority (GpuCompute's "a thread waiting
// on the GPU yields", nice +5) leaves a thread at its original nice instead of raising it. This
// backend acts once per tick, and a training step's GPU wait often ends (and the thread is back
// on the critical path, launching the next kernels) long before the next tick could lower its
// nice again; at nice +5 it would then queue behind every CPU hog of the machine (in the
// protection benchmark step p99 went from 2.1x to 1.7x solo with this rule). The yield is still
// expressed inside the job: its data loaders (nice -10) rank far above its GPU waiter. The
// sched_ext backend, which acts on every wakeup, carries the full range.
//
// What it touches: only the processes of the decisions it is given, and only what differs from
// what it last wrote (a cache per thread and per process). Originals are read the first time a
// thread or process is seen: a thread or child process that inherited a value this backend set
// (nice and affinity are inherited at clone, the cgroup at fork) gets its creator's original.
// Every original is in the journal (journal.hpp) before the first change; a change whose
// original could not be journaled is not made.
//
// Restoring: forget(pid) puts the process's originals back when it is still the same process
// (start time); shutdown() does it for all, moves whatever is left in the tenant groups back,
// removes the groups and the journal. create() first restores what a journal left by a dead
// daemon lists, then removes it; a journal whose daemon still runs is an error (two daemons
// would fight over the same values).
//
// Errors of a single write (EPERM, EINVAL, ...) are counted and logged once per process, never
// fatal; a process or thread that has exited (ESRCH, ENOENT) is simply dropped.
//
// Not thread-safe: the daemon's loop owns it.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.hpp"
#include "enforce/backend.hpp"
#include "enforce/userspace/cgroup.hpp"
#include "enforce/userspace/journal.hpp"

namespace zernel::enforce::userspace {

inline constexpr const char* kDefaultJournalPath = "/run/zernel/userspace.journal";
inline constexpr const char* kDefaultCgroupName = "zernel";

struct UserspaceOptions {
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
  // The cpu cgroup hierarchy; nullopt: detected from PROC_ROOT/self/mountinfo.
  std::optional<CpuCgroupLayout> cgroup;
  bool use_cgroups = true;  // false: tenant weights are not enforced
  std::string cgroup_name = kDefaultCgroupName;
  std::string journal_path = kDefaultJournalPath;
  // Refuse to start without root or CAP_SYS_NICE (tests of the refusal turn the check on with
  // a fake status file: PROC_ROOT/self/status).
  bool check_privileges = true;
};

struct UserspaceStats {
  std::uint64_t nice_writes = 0;
  std::uint64_t affinity_writes = 0;
  std::uint64_t cgroup_moves = 0;
  std::uint64_t weight_writes = 0;
  std::uint64_t journal_writes = 0;
  std::uint64_t write_errors = 0;
  // From the journal of a dead daemon at create().
  std::uint64_t recovered_threads = 0;
  std::uint64_t recovered_processes = 0;
  std::uint64_t recovery_skipped = 0;  // exited or pid reused
};

class UserspaceBackend final : public Backend {
 public:
  static Result<std::unique_ptr<UserspaceBackend>> create(UserspaceOptions opts);
  ~UserspaceBackend() override;
  UserspaceBackend(const UserspaceBackend&) = delete;
  UserspaceBackend& operator=(const UserspaceBackend&) = delete;

  [[nodiscard]] std::string_view name() const override { return "userspace"; }
  Result<void> apply(std::span<const policy::Decision> decisions) override;
  void forget(std::uint32_t pid) override;
  Result<void> shutdown() override;

  [[nodiscard]] const UserspaceStats& stats() const { return stats_; }
  [[nodiscard]] const std::optional<CgroupTree>& cgroups() const { return tree_; }
  // The CPUs of the NUMA node holding `cpu` (empty when unknown).
  [[nodiscard]] std::vector<std::uint32_t> node_cpus_of(std::uint32_t cpu) const;

 private:
  struct ThreadState {
    std::uint64_t start = 0;
    std::int32_t orig_nice = 0;
    std::vector<std::uint32_t> orig_cpus;
    std::optional<std::int32_t> nice;                // last written
    std::optional<std::vector<std::uint32_t>> cpus;  // last written
    bool journaled = false;
    bool seen = false;
  };
  struct ProcState {
    std::uint64_t start = 0;
    std::uint32_t ppid = 0;
    std::map<std::uint32_t, ThreadState> threads;
    bool have_orig = false;
    std::int32_t orig_nice = 0;
    std::vector<std::uint32_t> orig_cpus;
    std::optional<std::string> orig_cgroup;  // hierarchy path, read when first moved
    bool cgroup_journaled = false;
    std::optional<std::uint16_t> group;  // tenant group it is in because of us
    // What this process's threads are set to now (for threads created between ticks).
    std::optional<std::int32_t> cur_nice;
    std::optional<std::vector<std::uint32_t>> cur_cpus;
    // This tick's targets.
    std::int32_t want_nice = 0;
    std::vector<std::uint32_t> want_cpus;  // empty: the original
    std::optional<std::uint16_t> want_group;
    std::uint32_t want_weight = 100;
    bool error_logged = false;
  };

  explicit UserspaceBackend(UserspaceOptions opts);
  Result<void> recover();
  void scan_threads(std::uint32_t pid, ProcState& p, const ProcState* parent, bool& dirty);
  void record_cgroup(std::uint32_t pid, ProcState& p, const ProcState* parent, bool& dirty);
  void enforce(std::uint32_t pid, ProcState& p);
  void restore(std::uint32_t pid, ProcState& p);
  Result<void> move_home(std::uint32_t pid, const ProcState& p);
  void write_failed(std::uint32_t pid, ProcState& p, const std::string& what, int err);
  Result<void> save_journal();
  void empty_tenant_groups(const CgroupTree& tree, const std::string& fallback_dir);
  std::string home_dir_for_slot(std::uint16_t slot) const;

  UserspaceOptions opts_;
  std::optional<CgroupTree> tree_;
  std::string cgroup_error_;  // why tenant weights are off (empty: they are on)
  bool cgroup_error_logged_ = false;
  std::map<std::uint16_t, std::uint32_t> group_weights_;  // tenant slot -> weight written
  std::vector<std::vector<std::uint32_t>> nodes_;         // CPUs per NUMA node
  std::unordered_map<std::uint32_t, ProcState> procs_;
  UserspaceStats stats_;
  std::uint64_t self_start_ = 0;
  bool journal_dirty_ = false;
  bool journal_error_logged_ = false;
  bool active_ = false;  // create() succeeded
  bool shut_down_ = false;
};

}  // namespace zernel::enforce::userspace
