#pragma once
// Per-process signals from /proc for the tracked processes, sampled every tick.
//
//   io_wait_fraction  share of the interval the process spent blocked on block I/O, from delay
//                     accounting: the per-thread delayacct_blkio_ticks (/proc/PID/task/TID/stat
//                     field 42; the process-level stat holds only the main thread's) summed over
//                     the threads, its growth since the previous sample divided by the elapsed
//                     time. Several threads blocked at once add up, so the sum can exceed the
//                     interval: the fraction is clamped to 1.0, meaning "at least one interval's
//                     worth of blocked time", which is what the detector's threshold asks about.
//                     Per-thread bookkeeping keeps the sum honest when threads come and go: a
//                     thread that exited takes its ticks with it (the kernel does not keep them
//                     in any /proc file), so only the growth of threads seen in both samples
//                     counts, plus all the ticks of threads born in the interval. Resolution is
//                     one clock tick (10 ms at USER_HZ 100). Needs kernel.task_delayacct on
//                     (see delayacct.hpp); without it the ticks never grow, so the caller turns
//                     measure_io_wait off rather than report a false 0.
//   cpu_time_ns       CPU time (utime + stime of the whole process) used in the interval.
//   nccl_active       libnccl is mapped (a maps path contains "libnccl"), or an NCCL shared-
//                     memory segment /dev/shm/nccl-* is mapped or open (also once unlinked).
//                     Reading maps takes the process's mmap lock and costs time proportional to
//                     its mappings, so it runs on the first sample and then every
//                     nccl_check_every samples; the samples in between leave it unset.
//
// Cost: a stat read per process plus one per thread (io wait), a few microseconds each; a
// process with 100 threads costs about 0.3 ms per sample. A single-threaded process that has not
// been on a CPU since its last sample costs one read of its schedstat instead (about a quarter of
// a stat's cost): it has neither run nor woken, so its CPU time, its blocked-I/O ticks (the
// kernel adds them when the task wakes) and its state are what they were (skip_unchanged). With
// a TaskCpuSource (collect/task_cpu.hpp), one read for all processes, a process of any thread
// count whose CPU time, timeslices and thread count are what they were at its last /proc read is
// answered so without any read of its own.
//
// Per process and sample, how much (SampleMode):
//   full          everything;
//   no_nccl       no NCCL check (a process the NCCL rule cannot apply to, whose futex waits are
//                 not counted);
//   idle_backoff  no_nccl for a process that may sleep for long: a single-threaded process found
//                 not to have run n samples in a row skips the next min(n, kIdleBackoffMax)
//                 samples, so a sleeping one costs one schedstat read every kIdleBackoffMax + 1
//                 samples; one that ran less than 1/kNearlyIdleShare of the interval (a launcher
//                 or an agent waking every tick for a few microseconds) is read in full and
//                 backs off the same way, unless it waited for block I/O or is in it (state D);
//                 the first sample that finds it ran more ends the back-off;
//   stat_only     CPU time and state (a process whose phase comes from events);
//   cpu_time      the CPU time only (a tenant's account). With a TaskCpuSource (a BPF task
//                 iterator, collect/task_cpu.hpp) read this time (where its one read costs less
//                 than the /proc reads it saves), every such process after its first sample is
//                 answered from it, no /proc read at all;
//                 one the source does not answer is read as follows. A single-threaded process
//                 that ran is answered from its schedstat's run time, which for one thread is
//                 its CPU time, and its stat is read every kCpuTimeStatEvery samples to see
//                 that it still has one thread (the CPU of threads it started meanwhile is
//                 counted then); `state` is not read then;
//   skip          nothing this time: its state is kept, so its next sample measures the interval
//                 since its last one.
//
// The taskstats netlink interface (one TGID query per process, including exited threads) would be
// cheaper, at the price of a netlink socket and CAP_NET_ADMIN; /proc is what the design names and
// what every kernel has.
//
// The first sample of a process gives no io_wait_fraction or cpu_time_ns (there is no delta
// yet). A process is identified by (pid, starttime): when the pid now belongs to a new process the
// old state is dropped and the sample counts as a first one (`restarted`). A process that exited
// (or is a zombie) is reported `gone` and its state dropped; threads that vanish between samples
// are normal. A file that cannot be parsed leaves that field unmeasured for the sample.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "policy/task_state.hpp"
#include "sys/procfs.hpp"

namespace zernel::collect {

struct SchedStat;  // collect/wait_state.hpp
class TaskCpuSource;  // collect/task_cpu.hpp
struct TaskCpu;

enum class SampleMode : std::uint8_t { full, no_nccl, idle_backoff, stat_only, cpu_time, skip };

struct SignalsOptions {
  std::string proc_root = "/proc";
  // False when kernel.task_delayacct is off (the blkio ticks would never grow).
  bool measure_io_wait = true;
  // NCCL detection runs on a process's first sample and then every this many samples (>= 1).
  // Reading maps and fd/ is most of a sample's cost (about 50 us of 75 us for a small process
  // here) while what it finds changes rarely: libnccl stays mapped, and NCCL's shm segments live
  // as long as its communicators. 10 at the default 100 ms tick re-checks once a second.
  std::uint32_t nccl_check_every = 10;
  // Clock ticks per second of the stat fields; 0 = sysconf(_SC_CLK_TCK).
  std::uint64_t clock_ticks_per_s = 0;
  // Keep each process's stat file open between samples and re-read it with pread: one system
  // call per single-threaded process and sample instead of six (open the directory, open, read
  // twice, close twice). On /proc an open stat file is tied to its process: once that exits, a
  // read fails with ESRCH, also when the pid has been reused since (the sampler then opens the
  // pid afresh, so a reused pid reads as `restarted`, as without the cache). A fabricated tree
  // has no such tie (a removed file stays readable through an open descriptor), so tests on
  // fake trees turn this off. At most max_open_files descriptors are kept; 0 = half of
  // RLIMIT_NOFILE's soft limit at construction.
  bool keep_files_open = true;
  std::size_t max_open_files = 0;
  // With keep_files_open: a single-threaded process whose schedstat (CPU time and timeslices)
  // has not moved since its last sample is not read further (see Cost above).
  bool skip_unchanged = true;
};

struct ProcessSignals {
  std::uint32_t pid = 0;
  bool gone = false;            // exited (or became a zombie); its state was dropped
  bool skipped = false;         // SampleMode::skip: not sampled this time, nothing measured
  bool restarted = false;       // the pid belongs to a new process since the last sample
  std::uint64_t starttime = 0;  // /proc/PID/stat field 22 of this sample (0: not read)
  std::optional<float> io_wait_fraction;
  std::optional<std::uint64_t> cpu_time_ns;
  std::optional<bool> nccl_active;
  // The process's state letter now (/proc/PID/stat field 3: R running or runnable, D in
  // uninterruptible sleep such as disk I/O, S sleeping, ...); '?' when not read.
  char state = '?';

  // The engine's update: only what this sample measured.
  [[nodiscard]] policy::TaskUpdate update() const;
};

class SignalSampler {
 public:
  explicit SignalSampler(SignalsOptions options = {});

  // Samples every pid at now_ns (CLOCK_MONOTONIC). `out` is cleared and gets one entry per pid,
  // in the order given. State of pids not in `pids` is forgotten.
  void sample(std::span<const std::uint32_t> pids, std::uint64_t now_ns,
              std::vector<ProcessSignals>& out);
  // The same with a mode per pid (`modes` as long as `pids`; empty: full for every pid), and
  // what `task_cpu` says of each where it answers (null: /proc only; see Cost and cpu_time).
  // `complete` false: `pids` names only the processes sampled this time, not every one followed
  // (a tick on which the others would all be skipped): the state of the others is kept, and
  // `task_cpu` goes on following what it followed.
  void sample(std::span<const std::uint32_t> pids, std::span<const SampleMode> modes,
              std::uint64_t now_ns, std::vector<ProcessSignals>& out,
              TaskCpuSource* task_cpu = nullptr, bool complete = true);
  std::vector<ProcessSignals> sample(std::span<const std::uint32_t> pids, std::uint64_t now_ns);

  // Processes with state from a previous sample.
  [[nodiscard]] std::size_t tracked() const { return state_.size(); }
  // Samples answered from schedstat alone (the process had not run), since construction.
  [[nodiscard]] std::uint64_t unchanged_samples() const { return unchanged_samples_; }
  // cpu_time samples whose CPU time came from schedstat (the process ran), since construction.
  [[nodiscard]] std::uint64_t schedstat_cpu_samples() const { return schedstat_cpu_samples_; }
  // Samples answered by the TaskCpuSource alone (cpu_time, or unchanged), since construction.
  [[nodiscard]] std::uint64_t task_cpu_samples() const { return task_cpu_samples_; }

  // idle_backoff samples skipped (the process was idle), since construction.
  [[nodiscard]] std::uint64_t idle_skipped_samples() const { return idle_skipped_samples_; }
  // idle_backoff samples that found the process ran, but little (kNearlyIdleShare), and so
  // backed it off, since construction.
  [[nodiscard]] std::uint64_t nearly_idle_samples() const { return nearly_idle_samples_; }

  // cpu_time: a single-threaded process's stat is read at least once in this many samples.
  static constexpr std::uint32_t kCpuTimeStatEvery = 10;
  // idle_backoff: the most samples skipped in a row.
  static constexpr std::uint32_t kIdleBackoffMax = 4;
  // idle_backoff: a process that ran less than 1/this of the interval since its last sample
  // backs off as an idle one (1 %: 1 ms of a 100 ms tick; for such a process, matched by a rule
  // only, the periodic rules weigh its I/O wait, not its CPU time).
  static constexpr std::uint64_t kNearlyIdleShare = 100;

 private:
  struct PidState {
    std::uint64_t starttime = 0;
    std::uint64_t last_ns = 0;
    std::uint64_t cpu_ticks = 0;
    std::vector<std::pair<std::uint32_t, std::uint64_t>> threads;  // (tid, blkio ticks), by tid
    std::uint32_t samples = 0;
    std::uint64_t generation = 0;
    bool threads_valid = false;
    sys::UniqueFd stat_fd;  // keep_files_open: the process's stat, open since its first sample
    // skip_unchanged: its schedstat, open since its first sample, and what stat and schedstat
    // said at the last full read.
    sys::UniqueFd schedstat_fd;
    std::uint64_t run_ns = 0;
    std::uint64_t timeslices = 0;
    std::uint32_t num_threads = 0;
    char state = '?';
    // cpu_time: samples answered from schedstat since the last stat read, and the CPU time they
    // reported (the next stat read reports only what its own delta adds to it).
    std::uint32_t schedstat_only = 0;
    std::uint64_t schedstat_cpu_ns = 0;
    // idle_backoff: samples in a row that found it had not run, and samples left to skip.
    std::uint32_t idle_streak = 0;
    std::uint32_t idle_skip = 0;
    // With a TaskCpuSource: what it said at this process's last /proc read (cpu_time: at its
    // last sample); src_cpu_ns 0: no baseline. ticks_stale: cpu_time samples it answered came
    // after the last stat read (cpu_ticks is no baseline for the next one, which only sets it).
    std::uint64_t src_cpu_ns = 0;
    std::uint64_t src_timeslices = 0;
    std::uint32_t src_threads = 0;
    bool ticks_stale = false;
  };

  // The directory <proc>/<pid>, opened by the first step of a sample that needs it.
  struct PidDir {
    int proc_fd = -1;
    const char* name = nullptr;
    sys::UniqueFd fd;
    int open();  // 0 or an errno value
  };

  void sample_one(int proc_fd, std::uint32_t pid, SampleMode mode, std::uint64_t now_ns,
                  ProcessSignals& out);
  // Marks `out` gone and forgets the process's state and kept descriptors.
  void drop_pid(std::uint32_t pid, ProcessSignals& out);
  // The state of `pid`, created at its first sample and started over when `st` shows another
  // process under that pid (`out.restarted`).
  PidState& state_for_stat(std::uint32_t pid, const sys::ProcStat& st, ProcessSignals& out);
  // keep_files_open: keeps the newly opened stat, and for skip_unchanged the schedstat of a
  // single-threaded process (its baseline comes from the next sample), while there is room.
  void keep_stat_descriptors(PidState& s, const sys::ProcStat& st, sys::UniqueFd& fresh_stat,
                             PidDir& dir);
  // measure_io_wait: reads the threads' blkio ticks into s.threads and sets
  // out.io_wait_fraction over the interval since the last sample. Returns 0 or an errno value.
  int sample_io_wait(std::uint32_t pid, const sys::ProcStat& st, PidState& s, PidDir& dir,
                     bool elapsed, std::uint64_t now_ns, ProcessSignals& out);
  // The fraction of the interval since s.last_ns that threads_ spent blocked on I/O.
  [[nodiscard]] float io_wait_fraction_since(const PidState& s, std::uint64_t now_ns) const;
  // skip_unchanged: reads the schedstat of a known single-threaded process; true (and `out`
  // filled) when it has not run since its last sample, or in cpu_time mode when its run time
  // answers (see SampleMode). Otherwise `run_ns`/`timeslices` hold what it read (or 0), for the
  // full read to keep.
  bool unchanged(PidState& s, SampleMode mode, std::uint64_t now_ns, ProcessSignals& out,
                 std::uint64_t& run_ns, std::uint64_t& timeslices);
  // idle_backoff: one more sample in a row found it idle; skip the next min(that, kIdleBackoffMax).
  static void back_off(PidState& s);
  // idle_backoff: a single-threaded process (at its last read and now) whose run time grew from
  // s.run_ns to `run_ns` by less than 1/kNearlyIdleShare of `interval_ns`.
  static bool ran_little(const PidState& s, const sys::ProcStat& st, std::uint64_t run_ns,
                         std::uint64_t interval_ns);
  // cpu_time: a sample answered from the run time in `st` (see SampleMode); false when the stat
  // is due (every kCpuTimeStatEvery samples) or the run time went backwards.
  bool cpu_time_from_schedstat(PidState& s, const SchedStat& st, std::uint64_t now_ns,
                               ProcessSignals& out);
  // cpu_time: a sample answered from the TaskCpuSource's figure `t`; false when there is no
  // baseline from an earlier sample.
  bool cpu_time_from_source(PidState& s, const TaskCpu& t, std::uint64_t now_ns,
                            ProcessSignals& out);
  // Other modes: a sample answered as unchanged because `t` says that no thread of the process
  // has run since its last /proc read; false otherwise.
  bool unchanged_by_source(PidState& s, const TaskCpu& t, SampleMode mode, std::uint64_t now_ns,
                           ProcessSignals& out);
  // Fills `out` with what the last /proc read said, for a process found not to have run.
  void answer_unchanged(PidState& s, SampleMode mode, std::uint64_t now_ns,
                        ProcessSignals& out) const;
  // The TaskCpuSource's answer for `pid` this sample; null: none.
  [[nodiscard]] const TaskCpu* task_cpu_of(std::uint32_t pid) const;
  // Keeps `t` (null: none) as the baseline of the source's next answers.
  static void keep_source_baseline(PidState& s, const TaskCpu* t);
  // A sample answered from schedstat alone: `s` counts it as this generation's, taken at now_ns.
  void answered(PidState& s, std::uint64_t now_ns) const;
  // Fills threads_ with (tid, blkio ticks) of every readable thread. Returns 0 or the errno
  // value of listing task/ (ENOENT/ESRCH: the process is gone).
  int read_threads(int pid_dirfd);
  // nullopt when neither maps nor fd/ could be read.
  std::optional<bool> nccl_active(int pid_dirfd);

  // Reads the process's stat into buf_, through the kept descriptor when there is one (then
  // `dir` stays closed), else by opening <proc>/<pid>. Returns 0 or an errno value.
  int read_stat(int proc_fd, const char* name, PidState* known, sys::UniqueFd& dir,
                sys::UniqueFd& fresh);

  SignalsOptions options_;
  std::size_t open_files_ = 0;  // kept stat and schedstat descriptors
  std::uint64_t unchanged_samples_ = 0;
  std::uint64_t schedstat_cpu_samples_ = 0;
  std::uint64_t idle_skipped_samples_ = 0;
  std::uint64_t nearly_idle_samples_ = 0;
  std::uint64_t task_cpu_samples_ = 0;
  std::uint64_t ticks_per_s_ = 100;
  std::uint64_t generation_ = 0;
  std::unordered_map<std::uint32_t, PidState> state_;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> threads_;
  std::vector<std::uint32_t> source_pids_;  // this sample's pids, which the source follows
  std::vector<TaskCpu> task_cpu_;           // the source's answer, by pid
  std::string buf_;
  std::string link_;
};

}  // namespace zernel::collect
