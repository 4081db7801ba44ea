#include "collect/discovery.hpp"

#include <fcntl.h>
#include <fnmatch.h>

#include <algorithm>
#include <charconv>

namespace zernel::collect {

namespace {

using sys::kMaxStatBytes;
constexpr std::size_t kMaxAttrBytes = 1 << 20;

std::uint32_t fnv1a(std::string_view s) {
  std::uint32_t h = 2166136261U;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619U;
  }
  return h;
}

bool any_glob(const std::vector<std::string>& patterns, const char* text) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return ::fnmatch(p.c_str(), text, 0) == 0; });
}

// The rule evaluation shared by the scan (attributes read lazily from /proc) and match_tenant
// (attributes given). Lists are checked cheapest first; the AND short-circuits.
template <typename Attrs>
std::optional<std::uint32_t> first_match(std::span<const config::TenantConfig> tenants,
                                         Attrs& attrs) {
  for (std::size_t i = 0; i < tenants.size(); ++i) {
    const config::TenantMatch& m = tenants[i].match;
    if (m.comm.empty() && m.cmdline.empty() && m.cgroup.empty() && m.uid.empty()) continue;
    if (!m.comm.empty() && !any_glob(m.comm, attrs.comm())) continue;
    if (!m.uid.empty()) {
      const std::optional<std::uint32_t> uid = attrs.uid();
      if (!uid || std::find(m.uid.begin(), m.uid.end(), *uid) == m.uid.end()) continue;
    }
    if (!m.cgroup.empty()) {
      const std::optional<std::string_view> path = attrs.cgroup();
      if (!path || std::none_of(m.cgroup.begin(), m.cgroup.end(), [&](const std::string& p) {
            return sys::cgroup_path_has_prefix(*path, p);
          })) {
        continue;
      }
    }
    if (!m.cmdline.empty()) {
      const char* cmdline = attrs.cmdline();
      if (cmdline == nullptr || !any_glob(m.cmdline, cmdline)) continue;
    }
    return static_cast<std::uint32_t>(i);
  }
  return std::nullopt;
}

struct GivenAttrs {
  std::string comm_;
  std::string cmdline_;
  std::optional<std::string_view> cgroup_;
  std::optional<std::uint32_t> uid_;

  const char* comm() const { return comm_.c_str(); }
  const char* cmdline() const { return cmdline_.c_str(); }
  std::optional<std::string_view> cgroup() const { return cgroup_; }
  std::optional<std::uint32_t> uid() const { return uid_; }
};

// Reads status, cgroup and cmdline of one process only when a rule asks, at most once each.
class LazyAttrs {
 public:
  LazyAttrs(int pid_dirfd, const std::string& comm, std::string& status_buf,
            std::string& cmdline_buf, std::string& cgroup_buf)
      : dirfd_(pid_dirfd),
        comm_(comm),
        buf_(status_buf),
        cmdline_buf_(cmdline_buf),
        cgroup_buf_(cgroup_buf) {}

  const char* comm() const { return comm_.c_str(); }

  std::optional<std::uint32_t> uid() {
    if (!uid_done_) {
      uid_done_ = true;
      if (sys::read_file_at(dirfd_, "status", buf_, kMaxAttrBytes) == 0) {
        if (auto st = sys::parse_status(buf_)) uid_ = st->ruid;
      }
    }
    return uid_;
  }

  // The view points into cgroup_buf_.
  std::optional<std::string_view> cgroup() {
    if (!cgroup_done_) {
      cgroup_done_ = true;
      if (sys::read_file_at(dirfd_, "cgroup", cgroup_buf_, kMaxAttrBytes) == 0) {
        cgroup_ = sys::cgroup_match_path(cgroup_buf_);
      }
    }
    return cgroup_;
  }

  const char* cmdline() {
    if (!cmdline_done_) {
      cmdline_done_ = true;
      if (sys::read_file_at(dirfd_, "cmdline", cmdline_buf_, kMaxAttrBytes) == 0) {
        while (!cmdline_buf_.empty() && cmdline_buf_.back() == '\0') cmdline_buf_.pop_back();
        std::replace(cmdline_buf_.begin(), cmdline_buf_.end(), '\0', ' ');
        cmdline_ok_ = true;
      }
    }
    return cmdline_ok_ ? cmdline_buf_.c_str() : nullptr;
  }

 private:
  int dirfd_;
  const std::string& comm_;
  std::string& buf_;
  std::string& cmdline_buf_;
  std::string& cgroup_buf_;
  bool uid_done_ = false;
  bool cgroup_done_ = false;
  bool cmdline_done_ = false;
  bool cmdline_ok_ = false;
  std::optional<std::uint32_t> uid_;
  std::optional<std::string_view> cgroup_;
};

}  // namespace

std::string_view role_name(ProcessRole role) {
  switch (role) {
    case ProcessRole::gpu_owner:
      return "gpu_owner";
    case ProcessRole::dataloader_worker:
      return "dataloader_worker";
    case ProcessRole::matched:
      return "matched";
  }
  return "matched";
}

std::optional<std::uint32_t> match_tenant(std::span<const config::TenantConfig> tenants,
                                          std::string_view comm, std::string_view cmdline,
                                          std::optional<std::string_view> cgroup_path,
                                          std::optional<std::uint32_t> ruid) {
  GivenAttrs attrs{std::string(comm), std::string(cmdline), cgroup_path, ruid};
  return first_match(tenants, attrs);
}

ProcessDiscovery::ProcessDiscovery(std::string proc_root) : proc_root_(std::move(proc_root)) {}

namespace {

// After an exec, or a fork that found nothing: fd/ is looked at again this long after it (a
// program opens its GPU in its first seconds: CUDA's initialisation), then only at scans.
constexpr std::uint64_t kRecheckDelaysNs[] = {1'000'000'000, 5'000'000'000};

}  // namespace

bool ProcessDiscovery::inherited_nvidia_fds(const Entry& child, const Entry& parent) const {
  if (child.nv_fds.empty() || parent.nv_fds.empty()) return false;
  return std::all_of(child.nv_fds.begin(), child.nv_fds.end(), [&](const NvFd& f) {
    return std::any_of(parent.nv_fds.begin(), parent.nv_fds.end(), [&](const NvFd& p) {
      return p.fd == f.fd && p.target_hash == f.target_hash;
    });
  });
}

void ProcessDiscovery::read_attrs(int pid_dirfd, Entry& e, const DiscoveryInput& input,
                                  DiscoveryResult& result) {
  e.nv_fds.clear();
  e.fd_gpu.reset();
  e.fd_denied = false;
  e.attrs_scan = scan_count_ == 0 ? 1 : scan_count_;
  {
    sys::DirReader fds(pid_dirfd, "fd");
    if (fds.error() != 0 && fds.error() != ENOENT && fds.error() != ESRCH) {
      ++result.fd_denied;
      e.fd_denied = true;
    }
    bool several_gpus = false;
    while (const char* fd_name = fds.next()) {
      if (sys::read_link_at(fds.fd(), fd_name, link_) != 0) continue;  // closed meanwhile
      const auto dev = sys::parse_nvidia_device(link_);
      if (!dev) continue;
      std::uint32_t fd_number = 0;
      const std::string_view n(fd_name);
      std::from_chars(n.data(), n.data() + n.size(), fd_number);
      e.nv_fds.push_back({fd_number, fnv1a(link_)});
      if (dev->gpu) {
        if (!e.fd_gpu) {
          e.fd_gpu = dev->gpu;
        } else if (*e.fd_gpu != *dev->gpu) {
          several_gpus = true;
        }
      }
    }
    if (several_gpus) e.fd_gpu.reset();
  }
  e.tenant.reset();
  if (!input.tenants.empty()) {
    LazyAttrs attrs(pid_dirfd, e.comm, buf_, cmdline_, cgroup_);
    e.tenant = first_match(input.tenants, attrs);
  }
}

bool ProcessDiscovery::read_entry(int proc_fd, std::uint32_t pid, Entry& e, bool attrs,
                                  const DiscoveryInput& input, DiscoveryResult& result) {
  char name[16] = {};
  std::to_chars(name, name + sizeof(name) - 1, pid);
  int err = 0;
  const sys::UniqueFd dir = sys::open_dir_at(proc_fd, name, err);
  if (!dir.valid()) {
    if (err != ENOENT && err != ESRCH) ++result.unreadable;
    return false;
  }
  err = sys::read_file_at(dir.get(), "stat", buf_, kMaxStatBytes);
  if (err != 0) {
    if (err != ENOENT && err != ESRCH) ++result.unreadable;
    return false;
  }
  auto st = sys::parse_stat(buf_);
  if (!st || st->pid != pid) {
    ++result.unreadable;
    return false;
  }
  if (st->is_kernel_thread() || st->is_dead()) return false;
  // Another process under this pid (its start time differs) is read whole.
  if (e.starttime != 0 && e.starttime != st->starttime_ticks) attrs = true;
  e.ppid = st->ppid;
  e.starttime = st->starttime_ticks;
  if (e.comm != st->comm) {
    e.comm = std::move(st->comm);
    attrs = attrs || !input.tenants.empty();  // the rules may name it
  }
  e.stale = false;
  if (attrs || e.attrs_scan == 0) read_attrs(dir.get(), e, input, result);
  return true;
}

void ProcessDiscovery::rules_changed(const DiscoveryInput& input) {
  // The match rules may have changed (a reload): matches are only valid for the same rules.
  if (std::equal(input.tenants.begin(), input.tenants.end(), last_rules_.begin(),
                 last_rules_.end())) {
    return;
  }
  for (auto& [pid, e] : table_) e.attrs_scan = 0;
  last_rules_.assign(input.tenants.begin(), input.tenants.end());
}

Result<DiscoveryResult> ProcessDiscovery::scan(const DiscoveryInput& input) {
  DiscoveryResult result;
  ++scan_count_;
  rules_changed(input);
  int err = 0;
  const sys::UniqueFd proc = sys::open_dir_at(AT_FDCWD, proc_root_.c_str(), err);
  if (!proc.valid()) return errno_error("opening " + proc_root_, err);
  {
    sys::DirReader top(proc.get(), ".");
    if (top.error() != 0) return errno_error("listing " + proc_root_, top.error());
    while (const char* name = top.next()) {
      const auto pid = sys::parse_pid_name(name);
      if (!pid) continue;
      ++result.scanned;
      auto [it, added] = table_.try_emplace(*pid);
      Entry& e = it->second;
      // fd/ and the rules are reused for rescan_every_ scans of the same process.
      const bool fresh =
          !added && !e.stale && e.attrs_scan != 0 && scan_count_ - e.attrs_scan < rescan_every_;
      if (!read_entry(proc.get(), *pid, e, !fresh, input, result)) {
        table_.erase(it);
        continue;
      }
      e.seen = scan_count_;
      e.recheck_ns = 0;
    }
  }
  std::erase_if(table_, [this](const auto& kv) { return kv.second.seen != scan_count_; });
  dirty_ = false;
  resolve(input, proc.get(), result);
  return result;
}

void ProcessDiscovery::apply(std::span<const ProcEvent> events, std::uint64_t now_ns) {
  for (const ProcEvent& ev : events) {
    switch (ev.kind) {
      case ProcEventKind::fork: {
        // The child holds what its parent held at the fork: its name, command line, cgroup, uid
        // and descriptors. Its start time is read if it comes to be tracked. A parent not known
        // (a kernel thread's child, or one missed) makes a child read in full.
        Entry child;
        if (auto p = table_.find(ev.ppid); p != table_.end()) {
          child.comm = p->second.comm;
          child.nv_fds = p->second.nv_fds;
          child.fd_gpu = p->second.fd_gpu;
          child.tenant = p->second.tenant;
          child.fd_denied = p->second.fd_denied;
          child.attrs_scan = p->second.attrs_scan;
        } else {
          child.stale = true;
        }
        child.ppid = ev.ppid;
        child.seen = scan_count_;
        child.recheck_ns = now_ns + kRecheckDelaysNs[0];
        table_[ev.pid] = std::move(child);
        break;
      }
      case ProcEventKind::exec:
      case ProcEventKind::comm:
      case ProcEventKind::uid: {
        Entry& e = table_[ev.pid];  // created (and read in full) when the fork was missed
        e.stale = true;
        e.seen = scan_count_;
        if (ev.kind == ProcEventKind::exec) {
          e.rechecks = 0;
          e.recheck_ns = now_ns + kRecheckDelaysNs[0];
        }
        break;
      }
      case ProcEventKind::exit:
        table_.erase(ev.pid);
        break;
      case ProcEventKind::thread_exit:
        continue;  // not a process
    }
    dirty_ = true;
  }
}

bool ProcessDiscovery::pending(std::uint64_t now_ns) const {
  if (dirty_) return true;
  return std::any_of(table_.begin(), table_.end(), [now_ns](const auto& kv) {
    return kv.second.recheck_ns != 0 && kv.second.recheck_ns <= now_ns;
  });
}

Result<DiscoveryResult> ProcessDiscovery::update(const DiscoveryInput& input,
                                                 std::uint64_t now_ns) {
  DiscoveryResult result;
  rules_changed(input);
  int err = 0;
  const sys::UniqueFd proc = sys::open_dir_at(AT_FDCWD, proc_root_.c_str(), err);
  if (!proc.valid()) return errno_error("opening " + proc_root_, err);
  for (auto it = table_.begin(); it != table_.end();) {
    Entry& e = it->second;
    const bool due = e.recheck_ns != 0 && e.recheck_ns <= now_ns;
    if (!e.stale && !due && e.attrs_scan != 0) {
      ++it;
      continue;
    }
    if (!read_entry(proc.get(), it->first, e, true, input, result)) {
      it = table_.erase(it);
      continue;
    }
    if (due) {
      ++e.rechecks;
      e.recheck_ns = e.rechecks < std::size(kRecheckDelaysNs)
                         ? now_ns + kRecheckDelaysNs[e.rechecks] - kRecheckDelaysNs[e.rechecks - 1]
                         : 0;
    }
    ++it;
  }
  dirty_ = false;
  resolve(input, proc.get(), result);
  return result;
}

void ProcessDiscovery::resolve(const DiscoveryInput& input, int proc_fd, DiscoveryResult& result) {
  // In memory: parents, GPU contexts, nearest gpu_owner ancestors.
  index_parent_links();
  mark_gpu_context_owners(input);
  find_owner_ancestors();
  // Roles and the cap: owners, then workers, then matched, lowest pids first within each.
  select_by_role(input.max_tracked_tasks, result);
  emit_selected_processes(input, proc_fd, result);
  // (A child found gone above stays in the record until its exit event or the next scan.)
  mark_changes_since_previous(result);
}

void ProcessDiscovery::index_parent_links() {
  sorted_.clear();
  for (auto& [pid, e] : table_) sorted_.emplace_back(pid, &e);
  std::sort(sorted_.begin(), sorted_.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const auto index_of = [this](std::uint32_t pid) -> std::int32_t {
    auto it = std::lower_bound(sorted_.begin(), sorted_.end(), pid,
                               [](const auto& c, std::uint32_t p) { return c.first < p; });
    if (it == sorted_.end() || it->first != pid) return -1;
    return static_cast<std::int32_t>(it - sorted_.begin());
  };
  const std::size_t n = sorted_.size();
  parent_.assign(n, -1);
  own_.assign(n, 0);
  owner_above_.assign(n, -1);
  visit_.assign(n, 0);  // 0 new, 1 on the current walk, 2 done
  for (std::size_t i = 0; i < n; ++i) {
    const auto [pid, e] = sorted_[i];
    if (e->ppid != pid) parent_[i] = index_of(e->ppid);
  }
}

void ProcessDiscovery::mark_gpu_context_owners(const DiscoveryInput& input) {
  for (std::size_t i = 0; i < sorted_.size(); ++i) {
    const auto [pid, e] = sorted_[i];
    if (input.nvml_processes != nullptr && input.nvml_processes->contains(pid)) {
      own_[i] = 1;
    } else if (!e->nv_fds.empty()) {
      const bool inherited =
          parent_[i] >= 0 &&
          inherited_nvidia_fds(*e, *sorted_[static_cast<std::size_t>(parent_[i])].second);
      own_[i] = inherited ? 0 : 1;
    }
  }
}

void ProcessDiscovery::find_owner_ancestors() {
  for (std::size_t i = 0; i < sorted_.size(); ++i) {
    if (visit_[i] == 2) continue;
    // Climb until an owner, a node already resolved, the top, or a cycle (only possible in a
    // fabricated tree). Every node on the climb below the stopping point is a non-owner except
    // possibly the first, so they all share one answer.
    walk_.clear();
    auto cur = static_cast<std::int32_t>(i);
    std::int32_t answer = -1;
    for (;;) {
      walk_.push_back(cur);
      visit_[static_cast<std::size_t>(cur)] = 1;
      const std::int32_t up = parent_[static_cast<std::size_t>(cur)];
      if (up < 0) break;
      const auto u = static_cast<std::size_t>(up);
      if (own_[u] != 0) {
        answer = up;
        break;
      }
      if (visit_[u] == 2) {
        answer = owner_above_[u];
        break;
      }
      if (visit_[u] == 1) break;  // cycle
      cur = up;
    }
    for (std::int32_t w : walk_) {
      owner_above_[static_cast<std::size_t>(w)] = answer;
      visit_[static_cast<std::size_t>(w)] = 2;
    }
  }
}

void ProcessDiscovery::select_by_role(std::size_t max_tracked_tasks, DiscoveryResult& result) {
  const std::size_t n = sorted_.size();
  order_.clear();
  for (std::size_t i = 0; i < n; ++i) {
    if (own_[i] != 0) order_.push_back(static_cast<std::uint32_t>(i));
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (own_[i] == 0 && owner_above_[i] >= 0) order_.push_back(static_cast<std::uint32_t>(i));
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (own_[i] == 0 && owner_above_[i] < 0 && sorted_[i].second->tenant) {
      order_.push_back(static_cast<std::uint32_t>(i));
    }
  }
  const std::size_t keep = std::min<std::size_t>(order_.size(), max_tracked_tasks);
  result.dropped = static_cast<std::uint32_t>(order_.size() - keep);
  order_.resize(keep);
  std::sort(order_.begin(), order_.end());  // index order is pid order
}

std::optional<std::uint32_t> ProcessDiscovery::owner_gpu(const DiscoveryInput& input,
                                                         std::size_t idx) const {
  if (input.nvml_processes != nullptr) {
    const auto it = input.nvml_processes->find(sorted_[idx].first);
    if (it != input.nvml_processes->end()) return it->second;
  }
  return sorted_[idx].second->fd_gpu;
}

void ProcessDiscovery::emit_selected_processes(const DiscoveryInput& input, int proc_fd,
                                               DiscoveryResult& result) {
  result.processes.reserve(order_.size());
  for (std::uint32_t idx : order_) {
    const auto [pid, e] = sorted_[idx];
    // A child known from its fork only: its start time (its identity) from its stat.
    if (e->starttime == 0 && !read_entry(proc_fd, pid, *e, false, input, result)) continue;
    DiscoveredProcess p;
    p.pid = pid;
    p.ppid = e->ppid;
    p.comm = e->comm;
    p.starttime_ticks = e->starttime;
    p.tenant = e->tenant;
    if (own_[idx] != 0) {
      p.role = ProcessRole::gpu_owner;
      p.gpu = owner_gpu(input, idx);
    } else if (owner_above_[idx] >= 0) {
      p.role = ProcessRole::dataloader_worker;
      p.gpu = owner_gpu(input, static_cast<std::size_t>(owner_above_[idx]));
    } else {
      p.role = ProcessRole::matched;
    }
    result.processes.push_back(std::move(p));
  }
}

void ProcessDiscovery::mark_changes_since_previous(DiscoveryResult& result) {
  // Both lists are in pid order.
  std::size_t j = 0;
  for (DiscoveredProcess& p : result.processes) {
    while (j < previous_.size() && previous_[j].first < p.pid) {
      result.removed.push_back(previous_[j++].first);
    }
    if (j < previous_.size() && previous_[j].first == p.pid) {
      p.change = previous_[j].second == p.starttime_ticks ? ProcessChange::unchanged
                                                          : ProcessChange::replaced;
      ++j;
    } else {
      p.change = ProcessChange::added;
    }
  }
  while (j < previous_.size()) result.removed.push_back(previous_[j++].first);
  previous_.clear();
  for (const DiscoveredProcess& p : result.processes) {
    previous_.emplace_back(p.pid, p.starttime_ticks);
  }
}

}  // namespace zernel::collect
