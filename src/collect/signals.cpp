#include "collect/signals.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <limits>

#include "collect/task_cpu.hpp"
#include "collect/wait_state.hpp"
#include "sys/procfs.hpp"

namespace zernel::collect {

namespace {

using sys::kMaxStatBytes;
constexpr std::size_t kMaxMapsBytes = std::size_t{64} << 20;
constexpr std::uint64_t kNsPerSecond = 1'000'000'000;

bool gone_errno(int err) { return err == ENOENT || err == ESRCH; }

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return b > std::numeric_limits<std::uint64_t>::max() - a
             ? std::numeric_limits<std::uint64_t>::max()
             : a + b;
}

// ticks * 1e9 / hz without overflowing for any tick count that fits the result.
std::uint64_t ticks_to_ns(std::uint64_t ticks, std::uint64_t hz) {
  const std::uint64_t whole = ticks / hz;
  const std::uint64_t rest = ticks % hz;  // < hz, so rest * 1e9 fits for any sane hz
  if (whole > std::numeric_limits<std::uint64_t>::max() / kNsPerSecond) {
    return std::numeric_limits<std::uint64_t>::max();
  }
  return whole * kNsPerSecond + rest * kNsPerSecond / hz;
}

// The modes that measure I/O wait (a walk over the threads).
bool reads_threads(SampleMode mode) {
  return mode == SampleMode::full || mode == SampleMode::no_nccl ||
         mode == SampleMode::idle_backoff;
}

// Reads a /proc file from offset 0 through an open descriptor. A proc file is made whole at the
// first read, so a read shorter than the room left is its end (saves the read that returns 0).
int pread_proc_file(int fd, std::string& out, std::size_t max_bytes) {
  out.resize(std::min<std::size_t>(4096, max_bytes + 1));
  std::size_t len = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, out.data() + len, out.size() - len, static_cast<off_t>(len));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      out.clear();
      return err;
    }
    len += static_cast<std::size_t>(n);
    if (n == 0 || len < out.size()) break;
    if (out.size() > max_bytes) {
      out.clear();
      return EFBIG;
    }
    out.resize(std::min(out.size() * 2, max_bytes + 1));
  }
  out.resize(len);
  return 0;
}

}  // namespace

policy::TaskUpdate ProcessSignals::update() const {
  policy::TaskUpdate u;
  u.io_wait_fraction = io_wait_fraction;
  u.nccl_active = nccl_active;
  return u;
}

SignalSampler::SignalSampler(SignalsOptions options) : options_(std::move(options)) {
  if (options_.keep_files_open && options_.max_open_files == 0) {
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
      options_.max_open_files = static_cast<std::size_t>(lim.rlim_cur / 2);
    } else {
      options_.max_open_files = 32768;
    }
  }
  if (options_.nccl_check_every == 0) options_.nccl_check_every = 1;
  if (options_.clock_ticks_per_s != 0) {
    ticks_per_s_ = options_.clock_ticks_per_s;
  } else if (const long hz = ::sysconf(_SC_CLK_TCK); hz > 0) {
    ticks_per_s_ = static_cast<std::uint64_t>(hz);
  }
}

std::vector<ProcessSignals> SignalSampler::sample(std::span<const std::uint32_t> pids,
                                                  std::uint64_t now_ns) {
  std::vector<ProcessSignals> out;
  sample(pids, now_ns, out);
  return out;
}

void SignalSampler::sample(std::span<const std::uint32_t> pids, std::uint64_t now_ns,
                           std::vector<ProcessSignals>& out) {
  sample(pids, {}, now_ns, out);
}

void SignalSampler::sample(std::span<const std::uint32_t> pids, std::span<const SampleMode> modes,
                           std::uint64_t now_ns, std::vector<ProcessSignals>& out,
                           TaskCpuSource* task_cpu, bool complete) {
  out.clear();
  out.resize(pids.size());
  ++generation_;
  task_cpu_.clear();
  if (task_cpu != nullptr) {
    // Every tracked process is followed (a set that changes as processes come and go, named in
    // full when `complete`); the source is read when it answers the processes sampled this time
    // for less than /proc would.
    if (complete) {
      source_pids_.assign(pids.begin(), pids.end());
      // The tick builder's pids come sorted already: an O(n) check instead of a sort each tick.
      if (!std::is_sorted(source_pids_.begin(), source_pids_.end())) {
        std::sort(source_pids_.begin(), source_pids_.end());
      }
      source_pids_.erase(std::unique(source_pids_.begin(), source_pids_.end()), source_pids_.end());
      task_cpu->follow(source_pids_);
    }
    std::size_t sampled = 0;
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (i >= modes.size() || modes[i] != SampleMode::skip) ++sampled;
    }
    if (sampled > 0 && task_cpu->worth_reading(sampled) && !task_cpu->read(task_cpu_)) {
      task_cpu_.clear();
    }
  }
  int err = 0;
  const sys::UniqueFd proc = sys::open_dir_at(AT_FDCWD, options_.proc_root.c_str(), err);
  for (std::size_t i = 0; i < pids.size(); ++i) {
    out[i].pid = pids[i];
    const SampleMode mode = i < modes.size() ? modes[i] : SampleMode::full;
    if (proc.valid()) sample_one(proc.get(), pids[i], mode, now_ns, out[i]);
  }
  if (!complete) return;
  std::erase_if(state_, [&](const auto& kv) {
    if (kv.second.generation == generation_) return false;
    if (kv.second.stat_fd.valid()) --open_files_;
    if (kv.second.schedstat_fd.valid()) --open_files_;
    return true;
  });
}

int SignalSampler::read_stat(int proc_fd, const char* name, PidState* known, sys::UniqueFd& dir,
                             sys::UniqueFd& fresh) {
  if (known != nullptr && known->stat_fd.valid()) {
    const int err = pread_proc_file(known->stat_fd.get(), buf_, kMaxStatBytes);
    if (err == 0) return 0;
    // ESRCH: that process is gone; the pid may be another's by now, which opening it tells.
    known->stat_fd.reset();
    --open_files_;
  }
  int err = 0;
  dir = sys::open_dir_at(proc_fd, name, err);
  if (!dir.valid()) return err;
  fresh = sys::UniqueFd(::openat(dir.get(), "stat", O_RDONLY | O_CLOEXEC));
  if (!fresh.valid()) return errno;
  return pread_proc_file(fresh.get(), buf_, kMaxStatBytes);
}

bool SignalSampler::unchanged(PidState& s, SampleMode mode, std::uint64_t now_ns,
                              ProcessSignals& out, std::uint64_t& run_ns,
                              std::uint64_t& timeslices) {
  run_ns = timeslices = 0;
  if (!s.schedstat_fd.valid()) return false;
  if (pread_proc_file(s.schedstat_fd.get(), buf_, 256) != 0) {
    s.schedstat_fd.reset();  // exited (ESRCH): the full read finds out
    --open_files_;
    return false;
  }
  const auto st = parse_schedstat(buf_);
  if (!st || st->run_ns == 0) return false;  // unparsable, or schedstats off (all zeros)
  run_ns = st->run_ns;
  timeslices = st->timeslices;
  if (s.num_threads != 1 || s.samples == 0) return false;
  if (st->run_ns != s.run_ns || st->timeslices != s.timeslices) {
    return mode == SampleMode::cpu_time && cpu_time_from_schedstat(s, *st, now_ns, out);
  }
  // Not on a CPU since the last sample, and alone in its process: nothing it could change has.
  answer_unchanged(s, mode, now_ns, out);
  ++unchanged_samples_;
  return true;
}

bool SignalSampler::ran_little(const PidState& s, const sys::ProcStat& st, std::uint64_t run_ns,
                               std::uint64_t interval_ns) {
  // Alone in its process at both reads (schedstat's run time is the main thread's only), both
  // run times known, and less than 1/kNearlyIdleShare of the interval between them.
  return s.num_threads == 1 && st.num_threads == 1 && s.run_ns != 0 && run_ns >= s.run_ns &&
         (run_ns - s.run_ns) < interval_ns / kNearlyIdleShare;
}

void SignalSampler::back_off(PidState& s) {
  s.idle_streak = std::min(s.idle_streak + 1, kIdleBackoffMax);
  s.idle_skip = s.idle_streak;
}

void SignalSampler::answered(PidState& s, std::uint64_t now_ns) const {
  s.generation = generation_;
  s.last_ns = now_ns;
  if (s.samples < std::numeric_limits<std::uint32_t>::max()) ++s.samples;
}

bool SignalSampler::cpu_time_from_schedstat(PidState& s, const SchedStat& st, std::uint64_t now_ns,
                                            ProcessSignals& out) {
  if (s.run_ns == 0 || s.schedstat_only + 1 >= kCpuTimeStatEvery || st.run_ns < s.run_ns) {
    return false;  // no baseline yet, the stat is due, or the run time went backwards
  }
  // Alone in its process at the last stat read: the thread's run time is the process's CPU
  // time (threads it started since are counted at the next stat read).
  const std::uint64_t ran = st.run_ns - s.run_ns;
  out.starttime = s.starttime;
  if (now_ns > s.last_ns) out.cpu_time_ns = ran;
  s.run_ns = st.run_ns;
  s.timeslices = st.timeslices;
  s.schedstat_cpu_ns = saturating_add(s.schedstat_cpu_ns, ran);
  ++s.schedstat_only;
  answered(s, now_ns);
  ++schedstat_cpu_samples_;
  return true;
}

void SignalSampler::answer_unchanged(PidState& s, SampleMode mode, std::uint64_t now_ns,
                                     ProcessSignals& out) const {
  const bool elapsed = now_ns > s.last_ns;
  out.state = s.state;
  out.starttime = s.starttime;
  if (elapsed) out.cpu_time_ns = 0;
  if (options_.measure_io_wait && reads_threads(mode) && elapsed && s.threads_valid) {
    out.io_wait_fraction = 0.0F;
  }
  answered(s, now_ns);
}

const TaskCpu* SignalSampler::task_cpu_of(std::uint32_t pid) const {
  const auto it = std::lower_bound(task_cpu_.begin(), task_cpu_.end(), pid,
                                   [](const TaskCpu& e, std::uint32_t p) { return e.pid < p; });
  return it == task_cpu_.end() || it->pid != pid ? nullptr : &*it;
}

void SignalSampler::keep_source_baseline(PidState& s, const TaskCpu* t) {
  s.src_cpu_ns = t != nullptr ? t->cpu_ns : 0;
  s.src_timeslices = t != nullptr ? t->timeslices : 0;
  s.src_threads = t != nullptr ? t->threads : 0;
}

bool SignalSampler::unchanged_by_source(PidState& s, const TaskCpu& t, SampleMode mode,
                                        std::uint64_t now_ns, ProcessSignals& out) {
  // No thread ran (nor was switched in) since the last /proc read, and none came or went.
  if (s.src_cpu_ns == 0 || s.samples == 0 || t.cpu_ns != s.src_cpu_ns ||
      t.timeslices != s.src_timeslices || t.threads != s.src_threads) {
    return false;
  }
  answer_unchanged(s, mode, now_ns, out);
  ++unchanged_samples_;
  ++task_cpu_samples_;
  return true;
}

bool SignalSampler::cpu_time_from_source(PidState& s, const TaskCpu& t, std::uint64_t now_ns,
                                         ProcessSignals& out) {
  if (s.src_cpu_ns == 0 || s.samples == 0) return false;
  out.starttime = s.starttime;
  // Never backwards: a thread that exited during the iterator's walk is missed once (see
  // bpf/task_cpu.bpf.c) and counted at the next read.
  if (now_ns > s.last_ns) out.cpu_time_ns = t.cpu_ns > s.src_cpu_ns ? t.cpu_ns - s.src_cpu_ns : 0;
  s.src_cpu_ns = std::max(s.src_cpu_ns, t.cpu_ns);
  // The /proc baselines are older than this sample now: a later /proc read starts them over.
  s.ticks_stale = true;
  s.run_ns = 0;
  s.timeslices = 0;
  s.schedstat_only = 0;
  s.schedstat_cpu_ns = 0;
  answered(s, now_ns);
  ++task_cpu_samples_;
  return true;
}

int SignalSampler::PidDir::open() {
  if (fd.valid()) return 0;
  int err = 0;
  fd = sys::open_dir_at(proc_fd, name, err);
  return fd.valid() ? 0 : err;
}

void SignalSampler::drop_pid(std::uint32_t pid, ProcessSignals& out) {
  out.gone = true;
  if (auto it = state_.find(pid); it != state_.end()) {
    if (it->second.stat_fd.valid()) --open_files_;
    if (it->second.schedstat_fd.valid()) --open_files_;
    state_.erase(it);
  }
}

SignalSampler::PidState& SignalSampler::state_for_stat(std::uint32_t pid, const sys::ProcStat& st,
                                                       ProcessSignals& out) {
  auto [it, inserted] = state_.try_emplace(pid);
  PidState& s = it->second;
  if (!inserted && s.starttime != st.starttime_ticks) {
    out.restarted = true;
    s.samples = 0;
    s.threads.clear();
    s.threads_valid = false;
  }
  return s;
}

void SignalSampler::keep_stat_descriptors(PidState& s, const sys::ProcStat& st,
                                          sys::UniqueFd& fresh_stat, PidDir& dir) {
  if (fresh_stat.valid() && options_.keep_files_open && !s.stat_fd.valid() &&
      open_files_ < options_.max_open_files) {
    s.stat_fd = std::move(fresh_stat);
    ++open_files_;
  }
  if (!options_.skip_unchanged || !options_.keep_files_open || st.num_threads != 1 ||
      s.schedstat_fd.valid() || !s.stat_fd.valid() || open_files_ >= options_.max_open_files) {
    return;
  }
  // Opened through the process's directory like stat, so it is tied to the same process. No
  // baseline yet (run_ns 0): read after the stat, it could include a run that ended after the
  // stat said R, and every later sample would answer R from it; the next sample reads schedstat
  // first and then the stat, which makes a true baseline.
  if (dir.open() != 0) return;
  s.schedstat_fd = sys::UniqueFd(::openat(dir.fd.get(), "schedstat", O_RDONLY | O_CLOEXEC));
  if (!s.schedstat_fd.valid()) return;
  ++open_files_;
  s.run_ns = 0;
  s.timeslices = 0;
}

float SignalSampler::io_wait_fraction_since(const PidState& s, std::uint64_t now_ns) const {
  // Growth of the threads seen before, plus everything of the threads born since.
  std::uint64_t delta = 0;
  std::size_t j = 0;
  for (const auto& [tid, ticks] : threads_) {
    while (j < s.threads.size() && s.threads[j].first < tid) ++j;
    const bool known = j < s.threads.size() && s.threads[j].first == tid;
    // A smaller count than before is a new thread that reused the tid.
    const std::uint64_t grown =
        known && ticks >= s.threads[j].second ? ticks - s.threads[j].second : ticks;
    delta = saturating_add(delta, grown);
  }
  const double blocked_s = static_cast<double>(delta) / static_cast<double>(ticks_per_s_);
  const double interval_s =
      static_cast<double>(now_ns - s.last_ns) / static_cast<double>(kNsPerSecond);
  return static_cast<float>(std::clamp(blocked_s / interval_s, 0.0, 1.0));
}

int SignalSampler::sample_io_wait(std::uint32_t pid, const sys::ProcStat& st, PidState& s,
                                  PidDir& dir, bool elapsed, std::uint64_t now_ns,
                                  ProcessSignals& out) {
  int err = 0;
  if (st.num_threads == 1 && st.delayacct_blkio_ticks) {
    // A single-threaded process: its stat line is its only thread's, so the per-thread walk
    // (a directory listing and one more file per thread) is not needed.
    threads_.assign(1, {pid, *st.delayacct_blkio_ticks});
  } else {
    err = dir.open();
    if (err == 0) err = read_threads(dir.fd.get());
  }
  if (gone_errno(err)) return err;
  if (err == 0) {
    if (elapsed && s.threads_valid) out.io_wait_fraction = io_wait_fraction_since(s, now_ns);
    s.threads.swap(threads_);
    s.threads_valid = true;
  } else {
    s.threads_valid = false;
  }
  return err;
}

void SignalSampler::sample_one(int proc_fd, std::uint32_t pid, SampleMode mode,
                               std::uint64_t now_ns, ProcessSignals& out) {
  char name[16] = {};
  std::to_chars(name, name + sizeof(name) - 1, pid);
  auto prior = state_.find(pid);
  if (mode == SampleMode::idle_backoff && prior != state_.end() && prior->second.idle_skip > 0) {
    --prior->second.idle_skip;
    ++idle_skipped_samples_;
    mode = SampleMode::skip;
  }
  if (mode == SampleMode::skip) {
    out.skipped = true;
    if (prior != state_.end()) prior->second.generation = generation_;
    return;
  }
  // The source's answer: cpu_time's CPU time, or for the other modes that nothing ran. Without
  // a baseline yet, /proc answers this time and the source's figures become the baseline.
  const TaskCpu* source = task_cpu_of(pid);
  if (source != nullptr && prior != state_.end()) {
    PidState& s = prior->second;
    if (mode == SampleMode::cpu_time
            ? cpu_time_from_source(s, *source, now_ns, out)
            : options_.skip_unchanged && unchanged_by_source(s, *source, mode, now_ns, out)) {
      if (mode == SampleMode::idle_backoff) back_off(s);
      return;
    }
  }
  std::uint64_t sched_run_ns = 0;
  std::uint64_t sched_timeslices = 0;
  if (options_.skip_unchanged && prior != state_.end() &&
      unchanged(prior->second, mode, now_ns, out, sched_run_ns, sched_timeslices)) {
    keep_source_baseline(prior->second, source);
    if (mode == SampleMode::idle_backoff) back_off(prior->second);
    return;
  }
  PidDir dir{proc_fd, name, {}};  // <proc>/<pid>, opened only when needed
  sys::UniqueFd fresh;            // a newly opened stat, kept below when there is room
  const int err =
      read_stat(proc_fd, name, prior != state_.end() ? &prior->second : nullptr, dir.fd, fresh);
  if (err != 0) {
    if (gone_errno(err)) drop_pid(pid, out);
    return;
  }
  auto st = sys::parse_stat(buf_);
  if (!st) {
    // Garbled: nothing measured this time; the state stays, so the next good sample measures
    // the interval since the last good one.
    if (auto kept = state_.find(pid); kept != state_.end()) kept->second.generation = generation_;
    return;
  }
  if (st->is_dead()) {
    drop_pid(pid, out);
    return;
  }
  out.state = st->state;
  out.starttime = st->starttime_ticks;

  PidState& s = state_for_stat(pid, *st, out);
  const bool elapsed = s.samples != 0 && now_ns > s.last_ns;
  const bool nearly_idle = mode == SampleMode::idle_backoff && elapsed &&
                           ran_little(s, *st, sched_run_ns, now_ns - s.last_ns);
  s.generation = generation_;
  s.state = st->state;
  s.num_threads = st->num_threads;
  s.run_ns = sched_run_ns;
  s.timeslices = sched_timeslices;
  keep_stat_descriptors(s, *st, fresh, dir);

  const std::uint64_t cpu = saturating_add(st->utime_ticks, st->stime_ticks);
  if (elapsed && cpu >= s.cpu_ticks && !s.ticks_stale) {
    // Less what samples from schedstat reported since the stat before (cpu_time mode).
    const std::uint64_t ns = ticks_to_ns(cpu - s.cpu_ticks, ticks_per_s_);
    out.cpu_time_ns = ns > s.schedstat_cpu_ns ? ns - s.schedstat_cpu_ns : 0;
  }
  s.schedstat_only = 0;
  s.schedstat_cpu_ns = 0;
  s.ticks_stale = false;
  keep_source_baseline(s, source);
  if (options_.measure_io_wait && reads_threads(mode) &&
      gone_errno(sample_io_wait(pid, *st, s, dir, elapsed, now_ns, out))) {
    drop_pid(pid, out);
    return;
  }
  if (nearly_idle && st->state != 'D' && out.io_wait_fraction.value_or(0.0F) == 0.0F) {
    // It ran, but for less than the periodic rules tell from sleep, and did not wait for I/O
    // (that is DataLoading's sign): backed off as one that did not run (the sample after the
    // back-off measures the whole interval since this one).
    back_off(s);
    ++nearly_idle_samples_;
  } else {
    s.idle_streak = 0;  // it ran (or is read in full): looked at every sample again
    s.idle_skip = 0;
  }
  if (mode == SampleMode::full && s.samples % options_.nccl_check_every == 0 && dir.open() == 0) {
    out.nccl_active = nccl_active(dir.fd.get());
  }
  s.starttime = st->starttime_ticks;
  s.last_ns = now_ns;
  s.cpu_ticks = cpu;
  if (s.samples < std::numeric_limits<std::uint32_t>::max()) ++s.samples;
}

int SignalSampler::read_threads(int pid_dirfd) {
  threads_.clear();
  sys::DirReader tasks(pid_dirfd, "task");
  if (tasks.error() != 0) return tasks.error();
  char path[32];
  while (const char* name = tasks.next()) {
    const auto tid = sys::parse_pid_name(name);
    if (!tid) continue;
    auto [end, ec] = std::to_chars(path, path + 16, *tid);
    if (ec != std::errc()) continue;
    std::copy_n("/stat", 6, end);
    if (sys::read_file_at(tasks.fd(), path, buf_, kMaxStatBytes) != 0) continue;  // thread exited
    auto st = sys::parse_stat(buf_);
    if (!st || !st->delayacct_blkio_ticks) continue;
    threads_.emplace_back(*tid, *st->delayacct_blkio_ticks);
  }
  std::sort(threads_.begin(), threads_.end());
  return 0;
}

std::optional<bool> SignalSampler::nccl_active(int pid_dirfd) {
  bool readable = false;
  if (sys::read_file_at(pid_dirfd, "maps", buf_, kMaxMapsBytes) == 0) {
    readable = true;
    std::string_view text = buf_;
    while (!text.empty()) {
      const std::size_t nl = text.find('\n');
      const std::string_view line = text.substr(0, nl);
      text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
      const auto path = sys::maps_line_path(line);
      if (path && sys::is_nccl_mapping(*path)) return true;
    }
  }
  sys::DirReader fds(pid_dirfd, "fd");
  if (fds.error() == 0) {
    readable = true;
    while (const char* name = fds.next()) {
      if (sys::read_link_at(fds.fd(), name, link_) == 0 && sys::is_nccl_shm_path(link_))
        return true;
    }
  }
  if (!readable) return std::nullopt;
  return false;
}

}  // namespace zernel::collect
