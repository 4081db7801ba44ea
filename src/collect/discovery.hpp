#pragma once
// Process discovery: which processes of the machine the scheduler tracks, and in which role.
//
// Design §5 defines an ML process as one with an NVIDIA device open or listed by NVML as a
// compute process, plus, by role, its descendants without a GPU context of their own (PyTorch
// DataLoader workers are separate processes), plus what the tenants' match rules add. A scan
// turns that into roles:
//
//   gpu_owner          has its own GPU context: NVML lists it, or it has an NVIDIA device open
//                      that it did not inherit. Its GPU: NVML's index; else N of the /dev/nvidiaN
//                      it has open when that is a single N (CUDA opens every visible GPU, so
//                      several Ns say nothing); else unknown. /dev/nvidiactl, /dev/nvidia-uvm,
//                      /dev/nvidia-modeset and /dev/nvidia-caps/* make it ML with an unknown GPU.
//   dataloader_worker  a descendant of a gpu_owner with no GPU context of its own. It is bound to
//                      the GPU of its nearest gpu_owner ancestor, so it runs near that GPU.
//   matched            neither, but a tenant's match rules select it.
//
// Inherited descriptors: a forked child (the default DataLoader start method) inherits its
// parent's /dev/nvidia* descriptors without having a context. A process whose NVIDIA
// descriptors are all also open in its parent, under the same numbers and targets, inherited
// them and is not a gpu_owner (unless NVML lists it). A child that opened the devices itself
// has descriptors its parent does not have.
//
// Every tracked process gets the first tenant (in the order given, i.e. file order) whose rules
// it matches, by config::TenantMatch's semantics: every non-empty list must have a matching
// entry; comm and cmdline are fnmatch(3) globs with flags 0 (cmdline with NULs as spaces); cgroup
// entries are prefixes of the v2 path by whole components; uid is the real uid. A tenant with
// every list empty matches nothing (explicit assignment only).
//
// Discovery keeps a record of the node's user processes (parent, start time, comm, NVIDIA
// descriptors, tenant match) and resolves roles from its parent links in memory. A scan is one
// pass over PROC that refreshes the record: for every pid it reads stat, walks fd/ (every process
// must be checked for /dev/nvidia*) and reads status, cgroup or cmdline only when some tenant's
// rules need them. With the kernel's process events (apply/update below) the record follows
// forks, execs, renames and exits instead, and only the processes they name are read. Skipped:
// kernel threads (PF_KTHREAD in stat's flags, before their fd/ is looked at), zombies (state Z with
// no live thread, and X), and anything under /proc/PID/task (threads are never processes; the top
// level of /proc lists thread-group leaders only). A process that exits during the scan is left out
// without an error.
//
// Identity: (pid, starttime). The scan remembers what it returned last time and marks each
// process added, unchanged or replaced (same pid, another starttime: the pid was reused, the
// daemon must drop the old task and register the new one), and lists the pids it no longer
// tracks.
//
// Cap: when more processes qualify than max_tracked_tasks, gpu_owners are kept first, then
// dataloader_workers, then matched processes, lowest pids first within a role; `dropped` says how
// many were left out (the daemon warns once).
//
// Races accepted: a process started after /proc was listed is seen by the next scan (with
// events: by its fork). A worker
// whose gpu_owner ancestor exits is reparented and is then no longer a worker (correct: nothing
// is waiting for its data any more). A pid reused between two scans is caught by starttime. A
// process whose main thread exited while others run (a zombie leader) shows an empty fd/, so only
// NVML can name it a gpu_owner.
//
// Cost: a scan costs about 25 us per process on the development VM (105 processes: 2.4 ms), nearly
// all of it the kernel's. Following events costs nothing per process that does nothing: a fork
// copies the parent's record (its child inherited all of it), an exit erases one, and only an
// exec or a rename is read (stat, fd/, the rules) at the next update.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collect/proc_events.hpp"
#include "common/result.hpp"
#include "config/config.hpp"
#include "sys/procfs.hpp"

namespace zernel::collect {

enum class ProcessRole : std::uint8_t { gpu_owner, dataloader_worker, matched };
// "gpu_owner", "dataloader_worker", "matched".
std::string_view role_name(ProcessRole role);

enum class ProcessChange : std::uint8_t {
  added,      // not tracked by the previous scan
  unchanged,  // same pid and starttime as before
  replaced,   // same pid, different starttime: a new process reusing the pid
};

// NVML's compute processes: pid -> GPU index (the driver's numbering).
using GpuProcessMap = std::unordered_map<std::uint32_t, std::uint32_t>;

struct DiscoveredProcess {
  std::uint32_t pid = 0;
  std::uint32_t ppid = 0;
  std::string comm;
  std::uint64_t starttime_ticks = 0;  // /proc/PID/stat field 22: with pid, the process identity
  bool is_ml = true;                  // every role is ML in design §5's sense
  std::optional<std::uint32_t> gpu;   // the GPU it is bound to, when known
  ProcessRole role = ProcessRole::matched;
  std::optional<std::uint32_t> tenant;  // index into DiscoveryInput::tenants of the first match
  ProcessChange change = ProcessChange::added;
};

struct DiscoveryInput {
  // NVML compute processes; nullptr when NVML is not available.
  const GpuProcessMap* nvml_processes = nullptr;
  // The tenants' match rules in file order (config.tenants).
  std::span<const config::TenantConfig> tenants;
  std::uint32_t max_tracked_tasks = 65'536;
};

struct DiscoveryResult {
  std::vector<DiscoveredProcess> processes;  // ascending pid
  // Pids the previous scan returned that this one does not (exited, no longer qualifying, or
  // dropped by the cap). A replaced pid is not listed here: it is in `processes`.
  std::vector<std::uint32_t> removed;
  std::uint32_t dropped = 0;     // qualified but over max_tracked_tasks
  std::uint32_t scanned = 0;     // pid directories looked at
  std::uint32_t unreadable = 0;  // stat unreadable or garbled for a reason other than exit
  std::uint32_t fd_denied = 0;   // fd/ directories not readable (EACCES: not root)
};

class ProcessDiscovery {
 public:
  explicit ProcessDiscovery(std::string proc_root = "/proc");

  // One scan of all of /proc. Fails only when the proc root itself cannot be listed.
  Result<DiscoveryResult> scan(const DiscoveryInput& input);

  // Following processes by their events instead (collect/proc_events.hpp), after a scan: apply()
  // records what the events say (a fork adds the child with its parent's attributes, which it
  // inherited; an exec, a new comm or uid marks the process to be read again; an exit removes
  // it), and update() makes a result from that record, reading only the processes marked, those
  // whose fd/ is due to be looked at again (1 s and 5 s after an exec or a fork found nothing),
  // and the stat of a child that is now tracked (its start time). `pending(now)` says whether
  // update() has anything to do; the result of an update() with nothing pending and the same
  // input is the previous one, all unchanged. The caller scans again now and then (a safety net
  // for events lost or things without events: a process moved to another cgroup, a command line
  // rewritten, a device opened later by a process NVML does not list).
  void apply(std::span<const ProcEvent> events, std::uint64_t now_ns);
  Result<DiscoveryResult> update(const DiscoveryInput& input, std::uint64_t now_ns);
  [[nodiscard]] bool pending(std::uint64_t now_ns) const;

  // How many scans reuse what fd/ and the match rules gave for a process (while its pid and start
  // time stay the same): 10 by default (5 s at the 500 ms poll of a daemon without process
  // events); 1 reads them at every scan (a daemon that scans every 30 s as a safety net).
  void set_rescan_every(std::uint32_t scans) { rescan_every_ = scans == 0 ? 1 : scans; }

  // Forgets everything: every process of the next scan is `added`.
  void reset() {
    previous_.clear();
    table_.clear();
  }

  // Processes the record holds (after a scan: every user process of the node).
  [[nodiscard]] std::size_t known() const { return table_.size(); }

 private:
  struct NvFd {
    std::uint32_t fd = 0;
    std::uint32_t target_hash = 0;
  };
  // One process as discovery knows it.
  struct Entry {
    std::uint32_t ppid = 0;
    std::uint64_t starttime = 0;  // 0: not read yet (a child known from its fork)
    std::string comm;
    std::vector<NvFd> nv_fds;
    std::optional<std::uint32_t> fd_gpu;  // the single /dev/nvidiaN open, if exactly one N
    std::optional<std::uint32_t> tenant;
    bool fd_denied = false;
    bool stale = false;            // exec'd, renamed or changed uid since it was read
    std::uint64_t attrs_scan = 0;  // scan_count_ when fd/ and the rules were read (0: never)
    std::uint64_t seen = 0;        // scan_count_ of the last scan that listed it
    std::uint64_t recheck_ns = 0;  // events: when its fd/ is due again (0: at scans only)
    std::uint8_t rechecks = 0;     // fd/ looks after an exec or a fork, of kRecheckDelaysNs
  };
  // Reads the process's stat (and, when `attrs` or it changed, fd/ and the rules) into `e`.
  // False when it is gone, a kernel thread or dead (the caller removes it).
  bool read_entry(int proc_fd, std::uint32_t pid, Entry& e, bool attrs, const DiscoveryInput& input,
                  DiscoveryResult& result);
  void read_attrs(int pid_dirfd, Entry& e, const DiscoveryInput& input, DiscoveryResult& result);
  // Roles, the cap and the changes against the previous result, from the record.
  void resolve(const DiscoveryInput& input, int proc_fd, DiscoveryResult& result);
  // The steps of resolve, on the scratch vectors below:
  // sorted_ from the record, parent_ from each ppid; own_, owner_above_, visit_ reset.
  void index_parent_links();
  // own_: a GPU context of its own (NVML lists it, or nvidia fds not inherited from its parent).
  void mark_gpu_context_owners(const DiscoveryInput& input);
  // owner_above_: the nearest gpu_owner ancestor of each process.
  void find_owner_ancestors();
  // order_: owners, then workers, then matched, cut to the cap (result.dropped), in pid order.
  void select_by_role(std::size_t max_tracked_tasks, DiscoveryResult& result);
  // An owner's GPU: NVML's index, else the single /dev/nvidiaN it has open.
  [[nodiscard]] std::optional<std::uint32_t> owner_gpu(const DiscoveryInput& input,
                                                       std::size_t idx) const;
  // result.processes from order_ (reading the stat of a child known from its fork only).
  void emit_selected_processes(const DiscoveryInput& input, int proc_fd, DiscoveryResult& result);
  // Each process's change, and result.removed, against previous_; then previous_ = this result.
  void mark_changes_since_previous(DiscoveryResult& result);
  [[nodiscard]] bool inherited_nvidia_fds(const Entry& child, const Entry& parent) const;
  void rules_changed(const DiscoveryInput& input);

  std::string proc_root_;
  std::uint32_t rescan_every_ = 10;
  std::unordered_map<std::uint32_t, Entry> table_;
  std::uint64_t scan_count_ = 0;
  std::vector<config::TenantConfig> last_rules_;  // the rules the matches were made with
  bool dirty_ = false;                            // events applied since the last result
  std::vector<std::pair<std::uint32_t, std::uint64_t>> previous_;  // (pid, starttime), by pid
  // Scratch kept between scans so a steady-state scan does not allocate.
  std::vector<std::pair<std::uint32_t, Entry*>> sorted_;  // the record by pid
  std::vector<std::int32_t> parent_;                      // index of the parent, -1 when not known
  std::vector<std::int32_t> owner_above_;  // index of the nearest gpu_owner ancestor, -1 if none
  std::vector<std::uint8_t> own_;          // has a GPU context of its own
  std::vector<std::uint8_t> visit_;        // ancestry walk state
  std::vector<std::int32_t> walk_;         // the climb in progress
  std::vector<std::uint32_t> order_;       // selection order
  std::string buf_;
  std::string link_;
  std::string cmdline_;
  std::string cgroup_;
};

// The first tenant whose rules match, given the process's attributes (for tests and for
// `tenant` tooling). uid and cgroup_path may be unknown; a list that needs an unknown value does
// not match.
std::optional<std::uint32_t> match_tenant(std::span<const config::TenantConfig> tenants,
                                          std::string_view comm, std::string_view cmdline,
                                          std::optional<std::string_view> cgroup_path,
                                          std::optional<std::uint32_t> ruid);

}  // namespace zernel::collect
