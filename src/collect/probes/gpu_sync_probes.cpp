#include "collect/probes/gpu_sync_probes.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collect/probes/cuda_library.hpp"
#include "common/clock.hpp"
#include "probes.h"
#include "probes.skel.h"
#include "sys/bpf/libbpf_log.hpp"
#include "sys/procfs.hpp"

namespace zernel::collect {
namespace {

constexpr const char* kNeedRoot = "BPF probes need root (CAP_BPF, CAP_PERFMON)";
constexpr const char* kNoTracefs =
    "tracefs not mounted (mount -t tracefs nodev /sys/kernel/tracing)";

// Whether the effective capability set holds `cap` (capget, no libcap).
bool has_capability(int cap) {
  __user_cap_header_struct hdr{};
  hdr.version = _LINUX_CAPABILITY_VERSION_3;
  hdr.pid = 0;
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  const auto idx = static_cast<std::size_t>(cap / 32);
  return idx < 2 && (data[idx].effective & (1U << (cap % 32))) != 0;
}

bool can_use_bpf_tracing() {
  constexpr int kCapPerfmon = 38;  // not in older headers
  constexpr int kCapBpf = 39;
  return has_capability(CAP_SYS_ADMIN) || (has_capability(kCapBpf) && has_capability(kCapPerfmon));
}

bool tracefs_mounted() {
  return ::access("/sys/kernel/tracing/events", F_OK) == 0 ||
         ::access("/sys/kernel/debug/tracing/events", F_OK) == 0;
}

Error libbpf_error(const std::string& what, int err) {
  if (err < 0) err = -err;
  if (err == EPERM) return Error(EPERM, what + ": " + kNeedRoot);
  return errno_error(what, err);
}

std::uint64_t delta(std::uint64_t now, std::uint64_t before) {
  return now >= before ? now - before : now;  // below: the counter restarted (entry recreated)
}

static_assert(static_cast<int>(PhaseCause::sync_enter) == ZERNEL_CAUSE_SYNC_ENTER);
static_assert(static_cast<int>(PhaseCause::sync_return) == ZERNEL_CAUSE_SYNC_RETURN);
static_assert(static_cast<int>(PhaseCause::long_sync) == ZERNEL_CAUSE_LONG_SYNC);
static_assert(static_cast<int>(PhaseCause::nccl_wait) == ZERNEL_CAUSE_NCCL_WAIT);
static_assert(static_cast<int>(PhaseCause::nccl_done) == ZERNEL_CAUSE_NCCL_DONE);
static_assert(static_cast<int>(PhaseCause::data_wait) == ZERNEL_CAUSE_DATA_WAIT);
static_assert(static_cast<int>(PhaseCause::worker_run) == ZERNEL_CAUSE_WORKER_RUN);
static_assert(static_cast<int>(PhaseCause::worker_idle) == ZERNEL_CAUSE_WORKER_IDLE);
static_assert(static_cast<int>(PhaseCause::optimizer_bound) == ZERNEL_CAUSE_OPTIMIZER_BOUND);
static_assert(static_cast<int>(PhaseCause::launch) == ZERNEL_CAUSE_LAUNCH);
static_assert(static_cast<int>(PhaseRole::rank) == ZERNEL_PHASE_ROLE_RANK);
static_assert(ZERNEL_PROBE_PHASE_DATA_LOADING == 0 && ZERNEL_PROBE_PHASE_GPU_COMPUTE == 1 &&
                  ZERNEL_PROBE_PHASE_NCCL_COLLECTIVE == 2 &&
                  ZERNEL_PROBE_PHASE_OPTIMIZER_STEP == 3 && ZERNEL_PROBE_PHASE_UNKNOWN == 4,
              "PhaseEvent::phase is policy::Phase's value");
static_assert(static_cast<int>(PhaseRole::worker) == ZERNEL_PHASE_ROLE_WORKER);

constexpr std::uint64_t kAttachRetryNs = 60'000'000'000;

// Phase programs: the rules' constants, and off (not loaded, a one-page ring) unless asked for.
void configure_phase_programs(probes_bpf& skel, const GpuSyncProbes::Options& o) {
  skel.rodata->zernel_sync_hyst_ns = o.sync_hysteresis_ns;
  skel.rodata->zernel_idle_hyst_ns = o.idle_hysteresis_ns;
  skel.rodata->zernel_optimizer_max_ns = o.optimizer_max_ns;
  if (!o.phase_events) {
    (void)bpf_program__set_autoload(skel.progs.zernel_phase_switch, false);
    (void)bpf_program__set_autoload(skel.progs.zernel_futex_exit, false);
    (void)bpf_program__set_autoload(skel.progs.zernel_launch, false);
    (void)bpf_map__set_max_entries(skel.maps.zernel_phase_events,
                                   static_cast<__u32>(sysconf(_SC_PAGESIZE)));
  }
}

}  // namespace

struct GpuSyncProbes::Impl {
  probes_bpf* skel = nullptr;
  bpf_link* exit_link = nullptr;
  bpf_link* futex_link = nullptr;
  bpf_link* switch_link = nullptr;      // phases: sched_switch
  bpf_link* futex_exit_link = nullptr;  // phases: sys_exit_futex
  ring_buffer* phase_ring = nullptr;
  std::vector<PhaseEvent>* drain_out = nullptr;  // drain_phase_events' target, during the drain
  std::vector<std::vector<bpf_link*>> library_links;  // parallel to libraries_
  // (dev, inode) of the maps lines attach_process_libraries has handled: a process's libcuda
  // is looked at once, not per process (maps shows the underlying file, stat() an overlay's).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> seen_maps_ids;
  // (dev, inode) of files whose attach the kernel refused, and when to try again (monotonic ns).
  std::vector<std::pair<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t>> failed_maps_ids;
  int ncpus = 0;

  ~Impl() {
    for (auto& links : library_links) {
      for (bpf_link* l : links) bpf_link__destroy(l);
    }
    ring_buffer__free(phase_ring);
    bpf_link__destroy(futex_exit_link);
    bpf_link__destroy(switch_link);
    bpf_link__destroy(futex_link);
    bpf_link__destroy(exit_link);
    probes_bpf__destroy(skel);
  }
};

GpuSyncProbes::GpuSyncProbes(std::unique_ptr<Impl> impl, Options options)
    : impl_(std::move(impl)), options_(std::move(options)) {}

GpuSyncProbes::~GpuSyncProbes() = default;

Result<std::unique_ptr<GpuSyncProbes>> GpuSyncProbes::open(const Options& options) {
  const std::string what = "loading the GPU sync probes";
  sys::route_libbpf_log();

  if (!can_use_bpf_tracing()) return Error(EPERM, what + ": " + kNeedRoot);
  if (::access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
    return Error(ENOTSUP, what +
                              ": the kernel has no BTF (/sys/kernel/btf/vmlinux; "
                              "CONFIG_DEBUG_INFO_BTF)");
  }

  auto impl = std::make_unique<Impl>();
  impl->ncpus = libbpf_num_possible_cpus();
  if (impl->ncpus <= 0) return libbpf_error(what + ": counting possible CPUs", impl->ncpus);

  impl->skel = probes_bpf__open();
  if (impl->skel == nullptr) return libbpf_error(what + ": opening probes.bpf.o", errno);
  configure_phase_programs(*impl->skel, options);
  if (const int err = probes_bpf__load(impl->skel); err != 0) {
    if (-err == EPERM) return Error(EPERM, what + ": " + kNeedRoot);
    return libbpf_error(what + " (the kernel rejected probes.bpf.o; libbpf's log has the reason)",
                        err);
  }

  impl->exit_link = bpf_program__attach_raw_tracepoint(impl->skel->progs.zernel_thread_exit,
                                                       "sched_process_exit");
  if (impl->exit_link == nullptr) {
    return libbpf_error(what + ": attaching the raw tracepoint sched_process_exit", errno);
  }

  std::unique_ptr<GpuSyncProbes> self(new GpuSyncProbes(std::move(impl), options));
  self->impl_->futex_link = bpf_program__attach_tracepoint(
      self->impl_->skel->progs.zernel_futex_enter, "syscalls", "sys_enter_futex");
  if (self->impl_->futex_link == nullptr) {
    const int err = errno;
    if (!tracefs_mounted()) {
      self->futex_error_ = Error(ENOENT, std::string("counting futex waits: ") + kNoTracefs);
    } else if (err == ENOENT) {
      self->futex_error_ = Error(ENOENT,
                                 "counting futex waits: the kernel has no tracepoint "
                                 "syscalls:sys_enter_futex (CONFIG_FTRACE_SYSCALLS)");
    } else {
      self->futex_error_ =
          libbpf_error("counting futex waits: attaching syscalls:sys_enter_futex", err);
    }
  }
  if (options.phase_events) {
    self->open_phase_events();
  } else {
    self->phase_error_ = Error(ENOTSUP, "phases from events are off ([phase_detection] mode)");
  }
  return self;
}

void GpuSyncProbes::open_phase_events() {
  auto& impl = *impl_;
  impl.switch_link = bpf_program__attach(impl.skel->progs.zernel_phase_switch);
  if (impl.switch_link == nullptr) {
    phase_error_ = libbpf_error("phases from events: attaching tp_btf/sched_switch", errno);
    return;
  }
  // Without the futex-return tracepoint (no tracefs) NCCL waits would never end: the NCCL rule
  // then stays off, as futex counting does (the entry side is attached with it).
  if (futex_link_ok()) {
    impl.futex_exit_link = bpf_program__attach_tracepoint(impl.skel->progs.zernel_futex_exit,
                                                          "syscalls", "sys_exit_futex");
    if (impl.futex_exit_link == nullptr) {
      phase_error_ = libbpf_error("phases from events: attaching syscalls:sys_exit_futex", errno);
      return;
    }
  }
  impl.phase_ring = ring_buffer__new(
      bpf_map__fd(impl.skel->maps.zernel_phase_events),
      [](void* ctx, void* data, std::size_t size) -> int {
        auto* self = static_cast<Impl*>(ctx);
        if (size < sizeof(zernel_phase_event) || self->drain_out == nullptr) return 0;
        zernel_phase_event ev{};
        std::memcpy(&ev, data, sizeof ev);
        self->drain_out->push_back(PhaseEvent{ev.t_ns, ev.tid, ev.tgid, ev.phase, ev.cause});
        return 0;
      },
      impl_.get(), nullptr);
  if (impl.phase_ring == nullptr) {
    phase_error_ = libbpf_error("phases from events: opening the ring buffer", errno);
  }
}

int GpuSyncProbes::phase_map_fd() const {
  return phase_error_ ? -1 : bpf_map__fd(impl_->skel->maps.zernel_phase_threads);
}

GpuSyncProbes::ProgramRuns GpuSyncProbes::phase_switch_runs() const {
  if (phase_error_) return {};
  bpf_prog_info info{};
  __u32 len = sizeof info;
  if (bpf_prog_get_info_by_fd(bpf_program__fd(impl_->skel->progs.zernel_phase_switch), &info,
                              &len) != 0) {
    return {};
  }
  return {info.run_cnt, info.run_time_ns};
}

bool GpuSyncProbes::futex_link_ok() const { return impl_->futex_link != nullptr; }

Result<void> GpuSyncProbes::set_phase_role(std::uint32_t pid, PhaseRole role) {
  if (phase_error_) return *phase_error_;
  const zernel_phase_proc entry{static_cast<__u32>(role), 0};
  const int err = bpf_map__update_elem(impl_->skel->maps.zernel_phase_procs, &pid, sizeof pid,
                                       &entry, sizeof entry, BPF_ANY);
  if (err != 0) {
    if (-err == E2BIG) {
      return Error(E2BIG, "phases from events: 65,536 processes have a role already");
    }
    return libbpf_error("phases from events: naming pid " + std::to_string(pid), err);
  }
  // After the write: a thread that cached "no role" re-reads once (probes.bpf.c, phase_thread).
  // Never 0 again, which means "no process named" there.
  if (__atomic_add_fetch(&impl_->skel->bss->zernel_phase_gen, 1U, __ATOMIC_RELEASE) == 0) {
    __atomic_add_fetch(&impl_->skel->bss->zernel_phase_gen, 1U, __ATOMIC_RELEASE);
  }
  return Ok{};
}

std::size_t GpuSyncProbes::drain_phase_events(std::vector<PhaseEvent>& out) {
  if (impl_->phase_ring == nullptr) return 0;
  const std::size_t before = out.size();
  impl_->drain_out = &out;
  (void)ring_buffer__consume(impl_->phase_ring);
  impl_->drain_out = nullptr;
  return out.size() - before;
}

Result<bool> GpuSyncProbes::attach_library(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno_error("probing " + path);
  const auto dev = static_cast<std::uint64_t>(st.st_dev);
  const auto ino = static_cast<std::uint64_t>(st.st_ino);
  for (const auto& lib : libraries_) {
    if (lib.dev == dev && lib.inode == ino) return false;
  }

  std::vector<std::string> wanted;
  for (const char* s : probes::kSyncSymbols) wanted.emplace_back(s);
  for (const char* s : probes::kOptionalSyncSymbols) wanted.emplace_back(s);
  auto found = probes::elf_defined_functions(path, wanted);
  if (!found) return found.error().context("probing " + path);
  std::string missing;
  for (const char* s : probes::kSyncSymbols) {
    if (std::find(found->begin(), found->end(), s) == found->end()) {
      missing += missing.empty() ? s : std::string(", ") + s;
    }
  }
  if (!missing.empty()) {
    return Error(ENOENT, path + " has no " + missing + ": not a CUDA driver library");
  }

  std::vector<bpf_link*> links;
  auto undo = [&links] {
    for (bpf_link* l : links) bpf_link__destroy(l);
  };
  // The return probes first, for every symbol, then the entry probes: a call that enters between
  // an entry probe's attach and its return probe's would count a depth that no return undoes,
  // and the thread would read as inside a sync for good (each later call then looks nested). A
  // return without its entry is harmless: it is counted as a miss and changes nothing.
  for (const bool ret : {true, false}) {
    for (const auto& sym : *found) {
      bpf_uprobe_opts opts{};
      opts.sz = sizeof opts;
      opts.func_name = sym.c_str();
      opts.retprobe = ret;
      bpf_program* prog =
          ret ? impl_->skel->progs.zernel_sync_return : impl_->skel->progs.zernel_sync_enter;
      bpf_link* link = bpf_program__attach_uprobe_opts(prog, -1, path.c_str(), 0, &opts);
      if (link == nullptr) {
        const int err = errno;
        undo();
        return libbpf_error(std::string("attaching a ") + (ret ? "uretprobe" : "uprobe") + " to " +
                                sym + " in " + path,
                            err);
      }
      links.push_back(link);
    }
  }
  if (!phase_error_) {
    // Launches: entry probes for the phase rules (a launch the file lacks is skipped).
    auto launches = probes::elf_defined_functions(
        path, std::vector<std::string>(std::begin(probes::kLaunchSymbols),
                                       std::end(probes::kLaunchSymbols)));
    for (const auto& sym : launches ? *launches : std::vector<std::string>{}) {
      bpf_uprobe_opts opts{};
      opts.sz = sizeof opts;
      opts.func_name = sym.c_str();
      bpf_link* link = bpf_program__attach_uprobe_opts(impl_->skel->progs.zernel_launch, -1,
                                                       path.c_str(), 0, &opts);
      if (link == nullptr) {
        const int err = errno;
        undo();
        return libbpf_error("attaching a uprobe to " + sym + " in " + path, err);
      }
      links.push_back(link);
      found->push_back(sym);
    }
  }
  libraries_.push_back(AttachedLibrary{path, dev, ino, std::move(*found)});
  impl_->library_links.push_back(std::move(links));
  spdlog::info("GPU sync probes attached to {} ({} entry points)", path,
               libraries_.back().symbols.size());
  return true;
}

Result<std::size_t> GpuSyncProbes::attach_process_libraries(std::uint32_t pid) {
  auto libs = probes::read_libcuda_mappings(options_.proc_root, pid);
  if (!libs) return libs.error();
  std::size_t attached = 0;
  for (const auto& lib : *libs) {
    const std::pair<std::uint64_t, std::uint64_t> id{
        static_cast<std::uint64_t>(makedev(lib.dev_major, lib.dev_minor)), lib.inode};
    auto& seen = impl_->seen_maps_ids;
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    // A file the kernel refused is tried again after kAttachRetryNs, not at every scan (each
    // refusal is a libbpf warning in the log: once a minute, not twice a second).
    const std::uint64_t now = monotonic_ns();
    auto& failed = impl_->failed_maps_ids;
    const auto f =
        std::find_if(failed.begin(), failed.end(), [&](const auto& e) { return e.first == id; });
    if (f != failed.end() && now < f->second) continue;
    // The path as the process sees it: through its root, which may be a container's.
    const std::string path = options_.proc_root + "/" + std::to_string(pid) + "/root" + lib.path;
    auto r = attach_library(path);
    if (!r) {
      if (f != failed.end()) {
        f->second = now + kAttachRetryNs;
      } else {
        failed.emplace_back(id, now + kAttachRetryNs);
      }
      return r.error().context("pid " + std::to_string(pid));
    }
    if (f != failed.end()) failed.erase(f);
    if (*r) ++attached;
    seen.push_back(id);
  }
  return attached;
}

Result<void> GpuSyncProbes::track(std::uint32_t pid) {
  if (futex_error_) return *futex_error_;
  const zernel_probe_futex zero{};
  const int err = bpf_map__update_elem(impl_->skel->maps.zernel_probe_futex, &pid, sizeof pid,
                                       &zero, sizeof zero, BPF_NOEXIST);
  if (err == -EEXIST) return Ok{};
  if (err == -E2BIG || err == -ENOMEM || err == -ENOSPC) {
    return Error(ENOSPC, "tracking futex waits of pid " + std::to_string(pid) +
                             ": the filter map is full (" + std::to_string(ZERNEL_PROBE_MAX_PROCS) +
                             " processes)");
  }
  if (err != 0) return libbpf_error("tracking futex waits of pid " + std::to_string(pid), err);
  if (auto it = previous_.find(pid); it != previous_.end()) it->second.futex_waits = 0;
  return Ok{};
}

Result<void> GpuSyncProbes::untrack(std::uint32_t pid) {
  if (futex_error_) return *futex_error_;
  const int err = bpf_map__delete_elem(impl_->skel->maps.zernel_probe_futex, &pid, sizeof pid, 0);
  if (err != 0 && err != -ENOENT) {
    return libbpf_error("untracking futex waits of pid " + std::to_string(pid), err);
  }
  if (auto it = previous_.find(pid); it != previous_.end()) it->second.futex_waits = 0;
  return Ok{};
}

Result<ProbeSample> GpuSyncProbes::read(std::uint32_t pid, std::uint64_t now_ns) {
  auto* skel = impl_->skel;
  zernel_probe_proc proc{};
  int err =
      bpf_map__lookup_elem(skel->maps.zernel_probe_procs, &pid, sizeof pid, &proc, sizeof proc, 0);
  if (err == -ENOENT) {
    proc = zernel_probe_proc{};
  } else if (err != 0) {
    return libbpf_error("reading the GPU sync state of pid " + std::to_string(pid), err);
  }
  zernel_probe_futex futex_entry{};
  if (!futex_error_) {
    err = bpf_map__lookup_elem(skel->maps.zernel_probe_futex, &pid, sizeof pid, &futex_entry,
                               sizeof futex_entry, 0);
    if (err == -ENOENT) {
      futex_entry = zernel_probe_futex{};
    } else if (err != 0) {
      return libbpf_error("reading the futex waits of pid " + std::to_string(pid), err);
    }
  }

  const __u64 futex = futex_entry.waits;
  ProbeSample s;
  s.main_futex_wait_ns = futex_entry.main_wait_ns;
  // in_sync is a count the BPF side never lets go below 0 for long; a huge value is a transient
  // underflow being repaired (probes.bpf.c, proc_leave).
  s.in_sync = proc.in_sync > 0 && proc.in_sync < (1U << 31);
  s.in_sync_since_ns = s.in_sync ? proc.in_sync_since_ns : 0;
  s.last_sync_return_ns = proc.last_return_ns;
  s.last_burst_ns = proc.last_burst_ns;

  if (!s.in_sync && proc.last_return_tid != 0) {
    const __u32 tid = proc.last_return_tid;
    zernel_probe_thread thread{};
    err = bpf_map__lookup_elem(skel->maps.zernel_probe_threads, &tid, sizeof tid, &thread,
                               sizeof thread, 0);
    if (err == 0 && thread.tgid == pid) {
      const std::string path = options_.proc_root + "/" + std::to_string(pid) + "/task/" +
                               std::to_string(tid) + "/schedstat";
      if (sys::read_file_at(AT_FDCWD, path.c_str(), buf_, 4096) == 0) {
        const auto runtime = probes::parse_schedstat_runtime(buf_);
        if (runtime && *runtime > thread.runtime_at_return_ns) {
          s.cpu_burst_ns = *runtime - thread.runtime_at_return_ns;
        }
      }
    }
  }

  auto [it, first] = previous_.try_emplace(pid);
  Previous& prev = it->second;
  s.sync_count_delta = delta(proc.sync_count, prev.sync_count);
  s.sync_time_delta_ns = delta(proc.sync_time_ns, prev.sync_time_ns);
  s.futex_waits_delta = delta(futex, prev.futex_waits);
  s.interval_ns = !first && now_ns > prev.now_ns ? now_ns - prev.now_ns : 0;
  prev = Previous{proc.sync_count, proc.sync_time_ns, futex, now_ns};
  return s;
}

void GpuSyncProbes::forget(std::uint32_t pid) {
  auto* skel = impl_->skel;
  (void)bpf_map__delete_elem(skel->maps.zernel_probe_procs, &pid, sizeof pid, 0);
  (void)bpf_map__delete_elem(skel->maps.zernel_probe_futex, &pid, sizeof pid, 0);
  (void)bpf_map__delete_elem(skel->maps.zernel_phase_procs, &pid, sizeof pid, 0);
  previous_.erase(pid);
}

ProbeStats GpuSyncProbes::stats() const {
  std::uint64_t sum[ZERNEL_PROBE_STAT_NR] = {};
  std::vector<__u64> per_cpu(static_cast<std::size_t>(impl_->ncpus));
  for (__u32 key = 0; key < ZERNEL_PROBE_STAT_NR; ++key) {
    if (bpf_map__lookup_elem(impl_->skel->maps.zernel_probe_stats, &key, sizeof key, per_cpu.data(),
                             per_cpu.size() * sizeof(__u64), 0) != 0) {
      continue;
    }
    for (__u64 v : per_cpu) sum[key] += v;
  }
  ProbeStats st;
  st.sync_enter = sum[ZERNEL_PROBE_STAT_SYNC_ENTER];
  st.sync_return = sum[ZERNEL_PROBE_STAT_SYNC_RETURN];
  st.sync_nested = sum[ZERNEL_PROBE_STAT_SYNC_NESTED];
  st.return_miss = sum[ZERNEL_PROBE_STAT_RETURN_MISS];
  st.depth_overflow = sum[ZERNEL_PROBE_STAT_DEPTH_OVERFLOW];
  st.thread_map_full = sum[ZERNEL_PROBE_STAT_THREAD_MAP_FULL];
  st.proc_map_full = sum[ZERNEL_PROBE_STAT_PROC_MAP_FULL];
  st.exit_in_sync = sum[ZERNEL_PROBE_STAT_EXIT_IN_SYNC];
  st.futex_waits = sum[ZERNEL_PROBE_STAT_FUTEX_WAIT];
  st.futex_untracked = sum[ZERNEL_PROBE_STAT_FUTEX_UNTRACKED];
  st.phase_events = sum[ZERNEL_PROBE_STAT_PHASE_EVENT];
  st.phase_events_lost = sum[ZERNEL_PROBE_STAT_PHASE_EVENT_LOST];
  st.phase_no_storage = sum[ZERNEL_PROBE_STAT_PHASE_NO_STORAGE];
  return st;
}

}  // namespace zernel::collect
