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
// The scan is one pass over PROC: for every pid it reads stat, walks fd/ (every process must be
// checked for /dev/nvidia*) and reads status, cgroup or cmdline only when some tenant's rules
// need them; then it resolves roles from the parent links in memory. Skipped: kernel threads
// (PF_KTHREAD in stat's flags, before their fd/ is looked at), zombies (state Z with no live
// thread, and X), and anything under /proc/PID/task (threads are never processes; the top level of
// /proc lists thread-group leaders only). A process that exits during the scan is left out without
// an error.
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
// Races accepted: a process started after /proc was listed is seen by the next scan. A worker
// whose gpu_owner ancestor exits is reparented and is then no longer a worker (correct: nothing
// is waiting for its data any more). A pid reused between two scans is caught by starttime. A
// process whose main thread exited while others run (a zombie leader) shows an empty fd/, so only
// NVML can name it a gpu_owner.
//
// Cost: about 25 us per process on the development VM (105 processes: 2.4 ms), nearly all of it
// the kernel's; the steady state allocates only the result (the scratch vectors are kept).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

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

  // One scan. Fails only when the proc root itself cannot be listed.
  Result<DiscoveryResult> scan(const DiscoveryInput& input);

  // Forgets the previous scan: every process of the next one is `added`.
  void reset() {
    previous_.clear();
    cache_.clear();
  }

 private:
  struct Candidate {
    std::uint32_t pid = 0;
    std::uint32_t ppid = 0;
    std::uint64_t starttime = 0;
    std::string comm;
    std::uint32_t nv_begin = 0;  // range in nv_fds_
    std::uint32_t nv_count = 0;
    std::optional<std::uint32_t> fd_gpu;  // the single /dev/nvidiaN open, if exactly one N
    std::optional<std::uint32_t> tenant;
  };
  struct NvFd {
    std::uint32_t fd = 0;
    std::uint32_t target_hash = 0;
  };
  class MatchContext;

  void scan_process(int proc_fd, std::uint32_t pid, const DiscoveryInput& input,
                    DiscoveryResult& result);
  [[nodiscard]] bool inherited_nvidia_fds(const Candidate& child, const Candidate& parent) const;
  [[nodiscard]] const Candidate* find(std::uint32_t pid) const;

  std::string proc_root_;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> previous_;  // (pid, starttime), by pid
  // Scratch kept between scans so a steady-state scan does not allocate.
  std::vector<Candidate> candidates_;
  std::vector<NvFd> nv_fds_;
  std::vector<std::int32_t> parent_;       // index of the parent candidate, -1 when not tracked
  std::vector<std::int32_t> owner_above_;  // index of the nearest gpu_owner ancestor, -1 if none
  std::vector<std::uint8_t> own_;          // has a GPU context of its own
  std::vector<std::uint8_t> visit_;        // ancestry walk state
  std::vector<std::int32_t> walk_;         // the climb in progress
  std::vector<std::uint32_t> order_;       // selection order
  std::string buf_;
  std::string link_;
  std::string cmdline_;
  std::string cgroup_;

  // What the expensive part of a scan (the fd/ walk and the match rules) found for a process, by
  // pid, reused for kRescanEvery scans while (pid, starttime) stays the same. A GPU process that
  // opens its device later is still found at once when NVML lists it; through fd/ alone, within
  // kRescanEvery scans (5 s at the default 500 ms poll).
  static constexpr std::uint32_t kRescanEvery = 10;
  struct Cached {
    std::uint64_t starttime = 0;
    std::uint64_t scan = 0;  // scan_count_ when fd/ and the rules were last read
    std::uint64_t seen = 0;  // scan_count_ when the process was last listed
    std::vector<NvFd> nv_fds;
    std::optional<std::uint32_t> fd_gpu;
    std::optional<std::uint32_t> tenant;
    bool fd_denied = false;
  };
  std::unordered_map<std::uint32_t, Cached> cache_;
  std::uint64_t scan_count_ = 0;
  std::vector<config::TenantConfig> last_rules_;  // the rules the cached matches were made with
};

// The first tenant whose rules match, given the process's attributes (for tests and for
// `tenant` tooling). uid and cgroup_path may be unknown; a list that needs an unknown value does
// not match.
std::optional<std::uint32_t> match_tenant(std::span<const config::TenantConfig> tenants,
                                          std::string_view comm, std::string_view cmdline,
                                          std::optional<std::string_view> cgroup_path,
                                          std::optional<std::uint32_t> ruid);

}  // namespace zernel::collect
