#include "enforce/userspace/userspace_backend.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>

#include "enforce/settings_journal.hpp"
#include "enforce/userspace/tenant_share.hpp"
#include "enforce/userspace/thread_ops.hpp"
#include "policy/weight.hpp"
#include "sys/file.hpp"
#include "sys/procfs.hpp"
#include "sys/topology_reader.hpp"

namespace zernel::enforce::userspace {
namespace {

constexpr int kCapSysNice = 23;
// How far up the parent chain an untracked process in a tenant's group is followed to find a
// tracked ancestor (a job's helpers are its children or grandchildren).
constexpr int kMaxAncestry = 32;

std::vector<std::uint32_t> intersect(const std::vector<std::uint32_t>& a,
                                     const std::vector<std::uint32_t>& b) {
  std::vector<std::uint32_t> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// Whether PROC_ROOT/self/status shows CAP_SYS_NICE in the effective set.
Result<bool> has_cap_sys_nice(const std::string& proc_root) {
  const std::string path = proc_root + "/self/status";
  const auto text = sys::read_file(path);
  if (!text) return text.error();
  std::istringstream in(*text);
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
  auto info = sys::read_topology(sys_root, proc_root);
  if (!info) return out;
  for (const policy::NumaNode& n : info->topology.nodes()) out.push_back(n.cpus);
  return out;
}

// The tenant of a process: its own when it is tracked, else its nearest tracked ancestor's
// when that one has a tenant (up to kMaxAncestry generations, read from <proc_root>/PID/stat).
TenantOfPid tenant_of_tracked_or_ancestor(
    const std::string& proc_root,
    const std::unordered_map<std::uint32_t, std::uint16_t>& tenant_of_tracked) {
  return [&proc_root, &tenant_of_tracked](std::uint32_t pid) -> std::optional<std::uint16_t> {
    std::uint32_t cur = pid;
    for (int i = 0; i < kMaxAncestry; ++i) {
      if (auto it = tenant_of_tracked.find(cur); it != tenant_of_tracked.end()) {
        // The process itself is tracked: its own tenant. An untracked one takes its nearest
        // tracked ancestor's only when that one has a tenant.
        if (cur == pid || it->second != policy::kNoTenant) return it->second;
        return std::nullopt;
      }
      auto st = sys::read_stat(proc_root, cur);
      if (!st || st->ppid <= 1 || st->ppid == cur) return std::nullopt;
      cur = st->ppid;
    }
    return std::nullopt;
  };
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
                   "priorities, set affinity and write cgroup CPU weights); "
                   "running as uid " +
                       std::to_string(::geteuid()) + " without it (try --backend observe)");
    }
  }
  std::unique_ptr<UserspaceBackend> b(new UserspaceBackend(std::move(opts)));
  const UserspaceOptions& o = b->opts_;
  b->self_start_ = own_start_time(o.proc_root);
  b->nodes_ = read_nodes(o.sys_root, o.proc_root);
  if (o.use_cgroups) {
    auto layout = o.cgroup ? Result<sys::CpuCgroupLayout>(*o.cgroup)
                           : sys::detect_cpu_cgroup_from(o.proc_root + "/self/mountinfo");
    if (layout) {
      b->layout_ = std::move(*layout);
      spdlog::info(
          "userspace backend: tenant weights as the {} of a tenant's own cgroup where it holds "
          "only that tenant's processes (cgroup {} at {}), else as nice; no process is moved",
          sys::cgroup_cpu_file(b->layout_->version),
          b->layout_->version == sys::CgroupVersion::v2 ? "v2" : "v1", b->layout_->mount_point);
    } else {
      b->cgroup_error_ = layout.error().message();
      spdlog::warn("userspace backend: tenant weights as nice only: {}", b->cgroup_error_);
    }
  } else {
    b->cgroup_error_ = "cgroups are turned off";
  }
  if (auto r = b->recover(); !r) return r.error();
  b->active_ = true;  // from here on shutdown() restores and removes the journal
  return b;
}

// ---- crash recovery ----

Result<void> UserspaceBackend::recover() {
  auto rep = replay_journal(opts_.journal_path, opts_.proc_root);
  if (!rep) return rep.error().context("userspace backend");
  if (rep->corrupt) {
    spdlog::error(
        "userspace backend: cannot use the journal of a previous run ({}); moved it to {}; "
        "values it listed are NOT restored",
        rep->corrupt_error, rep->moved_to);
  } else if (rep->found) {
    for (const std::string& line : rep->lines) spdlog::info("userspace journal: {}", line);
    spdlog::info(
        "userspace backend: restored from the journal of zernel-scheduler pid {}, which is no "
        "longer running: {}",
        rep->owner_pid, rep->summary());
  }
  stats_.recovered_threads = rep->threads;
  stats_.recovered_processes = rep->processes;
  stats_.recovery_skipped = rep->skipped;
  stats_.write_errors += rep->errors;
  return Ok{};
}

// ---- apply ----

std::vector<std::uint32_t> UserspaceBackend::node_cpus_of(std::uint32_t cpu) const {
  for (const auto& n : nodes_) {
    if (std::binary_search(n.begin(), n.end(), cpu)) return n;
  }
  return {};
}

TenantShare UserspaceBackend::tenant_share(std::uint32_t pid) const {
  auto it = procs_.find(pid);
  return it == procs_.end() ? TenantShare::none : it->second.share;
}

std::string UserspaceBackend::tenant_share_text(std::uint32_t pid) const {
  auto it = procs_.find(pid);
  return it == procs_.end() ? std::string() : it->second.share_text;
}

void UserspaceBackend::scan_threads(std::uint32_t pid, ProcState& p, const ProcState* parent,
                                    bool& dirty) {
  auto tids = sys::read_thread_ids(opts_.proc_root, pid);
  if (!tids) return;  // exited; forget() follows
  for (auto& [tid, t] : p.threads) t.seen = false;
  const bool first_scan = p.threads.empty() && !p.have_orig;
  for (const std::uint32_t tid : *tids) {
    if (auto it = p.threads.find(tid); it != p.threads.end()) {
      it->second.seen = true;
      continue;
    }
    auto st = sys::read_thread_stat(opts_.proc_root, pid, tid);
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

// Decides, for every process of a tenant, whether its own cgroup carries the tenant's weight or
// its threads' nice does (tenant_share.hpp), and what each carrying group's weight is to be.
void UserspaceBackend::plan_tenant_shares(std::span<const policy::Decision> decisions,
                                          bool& dirty) {
  for (auto& [dir, g] : groups_) g.wanted = false;
  std::unordered_map<std::uint32_t, std::uint16_t> tenant_of_tracked;
  tenant_of_tracked.reserve(decisions.size());
  for (const policy::Decision& d : decisions) tenant_of_tracked[d.pid] = d.tenant;
  const GroupVerdicts verdicts = judge_tenant_groups(decisions, tenant_of_tracked);
  for (const policy::Decision& d : decisions) {
    auto it = procs_.find(d.pid);
    if (it == procs_.end()) continue;
    assign_tenant_share(d, it->second, verdicts, dirty);
  }
  // Groups no longer carrying a tenant (its processes left, exited or were unassigned, or the
  // group is shared now) go back to their original at once: see write_groups.
  for (auto& [dir, g] : groups_) {
    if (!g.wanted) dirty = true;
  }
}

UserspaceBackend::GroupVerdicts UserspaceBackend::judge_tenant_groups(
    std::span<const policy::Decision> decisions,
    const std::unordered_map<std::uint32_t, std::uint16_t>& tenant_of_tracked) {
  const auto self = static_cast<std::uint32_t>(::getpid());
  const TenantOfPid tenant_of = tenant_of_tracked_or_ancestor(opts_.proc_root, tenant_of_tracked);
  GroupVerdicts verdicts;
  for (const policy::Decision& d : decisions) {
    auto it = procs_.find(d.pid);
    if (it == procs_.end()) continue;
    ProcState& p = it->second;
    p.cgroup.reset();
    if (d.tenant == policy::kNoTenant || !layout_) continue;
    if (auto text = sys::read_file(opts_.proc_root + "/" + std::to_string(d.pid) + "/cgroup")) {
      p.cgroup = sys::cpu_cgroup_path(layout_->version, *text);
    }
    if (!p.cgroup) continue;
    const auto key = std::make_pair(*p.cgroup, d.tenant);
    if (verdicts.contains(key)) continue;
    GroupVerdict v;
    v.dir = sys::cgroup_dir(*layout_, *p.cgroup).value_or("");
    v.why_not = why_group_cannot_carry(*layout_, *p.cgroup, d.tenant, tenant_of, self);
    if (!v.why_not) {
      if (auto r = refused_.find(v.dir); r != refused_.end()) {
        if (r->second.first == sys::cgroup_inode(v.dir).value_or(0)) {
          v.why_not = r->second.second;
        } else {
          refused_.erase(r);  // made again since: a new group with a new owner's value
        }
      }
    }
    // Two tenants in one group: neither can have it (both see the other's process as shared).
    verdicts.emplace(key, std::move(v));
  }
  return verdicts;
}

std::string UserspaceBackend::carry_tenant_on_group(const policy::Decision& d,
                                                    const std::string& cgroup,
                                                    const std::string& dir, bool& dirty) {
  const std::uint64_t value = sys::cgroup_cpu_value(layout_->version, d.tenant_weight);
  auto [gi, added] = groups_.try_emplace(dir);
  GroupState& g = gi->second;
  const auto inode = sys::cgroup_inode(dir);
  if (!added && inode && *inode != g.inode) {
    g = GroupState{};  // removed and made again: another group
    added = true;
  }
  if (added) {
    g.path = cgroup;
    g.inode = inode.value_or(0);
    g.original = sys::read_cgroup_cpu_value(layout_->version, dir).value_or(value);
    dirty = true;
  }
  g.wanted = true;
  g.want = value;
  if (g.journaled != g.values()) dirty = true;
  return fmt::format("{} {} on its cgroup {}", sys::cgroup_cpu_file(layout_->version), value,
                     cgroup);
}

void UserspaceBackend::assign_tenant_share(const policy::Decision& d, ProcState& p,
                                           const GroupVerdicts& verdicts, bool& dirty) {
  TenantShare share = TenantShare::none;
  std::string text;
  if (d.tenant != policy::kNoTenant) {
    const GroupVerdict* v = nullptr;
    if (p.cgroup) {
      if (auto vi = verdicts.find({*p.cgroup, d.tenant}); vi != verdicts.end()) v = &vi->second;
    }
    if (v != nullptr && !v->why_not) {
      share = TenantShare::cgroup;
      text = carry_tenant_on_group(d, *p.cgroup, v->dir, dirty);
    } else {
      share = TenantShare::nice;
      const std::string why = v != nullptr ? *v->why_not
                              : p.cgroup   ? "no verdict"
                              : layout_    ? "its cgroup cannot be read"
                                           : cgroup_error_;
      text = fmt::format("nice shift {:+d} on its threads: {}",
                         -tenant_priority_shift(d.tenant_weight), why);
    }
  }
  if (share != p.share || (share == TenantShare::cgroup && text != p.share_text)) {
    if (share != TenantShare::none || p.share != TenantShare::none) {
      spdlog::info("userspace backend: pid {} (tenant weight {}): {}", d.pid, d.tenant_weight,
                   share == TenantShare::none ? std::string("no tenant any more") : text);
    }
  }
  p.share = share;
  p.share_text = std::move(text);
}

std::vector<std::uint64_t> UserspaceBackend::GroupState::values() const {
  std::vector<std::uint64_t> v;
  if (wanted) v.push_back(want);
  if (written && (!wanted || *written != want)) v.push_back(*written);
  return v;
}

Result<void> UserspaceBackend::save_journal() {
  Journal j;
  j.owner_pid = static_cast<std::uint32_t>(::getpid());
  j.owner_start = self_start_;
  j.processes.reserve(procs_.size());
  for (const auto& [pid, p] : procs_) {
    ProcessOriginal po;
    po.pid = pid;
    po.start = p.start;
    po.nice = p.orig_nice;
    po.cpus = p.orig_cpus;
    if (!p.want_cpus.empty()) {
      auto in_node = intersect(p.want_cpus, p.orig_cpus);
      if (!in_node.empty() && in_node != p.orig_cpus) po.applied_cpus = std::move(in_node);
    }
    for (const auto& [tid, t] : p.threads) {
      po.threads.push_back(ThreadOriginal{tid, t.start, t.orig_nice, t.orig_cpus});
    }
    j.processes.push_back(std::move(po));
  }
  std::sort(j.processes.begin(), j.processes.end(),
            [](const ProcessOriginal& a, const ProcessOriginal& b) { return a.pid < b.pid; });
  // A group keeps its line until its original is back (a failed restore is retried at exit and
  // by the next start).
  for (const auto& [dir, g] : groups_) {
    auto values = g.values();
    if (values.empty()) continue;
    j.weights.push_back(WeightOriginal{dir, sys::cgroup_cpu_file(layout_->version), g.inode,
                                       g.original, std::move(values)});
  }
  if (auto r = write_journal(opts_.journal_path, j); !r) return r;
  ++stats_.journal_writes;
  for (auto& [pid, p] : procs_) {
    for (auto& [tid, t] : p.threads) t.journaled = true;
  }
  for (const ProcessOriginal& po : j.processes) procs_[po.pid].journaled_applied = po.applied_cpus;
  for (auto& [dir, g] : groups_) g.journaled = g.values();
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
      auto st = sys::read_stat(opts_.proc_root, d.pid);
      if (!st || st->is_dead() || st->is_kernel_thread()) continue;
      if (d.pid == static_cast<std::uint32_t>(::getpid())) continue;  // never ourselves
      ProcState p;
      p.start = st->starttime_ticks;
      p.ppid = st->ppid;
      it = procs_.emplace(d.pid, std::move(p)).first;
    }
    ProcState& p = it->second;
    p.priority = d.priority;
    p.tenant = d.tenant;
    p.tenant_weight = d.tenant_weight;
    p.want_cpus.clear();
    // Only a task bound to a GPU is pinned: its preferred CPU lies in its GPU's node. Other
    // tasks get a preferred CPU too (the least loaded anywhere), which moves between nodes.
    if (const auto cpu = d.cpu(); cpu && d.gpu_id >= 0) p.want_cpus = node_cpus_of(*cpu);
    const ProcState* parent = nullptr;
    if (auto par = procs_.find(p.ppid); par != procs_.end() && p.ppid != d.pid) {
      parent = &par->second;
    }
    scan_threads(d.pid, p, parent, dirty);
    if (!p.want_cpus.empty()) {
      auto in_node = intersect(p.want_cpus, p.orig_cpus);
      if (in_node == p.orig_cpus) in_node.clear();
      if (in_node != p.journaled_applied) dirty = true;
    } else if (!p.journaled_applied.empty()) {
      dirty = true;
    }
    order.push_back(d.pid);
  }
  plan_tenant_shares(decisions, dirty);
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
  write_groups();
  for (const std::uint32_t pid : order) {
    if (auto it = procs_.find(pid); it != procs_.end()) enforce(pid, it->second);
  }
  return Ok{};
}

// Puts a group's original weight back when the file still holds what we wrote (someone else's
// later value is theirs to keep). True when the group is done with (restored, gone, or left).
bool UserspaceBackend::restore_group(const std::string& dir, const GroupState& g) {
  if (!g.written) return true;
  const auto inode = sys::cgroup_inode(dir);
  if (!inode || *inode != g.inode) return true;  // removed (or made again): nothing to restore
  const auto now = sys::read_cgroup_cpu_value(layout_->version, dir);
  if (!now || *now != *g.written) {
    spdlog::warn(
        "userspace backend: cgroup {}: {} is {}, not the {} zernel wrote: changed by "
        "someone else, left as is",
        g.path, sys::cgroup_cpu_file(layout_->version), now ? std::to_string(*now) : "?",
        *g.written);
    return true;
  }
  if (auto r = sys::write_cgroup_cpu_value(layout_->version, dir, g.original); !r) {
    ++stats_.write_errors;
    spdlog::warn("userspace backend: cgroup {}: restoring {} {}: {}", g.path,
                 sys::cgroup_cpu_file(layout_->version), g.original, r.error().message());
    return false;
  }
  ++stats_.weight_writes;
  spdlog::info("userspace backend: cgroup {}: {} back to {}", g.path,
               sys::cgroup_cpu_file(layout_->version), g.original);
  return true;
}

void UserspaceBackend::write_groups() {
  if (!layout_) return;
  for (auto it = groups_.begin(); it != groups_.end();) {
    const std::string& dir = it->first;
    GroupState& g = it->second;
    if (!g.wanted) {
      if (restore_group(dir, g)) {
        it = groups_.erase(it);
        journal_dirty_ = true;
        continue;
      }
      ++it;
      continue;
    }
    // The owner (kubelet, systemd, an operator) wrote its own value since our last write: it is
    // theirs; we yield the group to them and carry the tenant by nice from the next tick on.
    if (g.written) {
      const auto now = sys::read_cgroup_cpu_value(layout_->version, dir);
      if (now && *now != *g.written) {
        spdlog::warn(
            "userspace backend: cgroup {}: {} was changed to {} by someone else (zernel wrote "
            "{}); leaving the group to its owner, its tenant's share goes by nice",
            g.path, sys::cgroup_cpu_file(layout_->version), *now, *g.written);
        refused_[dir] = {g.inode, "its cgroup " + g.path + "'s weight is managed by someone else"};
        it = groups_.erase(it);
        journal_dirty_ = true;
        continue;
      }
    }
    // Written only once the journal holds the value (and with it the original).
    const bool journaled = std::find(g.journaled.begin(), g.journaled.end(), g.want) !=
                           g.journaled.end();
    if (g.want != g.written.value_or(g.original) && journaled) {
      if (auto r = sys::write_cgroup_cpu_value(layout_->version, dir, g.want); r) {
        ++stats_.weight_writes;
        if (!g.written) {
          spdlog::info("userspace backend: cgroup {}: {} {} (was {}) for its tenant", g.path,
                       sys::cgroup_cpu_file(layout_->version), g.want, g.original);
        }
        g.written = g.want;
        if (g.journaled.size() > 1) journal_dirty_ = true;  // the old value is gone now
      } else {
        ++stats_.write_errors;
        spdlog::warn(
            "userspace backend: cgroup {}: writing {} {}: {}; its tenant's share goes "
            "by nice",
            g.path, sys::cgroup_cpu_file(layout_->version), g.want, r.error().message());
        refused_[dir] = {g.inode, "writing its cgroup " + g.path + "'s weight failed"};
        g.wanted = false;
        journal_dirty_ = true;
      }
    } else if (!g.written && g.want == g.original) {
      g.written = g.want;  // already holds the value: nothing to write
    }
    ++it;
  }
}

void UserspaceBackend::enforce(std::uint32_t pid, ProcState& p) {
  // The tenant share by nice when its cgroup cannot carry it.
  std::int32_t priority = p.priority;
  if (p.share == TenantShare::nice) priority += tenant_priority_shift(p.tenant_weight);
  const std::int32_t want_nice_all = policy::nice_for_priority(priority);
  // nice and affinity, per thread.
  for (auto it = p.threads.begin(); it != p.threads.end();) {
    const std::uint32_t tid = it->first;
    ThreadState& t = it->second;
    if (!t.journaled) {
      ++it;
      continue;
    }
    bool thread_gone_now = false;
    // Never weaker than the thread's original ("Never weaker than before" in the header).
    const std::int32_t want_nice = std::min(want_nice_all, t.orig_nice);
    if (want_nice != t.nice.value_or(t.orig_nice)) {
      if (const int e = set_nice(tid, want_nice); e == 0) {
        ++stats_.nice_writes;
        t.nice = want_nice;
      } else if (thread_gone(e)) {
        thread_gone_now = true;
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
    if (!thread_gone_now && want != t.cpus.value_or(t.orig_cpus)) {
      if (const int e = set_cpus(tid, want); e == 0) {
        ++stats_.affinity_writes;
        t.cpus = std::move(want);
      } else if (thread_gone(e)) {
        thread_gone_now = true;
      } else {
        write_failed(pid, p, "setting the affinity of thread " + std::to_string(tid), e);
      }
    }
    it = thread_gone_now ? p.threads.erase(it) : std::next(it);
  }
  p.cur_nice = std::min(want_nice_all, p.orig_nice);
  std::vector<std::uint32_t> cur = p.orig_cpus;
  if (!p.want_cpus.empty()) {
    auto in_node = intersect(p.want_cpus, p.orig_cpus);
    if (!in_node.empty()) cur = std::move(in_node);
  }
  p.cur_cpus = std::move(cur);
}

// ---- restore ----

void UserspaceBackend::restore(std::uint32_t pid, ProcState& p) {
  if (!process_running(opts_.proc_root, pid, p.start)) return;  // exited (or the pid was reused)
  auto tids = sys::read_thread_ids(opts_.proc_root, pid);
  for (const std::uint32_t tid : tids ? *tids : std::vector<std::uint32_t>{}) {
    auto it = p.threads.find(tid);
    if (it != p.threads.end() && same_thread(opts_.proc_root, pid, tid, it->second.start)) {
      ThreadState& t = it->second;
      if (t.nice && *t.nice != t.orig_nice) {
        if (const int e = set_nice(tid, t.orig_nice); e != 0 && !thread_gone(e)) {
          write_failed(pid, p,
                       "restoring nice " + std::to_string(t.orig_nice) + " of thread " +
                           std::to_string(tid),
                       e);
        }
      }
      if (t.cpus && *t.cpus != t.orig_cpus) {
        if (const int e = set_cpus(tid, t.orig_cpus); e != 0 && !thread_gone(e)) {
          write_failed(pid, p, "restoring the affinity of thread " + std::to_string(tid), e);
        }
      }
      continue;
    }
    // Born since the last tick: it inherited its creator's values at clone. This backend only
    // lowers nice and only gives the applied affinity, so those are the values to undo (the
    // same rule as the journal replay, restore.hpp); anything else its owner set.
    if (!p.have_orig) continue;
    std::int32_t nice = 0;
    std::vector<std::uint32_t> cpus;
    if (get_nice(tid, nice) != 0 || get_cpus(tid, cpus) != 0) continue;
    bool wrote = false;
    if (nice < p.orig_nice) {
      if (const int e = set_nice(tid, p.orig_nice); e == 0) {
        wrote = true;
      } else if (!thread_gone(e)) {
        write_failed(pid, p, "restoring nice of new thread " + std::to_string(tid), e);
      }
    }
    if (p.cur_cpus && *p.cur_cpus != p.orig_cpus && cpus == *p.cur_cpus) {
      if (const int e = set_cpus(tid, p.orig_cpus); e == 0) {
        wrote = true;
      } else if (!thread_gone(e)) {
        write_failed(pid, p, "restoring the affinity of new thread " + std::to_string(tid), e);
      }
    }
    if (wrote) ++stats_.unlisted_restored;
  }
}

void UserspaceBackend::forget(std::uint32_t pid) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return;
  restore(pid, it->second);
  procs_.erase(it);
  // Rewritten on the next apply (a stale entry is harmless: start times); a group it alone held
  // goes back to its original on that apply too.
  journal_dirty_ = true;
}

Result<void> UserspaceBackend::shutdown() {
  // A backend whose create() failed owns nothing: the journal may be another daemon's.
  if (shut_down_ || !active_) return Ok{};
  shut_down_ = true;
  const std::uint64_t errors_before = stats_.write_errors;
  std::size_t threads = 0;
  for (auto& [pid, p] : procs_) {
    restore(pid, p);
    threads += p.threads.size();
  }
  std::size_t groups = 0;
  bool groups_left = false;
  for (const auto& [dir, g] : groups_) {
    if (g.written) ++groups;
    if (!restore_group(dir, g)) groups_left = true;
  }
  spdlog::info(
      "userspace backend: restored the original nice and affinity of {} process(es) ({} "
      "thread(s), {} born since the last tick) and the CPU weight of {} cgroup(s)",
      procs_.size(), threads + stats_.unlisted_restored, stats_.unlisted_restored, groups);
  procs_.clear();
  if (groups_left) {
    // The journal keeps what could not be put back, for the next start to retry.
    return Error(EIO, "userspace backend: a cgroup weight could not be restored (logged above); "
                      "the journal " + opts_.journal_path + " is kept for the next start");
  }
  groups_.clear();
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
