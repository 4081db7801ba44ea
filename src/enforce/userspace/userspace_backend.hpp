#pragma once
// The userspace backend: carries decisions out with what every Linux has, for kernels without
// sched_ext (docs/userspace.md).
//
//   priority       -> nice of every thread of the process (setpriority on each tid of
//                     /proc/PID/task; nice = policy::nice_for_priority, -priority clamped),
//                     never above the thread's original nice (below)
//   tenant_weight  -> where the process is (tenant_share.hpp): the cpu.weight (v2) / cpu.shares
//                     (v1) of the process's own cgroup when that group holds only this tenant's
//                     processes; otherwise a priority shift on its threads' nice. No process is
//                     ever moved to another cgroup.
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
// sched_ext backend, which acts on every wakeup, carries the full range. So this backend only
// ever lowers a nice value, which is also what lets a journal replay recognise a value it set in
// a thread it never saw (restore.hpp).
//
// What it touches: only the processes of the decisions it is given, the weight file of cgroups
// that hold nothing but one tenant's processes, and only what differs from what it last wrote (a
// cache per thread, process and cgroup). Originals are read the first time a thread, process or
// cgroup is seen: a thread or child process that inherited a value this backend set (nice and
// affinity are inherited at clone) gets its creator's original. Every original is in the journal
// (journal.hpp) before the first change; a change whose original could not be journaled is not
// made.
//
// Restoring: forget(pid) puts the process's originals back when it is still the same process
// (start time), also on threads born since the last tick (to the process's originals, where they
// carry a value this backend set); a cgroup goes back to its original weight as soon as it stops
// holding only its tenant's processes. shutdown() does all of it and removes the journal. create()
// first replays a journal left by a dead daemon (restore.hpp); a journal whose daemon still runs
// is an error (two daemons would fight over the same values).
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
#include <utility>
#include <vector>

#include "common/result.hpp"
#include "enforce/backend.hpp"
#include "enforce/userspace/journal.hpp"
#include "enforce/userspace/restore.hpp"
#include "sys/cgroup.hpp"

namespace zernel::enforce::userspace {

struct UserspaceOptions {
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
  // The cpu cgroup hierarchy; nullopt: detected from PROC_ROOT/self/mountinfo.
  std::optional<sys::CpuCgroupLayout> cgroup;
  bool use_cgroups = true;  // false: tenant weights always by nice
  std::string journal_path = kDefaultJournalPath;
  // Refuse to start without root or CAP_SYS_NICE (tests of the refusal turn the check on with
  // a fake status file: PROC_ROOT/self/status).
  bool check_privileges = true;
};

struct UserspaceStats {
  std::uint64_t nice_writes = 0;
  std::uint64_t affinity_writes = 0;
  std::uint64_t weight_writes = 0;    // cgroup cpu.weight / cpu.shares, restores included
  std::uint64_t journal_writes = 0;
  std::uint64_t write_errors = 0;
  std::uint64_t unlisted_restored = 0;  // threads born between ticks restored at forget/shutdown
  // From the journal of a dead daemon at create().
  std::uint64_t recovered_threads = 0;
  std::uint64_t recovered_processes = 0;
  std::uint64_t recovery_skipped = 0;  // exited or pid reused
};

// How a tracked process's tenant weight is carried out (status, logs).
enum class TenantShare : std::uint8_t {
  none,    // no tenant
  cgroup,  // its own cgroup's cpu.weight / cpu.shares
  nice,    // a shift of its threads' nice
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
  [[nodiscard]] const std::optional<sys::CpuCgroupLayout>& cgroup_layout() const { return layout_; }
  // The CPUs of the NUMA node holding `cpu` (empty when unknown).
  [[nodiscard]] std::vector<std::uint32_t> node_cpus_of(std::uint32_t cpu) const;
  // How the tenant weight of `pid` is carried out now, and in words ("cpu.weight 150 on cgroup
  // /job1", "nice shift -2: its cgroup / is the root cgroup"); none for an unknown pid.
  [[nodiscard]] TenantShare tenant_share(std::uint32_t pid) const;
  [[nodiscard]] std::string tenant_share_text(std::uint32_t pid) const;
  [[nodiscard]] std::string tenant_share_note(std::uint32_t pid) const override {
    return tenant_share_text(pid);
  }

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
    // What this process's threads are set to now (for threads created between ticks).
    std::optional<std::int32_t> cur_nice;
    std::optional<std::vector<std::uint32_t>> cur_cpus;
    // The affinity its threads get, as the journal has it (a thread born after the last tick
    // carries it; the replay recognises it by that).
    std::vector<std::uint32_t> journaled_applied;
    // This tick's decision.
    std::int32_t priority = 0;
    std::uint16_t tenant = 0xFFFF;
    std::uint32_t tenant_weight = 100;
    std::vector<std::uint32_t> want_cpus;  // empty: the original
    // This tick's cgroup (cpu hierarchy path) and how its tenant weight is carried.
    std::optional<std::string> cgroup;
    TenantShare share = TenantShare::none;
    std::string share_text;
    bool error_logged = false;
  };
  // A cgroup whose weight file this backend writes, by directory.
  struct GroupState {
    std::string path;  // hierarchy path, for the log
    std::uint64_t inode = 0;
    std::uint64_t original = 0;
    std::optional<std::uint64_t> written;  // what is in the file because of us
    std::uint64_t want = 0;
    std::vector<std::uint64_t> journaled;  // the WRITTEN values the journal has
    bool wanted = false;                   // carries a tenant this tick
    // The WRITTEN values the journal must have: want (when wanted) and what the file holds.
    [[nodiscard]] std::vector<std::uint64_t> values() const;
  };

  explicit UserspaceBackend(UserspaceOptions opts);
  Result<void> recover();
  void scan_threads(std::uint32_t pid, ProcState& p, const ProcState* parent, bool& dirty);
  void plan_tenant_shares(std::span<const policy::Decision> decisions, bool& dirty);
  // Whether a tenant process's cgroup can carry its tenant's weight: by (cgroup path, tenant),
  // the group's directory and, when it cannot, why not.
  struct GroupVerdict {
    std::optional<std::string> why_not;
    std::string dir;
  };
  using GroupVerdicts = std::map<std::pair<std::string, std::uint16_t>, GroupVerdict>;
  // Reads each tenant process's cgroup into its ProcState and judges each (group, tenant) once.
  GroupVerdicts judge_tenant_groups(
      std::span<const policy::Decision> decisions,
      const std::unordered_map<std::uint32_t, std::uint16_t>& tenant_of_tracked);
  // The group at `dir` carries d's tenant weight this tick (taken on, or taken on again when
  // made again since); returns the share's description.
  std::string carry_tenant_on_group(const policy::Decision& d, const std::string& cgroup,
                                    const std::string& dir, bool& dirty);
  // p.share and p.share_text for this tick, logged when they change.
  void assign_tenant_share(const policy::Decision& d, ProcState& p, const GroupVerdicts& verdicts,
                           bool& dirty);
  void write_groups();
  bool restore_group(const std::string& dir, const GroupState& g);
  void enforce(std::uint32_t pid, ProcState& p);
  void restore(std::uint32_t pid, ProcState& p);
  void write_failed(std::uint32_t pid, ProcState& p, const std::string& what, int err);
  Result<void> save_journal();

  UserspaceOptions opts_;
  std::optional<sys::CpuCgroupLayout> layout_;
  std::string cgroup_error_;  // why tenant weights never go to cgroups (empty: they may)
  std::vector<std::vector<std::uint32_t>> nodes_;  // CPUs per NUMA node
  std::unordered_map<std::uint32_t, ProcState> procs_;
  std::map<std::string, GroupState> groups_;
  // Groups this backend yields to their owner for the rest of its run (their weight was changed
  // by someone else, or could not be written), by directory: inode and why.
  std::map<std::string, std::pair<std::uint64_t, std::string>> refused_;
  UserspaceStats stats_;
  std::uint64_t self_start_ = 0;
  bool journal_dirty_ = false;
  bool journal_error_logged_ = false;
  bool active_ = false;  // create() succeeded
  bool shut_down_ = false;
};

}  // namespace zernel::enforce::userspace
