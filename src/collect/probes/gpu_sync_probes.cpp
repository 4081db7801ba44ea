#include "collect/probes/gpu_sync_probes.hpp"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iterator>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "collect/probes/cuda_library.hpp"
#include "common/clock.hpp"
#include "probes.h"
#include "probes.skel.h"
#include "sys/bpf/capabilities.hpp"
#include "sys/bpf/libbpf_log.hpp"
#include "sys/procfs.hpp"

namespace zernel::collect {
namespace {

constexpr const char* kNeedRoot = "BPF probes need root (CAP_BPF, CAP_PERFMON)";

// Whether the kernel has multi-uprobe links (Linux 6.6), from its BTF.
bool kernel_has_uprobe_multi() {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (vmlinux == nullptr) return false;
  bool found = false;
  const __s32 id = btf__find_by_name_kind(vmlinux, "bpf_attach_type", BTF_KIND_ENUM);
  if (id > 0) {
    const btf_type* t = btf__type_by_id(vmlinux, static_cast<__u32>(id));
    const struct btf_enum* e = btf_enum(t);
    for (__u16 i = 0; i < btf_vlen(t) && !found; ++i) {
      const char* name = btf__name_by_offset(vmlinux, e[i].name_off);
      found = name != nullptr && std::string_view(name) == "BPF_TRACE_UPROBE_MULTI";
    }
  }
  btf__free(vmlinux);
  return found;
}

// Whether the kernel lets a uprobe (a kprobe-type program) use a map that holds a bpf_timer:
// the VM tests' 7.3 does; 6.12 and the development host's 6.18 refuse ("tracing progs cannot use
// bpf_timer yet"). Probed with
// a three-instruction program that loads such a map's address; the uprobes' _kick variants need
// it (probes/rules.bpf.h, SYNC KICKS). Any failure reads as no.
bool kernel_allows_timer_in_uprobes() {
  btf* b = btf__new_empty();
  if (b == nullptr) return false;
  const int u32_id = btf__add_int(b, "unsigned int", 4, 0);
  const int u64_id = btf__add_int(b, "unsigned long long", 8, 0);
  const int opaque_id = btf__add_array(b, u32_id, u64_id, 2);
  const int timer_id = btf__add_struct(b, "bpf_timer", 16);
  bool ok = u32_id > 0 && u64_id > 0 && opaque_id > 0 && timer_id > 0 &&
            btf__add_field(b, "__opaque", opaque_id, 0, 0) == 0;
  const int value_id = ok ? btf__add_struct(b, "zernel_timer_probe", 16) : -1;
  ok = ok && value_id > 0 && btf__add_field(b, "timer", timer_id, 0, 0) == 0 &&
       btf__load_into_kernel(b) == 0;
  int map_fd = -1;
  if (ok) {
    bpf_map_create_opts mopts{};
    mopts.sz = sizeof mopts;
    mopts.btf_fd = static_cast<__u32>(btf__fd(b));
    mopts.btf_key_type_id = static_cast<__u32>(u32_id);
    mopts.btf_value_type_id = static_cast<__u32>(value_id);
    map_fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "zernel_tprobe", 4, 16, 1, &mopts);
  }
  int prog_fd = -1;
  if (map_fd >= 0) {
    constexpr __u8 kLoadImm64 = 0x18;  // BPF_LD | BPF_IMM | BPF_DW (BPF_LD and BPF_IMM are 0)
    const bpf_insn insns[] = {
        // r1 = the map (BPF_LD_MAP_FD: two instructions), r0 = 0, exit
        {kLoadImm64, BPF_REG_1, BPF_PSEUDO_MAP_FD, 0, map_fd},
        {0, 0, 0, 0, 0},
        {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
        {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
    };
    prog_fd = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "zernel_tprobe", "GPL", insns,
                            sizeof insns / sizeof insns[0], nullptr);
  }
  const bool allowed = prog_fd >= 0;
  if (prog_fd >= 0) ::close(prog_fd);
  if (map_fd >= 0) ::close(map_fd);
  btf__free(b);
  return allowed;
}

Error libbpf_error(const std::string& what, int err) {
  return sys::libbpf_error(what, err, kNeedRoot);
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
static_assert(static_cast<int>(PhaseCause::data_arrived) == ZERNEL_CAUSE_DATA_ARRIVED);
static_assert(static_cast<int>(PhaseCause::not_driver) == ZERNEL_CAUSE_NOT_DRIVER);
static_assert(static_cast<int>(PhaseCause::batch_wait) == ZERNEL_CAUSE_BATCH_WAIT);
static_assert(static_cast<int>(PhaseCause::optimizer_end) == ZERNEL_CAUSE_OPTIMIZER_END);
static_assert(static_cast<int>(PhaseCause::batch_taken) == ZERNEL_CAUSE_BATCH_TAKEN);
static_assert(static_cast<int>(PhaseRole::rank) == ZERNEL_PHASE_ROLE_RANK);
static_assert(ZERNEL_PROBE_PHASE_DATA_LOADING == 0 && ZERNEL_PROBE_PHASE_GPU_COMPUTE == 1 &&
                  ZERNEL_PROBE_PHASE_NCCL_COLLECTIVE == 2 &&
                  ZERNEL_PROBE_PHASE_OPTIMIZER_STEP == 3 && ZERNEL_PROBE_PHASE_UNKNOWN == 4,
              "PhaseEvent::phase is policy::Phase's value");
static_assert(static_cast<int>(PhaseRole::worker) == ZERNEL_PHASE_ROLE_WORKER);

constexpr std::uint64_t kAttachRetryNs = 60'000'000'000;

// The phase rules run only with phases from events (and the ring is sized for them, else one
// page); uprobes are multi-uprobe programs where the kernel has those, else plain (perf-event)
// ones.
void configure_programs(probes_bpf& skel, const GpuSyncProbes::Options& o, bool uprobe_multi,
                        bool sync_kicks, int ncpus) {
  skel.rodata_zprobe->zernel_sync_hyst_ns = o.sync_hysteresis_ns;
  skel.rodata_zprobe->zernel_idle_hyst_ns = o.idle_hysteresis_ns;
  skel.rodata_zprobe->zernel_optimizer_max_ns = o.optimizer_max_ns;
  skel.rodata_zprobe->zernel_phase_rules = o.phase_events ? 1 : 0;
  if (!o.phase_events) {
    (void)bpf_map__set_max_entries(skel.maps.zernel_phase_events,
                                   static_cast<__u32>(sysconf(_SC_PAGESIZE)));
  } else if (o.phase_ring_bytes != 0) {
    (void)bpf_map__set_max_entries(skel.maps.zernel_phase_events, o.phase_ring_bytes);
  }
  if (!uprobe_multi) {
    for (bpf_program* p : {skel.progs.zernel_sync_enter, skel.progs.zernel_sync_return,
                           skel.progs.zernel_sync_enter_kick, skel.progs.zernel_sync_return_kick}) {
      (void)bpf_program__set_expected_attach_type(p, static_cast<bpf_attach_type>(0));
    }
  }
  // One pair of sync programs is loaded: the _kick pair where the kernel allows it and phases
  // come from events (probes/rules.bpf.h, SYNC KICKS), else the plain one.
  (void)bpf_program__set_autoload(skel.progs.zernel_sync_enter, !sync_kicks);
  (void)bpf_program__set_autoload(skel.progs.zernel_sync_return, !sync_kicks);
  (void)bpf_program__set_autoload(skel.progs.zernel_sync_enter_kick, sync_kicks);
  (void)bpf_program__set_autoload(skel.progs.zernel_sync_return_kick, sync_kicks);
  skel.rodata_zprobe->zernel_sync_kick_on = sync_kicks ? 1 : 0;
  (void)bpf_map__set_max_entries(skel.maps.zernel_sync_kick_timers,
                                 static_cast<__u32>(std::max(ncpus, 1)));
}

// Destroys BPF links on a thread of its own: the kernel waits for an RCU grace period when a
// uprobe goes (tens to hundreds of ms), which must not stall the daemon's tick. Links handed
// over are gone once settle() returns; the destructor destroys whatever is left.
class LinkReaper {
 public:
  LinkReaper() = default;
  LinkReaper(const LinkReaper&) = delete;
  LinkReaper& operator=(const LinkReaper&) = delete;
  ~LinkReaper() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_.notify_all();
    if (thread_.joinable()) thread_.join();
    for (bpf_link* l : pending_) bpf_link__destroy(l);
  }

  void destroy(std::vector<bpf_link*> links) {
    if (links.empty()) return;
    std::lock_guard lock(mu_);
    pending_.insert(pending_.end(), links.begin(), links.end());
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    work_.notify_one();
  }

  void settle() {
    std::unique_lock lock(mu_);
    idle_.wait(lock, [this] { return pending_.empty() && !busy_; });
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      work_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping with nothing left
      std::vector<bpf_link*> batch;
      batch.swap(pending_);
      busy_ = true;
      lock.unlock();
      for (bpf_link* l : batch) bpf_link__destroy(l);
      lock.lock();
      busy_ = false;
      idle_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_;
  std::condition_variable idle_;
  std::vector<bpf_link*> pending_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

struct GpuSyncProbes::Impl {
  probes_bpf* skel = nullptr;
  bool uprobe_multi = false;
  bool sync_kicks = false;  // the _kick pair of sync programs is loaded (SYNC KICKS)
  // The programs that run for every task, attached while a process is followed: thread exit
  // (every_task_links) and the context switch (switch_link), the latter only while the
  // scheduler does not carry its rules (switch_carried).
  std::vector<bpf_link*> every_task_links;
  bpf_link* switch_link = nullptr;
  bool attached = false;
  bool switch_carried = false;
  ring_buffer* phase_ring = nullptr;
  std::vector<PhaseEvent>* drain_out = nullptr;  // drain_phase_events' target, during the drain
  // Followed processes per bit of zernel_follow (tgids that share a bit).
  std::unordered_map<std::uint32_t, std::uint32_t> bit_users;
  // (dev, inode) of files whose attach failed, and when to try again (monotonic ns).
  std::vector<std::pair<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t>> failed_maps_ids;
  int ncpus = 0;
  LinkReaper reaper;

  // Every link is gone before the object: the ones handed to the reaper, then the rest.
  ~Impl() {
    reaper.settle();
    for (bpf_link* l : every_task_links) bpf_link__destroy(l);
    bpf_link__destroy(switch_link);
    ring_buffer__free(phase_ring);
    probes_bpf__destroy(skel);
  }

  void set_follow_bit(std::uint32_t tgid, bool on) {
    const std::uint32_t bit = tgid & ZERNEL_FOLLOW_MASK;
    __u64* word = &skel->data_zprobe->zernel_follow[bit / 64];
    const __u64 mask = 1ULL << (bit % 64);
    if (on) {
      if (bit_users[bit]++ == 0) __atomic_or_fetch(word, mask, __ATOMIC_RELEASE);
      return;
    }
    const auto it = bit_users.find(bit);
    if (it == bit_users.end() || --it->second > 0) return;
    bit_users.erase(it);
    __atomic_and_fetch(word, ~mask, __ATOMIC_RELEASE);
  }
};

GpuSyncProbes::GpuSyncProbes(std::unique_ptr<Impl> impl, Options options)
    : impl_(std::move(impl)), options_(std::move(options)) {}

GpuSyncProbes::~GpuSyncProbes() {
  for (auto& [pid, f] : followed_) impl_->reaper.destroy(std::move(f.links));
}

Result<std::unique_ptr<GpuSyncProbes>> GpuSyncProbes::open(const Options& options) {
  const std::string what = "loading the GPU sync probes";
  sys::route_libbpf_log();

  if (!sys::can_use_bpf_tracing()) return Error(EPERM, what + ": " + kNeedRoot);
  if (::access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
    return Error(ENOTSUP, what +
                              ": the kernel has no BTF (/sys/kernel/btf/vmlinux; "
                              "CONFIG_DEBUG_INFO_BTF)");
  }

  auto impl = std::make_unique<Impl>();
  impl->ncpus = libbpf_num_possible_cpus();
  if (impl->ncpus <= 0) return libbpf_error(what + ": counting possible CPUs", impl->ncpus);

  impl->uprobe_multi = !options.perf_uprobes && kernel_has_uprobe_multi();
  // Tests only: $ZERNEL_TEST_NO_SYNC_KICKS=1 loads the plain pair where the kernel allows the
  // _kick one, so that the scheduler's polling fallback runs on such a kernel too.
  const char* no_kicks = std::getenv("ZERNEL_TEST_NO_SYNC_KICKS");
  const bool kicks_off = no_kicks != nullptr && std::string_view(no_kicks) == "1";
  impl->sync_kicks = options.phase_events && !kicks_off && kernel_allows_timer_in_uprobes();
  impl->skel = probes_bpf__open();
  if (impl->skel == nullptr) return libbpf_error(what + ": opening probes.bpf.o", errno);
  configure_programs(*impl->skel, options, impl->uprobe_multi, impl->sync_kicks, impl->ncpus);
  if (const int err = probes_bpf__load(impl->skel); err != 0) {
    if (-err == EPERM) return Error(EPERM, what + ": " + kNeedRoot);
    return libbpf_error(what + " (the kernel rejected probes.bpf.o; libbpf's log has the reason)",
                        err);
  }

  std::unique_ptr<GpuSyncProbes> self(new GpuSyncProbes(std::move(impl), options));
  if (options.phase_events) {
    self->open_phase_events();
    if (!self->phase_error_) {
      spdlog::info(self->sync_kicks()
                       ? "GPU sync probes: a sync's phase changes are kicked for by the probes' "
                         "timer (the kernel lets a uprobe use a bpf_timer)"
                   : kicks_off
                       ? "GPU sync probes: $ZERNEL_TEST_NO_SYNC_KICKS=1 (tests): the sched_ext "
                         "scheduler's phase timer polls while a thread is in a sync"
                       : "GPU sync probes: this kernel refuses a bpf_timer to uprobes; the "
                         "sched_ext scheduler's phase timer polls while a thread is in a sync");
    }
  } else {
    self->phase_error_ = Error(ENOTSUP, "phases from events are off ([phase_detection] mode)");
  }
  return self;
}

void GpuSyncProbes::open_phase_events() {
  auto& impl = *impl_;
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

// The programs that run for every task: thread exit and the context switch (futex waits and
// the phase rules). A failure turns off what needs that program and says so once.
void GpuSyncProbes::attach_every_task_programs() {
  auto& impl = *impl_;
  auto& progs = impl.skel->progs;
  impl.attached = true;
  bpf_link* exit_link =
      bpf_program__attach_raw_tracepoint(progs.zernel_thread_exit, "sched_process_exit");
  if (exit_link == nullptr) {
    spdlog::warn(
        "GPU sync probes: attaching the raw tracepoint sched_process_exit: {} (the "
        "state of exiting threads stays until forget)",
        std::strerror(errno));
  } else {
    impl.every_task_links.push_back(exit_link);
  }
  if (!impl.switch_carried) attach_switch_program();
}

void GpuSyncProbes::attach_switch_program() {
  auto& impl = *impl_;
  if (futex_error_ || impl.switch_link != nullptr) return;  // failed before: not again
  impl.switch_link = bpf_program__attach(impl.skel->progs.zernel_switch);
  if (impl.switch_link == nullptr) {
    futex_error_ = libbpf_error("counting futex waits: attaching tp_btf/sched_switch", errno);
    spdlog::warn("{}", futex_error_->message());
    if (!phase_error_) {
      phase_error_ = Error(futex_error_->code(), "phases from events: " + futex_error_->message());
    }
  }
}

void GpuSyncProbes::detach_every_task_programs() {
  if (impl_->switch_link != nullptr) impl_->every_task_links.push_back(impl_->switch_link);
  impl_->switch_link = nullptr;
  impl_->reaper.destroy(std::move(impl_->every_task_links));
  impl_->every_task_links.clear();
  impl_->attached = false;
}

void GpuSyncProbes::set_switch_carried(bool carried) {
  auto& impl = *impl_;
  if (impl.switch_carried == carried) return;
  impl.switch_carried = carried;
  spdlog::info("GPU sync probes: the context-switch rules run in {}",
               carried ? "the sched_ext scheduler's ops.stopping and ops.running"
                       : "the probes' tracepoint sched_switch");
  if (!impl.attached) return;  // nothing followed: attached at the next first follow
  if (!carried) {
    attach_switch_program();
  } else if (impl.switch_link != nullptr) {
    impl.reaper.destroy({impl.switch_link});
    impl.switch_link = nullptr;
  }
}

bool GpuSyncProbes::switch_carried() const { return impl_->switch_carried; }

std::vector<GpuSyncProbes::SharedMap> GpuSyncProbes::shared_maps() const {
  std::vector<SharedMap> out;
  if (phase_error_) return out;
  bpf_map* map = nullptr;
  bpf_object__for_each_map(map, impl_->skel->obj) {
    out.push_back(SharedMap{bpf_map__name(map), bpf_map__fd(map)});
  }
  return out;
}

GpuSyncProbes::Followed& GpuSyncProbes::follow(std::uint32_t pid) {
  auto [it, added] = followed_.try_emplace(pid);
  if (added) {
    impl_->set_follow_bit(pid, true);
    if (!impl_->attached) attach_every_task_programs();
  }
  return it->second;
}

void GpuSyncProbes::unfollow_if_idle(std::uint32_t pid) {
  const auto it = followed_.find(pid);
  if (it == followed_.end()) return;
  if (it->second.futex || it->second.role || !it->second.links.empty()) return;
  followed_.erase(it);
  impl_->set_follow_bit(pid, false);
  if (followed_.empty() && impl_->attached) detach_every_task_programs();
}

std::size_t GpuSyncProbes::followed() const { return followed_.size(); }
bool GpuSyncProbes::attached() const { return impl_->attached; }
bool GpuSyncProbes::uprobe_multi() const { return impl_->uprobe_multi; }
void GpuSyncProbes::settle() { impl_->reaper.settle(); }

bool GpuSyncProbes::sync_kicks() const { return impl_->sync_kicks && !phase_error_; }

int GpuSyncProbes::phase_map_fd() const {
  return phase_error_ ? -1 : bpf_map__fd(impl_->skel->maps.zernel_phase_threads);
}

GpuSyncProbes::ProgramRuns GpuSyncProbes::switch_runs() const {
  bpf_prog_info info{};
  __u32 len = sizeof info;
  if (bpf_prog_get_info_by_fd(bpf_program__fd(impl_->skel->progs.zernel_switch), &info, &len) !=
      0) {
    return {};
  }
  return {info.run_cnt, info.run_time_ns};
}

Result<void> GpuSyncProbes::set_phase_role(std::uint32_t pid, PhaseRole role) {
  if (phase_error_) return *phase_error_;
  // The time first, then the entry: a thread that has no state at its first switch-in after
  // this has slept since before named_ns (probes/rules.bpf.h, FIRST SIGHT).
  const zernel_phase_proc entry{static_cast<__u32>(role), 0, monotonic_ns()};
  const int err = bpf_map__update_elem(impl_->skel->maps.zernel_phase_procs, &pid, sizeof pid,
                                       &entry, sizeof entry, BPF_ANY);
  if (err != 0) {
    if (-err == E2BIG) {
      return Error(E2BIG, "phases from events: 65,536 processes have a role already");
    }
    return libbpf_error("phases from events: naming pid " + std::to_string(pid), err);
  }
  // After the role is in the map: its threads' events look it up from their next one.
  follow(pid).role = true;
  if (phase_error_) return *phase_error_;  // attaching the switch program failed just now
  return Ok{};
}

std::size_t GpuSyncProbes::drain_phase_events(std::vector<PhaseEvent>& out) {
  if (impl_->phase_ring == nullptr) return 0;
  const std::size_t before = out.size();
  impl_->drain_out = &out;
  (void)ring_buffer__consume(impl_->phase_ring);
  impl_->drain_out = nullptr;
  if (impl_->skel->data_zprobe->zernel_phase_unsent_pending != 0)
    take_unsent_phase_events(out, before);
  return out.size() - before;
}

// The changes the ring buffer had no room for, each thread's last (probes/rules.bpf.h, "LOST
// CHANGES"): the flag is cleared before the map is read, so a change kept after this read sets
// it again for the next drain. Each entry is taken with lookup-and-delete (a newer one the BPF
// side writes meanwhile stays for the next drain). One that a change of the same thread drained
// from the ring just now supersedes is dropped: the BPF side deletes such an entry once the
// later change went through, but may not have yet.
void GpuSyncProbes::take_unsent_phase_events(std::vector<PhaseEvent>& out,
                                             std::size_t drained_from) {
  __atomic_store_n(&impl_->skel->data_zprobe->zernel_phase_unsent_pending, 0U, __ATOMIC_SEQ_CST);
  bpf_map* map = impl_->skel->maps.zernel_phase_unsent;
  std::vector<PhaseEvent> kept;
  __u32 key = 0;
  __u32 next = 0;
  const __u32* prev = nullptr;
  std::vector<__u32> keys;
  while (bpf_map__get_next_key(map, prev, &next, sizeof next) == 0) {
    keys.push_back(next);
    key = next;
    prev = &key;
  }
  for (const __u32 tid : keys) {
    zernel_phase_event ev{};
    if (bpf_map__lookup_and_delete_elem(map, &tid, sizeof tid, &ev, sizeof ev, 0) != 0) continue;
    const bool superseded =
        std::any_of(out.begin() + static_cast<std::ptrdiff_t>(drained_from), out.end(),
                    [&](const PhaseEvent& e) { return e.tid == ev.tid && e.t_ns >= ev.t_ns; });
    if (!superseded) kept.push_back(PhaseEvent{ev.t_ns, ev.tid, ev.tgid, ev.phase, ev.cause});
  }
  std::sort(kept.begin(), kept.end(),
            [](const PhaseEvent& a, const PhaseEvent& b) { return a.t_ns < b.t_ns; });
  phase_events_recovered_ += kept.size();
  out.insert(out.end(), kept.begin(), kept.end());
}

Result<bool> GpuSyncProbes::attach_library(std::uint32_t pid, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno_error("probing " + path);
  const std::pair<std::uint64_t, std::uint64_t> id{static_cast<std::uint64_t>(st.st_dev),
                                                   static_cast<std::uint64_t>(st.st_ino)};
  if (const auto f = followed_.find(pid); f != followed_.end()) {
    const auto& files = f->second.files;
    if (std::find(files.begin(), files.end(), id) != files.end()) return false;
  }
  if (pid == 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
    return Error(ESRCH, "probing " + path + " in pid " + std::to_string(pid) + ": no such process");
  }

  // The file's entry points, resolved once per file (dev, inode).
  auto lib = std::find_if(libraries_.begin(), libraries_.end(), [&](const AttachedLibrary& l) {
    return l.dev == id.first && l.inode == id.second;
  });
  if (lib == libraries_.end()) {
    std::vector<std::string> wanted;
    for (const char* s : probes::kSyncSymbols) wanted.emplace_back(s);
    for (const char* s : probes::kOptionalSyncSymbols) wanted.emplace_back(s);
    auto found = probes::elf_function_offsets(path, wanted);
    if (!found) return found.error().context("probing " + path);
    std::string missing;
    for (const char* s : probes::kSyncSymbols) {
      if (std::none_of(found->begin(), found->end(),
                       [&](const probes::ElfFunction& f) { return f.name == s; })) {
        missing += missing.empty() ? s : std::string(", ") + s;
      }
    }
    if (!missing.empty()) {
      return Error(ENOENT, path + " has no " + missing + ": not a CUDA driver library");
    }
    AttachedLibrary entry{path, id.first, id.second, {}, {}};
    for (const auto& f : *found) {
      entry.symbols.push_back(f.name);
      entry.offsets.push_back(f.offset);
    }
    libraries_.push_back(std::move(entry));
    lib = std::prev(libraries_.end());
  }

  auto& progs = impl_->skel->progs;
  const std::vector<unsigned long> offsets(lib->offsets.begin(), lib->offsets.end());
  std::vector<bpf_link*> links;
  auto undo = [&] { impl_->reaper.destroy(std::move(links)); };
  // Attaches `prog` at every offset in pid; false (errno set) when the kernel refuses.
  auto attach = [&](bpf_program* prog, bool ret) {
    if (impl_->uprobe_multi) {
      bpf_uprobe_multi_opts opts{};
      opts.sz = sizeof opts;
      opts.offsets = offsets.data();
      opts.cnt = offsets.size();
      opts.retprobe = ret;
      bpf_link* link = bpf_program__attach_uprobe_multi(prog, static_cast<pid_t>(pid), path.c_str(),
                                                        nullptr, &opts);
      if (link == nullptr) return false;
      links.push_back(link);
      return true;
    }
    for (const unsigned long off : offsets) {
      bpf_uprobe_opts opts{};
      opts.sz = sizeof opts;
      opts.retprobe = ret;
      bpf_link* link =
          bpf_program__attach_uprobe_opts(prog, static_cast<pid_t>(pid), path.c_str(), off, &opts);
      if (link == nullptr) return false;
      links.push_back(link);
    }
    return true;
  };
  // The return probes first, then the entry probes: a call that enters between an entry
  // probe's attach and its return probe's would count a depth that no return undoes, and the
  // thread would read as inside a sync for good (each later call then looks nested). A return
  // without its entry is harmless: it is counted as a miss and changes nothing.
  const char* failed = nullptr;
  bpf_program* enter = impl_->sync_kicks ? progs.zernel_sync_enter_kick : progs.zernel_sync_enter;
  bpf_program* ret = impl_->sync_kicks ? progs.zernel_sync_return_kick : progs.zernel_sync_return;
  if (!attach(ret, true)) {
    failed = "uretprobes";
  } else if (!attach(enter, false)) {
    failed = "uprobes";
  }
  if (failed != nullptr) {
    const int err = errno;
    undo();
    return libbpf_error(
        std::string("attaching ") + failed + " to " + path + " in pid " + std::to_string(pid), err);
  }
  Followed& f = follow(pid);
  f.files.push_back(id);
  f.links.insert(f.links.end(), links.begin(), links.end());
  spdlog::info("GPU sync probes attached to {} in pid {} ({} entry points)", path, pid,
               offsets.size());
  return true;
}

Result<std::size_t> GpuSyncProbes::attach_process_libraries(std::uint32_t pid) {
  auto libs = probes::read_libcuda_mappings(options_.proc_root, pid);
  if (!libs) return libs.error();
  std::size_t attached = 0;
  for (const auto& lib : *libs) {
    const std::pair<std::uint64_t, std::uint64_t> id{
        static_cast<std::uint64_t>(makedev(lib.dev_major, lib.dev_minor)), lib.inode};
    // A file that failed is tried again after kAttachRetryNs, not at every scan (each refusal
    // is a libbpf warning in the log: once a minute, not twice a second).
    const std::uint64_t now = monotonic_ns();
    auto& failed = impl_->failed_maps_ids;
    const auto f =
        std::find_if(failed.begin(), failed.end(), [&](const auto& e) { return e.first == id; });
    if (f != failed.end() && now < f->second) continue;
    // The path as the process sees it: through its root, which may be a container's.
    const std::string path = options_.proc_root + "/" + std::to_string(pid) + "/root" + lib.path;
    auto r = attach_library(pid, path);
    if (!r) {
      if (r.error().code() == ESRCH) return r.error();
      if (f != failed.end()) {
        f->second = now + kAttachRetryNs;
      } else {
        failed.emplace_back(id, now + kAttachRetryNs);
      }
      return r.error().context("pid " + std::to_string(pid));
    }
    if (f != failed.end()) failed.erase(f);
    if (*r) ++attached;
  }
  return attached;
}

Result<void> GpuSyncProbes::track(std::uint32_t pid) {
  if (futex_error_) return *futex_error_;
  const zernel_probe_futex zero{};
  const int err = bpf_map__update_elem(impl_->skel->maps.zernel_probe_futex, &pid, sizeof pid,
                                       &zero, sizeof zero, BPF_NOEXIST);
  if (err == -E2BIG || err == -ENOMEM || err == -ENOSPC) {
    return Error(ENOSPC, "tracking futex waits of pid " + std::to_string(pid) +
                             ": the filter map is full (" + std::to_string(ZERNEL_PROBE_MAX_PROCS) +
                             " processes)");
  }
  if (err != 0 && err != -EEXIST) {
    return libbpf_error("tracking futex waits of pid " + std::to_string(pid), err);
  }
  if (err == 0) {
    if (auto it = previous_.find(pid); it != previous_.end()) it->second.futex_waits = 0;
  }
  follow(pid).futex = true;
  if (futex_error_) return *futex_error_;  // attaching the futex programs failed just now
  return Ok{};
}

Result<void> GpuSyncProbes::untrack(std::uint32_t pid) {
  if (futex_error_) return *futex_error_;
  const int err = bpf_map__delete_elem(impl_->skel->maps.zernel_probe_futex, &pid, sizeof pid, 0);
  if (err != 0 && err != -ENOENT) {
    return libbpf_error("untracking futex waits of pid " + std::to_string(pid), err);
  }
  if (auto it = previous_.find(pid); it != previous_.end()) it->second.futex_waits = 0;
  if (auto it = followed_.find(pid); it != followed_.end()) {
    it->second.futex = false;
    unfollow_if_idle(pid);
  }
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
  // underflow being repaired (probes/rules.bpf.h, proc_leave).
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
  s.interval_ns = first ? 0 : elapsed(now_ns, prev.now_ns);
  prev = Previous{proc.sync_count, proc.sync_time_ns, futex, now_ns};
  return s;
}

void GpuSyncProbes::forget(std::uint32_t pid) {
  auto* skel = impl_->skel;
  const auto it = followed_.find(pid);
  if (it != followed_.end()) {
    // Its uprobes go first (in the background); then its threads' sync state, which the exit
    // program no longer removes once the process is not followed.
    impl_->reaper.destroy(std::move(it->second.links));
    if (!it->second.files.empty()) {
      __u32 key = 0;
      __u32 next = 0;
      std::vector<__u32> mine;
      for (const __u32* prev = nullptr;
           bpf_map__get_next_key(skel->maps.zernel_probe_threads, prev, &next, sizeof next) == 0;
           prev = &key) {
        key = next;
        zernel_probe_thread t{};
        if (bpf_map__lookup_elem(skel->maps.zernel_probe_threads, &key, sizeof key, &t, sizeof t,
                                 0) == 0 &&
            t.tgid == pid) {
          mine.push_back(key);
        }
      }
      for (__u32 tid : mine) {
        (void)bpf_map__delete_elem(skel->maps.zernel_probe_threads, &tid, sizeof tid, 0);
      }
    }
    it->second = Followed{};
  }
  (void)bpf_map__delete_elem(skel->maps.zernel_probe_procs, &pid, sizeof pid, 0);
  (void)bpf_map__delete_elem(skel->maps.zernel_probe_futex, &pid, sizeof pid, 0);
  (void)bpf_map__delete_elem(skel->maps.zernel_phase_procs, &pid, sizeof pid, 0);
  previous_.erase(pid);
  unfollow_if_idle(pid);
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
  st.nccl_checks = sum[ZERNEL_PROBE_STAT_NCCL_CHECK];
  st.nccl_missed = sum[ZERNEL_PROBE_STAT_NCCL_CHECK_MISSED];
  st.wake_unseen = sum[ZERNEL_PROBE_STAT_WAKE_UNSEEN];
  st.sync_kicks = sum[ZERNEL_PROBE_STAT_SYNC_KICK];
  st.unsent_failed = sum[ZERNEL_PROBE_STAT_UNSENT_FAILED];
  st.phase_recovered = phase_events_recovered_;
  return st;
}

}  // namespace zernel::collect
