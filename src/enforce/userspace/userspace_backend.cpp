#include "enforce/userspace/userspace_backend.hpp"

#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "collect/procfs.hpp"
#include "collect/topology_reader.hpp"
#include "enforce/settings_journal.hpp"
#include "policy/weight.hpp"

namespace zernel::enforce::userspace {
namespace {

namespace fs = std::filesystem;

constexpr int kCapSysNice = 23;
constexpr std::size_t kMaxCpus = 8192;

// A thread or process that exited: ESRCH from the syscalls, ENOENT from /proc.
bool gone(int err) { return err == ESRCH || err == ENOENT; }
// Writing an exited pid to cgroup.procs gives ESRCH; ENOENT there means the group is missing.
bool pid_gone(const Error& e) { return e.code() == ESRCH; }

// RAII for a dynamically sized cpu_set_t.
class CpuSet {
 public:
  CpuSet() : set_(CPU_ALLOC(kMaxCpus)), size_(CPU_ALLOC_SIZE(kMaxCpus)) { CPU_ZERO_S(size_, set_); }
  ~CpuSet() { CPU_FREE(set_); }
  CpuSet(const CpuSet&) = delete;
  CpuSet& operator=(const CpuSet&) = delete;
  cpu_set_t* get() { return set_; }
  [[nodiscard]] std::size_t size() const { return size_; }

 private:
  cpu_set_t* set_;
  std::size_t size_;
};

// 0 or an errno value.
int get_nice(std::uint32_t tid, std::int32_t& out) {
  errno = 0;
  const int v = ::getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
  if (v == -1 && errno != 0) return errno;
  out = v;
  return 0;
}

int set_nice(std::uint32_t tid, std::int32_t nice) {
  return ::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), nice) == 0 ? 0 : errno;
}

int get_cpus(std::uint32_t tid, std::vector<std::uint32_t>& out) {
  CpuSet s;
  if (::sched_getaffinity(static_cast<pid_t>(tid), s.size(), s.get()) != 0) return errno;
  out.clear();
  for (std::size_t c = 0; c < kMaxCpus; ++c) {
    if (CPU_ISSET_S(c, s.size(), s.get())) out.push_back(static_cast<std::uint32_t>(c));
  }
  return 0;
}

int set_cpus(std::uint32_t tid, const std::vector<std::uint32_t>& cpus) {
  CpuSet s;
  for (const std::uint32_t c : cpus) {
    if (c < kMaxCpus) CPU_SET_S(c, s.size(), s.get());
  }
  return ::sched_setaffinity(static_cast<pid_t>(tid), s.size(), s.get()) == 0 ? 0 : errno;
}

std::vector<std::uint32_t> intersect(const std::vector<std::uint32_t>& a,
                                     const std::vector<std::uint32_t>& b) {
  std::vector<std::uint32_t> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// Whether PROC_ROOT/self/status shows CAP_SYS_NICE in the effective set.
Result<bool> has_cap_sys_nice(const std::string& proc_root) {
  const std::string path = proc_root + "/self/status";
  std::ifstream in(path);
  if (!in) return errno_error("reading " + path, errno != 0 ? errno : ENOENT);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    std::uint64_t caps = 0;
    std::istringstream ss(line.substr(7));
    ss >> std::hex >> caps;
    if (!ss) return Error(EINVAL, path + ": malformed CapEff line");
    return ((caps >> kCapSysNice) & 1U) != 0;
  }
  return Error(EINVAL, path + ": no CapEff line");
}

// The CPUs of each NUMA node, from the topology reader the daemon uses (sysfs under sys_root;
// one node of every online CPU when there is no node directory). Empty when no CPU is found.
std::vector<std::vector<std::uint32_t>> read_nodes(const std::string& sys_root,
                                                   const std::string& proc_root) {
  std::vector<std::vector<std::uint32_t>> out;
  auto info = collect::read_topology(sys_root, proc_root);
  if (!info) return out;
  for (const policy::NumaNode& n : info->topology.nodes()) out.push_back(n.cpus);
  return out;
}

// Same thread as when the original was read: guards against tid reuse (processes:
// process_running, enforce/settings_journal.hpp).
bool same_thread(const std::string& proc_root, std::uint32_t pid, std::uint32_t tid,
                 std::uint64_t start) {
  auto st = collect::read_thread_stat(proc_root, pid, tid);
  return st && st->starttime_ticks == start;
}

}  // namespace

UserspaceBackend::UserspaceBackend(UserspaceOptions opts) : opts_(std::move(opts)) {}

UserspaceBackend::~UserspaceBackend() { (void)shutdown(); }

Result<std::unique_ptr<UserspaceBackend>> UserspaceBackend::create(UserspaceOptions opts) {
  if (opts.check_privileges) {
    auto cap = has_cap_sys_nice(opts.proc_root);
    if (!cap) return cap.error().context("userspace backend: checking privileges");
    if (!*cap) {
      return Error(EPERM,
                   "the userspace backend needs root with CAP_SYS_NICE (to raise "
                   "priorities, set affinity and move processes between cgroups); "
                   "running as uid " +
                       std::to_string(::geteuid()) + " without it (try --backend observe)");
    }
  }
  std::unique_ptr<UserspaceBackend> b(new UserspaceBackend(std::move(opts)));
  const UserspaceOptions& o = b->opts_;
  if (o.cgroup_name.empty() || o.cgroup_name.find('/') != std::string::npos ||
      o.cgroup_name == "." || o.cgroup_name == "..") {
    return Error(EINVAL, "userspace backend: bad cgroup subtree name \"" + o.cgroup_name + "\"");
  }
  b->self_start_ = own_start_time(o.proc_root);
  b->nodes_ = read_nodes(o.sys_root, o.proc_root);
  if (o.use_cgroups) {
    auto layout = o.cgroup ? Result<CpuCgroupLayout>(*o.cgroup)
                           : detect_cpu_cgroup_from(o.proc_root + "/self/mountinfo");
    if (layout) {
      b->tree_.emplace(std::move(*layout), o.cgroup_name);
      spdlog::info("userspace backend: tenant CPU weights in {} (cgroup {}, {})",
                   b->tree_->subtree_dir(),
                   b->tree_->layout().version == CgroupVersion::v2 ? "v2" : "v1",
                   cgroup_cpu_file(b->tree_->layout().version));
    } else {
      b->cgroup_error_ = layout.error().message();
      spdlog::warn("userspace backend: tenant CPU weights are off: {}", b->cgroup_error_);
    }
  } else {
    b->cgroup_error_ = "cgroups are turned off";
  }
  if (auto r = b->recover(); !r) return r.error();
  b->active_ = true;  // from here on shutdown() restores, cleans up and removes the journal
  return b;
}

// ---- crash recovery ----

Result<void> UserspaceBackend::recover() {
  const std::string& path = opts_.journal_path;
  auto read = read_journal(path);
  if (!read && read.error().code() != EINVAL) {
    return read.error().context("userspace backend: cannot tell what a previous run left");
  }
  if (!read) {
    const std::string aside = path + ".corrupt";
    spdlog::error(
        "userspace backend: cannot use the journal of a previous run ({}); moved it to "
        "{}; values it listed are NOT restored",
        read.error().message(), aside);
    if (::rename(path.c_str(), aside.c_str()) != 0) {
      return errno_error("userspace backend: moving the unreadable journal " + path + " aside");
    }
  } else if (read->has_value()) {
    const Journal& j = **read;
    if (process_running(opts_.proc_root, j.owner_pid, j.owner_start)) {
      return Error(EBUSY, "userspace backend: " + path +
                              " belongs to a running zernel-scheduler "
                              "(pid " +
                              std::to_string(j.owner_pid) +
                              "); stop it first (two daemons would fight over the same values)");
    }
    for (const ProcessOriginal& p : j.processes) {
      if (!process_running(opts_.proc_root, p.pid, p.start)) {
        ++stats_.recovery_skipped;
        continue;
      }
      ++stats_.recovered_processes;
      for (const ThreadOriginal& t : p.threads) {
        if (!same_thread(opts_.proc_root, p.pid, t.tid, t.start)) continue;
        ++stats_.recovered_threads;
        std::int32_t cur = 0;
        if (get_nice(t.tid, cur) == 0 && cur != t.nice) {
          if (const int e = set_nice(t.tid, t.nice); e != 0 && !gone(e)) {
            ++stats_.write_errors;
            spdlog::warn("userspace backend: restoring nice {} of thread {}: {}", t.nice, t.tid,
                         std::strerror(e));
          }
        }
        std::vector<std::uint32_t> cpus;
        if (!t.cpus.empty() && get_cpus(t.tid, cpus) == 0 && cpus != t.cpus) {
          if (const int e = set_cpus(t.tid, t.cpus); e != 0 && !gone(e)) {
            ++stats_.write_errors;
            spdlog::warn("userspace backend: restoring the affinity of thread {}: {}", t.tid,
                         std::strerror(e));
          }
        }
      }
      if (p.cgroup && j.cgroup) {
        auto dir = cgroup_dir(j.cgroup->layout, *p.cgroup);
        auto r = dir ? CgroupTree::move(*dir, p.pid)
                     : Result<void>(Error(ENOENT, "not under " + j.cgroup->layout.mount_point));
        if (!r && !pid_gone(r.error())) {
          ++stats_.write_errors;
          spdlog::warn("userspace backend: moving pid {} back to cgroup {}: {}", p.pid, *p.cgroup,
                       r.error().message());
        }
      }
    }
    if (j.cgroup) {
      const CgroupTree old(j.cgroup->layout, j.cgroup->name);
      empty_tenant_groups(old, old.layout().mount_point);
    }
    spdlog::info(
        "userspace backend: restored from the journal of zernel-scheduler pid {}, which "
        "is no longer running: {} thread(s) of {} process(es); {} process(es) skipped "
        "(exited or pid reused)",
        j.owner_pid, stats_.recovered_threads, stats_.recovered_processes, stats_.recovery_skipped);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return errno_error("userspace backend: removing " + path);
    }
  }
  // Groups of our own subtree left by a run whose journal is gone or unreadable.
  if (tree_) empty_tenant_groups(*tree_, tree_->layout().mount_point);
  return Ok{};
}

// Moves every member of the tree's tenant groups to `fallback_dir` (or, for groups this backend
// knows, to the original group of its members), then removes the groups and the subtree.
void UserspaceBackend::empty_tenant_groups(const CgroupTree& tree,
                                           const std::string& fallback_dir) {
  std::error_code ec;
  if (!fs::exists(tree.subtree_dir(), ec)) return;
  for (const std::uint16_t slot : tree.tenant_slots()) {
    const std::string dir = tree.tenant_dir(slot);
    std::string home = home_dir_for_slot(slot);
    if (home.empty()) home = fallback_dir;
    if (auto members = read_cgroup_procs(dir)) {
      for (const std::uint32_t pid : *members) {
        if (auto r = CgroupTree::move(home, pid); !r && !pid_gone(r.error())) {
          ++stats_.write_errors;
          spdlog::warn("userspace backend: moving pid {} out of {}: {}", pid, dir,
                       r.error().message());
        }
      }
    }
    if (auto r = tree.remove_tenant(slot); !r) {
      spdlog::warn("userspace backend: {}", r.error().message());
    }
  }
  if (auto r = tree.remove_subtree(); !r)
    spdlog::warn("userspace backend: {}", r.error().message());
}

// Where an unknown member of a tenant group goes back to: the original group of a process this
// backend moved into that group (children forked there share their parent's original), else "".
std::string UserspaceBackend::home_dir_for_slot(std::uint16_t slot) const {
  if (!tree_) return {};
  for (const auto& [pid, p] : procs_) {
    if (p.group == slot && p.orig_cgroup) {
      if (auto dir = cgroup_dir(tree_->layout(), *p.orig_cgroup)) return *dir;
    }
  }
  return {};
}

// ---- apply ----

std::vector<std::uint32_t> UserspaceBackend::node_cpus_of(std::uint32_t cpu) const {
  for (const auto& n : nodes_) {
    if (std::binary_search(n.begin(), n.end(), cpu)) return n;
  }
  return {};
}

void UserspaceBackend::scan_threads(std::uint32_t pid, ProcState& p, const ProcState* parent,
                                    bool& dirty) {
  auto tids = collect::read_thread_ids(opts_.proc_root, pid);
  if (!tids) return;  // exited; forget() follows
  for (auto& [tid, t] : p.threads) t.seen = false;
  const bool first_scan = p.threads.empty() && !p.have_orig;
  for (const std::uint32_t tid : *tids) {
    if (auto it = p.threads.find(tid); it != p.threads.end()) {
      it->second.seen = true;
      continue;
    }
    auto st = collect::read_thread_stat(opts_.proc_root, pid, tid);
    if (!st) continue;
    ThreadState t;
    t.start = st->starttime_ticks;
    if (get_nice(tid, t.orig_nice) != 0 || get_cpus(tid, t.orig_cpus) != 0) continue;
    // A value this backend set, inherited at clone: the creator's original is the original.
    const ProcState* from = first_scan ? parent : &p;
    if (from != nullptr && from->have_orig) {
      if (from->cur_nice && t.orig_nice == *from->cur_nice) t.orig_nice = from->orig_nice;
      if (from->cur_cpus && t.orig_cpus == *from->cur_cpus) t.orig_cpus = from->orig_cpus;
    }
    t.seen = true;
    if (!p.have_orig || tid == pid) {
      p.orig_nice = t.orig_nice;
      p.orig_cpus = t.orig_cpus;
      p.have_orig = true;
    }
    p.threads.emplace(tid, std::move(t));
    dirty = true;
  }
  std::erase_if(p.threads, [](const auto& kv) { return !kv.second.seen; });
}

void UserspaceBackend::record_cgroup(std::uint32_t pid, ProcState& p, const ProcState* parent,
                                     bool& dirty) {
  if (p.orig_cgroup || !tree_) return;
  std::string text;
  const std::string path = opts_.proc_root + "/" + std::to_string(pid) + "/cgroup";
  std::ifstream in(path);
  if (!in) return;
  std::stringstream ss;
  ss << in.rdbuf();
  auto cur = cpu_cgroup_path(tree_->layout().version, ss.str());
  if (!cur) return;
  // Forked inside one of our groups: it belongs where its parent came from.
  const std::string subtree =
      (tree_->layout().mount_root == "/" ? "" : tree_->layout().mount_root) + "/" + tree_->name();
  if (collect::cgroup_path_has_prefix(*cur, subtree)) {
    *cur = parent != nullptr && parent->orig_cgroup ? *parent->orig_cgroup
                                                    : tree_->layout().mount_root;
  }
  p.orig_cgroup = std::move(*cur);
  p.cgroup_journaled = false;
  dirty = true;
}

Result<void> UserspaceBackend::save_journal() {
  Journal j;
  j.owner_pid = static_cast<std::uint32_t>(::getpid());
  j.owner_start = self_start_;
  if (tree_) j.cgroup = JournalCgroup{tree_->layout(), tree_->name()};
  j.processes.reserve(procs_.size());
  for (const auto& [pid, p] : procs_) {
    ProcessOriginal po;
    po.pid = pid;
    po.start = p.start;
    po.cgroup = p.orig_cgroup;
    for (const auto& [tid, t] : p.threads) {
      po.threads.push_back(ThreadOriginal{tid, t.start, t.orig_nice, t.orig_cpus});
    }
    j.processes.push_back(std::move(po));
  }
  std::sort(j.processes.begin(), j.processes.end(),
            [](const ProcessOriginal& a, const ProcessOriginal& b) { return a.pid < b.pid; });
  if (auto r = write_journal(opts_.journal_path, j); !r) return r;
  ++stats_.journal_writes;
  for (auto& [pid, p] : procs_) {
    if (p.orig_cgroup) p.cgroup_journaled = true;
    for (auto& [tid, t] : p.threads) t.journaled = true;
  }
  journal_dirty_ = false;
  return Ok{};
}

void UserspaceBackend::write_failed(std::uint32_t pid, ProcState& p, const std::string& what,
                                    int err) {
  ++stats_.write_errors;
  if (p.error_logged) return;
  p.error_logged = true;
  spdlog::warn(
      "userspace backend: pid {}: {}: {} (further failures for this process are only "
      "counted)",
      pid, what, std::strerror(err));
}

Result<void> UserspaceBackend::apply(std::span<const policy::Decision> decisions) {
  if (shut_down_) return Ok{};
  bool dirty = journal_dirty_;
  std::vector<std::uint32_t> order;
  order.reserve(decisions.size());
  for (const policy::Decision& d : decisions) {
    auto it = procs_.find(d.pid);
    if (it == procs_.end()) {
      auto st = collect::read_stat(opts_.proc_root, d.pid);
      if (!st || st->is_dead() || st->is_kernel_thread()) continue;
      if (d.pid == static_cast<std::uint32_t>(::getpid())) continue;  // never ourselves
      ProcState p;
      p.start = st->starttime_ticks;
      p.ppid = st->ppid;
      it = procs_.emplace(d.pid, std::move(p)).first;
    }
    ProcState& p = it->second;
    p.want_nice = policy::nice_for_priority(d.priority);
    p.want_cpus.clear();
    // Only a task bound to a GPU is pinned: its preferred CPU lies in its GPU's node. Other
    // tasks get a preferred CPU too (the least loaded anywhere), which moves between nodes.
    if (const auto cpu = d.cpu(); cpu && d.gpu_id >= 0) p.want_cpus = node_cpus_of(*cpu);
    p.want_group.reset();
    if (d.tenant != policy::kNoTenant) {
      if (tree_) {
        p.want_group = d.tenant;
        p.want_weight = d.tenant_weight;
      } else if (!cgroup_error_logged_) {
        cgroup_error_logged_ = true;
        spdlog::warn(
            "userspace backend: tenant CPU weights are not enforced ({}); tenants' "
            "processes compete by nice only",
            cgroup_error_);
      }
    }
    const ProcState* parent = nullptr;
    if (auto par = procs_.find(p.ppid); par != procs_.end() && p.ppid != d.pid) {
      parent = &par->second;
    }
    scan_threads(d.pid, p, parent, dirty);
    if (p.want_group) record_cgroup(d.pid, p, parent, dirty);
    order.push_back(d.pid);
  }
  if (dirty) {
    journal_dirty_ = true;
    if (auto r = save_journal(); !r) {
      ++stats_.write_errors;
      if (!journal_error_logged_) {
        journal_error_logged_ = true;
        spdlog::error(
            "userspace backend: {}; nothing new is changed until the journal can be "
            "written (retried every tick)",
            r.error().message());
      }
    } else {
      journal_error_logged_ = false;
    }
  }
  for (const std::uint32_t pid : order) {
    if (auto it = procs_.find(pid); it != procs_.end()) enforce(pid, it->second);
  }
  return Ok{};
}

void UserspaceBackend::enforce(std::uint32_t pid, ProcState& p) {
  // cgroup: into the tenant's group, or back to where it came from.
  if (tree_ && p.want_group != p.group) {
    if (p.want_group) {
      const std::uint16_t slot = *p.want_group;
      if (p.cgroup_journaled) {
        auto r = tree_->ensure_tenant(slot);
        if (r && group_weights_.find(slot) == group_weights_.end()) {
          r = tree_->set_tenant_weight(slot, p.want_weight);
          if (r) {
            ++stats_.weight_writes;
            group_weights_[slot] = p.want_weight;
          }
        }
        if (r) r = CgroupTree::move(tree_->tenant_dir(slot), pid);
        if (r) {
          ++stats_.cgroup_moves;
          p.group = slot;
        } else if (pid_gone(r.error())) {
          return;
        } else {
          write_failed(
              pid, p,
              "moving it to tenant group " + tree_->tenant_dir(slot) + ": " + r.error().message(),
              r.error().code());
        }
      }
    } else if (p.orig_cgroup) {
      auto r = move_home(pid, p);
      if (r) {
        ++stats_.cgroup_moves;
        p.group.reset();
      } else if (pid_gone(r.error())) {
        return;
      } else {
        write_failed(pid, p, r.error().message(), r.error().code());
      }
    }
  }
  if (tree_ && p.group && p.want_group == p.group) {
    auto w = group_weights_.find(*p.group);
    if (w != group_weights_.end() && w->second != p.want_weight) {
      if (auto r = tree_->set_tenant_weight(*p.group, p.want_weight); r) {
        ++stats_.weight_writes;
        w->second = p.want_weight;
      } else {
        write_failed(pid, p, "writing the tenant weight: " + r.error().message(), r.error().code());
      }
    }
  }
  // nice and affinity, per thread.
  for (auto it = p.threads.begin(); it != p.threads.end();) {
    const std::uint32_t tid = it->first;
    ThreadState& t = it->second;
    if (!t.journaled) {
      ++it;
      continue;
    }
    bool thread_gone = false;
    // Never weaker than the thread's original ("Never weaker than before" in the header).
    const std::int32_t want_nice = std::min(p.want_nice, t.orig_nice);
    if (want_nice != t.nice.value_or(t.orig_nice)) {
      if (const int e = set_nice(tid, want_nice); e == 0) {
        ++stats_.nice_writes;
        t.nice = want_nice;
      } else if (gone(e)) {
        thread_gone = true;
      } else {
        write_failed(
            pid, p,
            "setting nice " + std::to_string(want_nice) + " on thread " + std::to_string(tid), e);
      }
    }
    std::vector<std::uint32_t> want = t.orig_cpus;
    if (!p.want_cpus.empty()) {
      auto in_node = intersect(p.want_cpus, t.orig_cpus);
      if (!in_node.empty()) want = std::move(in_node);
    }
    if (!thread_gone && want != t.cpus.value_or(t.orig_cpus)) {
      if (const int e = set_cpus(tid, want); e == 0) {
        ++stats_.affinity_writes;
        t.cpus = std::move(want);
      } else if (gone(e)) {
        thread_gone = true;
      } else {
        write_failed(pid, p, "setting the affinity of thread " + std::to_string(tid), e);
      }
    }
    it = thread_gone ? p.threads.erase(it) : std::next(it);
  }
  p.cur_nice = std::min(p.want_nice, p.orig_nice);
  std::vector<std::uint32_t> cur = p.orig_cpus;
  if (!p.want_cpus.empty()) {
    auto in_node = intersect(p.want_cpus, p.orig_cpus);
    if (!in_node.empty()) cur = std::move(in_node);
  }
  p.cur_cpus = std::move(cur);
}

// ---- restore ----

// Back to the group the process came from; when that group no longer exists (removed while the
// process was in a tenant group), to the hierarchy's root rather than leaving it with us.
Result<void> UserspaceBackend::move_home(std::uint32_t pid, const ProcState& p) {
  const auto dir = cgroup_dir(tree_->layout(), *p.orig_cgroup);
  if (dir) {
    auto r = CgroupTree::move(*dir, pid);
    if (r || r.error().code() != ENOENT) {
      if (!r) return r.error().context("moving it back to cgroup " + *p.orig_cgroup);
      return r;
    }
  }
  spdlog::warn("userspace backend: pid {}: its original cgroup {} is gone; moving it to {}", pid,
               *p.orig_cgroup, tree_->layout().mount_point);
  auto r = CgroupTree::move(tree_->layout().mount_point, pid);
  if (!r) return r.error().context("moving it to the root cgroup");
  return r;
}

void UserspaceBackend::restore(std::uint32_t pid, ProcState& p) {
  if (!process_running(opts_.proc_root, pid, p.start)) return;  // exited (or the pid was reused)
  for (auto& [tid, t] : p.threads) {
    const bool nice_changed = t.nice && *t.nice != t.orig_nice;
    const bool cpus_changed = t.cpus && *t.cpus != t.orig_cpus;
    if (!nice_changed && !cpus_changed) continue;
    if (!same_thread(opts_.proc_root, pid, tid, t.start)) continue;
    if (nice_changed) {
      if (const int e = set_nice(tid, t.orig_nice); e != 0 && !gone(e)) {
        write_failed(
            pid, p,
            "restoring nice " + std::to_string(t.orig_nice) + " of thread " + std::to_string(tid),
            e);
      }
    }
    if (cpus_changed) {
      if (const int e = set_cpus(tid, t.orig_cpus); e != 0 && !gone(e)) {
        write_failed(pid, p, "restoring the affinity of thread " + std::to_string(tid), e);
      }
    }
  }
  if (tree_ && p.group && p.orig_cgroup) {
    if (auto r = move_home(pid, p); !r && !pid_gone(r.error())) {
      write_failed(pid, p, r.error().message(), r.error().code());
    }
  }
}

void UserspaceBackend::forget(std::uint32_t pid) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return;
  restore(pid, it->second);
  procs_.erase(it);
  journal_dirty_ = true;  // rewritten on the next apply (a stale entry is harmless: start times)
}

Result<void> UserspaceBackend::shutdown() {
  // A backend whose create() failed owns nothing: the journal and groups may be another
  // daemon's.
  if (shut_down_ || !active_) return Ok{};
  shut_down_ = true;
  const std::uint64_t errors_before = stats_.write_errors;
  std::size_t threads = 0;
  for (auto& [pid, p] : procs_) {
    restore(pid, p);
    threads += p.threads.size();
  }
  if (tree_) empty_tenant_groups(*tree_, tree_->layout().mount_point);
  spdlog::info(
      "userspace backend: restored the original nice, affinity and cgroup of {} "
      "process(es) ({} thread(s))",
      procs_.size(), threads);
  procs_.clear();
  if (::unlink(opts_.journal_path.c_str()) != 0 && errno != ENOENT) {
    return errno_error("userspace backend: removing " + opts_.journal_path);
  }
  if (stats_.write_errors > errors_before) {
    return Error(EIO, "userspace backend: " + std::to_string(stats_.write_errors - errors_before) +
                          " value(s) could not be restored (logged above)");
  }
  return Ok{};
}

}  // namespace zernel::enforce::userspace
