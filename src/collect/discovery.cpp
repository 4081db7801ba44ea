#include "collect/discovery.hpp"

#include <fcntl.h>
#include <fnmatch.h>

#include <algorithm>
#include <charconv>

namespace zernel::collect {

namespace {

constexpr std::size_t kMaxStatBytes = std::size_t{64} * 1024;
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

const ProcessDiscovery::Candidate* ProcessDiscovery::find(std::uint32_t pid) const {
  auto it = std::lower_bound(candidates_.begin(), candidates_.end(), pid,
                             [](const Candidate& c, std::uint32_t p) { return c.pid < p; });
  if (it == candidates_.end() || it->pid != pid) return nullptr;
  return &*it;
}

bool ProcessDiscovery::inherited_nvidia_fds(const Candidate& child, const Candidate& parent) const {
  if (child.nv_count == 0 || parent.nv_count == 0) return false;
  const auto parent_begin = nv_fds_.begin() + parent.nv_begin;
  const auto parent_end = parent_begin + parent.nv_count;
  for (std::uint32_t i = 0; i < child.nv_count; ++i) {
    const NvFd& f = nv_fds_[child.nv_begin + i];
    const bool in_parent = std::any_of(parent_begin, parent_end, [&](const NvFd& p) {
      return p.fd == f.fd && p.target_hash == f.target_hash;
    });
    if (!in_parent) return false;
  }
  return true;
}

void ProcessDiscovery::scan_process(int proc_fd, std::uint32_t pid, const DiscoveryInput& input,
                                    DiscoveryResult& result) {
  char name[16] = {};
  std::to_chars(name, name + sizeof(name) - 1, pid);
  int err = 0;
  const sys::UniqueFd dir = sys::open_dir_at(proc_fd, name, err);
  if (!dir.valid()) {
    if (err != ENOENT && err != ESRCH) ++result.unreadable;
    return;
  }
  err = sys::read_file_at(dir.get(), "stat", buf_, kMaxStatBytes);
  if (err != 0) {
    if (err != ENOENT && err != ESRCH) ++result.unreadable;
    return;
  }
  auto st = sys::parse_stat(buf_);
  if (!st || st->pid != pid) {
    ++result.unreadable;
    return;
  }
  if (st->is_kernel_thread() || st->is_dead()) return;

  Candidate c;
  c.pid = pid;
  c.ppid = st->ppid;
  c.starttime = st->starttime_ticks;
  c.comm = std::move(st->comm);
  c.nv_begin = static_cast<std::uint32_t>(nv_fds_.size());

  Cached& cached = cache_[pid];
  cached.seen = scan_count_;
  const bool fresh = cached.scan != 0 && cached.starttime == c.starttime &&
                     scan_count_ - cached.scan < kRescanEvery;
  if (fresh) {
    nv_fds_.insert(nv_fds_.end(), cached.nv_fds.begin(), cached.nv_fds.end());
    c.nv_count = static_cast<std::uint32_t>(cached.nv_fds.size());
    c.fd_gpu = cached.fd_gpu;
    c.tenant = cached.tenant;
    if (cached.fd_denied) ++result.fd_denied;
    candidates_.push_back(std::move(c));
    return;
  }
  cached = Cached{};
  cached.starttime = c.starttime;
  cached.scan = scan_count_;
  cached.seen = scan_count_;

  {
    sys::DirReader fds(dir.get(), "fd");
    if (fds.error() == ENOENT || fds.error() == ESRCH) return;  // exited
    if (fds.error() != 0) {
      ++result.fd_denied;
      cached.fd_denied = true;
    }
    bool several_gpus = false;
    while (const char* fd_name = fds.next()) {
      if (sys::read_link_at(fds.fd(), fd_name, link_) != 0) continue;  // closed meanwhile
      const auto dev = sys::parse_nvidia_device(link_);
      if (!dev) continue;
      std::uint32_t fd_number = 0;
      const std::string_view n(fd_name);
      std::from_chars(n.data(), n.data() + n.size(), fd_number);
      nv_fds_.push_back({fd_number, fnv1a(link_)});
      if (dev->gpu) {
        if (!c.fd_gpu) {
          c.fd_gpu = dev->gpu;
        } else if (*c.fd_gpu != *dev->gpu) {
          several_gpus = true;
        }
      }
    }
    if (several_gpus) c.fd_gpu.reset();
  }
  c.nv_count = static_cast<std::uint32_t>(nv_fds_.size()) - c.nv_begin;

  if (!input.tenants.empty()) {
    LazyAttrs attrs(dir.get(), c.comm, buf_, cmdline_, cgroup_);
    c.tenant = first_match(input.tenants, attrs);
  }
  cached.nv_fds.assign(nv_fds_.begin() + c.nv_begin, nv_fds_.end());
  cached.fd_gpu = c.fd_gpu;
  cached.tenant = c.tenant;
  candidates_.push_back(std::move(c));
}

Result<DiscoveryResult> ProcessDiscovery::scan(const DiscoveryInput& input) {
  DiscoveryResult result;
  ++scan_count_;
  // The match rules may have changed (a reload): cached matches are only valid for the same rules.
  if (!std::equal(input.tenants.begin(), input.tenants.end(), last_rules_.begin(),
                  last_rules_.end())) {
    cache_.clear();
    last_rules_.assign(input.tenants.begin(), input.tenants.end());
  }
  candidates_.clear();
  nv_fds_.clear();

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
      scan_process(proc.get(), *pid, input, result);
    }
  }

  // Pass 2, in memory: parents, GPU contexts, nearest gpu_owner ancestors.
  std::sort(candidates_.begin(), candidates_.end(),
            [](const Candidate& a, const Candidate& b) { return a.pid < b.pid; });
  const std::size_t n = candidates_.size();
  parent_.assign(n, -1);
  own_.assign(n, 0);
  owner_above_.assign(n, -1);
  visit_.assign(n, 0);  // 0 new, 1 on the current walk, 2 done
  for (std::size_t i = 0; i < n; ++i) {
    const Candidate& c = candidates_[i];
    if (c.ppid != c.pid) {
      if (const Candidate* p = find(c.ppid)) {
        parent_[i] = static_cast<std::int32_t>(p - candidates_.data());
      }
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const Candidate& c = candidates_[i];
    if (input.nvml_processes != nullptr && input.nvml_processes->contains(c.pid)) {
      own_[i] = 1;
    } else if (c.nv_count > 0) {
      const bool inherited =
          parent_[i] >= 0 &&
          inherited_nvidia_fds(c, candidates_[static_cast<std::size_t>(parent_[i])]);
      own_[i] = inherited ? 0 : 1;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
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

  // Roles and the cap: owners, then workers, then matched, lowest pids first within each.
  order_.clear();
  for (std::size_t i = 0; i < n; ++i) {
    if (own_[i] != 0) order_.push_back(static_cast<std::uint32_t>(i));
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (own_[i] == 0 && owner_above_[i] >= 0) order_.push_back(static_cast<std::uint32_t>(i));
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (own_[i] == 0 && owner_above_[i] < 0 && candidates_[i].tenant) {
      order_.push_back(static_cast<std::uint32_t>(i));
    }
  }
  const std::size_t keep = std::min<std::size_t>(order_.size(), input.max_tracked_tasks);
  result.dropped = static_cast<std::uint32_t>(order_.size() - keep);
  order_.resize(keep);
  std::sort(order_.begin(), order_.end());  // candidate order is pid order

  // An owner's GPU: NVML's index, else the single /dev/nvidiaN it has open.
  const auto owner_gpu = [&](std::size_t idx) -> std::optional<std::uint32_t> {
    if (input.nvml_processes != nullptr) {
      const auto it = input.nvml_processes->find(candidates_[idx].pid);
      if (it != input.nvml_processes->end()) return it->second;
    }
    return candidates_[idx].fd_gpu;
  };
  result.processes.reserve(keep);
  for (std::uint32_t idx : order_) {
    const Candidate& c = candidates_[idx];
    DiscoveredProcess p;
    p.pid = c.pid;
    p.ppid = c.ppid;
    p.comm = c.comm;
    p.starttime_ticks = c.starttime;
    p.tenant = c.tenant;
    if (own_[idx] != 0) {
      p.role = ProcessRole::gpu_owner;
      p.gpu = owner_gpu(idx);
    } else if (owner_above_[idx] >= 0) {
      p.role = ProcessRole::dataloader_worker;
      p.gpu = owner_gpu(static_cast<std::size_t>(owner_above_[idx]));
    } else {
      p.role = ProcessRole::matched;
    }
    result.processes.push_back(std::move(p));
  }

  // Changes against the previous scan; both lists are in pid order.
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
  std::erase_if(cache_, [this](const auto& e) { return e.second.seen != scan_count_; });
  return result;
}

}  // namespace zernel::collect
