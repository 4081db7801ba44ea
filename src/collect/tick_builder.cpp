#include "collect/tick_builder.hpp"

#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <utility>

#include "collect/sync_signals.hpp"
#include "collect/wait_state.hpp"
#include "common/clock.hpp"

namespace zernel::collect {
namespace {

SyncState sync_state(const ProbeSample& p, bool runnable, std::optional<std::uint32_t> nvml_util) {
  SyncState st;
  st.in_sync = p.in_sync;
  st.in_sync_since_ns = p.in_sync_since_ns;
  st.last_return_ns = p.last_sync_return_ns;
  st.burst_since_return_ns = p.cpu_burst_ns;
  st.last_burst_ns = p.last_burst_ns;
  st.sync_time_delta_ns = p.sync_time_delta_ns;
  st.interval_ns = p.interval_ns;
  st.runnable = runnable;
  st.nvml_util_pct = nvml_util;
  return st;
}

// GPU utilisation of a process this tick: `measured` when NVML gave per-process figures. An
// empty per-process answer (no process used the GPU since the last call) is a measurement of 0
// for everyone, not a reason to fall back to the device's figure: that one is averaged over up
// to a second and would make a GPU owner that has just stopped using its GPU look busy that long.
struct GpuUtil {
  std::uint32_t pct = 0;
  bool measured = false;
};

GpuUtil gpu_utilization_of(const TrackedProcess& t, const GpuUtilization* gpu) {
  if (gpu == nullptr) return {};
  if (auto it = gpu->per_process.find(t.pid); it != gpu->per_process.end()) {
    return {it->second, true};
  }
  // NVML measures per process and saw none of this one's work.
  if (gpu->per_process_ok) return {0, true};
  // No per-process figures: the device's, for its owners.
  if (t.gpu && t.role == ProcessRole::gpu_owner && *t.gpu < gpu->device.size()) {
    return {gpu->device[*t.gpu], false};
  }
  return {};
}

// CPU burst and last GPU sync from the uprobes, as the process stands now
// (collect/sync_signals.hpp): 0 while blocked in a long sync, the burst before a short one, the
// CPU since the return otherwise; a GPU utilisation floor of 100 while blocked in a long sync
// (NVML's per-process figure trails by up to a tick here, a second on real drivers), else the
// share of the tick spent in syncs; futex waits of the whole process. Returns the main thread's
// last futex wait stamp (0: none).
std::uint64_t apply_probes(const ProbeSample& p, bool runnable,
                           std::optional<std::uint32_t> nvml_util, bool counts_futex,
                           std::uint64_t read_ns, std::uint64_t tick_ns, policy::TaskUpdate& u) {
  // The probes' stamps are real CLOCK_MONOTONIC times, and the tick may run late: compare with
  // the time of this read, not the tick's deadline.
  const SyncSignals sig = sync_signals(sync_state(p, runnable, nvml_util), read_ns, tick_ns);
  u.cpu_burst_duration_ns = sig.cpu_burst_ns;
  if (sig.wait_blocks) u.gpu_wait_blocks = sig.wait_blocks;
  if (p.last_sync_return_ns > 0) u.last_gpu_sync_ns = p.last_sync_return_ns;
  if (!u.gpu_utilization || *u.gpu_utilization < sig.gpu_floor_pct) {
    u.gpu_utilization = static_cast<std::uint8_t>(sig.gpu_floor_pct);
  }
  if (counts_futex) {
    u.futex_wait_count =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(p.futex_waits_delta, UINT32_MAX));
  }
  return p.main_futex_wait_ns;
}

void trace_update(const TrackedProcess& t, const ProcessSignals& s, const policy::TaskUpdate& u) {
  spdlog::trace(
      "signals pid {} role {}: gpu {} io {:.2f} burst {} sync {} futex {} nccl {} "
      "cpu {:.2f} state {}",
      s.pid, static_cast<int>(t.role), u.gpu_utilization.value_or(255),
      u.io_wait_fraction.value_or(-1.0F), u.cpu_burst_duration_ns.value_or(0),
      u.last_gpu_sync_ns.value_or(0), u.futex_wait_count.value_or(0),
      u.nccl_active ? (*u.nccl_active ? 1 : 0) : -1, u.cpu_fraction.value_or(-1.0F), s.state);
}

}  // namespace

bool is_another_process(const ProcessSignals& s, std::uint64_t start) {
  return s.gone || s.restarted || (s.starttime != 0 && start != 0 && s.starttime != start);
}

TickBuilder::TickBuilder(Options options)
    : options_(std::move(options)), signals_(options_.signals) {}

std::uint64_t TickBuilder::now() const {
  return options_.clock ? options_.clock() : monotonic_ns();
}

TickResult TickBuilder::build(const TickInputs& in) {
  TickResult out;
  build(in, out);
  return out;
}

void TickBuilder::build(const TickInputs& in, TickResult& out) {
  out.updates.clear();
  out.gone.clear();
  sorted_.assign(in.processes.begin(), in.processes.end());
  std::sort(sorted_.begin(), sorted_.end(),
            [](const TrackedProcess& a, const TrackedProcess& b) { return a.pid < b.pid; });
  // A pid named twice is one process (the first entry's facts).
  sorted_.erase(
      std::unique(sorted_.begin(), sorted_.end(),
                  [](const TrackedProcess& a, const TrackedProcess& b) { return a.pid == b.pid; }),
      sorted_.end());
  pids_.clear();
  modes_.clear();
  for (const TrackedProcess& t : sorted_) {
    pids_.push_back(t.pid);
    modes_.push_back(t.sample);
  }
  if (in.complete) {
    std::erase_if(baselines_, [&](const auto& kv) {
      return !std::binary_search(pids_.begin(), pids_.end(), kv.first);
    });
  }
  signals_.sample(pids_, modes_, in.now_ns, samples_, in.task_cpu, in.complete);
  for (std::size_t i = 0; i < samples_.size(); ++i) {
    const ProcessSignals& s = samples_[i];
    const TrackedProcess& t = sorted_[i];
    if (s.skipped) continue;
    if (is_another_process(s, t.start)) {
      if (!s.gone) spdlog::debug("pid {} was reused by a new process: dropped", s.pid);
      out.gone.push_back(s.pid);
      baselines_.erase(s.pid);
      continue;
    }
    ProcessTick& p = out.updates.emplace_back();
    p.pid = s.pid;
    p.update = task_update(t, s, in);
    p.cpu_time_ns = s.cpu_time_ns;
    p.stat_read = s.state != '?';
    if (!p.stat_read) spdlog::debug("pid {}: /proc/{}/stat unreadable this tick", s.pid, s.pid);
  }
}

void TickBuilder::forget(std::uint32_t pid) { baselines_.erase(pid); }

policy::TaskUpdate TickBuilder::task_update(const TrackedProcess& t, const ProcessSignals& s,
                                            const TickInputs& in) {
  policy::TaskUpdate u = s.update();
  if (t.event_role) {
    u.event_phase = policy::Phase::unknown;
    if (in.event_phases != nullptr) {
      if (auto it = in.event_phases->find(s.pid); it != in.event_phases->end()) {
        u.event_phase = it->second;
      }
    }
  }
  const GpuUtil util = gpu_utilization_of(t, in.gpu);
  u.gpu_utilization = static_cast<std::uint8_t>(std::min<std::uint32_t>(util.pct, 100));
  const bool stat_only = t.sample == SampleMode::stat_only || t.sample == SampleMode::cpu_time;
  if (!stat_only || t.role != ProcessRole::dataloader_worker) set_cpu_fraction(t, s, in, u);
  std::uint64_t main_futex_wait_ns = 0;
  // The probes' figures feed the periodic rules only: a process whose phases come from events
  // has them from the BPF rules, and reading them (two or three map lookups and a schedstat a
  // process) would be work nothing uses.
  if (in.probes != nullptr && t.probed && !t.event_role) {
    if (std::optional<ProbeSample> p = in.probes->read(s.pid, in.now_ns)) {
      main_futex_wait_ns =
          apply_probes(*p, s.state == 'R', util.measured ? std::optional(util.pct) : std::nullopt,
                       in.probes->counts_futex_waits(), now(), in.tick_ns, u);
    }
  }
  // What a GPU owner's main thread is blocked in now. On its workers' queue: waiting for data.
  // In futex, or running between the short waits of a wait loop (the probes' stamp of its last
  // futex wait): a collective's wait; this beats the probes' per-process futex count, which
  // every helper thread's lock adds to.
  if (t.role == ProcessRole::gpu_owner && !stat_only) {
    const MainThreadWait w = read_main_thread_wait(options_.signals.proc_root, s.pid);
    if (t.has_workers && w == MainThreadWait::input) u.io_wait_fraction = 1.0F;
    if (w != MainThreadWait::unknown) {
      u.futex_wait_count = main_thread_in_futex_wait(w, main_futex_wait_ns, now()) ? 1U : 0U;
    }
  }
  if (spdlog::should_log(spdlog::level::trace)) trace_update(t, s, u);
  return u;
}

void TickBuilder::set_cpu_fraction(const TrackedProcess& t, const ProcessSignals& s,
                                   const TickInputs& in, policy::TaskUpdate& u) {
  if (t.role != ProcessRole::dataloader_worker) {
    if (s.cpu_time_ns && in.tick_ns != 0) {
      u.cpu_fraction =
          static_cast<float>(static_cast<double>(*s.cpu_time_ns) / static_cast<double>(in.tick_ns));
    }
    return;
  }
  // A worker wanting the CPU is producing, also while it waits for one: time on the CPU plus
  // time runnable on a run queue (/proc/PID/schedstat), so contention does not hide it. And as
  // it stands now: running or runnable (R) or in disk I/O (D) is producing this instant, which
  // the interval's share (none yet on a first sample) may not show for a tick.
  const auto busy = worker_busy_fraction(s.pid, in.now_ns);
  const bool busy_now = s.state == 'R' || s.state == 'D';
  if (busy_now) {
    u.cpu_fraction = 1.0F;
  } else if (busy) {
    u.cpu_fraction = busy;
  }
}

std::optional<float> TickBuilder::worker_busy_fraction(std::uint32_t pid, std::uint64_t now_ns) {
  auto st = read_schedstat(options_.signals.proc_root, pid);
  if (!st) return std::nullopt;
  Baseline& b = baselines_[pid];
  const std::uint64_t busy = st->run_ns + st->wait_ns;
  std::optional<float> out;
  if (b.at_ns != 0 && now_ns > b.at_ns && busy >= b.busy_ns) {
    out = static_cast<float>(static_cast<double>(busy - b.busy_ns) /
                             static_cast<double>(now_ns - b.at_ns));
  }
  b.busy_ns = busy;
  b.at_ns = now_ns;
  return out;
}

}  // namespace zernel::collect
