#include "enforce/scx/scx_backend.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include "enforce/scx/skel_shim.h"
#include "policy/phase.hpp"
#include "policy/weight.hpp"
#include "sys/bpf/libbpf_log.hpp"
#include "sys/file.hpp"
#include "sys/procfs.hpp"
#include "sys/sched_ext.hpp"
#include "sys/topology_reader.hpp"

namespace zernel::enforce::scx {
namespace {

namespace fs = std::filesystem;

void shim_log(int level, const char* msg) {
  if (level > 0) {
    spdlog::warn("sched_ext: {}", msg);
  } else {
    spdlog::info("sched_ext: {}", msg);
  }
}

// CPU -> NUMA node, from the topology the collectors read (all node 0 without NUMA nodes).
std::vector<std::uint8_t> read_cpu_nodes(const fs::path& sys_root, const fs::path& proc_root,
                                         std::uint32_t nr_cpus, std::uint32_t& nr_nodes) {
  std::vector<std::uint8_t> node_of(nr_cpus, 0);
  nr_nodes = 1;
  auto info = sys::read_topology(sys_root.string(), proc_root.string());
  if (!info) return node_of;
  for (const policy::NumaNode& n : info->topology.nodes()) {
    if (n.id >= ZERNEL_MAX_NODES) continue;
    for (std::uint32_t cpu : n.cpus) {
      if (cpu < nr_cpus) node_of[cpu] = static_cast<std::uint8_t>(n.id);
    }
    nr_nodes = std::max(nr_nodes, n.id + 1);
  }
  return node_of;
}

std::string kernel_release() {
  utsname u{};
  return ::uname(&u) == 0 ? std::string(u.release) : std::string();
}

// struct sched_attr (include/uapi/linux/sched/types.h, VER1); glibc 2.36 has no wrapper.
struct SchedAttr {
  std::uint32_t size;
  std::uint32_t sched_policy;
  std::uint64_t sched_flags;
  std::int32_t sched_nice;
  std::uint32_t sched_priority;
  std::uint64_t sched_runtime;
  std::uint64_t sched_deadline;
  std::uint64_t sched_period;
  std::uint32_t sched_util_min;
  std::uint32_t sched_util_max;
};
constexpr std::uint32_t kSchedOther = 0;
constexpr std::uint32_t kSchedBatch = 3;
constexpr std::uint32_t kSchedIdle = 5;
constexpr std::uint32_t kSchedExt = 7;

bool get_attr(std::uint32_t tid, SchedAttr& a) {
  a = SchedAttr{};
  return syscall(SYS_sched_getattr, static_cast<pid_t>(tid), &a, sizeof a, 0U) == 0;
}

bool set_policy(std::uint32_t tid, const SchedAttr& current, std::uint32_t policy) {
  SchedAttr a = current;
  a.size = sizeof a;
  a.sched_policy = policy;
  a.sched_flags = 0;
  a.sched_priority = 0;
  return syscall(SYS_sched_setattr, static_cast<pid_t>(tid), &a, 0U) == 0;
}

// Says at start what of the cgroup tree the scheduler honours on this kernel, and refuses a full
// switch that would silently drop cpu.max limits (unless the operator opted in).
Result<void> check_cgroup_support(const Options& options, unsigned caps) {
  const fs::path config = options.boot_root / ("config-" + kernel_release());
  const auto group_sched = read_config_bool(config, "EXT_GROUP_SCHED");
  // An unreadable config: trust the ops (the kernel calls them only with the option).
  const bool groups = group_sched.value_or(true);
  const bool weight = groups && (caps & ZERNEL_SCX_CAP_CGROUP) != 0;
  const bool bandwidth = groups && (caps & ZERNEL_SCX_CAP_BANDWIDTH) != 0;
  if (weight && bandwidth) {
    spdlog::info("sched_ext: cgroup cpu.weight honoured hierarchically, cpu.max enforced");
    return {};
  }
  if (!weight) {
    spdlog::warn(
        "sched_ext: this kernel does not pass cgroups to sched_ext schedulers ({}): "
        "cpu.weight and cpu.max do not apply to the tasks it schedules",
        group_sched && !*group_sched ? "no CONFIG_EXT_GROUP_SCHED" : "no cgroup ops");
  } else {
    spdlog::warn(
        "sched_ext: this kernel does not pass cpu.max to sched_ext schedulers "
        "(ops.cgroup_set_bandwidth came in Linux 6.17): cpu.weight is honoured, "
        "cpu.max is not");
  }
  if (options.partial) return {};
  auto limited = find_cpu_max_quota(options.sys_root / "fs/cgroup");
  if (!limited) return {};
  if (options.allow_unenforced_cpu_max) {
    spdlog::warn(
        "sched_ext: cgroup {} has a cpu.max quota that will not apply while this "
        "scheduler runs (allowed by [sched_ext] allow_unenforced_cpu_max)",
        *limited);
    return {};
  }
  return Error(ENOTSUP, "cgroup " + *limited +
                            " has a cpu.max quota, and this kernel cannot enforce cpu.max under "
                            "a sched_ext scheduler; refusing a full switch (use the userspace "
                            "backend, or set [sched_ext] allow_unenforced_cpu_max = true)");
}

// A distribution's kernel config is about 300 KB.
constexpr std::size_t kMaxKernelConfigBytes = std::size_t{16} << 20;

// The engine's table as the BPF side applies it to threads that follow their own phase
// (zernel.bpf.c, "PHASES OF THREADS"): one entry per phase, and last the GpuCompute thread woken
// in a sync it slept in, which the engine gives kBlockedGpuWaitPriority (policy/phase.hpp).
std::array<zernel_phase_policy, ZERNEL_PHASE_NR + 1> phase_policies() {
  std::array<zernel_phase_policy, ZERNEL_PHASE_NR + 1> out{};
  auto fill = [](zernel_phase_policy& e, const policy::PhasePolicy& p, std::int32_t priority) {
    e.slice_ns = p.slice_ns;
    e.weight = policy::weight_for_priority(priority);
    e.latency_target_us = p.latency_target_us;
    e.flags = p.preempt ? ZERNEL_DF_PREEMPT : 0;
  };
  for (policy::Phase ph : policy::kAllPhases) {
    const policy::PhasePolicy p = policy::policy_for_phase(ph);
    fill(out[policy::index_of(ph)], p, p.priority);
  }
  fill(out[ZERNEL_PHASE_NR], policy::policy_for_phase(policy::Phase::gpu_compute),
       policy::kBlockedGpuWaitPriority);
  return out;
}

// Whether a struct_ops program may call the switch rules' tracing helpers (bpf_task_pt_regs,
// bpf_find_vma). sched_ext's programs get the kernel's base helper set, which has them since
// Linux 6.16 ("trace helpers for all prog types"; for a privileged loader); a socket filter's
// helpers fall back to the same set, and libbpf can probe those (not struct_ops ones). A kernel
// that says yes here and still refuses is caught at the load (create() loads again without).
bool base_has_trace_helpers() {
  return libbpf_probe_bpf_helper(BPF_PROG_TYPE_SOCKET_FILTER, BPF_FUNC_task_pt_regs, nullptr) ==
             1 &&
         libbpf_probe_bpf_helper(BPF_PROG_TYPE_SOCKET_FILTER, BPF_FUNC_find_vma, nullptr) == 1;
}

}  // namespace

std::optional<std::uint32_t> read_config_hz(const fs::path& config) {
  const auto text = sys::read_file(config.string(), kMaxKernelConfigBytes);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string line;
  constexpr std::string_view key = "CONFIG_HZ=";
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    std::uint32_t hz = 0;
    const char* first = line.data() + key.size();
    const char* last = line.data() + line.size();
    auto [end, ec] = std::from_chars(first, last, hz);
    if (ec != std::errc() || end != last || hz == 0 || hz > 10000) return std::nullopt;
    return hz;
  }
  return std::nullopt;
}

std::optional<bool> read_config_bool(const fs::path& config, std::string_view name) {
  const auto text = sys::read_file(config.string(), kMaxKernelConfigBytes);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  const std::string set = "CONFIG_" + std::string(name) + "=y";
  std::string line;
  while (std::getline(in, line)) {
    if (line == set) return true;
  }
  return false;
}

std::optional<std::string> find_cpu_max_quota(const fs::path& cgroup_root, std::size_t max_dirs) {
  std::error_code ec;
  if (!fs::exists(cgroup_root / "cgroup.controllers", ec)) return std::nullopt;
  fs::recursive_directory_iterator it(cgroup_root, fs::directory_options::skip_permission_denied,
                                      ec);
  std::size_t seen = 0;
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec) || it->is_symlink(ec)) continue;
    if (++seen > max_dirs) break;
    const auto text = sys::read_file((it->path() / "cpu.max").string());
    std::istringstream in(text ? *text : std::string());
    std::string quota;
    if (in >> quota && quota != "max") {
      return fs::relative(it->path(), cgroup_root, ec).string();
    }
  }
  return std::nullopt;
}

Result<std::unique_ptr<ScxBackend>> ScxBackend::create(const Options& options) {
  if (auto r = sys::check_sched_ext_free(options.sys_root); !r) {
    return r.error().context("loading the sched_ext scheduler");
  }
  sys::route_libbpf_log();

  int possible = libbpf_num_possible_cpus();
  if (possible <= 0) return Error(-possible, "loading the sched_ext scheduler: no possible CPUs");
  auto nr_cpus = static_cast<std::uint32_t>(possible);
  // The per-CPU tables of the scheduler (node, LLC) cover CPU ids below ZERNEL_MAX_CPUS.
  const std::uint32_t table_cpus = std::min<std::uint32_t>(nr_cpus, ZERNEL_MAX_CPUS);
  std::uint32_t nr_nodes = 1;
  auto nodes = read_cpu_nodes(options.sys_root, options.proc_root, table_cpus, nr_nodes);
  const sys::CpuLlcs llcs =
      sys::read_cpu_llcs(options.sys_root.string(), table_cpus, ZERNEL_MAX_LLCS);
  std::vector<std::uint8_t> llc_of(llcs.llc_of.begin(), llcs.llc_of.end());

  zernel_scx_open_opts opts{};
  opts.nr_cpus = nr_cpus;
  opts.nr_nodes = nr_nodes;
  opts.cpu_node = nodes.data();
  opts.nr_llcs = llcs.nr_llcs;
  opts.cpu_llc = llc_of.data();
  opts.starve_ns = options.starve_ns;
  if (auto hz = read_config_hz(options.boot_root / ("config-" + kernel_release()))) {
    opts.tick_ns = 1'000'000'000ULL / *hz;
  }
  opts.inject_error_after_ns = options.inject_error_after_ns;
  opts.switch_partial = options.partial ? 1U : 0U;
  opts.max_tasks = options.max_tasks;
  opts.log = shim_log;
  const auto policies = phase_policies();
  opts.phase_map_fd = options.phase_map_fd;
  opts.phase_policy = options.phase_map_fd >= 0 ? policies.data() : nullptr;
  opts.phase_sync_kicks = options.phase_sync_kicks ? 1U : 0U;
  std::vector<const char*> shared_names;
  std::vector<int> shared_fds;
  for (const auto& [name, fd] : options.shared_maps) {
    shared_names.push_back(name.c_str());
    shared_fds.push_back(fd);
  }
  opts.shared_names = shared_names.data();
  opts.shared_fds = shared_fds.data();
  opts.nr_shared = static_cast<std::uint32_t>(shared_names.size());
  opts.switch_rules = options.switch_rules ? 1U : 0U;
  // Tests only: $ZERNEL_TEST_SCX_SKIP_HELPER_PROBE=1 asks for the rules without asking the kernel
  // first, so that a kernel without the helpers (6.12) shows the reload without them below.
  const char* skip_probe = std::getenv("ZERNEL_TEST_SCX_SKIP_HELPER_PROBE");
  const bool probe = skip_probe == nullptr || std::string_view(skip_probe) != "1";
  if (opts.switch_rules != 0 && !probe) {
    spdlog::info(
        "sched_ext: $ZERNEL_TEST_SCX_SKIP_HELPER_PROBE=1 (tests): the scheduler asks for the "
        "context-switch rules without probing the kernel's helpers");
  }
  if (opts.switch_rules != 0 && probe && !base_has_trace_helpers()) {
    spdlog::info(
        "sched_ext: this kernel does not let the scheduler call bpf_task_pt_regs and "
        "bpf_find_vma (Linux 6.16 and later do): the probes' tracepoint sched_switch runs the "
        "context-switch rules");
    opts.switch_rules = 0;
  }

  char err[512] = "";
  ::zernel_scx* handle = nullptr;
  int ret = zernel_scx_open(&opts, &handle, err, sizeof err);
  if (ret == 0) {
    if (auto r = check_cgroup_support(options, zernel_scx_caps(handle)); !r) {
      zernel_scx_destroy(handle);
      return r.error().context("loading the sched_ext scheduler");
    }
  }
  if (ret == 0) {
    ret = zernel_scx_load(handle, err, sizeof err);
    // A kernel whose struct_ops programs may not call the rules' tracing helpers
    // (bpf_task_pt_regs, bpf_find_vma): without the rules, the probes' tracepoint runs them.
    if (ret != 0 && zernel_scx_switch_rules(handle) != 0) {
      spdlog::warn(
          "sched_ext: the scheduler with the probes' context-switch rules did not load ({}); "
          "loading it without them (the probes' tracepoint sched_switch runs them)",
          err);
      zernel_scx_destroy(handle);
      handle = nullptr;
      opts.switch_rules = 0;
      ret = zernel_scx_open(&opts, &handle, err, sizeof err);
      if (ret == 0) ret = zernel_scx_load(handle, err, sizeof err);
    }
  }
  if (ret == 0) {
    ret = zernel_scx_attach(handle, err, sizeof err);
  }
  if (ret != 0) {
    zernel_scx_destroy(handle);
    return Error(-ret, std::string("loading the sched_ext scheduler: ") + err);
  }
  std::unique_ptr<ScxBackend> b(new ScxBackend(options, handle));
  std::string queues = "one per LLC";
  if (llcs.found == 0) {
    queues = "no LLC topology found";
  } else if (llcs.found != llcs.nr_llcs) {
    queues = fmt::format("{} LLCs folded onto them", llcs.found);
  }
  spdlog::info(
      "sched_ext: scheduler \"{}\" attached ({} switch, {} CPUs, {} NUMA nodes, {} queue{}: {})",
      ZERNEL_SCHED_NAME, options.partial ? "partial" : "full", nr_cpus, nr_nodes, llcs.nr_llcs,
      llcs.nr_llcs == 1 ? "" : "s", queues);
  if (options.partial) {
    spdlog::warn(
        "sched_ext: partial switch: only the processes given decisions run under sched_ext, "
        "and they rank below every normal (fair-class) task");
  }
  return b;
}

ScxBackend::ScxBackend(Options options, ::zernel_scx* handle)
    : options_(std::move(options)),
      handle_(handle),
      attached_(true),
      decisions_fd_(zernel_scx_map_fd(handle, ZERNEL_SCX_MAP_DECISIONS)),
      tenants_fd_(zernel_scx_map_fd(handle, ZERNEL_SCX_MAP_TENANTS)) {}

ScxBackend::~ScxBackend() {
  if (auto r = shutdown(); !r) spdlog::warn("{}", r.error().message());
  zernel_scx_destroy(handle_);
}

bool ScxBackend::running() { return attached_ && zernel_scx_exited(handle_, nullptr) == 0; }

bool ScxBackend::carries_switch_rules() const {
  return attached_ && zernel_scx_switch_rules(handle_) != 0 &&
         zernel_scx_exited(handle_, nullptr) == 0;
}

std::optional<ExitInfo> ScxBackend::exit_info() {
  zernel_scx_exit e{};
  if (zernel_scx_exited(handle_, &e) != 1) return std::nullopt;
  ExitInfo info;
  info.kind = e.kind;
  info.cpu = e.exit_cpu;
  info.code = e.exit_code;
  info.reason = e.reason;
  info.message = e.msg;
  if (!exit_logged_) {
    exit_logged_ = true;
    auto advice = restart_advice(info.kind, info.code);
    if (is_error_exit(info.kind) || info.kind == ZERNEL_EXIT_UNREG_KERN) {
      spdlog::error(
          "sched_ext: the kernel unloaded the scheduler: {} ({}){}{} exit_code={:#x} "
          "cpu={} restart={}",
          exit_kind_name(info.kind), info.reason, info.message.empty() ? "" : ": ", info.message,
          static_cast<std::uint64_t>(info.code), info.cpu, restart_advice_name(advice));
      std::string dump = exit_dump();
      if (!dump.empty()) spdlog::debug("sched_ext: exit dump:\n{}", dump);
    } else {
      spdlog::info("sched_ext: scheduler unloaded: {} ({}) restart={}", exit_kind_name(info.kind),
                   info.reason, restart_advice_name(advice));
    }
  }
  return info;
}

std::string ScxBackend::exit_dump() const { return zernel_scx_exit_dump(handle_); }

Result<Stats> ScxBackend::stats() const {
  int possible = libbpf_num_possible_cpus();
  if (possible <= 0) return Error(-possible, "reading sched_ext counters: no possible CPUs");
  std::vector<std::uint64_t> per_cpu(static_cast<std::size_t>(possible));
  int fd = zernel_scx_map_fd(handle_, ZERNEL_SCX_MAP_STATS);
  Stats sums{};
  for (std::uint32_t i = 0; i < ZERNEL_STAT_NR; ++i) {
    if (bpf_map_lookup_elem(fd, &i, per_cpu.data()) != 0) {
      return errno_error("reading sched_ext counter " + std::string(kStatNames[i]));
    }
    for (auto v : per_cpu) sums[i] += v;
  }
  return sums;
}

Result<std::vector<Backend::Counter>> ScxBackend::counters() const {
  auto sums = stats();
  if (!sums) return sums.error();
  std::vector<Counter> out;
  out.reserve(ZERNEL_STAT_NR);
  for (std::size_t i = 0; i < ZERNEL_STAT_NR; ++i) out.push_back({kStatNames[i], (*sums)[i]});
  return out;
}

std::string_view ScxBackend::exit_kind() {
  auto info = exit_info();
  return info ? exit_kind_name(info->kind) : std::string_view("UNKNOWN");
}

std::optional<zernel_task_ctx> ScxBackend::task_ctx(std::uint32_t tid) const {
  // Task storage is keyed by a pidfd; the BPF value is the shared struct, then the BPF side's own.
  int fd = zernel_scx_map_fd(handle_, ZERNEL_SCX_MAP_TASK_CTX);
  bpf_map_info info{};
  std::uint32_t len = sizeof info;
  if (bpf_map_get_info_by_fd(fd, &info, &len) != 0 || info.value_size < sizeof(zernel_task_ctx)) {
    return std::nullopt;
  }
  auto pidfd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(tid), 0U));
  if (pidfd < 0) return std::nullopt;
  std::vector<unsigned char> buf(info.value_size);
  int ret = bpf_map_lookup_elem(fd, &pidfd, buf.data());
  close(pidfd);
  if (ret != 0) return std::nullopt;
  zernel_task_ctx tc{};
  std::memcpy(&tc, buf.data(), sizeof tc);
  return tc;
}

Result<void> ScxBackend::write_batch(const std::vector<std::uint32_t>& keys,
                                     const std::vector<zernel_decision>& values) {
  if (keys.empty()) return Ok{};
  if (batch_supported_) {
    LIBBPF_OPTS(bpf_map_batch_opts, opts, .elem_flags = BPF_ANY, .flags = 0);
    auto count = static_cast<std::uint32_t>(keys.size());
    int ret = bpf_map_update_batch(decisions_fd_, keys.data(), values.data(), &count, &opts);
    ++counters_.batches;
    if (ret == 0) return Ok{};
    // A map type without batch operations is refused with the kernel's own ENOTSUPP (524: not
    // ENOTSUP, which is EOPNOTSUPP in userspace); a kernel without the command says EINVAL.
    constexpr int kKernelEnotsupp = 524;
    if (ret != -EINVAL && ret != -EOPNOTSUPP && ret != -kKernelEnotsupp) {
      return errno_error("writing " + std::to_string(keys.size()) + " sched_ext decisions", -ret);
    }
    spdlog::debug("sched_ext: no batch map updates here ({}), writing one by one",
                  std::strerror(-ret));
    batch_supported_ = false;
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (bpf_map_update_elem(decisions_fd_, &keys[i], &values[i], BPF_ANY) != 0) {
      return errno_error("writing the sched_ext decision of pid " + std::to_string(keys[i]));
    }
  }
  return Ok{};
}

Result<void> ScxBackend::apply(std::span<const policy::Decision> decisions) {
  if (!attached_) return Error(ENOTCONN, "sched_ext backend is shut down");
  if (auto e = exit_info()) {
    return Error(ECANCELED, "the kernel unloaded the sched_ext scheduler: " +
                                std::string(exit_kind_name(e->kind)) + " (" + e->reason +
                                (e->message.empty() ? "" : ": " + e->message) + ")");
  }
  std::vector<std::uint32_t> keys;
  std::vector<zernel_decision> values;
  for (const auto& d : decisions) {
    auto v = to_map_value(d);
    if (v.tenant < ZERNEL_MAX_TENANTS && tenant_weights_[v.tenant] != v.tenant_weight) {
      std::uint32_t slot = v.tenant;
      auto t = tenant_value(v.tenant_weight);
      if (bpf_map_update_elem(tenants_fd_, &slot, &t, BPF_ANY) != 0) {
        return errno_error("writing sched_ext tenant slot " + std::to_string(slot));
      }
      tenant_weights_[slot] = v.tenant_weight;
      ++counters_.tenant_writes;
    }
    auto it = written_.find(d.pid);
    if (it != written_.end() && same_value(it->second, v)) {
      ++counters_.unchanged;
      continue;
    }
    if (options_.partial && it == written_.end()) move_to_ext(d.pid);
    keys.push_back(d.pid);
    values.push_back(v);
  }
  auto r = write_batch(keys, values);
  // Also after a failure: part of the batch may be in the map.
  if (!keys.empty()) zernel_scx_decisions_changed(handle_, keys.data(), keys.size());
  if (!r) {
    // What was written is unknown: forget the cache of these pids so that the next tick
    // rewrites them.
    for (auto k : keys) written_.erase(k);
    if (r.error().code() == E2BIG || r.error().code() == ENOSPC) {
      const std::uint32_t size =
          options_.max_tasks != 0 ? options_.max_tasks : std::uint32_t{ZERNEL_MAX_TASKS};
      return r.error().context("the decision map is full (" + std::to_string(size) +
                               " processes, [general] max_tracked_tasks)");
    }
    return r;
  }
  for (std::size_t i = 0; i < keys.size(); ++i) written_[keys[i]] = values[i];
  counters_.written += keys.size();
  return Ok{};
}

void ScxBackend::forget(std::uint32_t pid) {
  auto it = written_.find(pid);
  if (it == written_.end()) return;
  written_.erase(it);
  if (attached_ && bpf_map_delete_elem(decisions_fd_, &pid) != 0 && errno != ENOENT) {
    spdlog::warn("sched_ext: deleting the decision of pid {}: {}", pid, std::strerror(errno));
  }
  if (attached_) zernel_scx_decisions_changed(handle_, &pid, 1);
  ++counters_.deleted;
  if (options_.partial) restore_policy(pid);
}

void ScxBackend::move_to_ext(std::uint32_t pid) {
  auto& saved = moved_[pid];
  // A process that exited meanwhile has no threads to move.
  const auto tids = sys::read_thread_ids(options_.proc_root.string(), pid);
  if (!tids) return;
  for (auto tid : *tids) {
    SchedAttr a{};
    if (!get_attr(tid, a)) continue;  // exited meanwhile
    if (a.sched_policy != kSchedOther && a.sched_policy != kSchedBatch &&
        a.sched_policy != kSchedIdle) {
      continue;  // real-time and deadline tasks keep their class; SCHED_EXT already moved
    }
    if (!set_policy(tid, a, kSchedExt)) {
      if (errno != ESRCH) {
        spdlog::warn("sched_ext: moving thread {} of pid {} to SCHED_EXT: {}", tid, pid,
                     std::strerror(errno));
      }
      continue;
    }
    saved.push_back({tid, a.sched_policy});
  }
}

void ScxBackend::restore_policy(std::uint32_t pid) {
  auto it = moved_.find(pid);
  if (it == moved_.end()) return;
  for (const auto& s : it->second) {
    SchedAttr a{};
    // Only what is still ours: a thread someone else has moved since keeps its new policy.
    if (!get_attr(s.tid, a) || a.sched_policy != kSchedExt) continue;
    if (!set_policy(s.tid, a, s.policy) && errno != ESRCH) {
      spdlog::warn("sched_ext: restoring the policy of thread {}: {}", s.tid, std::strerror(errno));
    }
  }
  moved_.erase(it);
}

// What the scheduler did, once, as it is detached (the daemon's log keeps it past the exit).
void ScxBackend::log_exit_counters() const noexcept {
  try {
    auto st = stats();
    if (!st) return;
    const Stats& c = *st;
    spdlog::info(
        "sched_ext: at exit: {} decided and {} undecided enqueues, {} preemption kicks, {} "
        "starvation rescues; threads scheduled by their own phase {} times ({} within 1 ms of "
        "its event); phase changes acted on after <= 0.1 ms {}, <= 1 ms {}, <= 4 ms {}, "
        "more {} of the thread's runnable time ({} by the tick, {} CPU kicks, "
        "{} phase timer runs, {} kicks by the probes)",
        c[ZERNEL_STAT_DECIDED], c[ZERNEL_STAT_UNDECIDED], c[ZERNEL_STAT_KICK_PREEMPT],
        c[ZERNEL_STAT_STARVE_RESCUE], c[ZERNEL_STAT_PHASE_FOLLOWED],
        c[ZERNEL_STAT_PHASE_FOLLOWED_1MS], c[ZERNEL_STAT_PHASE_DELAY_100US],
        c[ZERNEL_STAT_PHASE_DELAY_1MS], c[ZERNEL_STAT_PHASE_DELAY_4MS],
        c[ZERNEL_STAT_PHASE_DELAY_LONG], c[ZERNEL_STAT_PHASE_TICK], c[ZERNEL_STAT_PHASE_KICK],
        c[ZERNEL_STAT_PHASE_TIMER], c[ZERNEL_STAT_PHASE_PROBE_KICK]);
  } catch (...) {  // a log line is not worth an exception out of a destructor
    std::fputs("zernel-scheduler: sched_ext: the exit counters could not be logged\n", stderr);
  }
}

Result<void> ScxBackend::shutdown() {
  if (!attached_) return Ok{};
  log_exit_counters();
  attached_ = false;
  zernel_scx_detach(handle_);
  while (!moved_.empty()) restore_policy(moved_.begin()->first);
  (void)exit_info();  // logs how it ended (UNREG after a detach)
  return Ok{};
}

Backend::Retry ScxBackend::retry_after_failure() {
  const auto exit = exit_info();
  if (!exit) return Retry::no;
  switch (restart_advice(exit->kind, exit->code)) {
    case RestartAdvice::restart:
      return Retry::now;
    case RestartAdvice::restart_with_backoff:
      return Retry::with_backoff;
    case RestartAdvice::none:
      break;
  }
  return Retry::no;
}

std::string ScxBackend::failure_summary() {
  const auto exit = exit_info();
  if (!exit) return "no exit recorded";
  return std::string(exit_kind_name(exit->kind)) + " (" + exit->reason +
         (exit->message.empty() ? "" : ": " + exit->message) + ")";
}

}  // namespace zernel::enforce::scx
