#include "collect/signals.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collect/task_cpu.hpp"
#include "support/proc_stat.hpp"
#include "support/temp_tree.hpp"

namespace zernel::collect {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

constexpr std::uint64_t kSecond = 1'000'000'000;

std::string stat_text(std::uint32_t pid, std::uint64_t utime, std::uint64_t stime,
                      std::uint64_t blkio, std::uint64_t starttime = 1000, char state = 'S') {
  return std::to_string(pid) + " (py) thr) " + state + " 1 1 1 0 -1 4194560 0 0 0 0 " +
         std::to_string(utime) + " " + std::to_string(stime) + " 0 0 20 0 " +
         (state == 'Z' ? "1" : "2") + " 0 " + std::to_string(starttime) +
         " 1000 10 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 " + std::to_string(blkio) +
         " 0 0 0 0 0 0 0 0 0 0\n";
}

class FakeProc : public test_support::TempTree {
 public:
  FakeProc() : TempTree("zernel-sig") {}
  // The process line (CPU time of the whole group) and its threads' blkio ticks.
  void process(std::uint32_t pid, std::uint64_t utime, std::uint64_t stime,
               const std::vector<std::pair<std::uint32_t, std::uint64_t>>& threads,
               std::uint64_t starttime = 1000, char state = 'S') const {
    const std::string d = std::to_string(pid);
    write(d + "/stat", stat_text(pid, utime, stime, 0, starttime, state));
    std::error_code ec;
    fs::remove_all(dir() / d / "task", ec);
    fs::create_directories(dir() / d / "task");
    for (const auto& [tid, blkio] : threads) {
      write(d + "/task/" + std::to_string(tid) + "/stat", stat_text(tid, 0, 0, blkio, starttime));
    }
    if (!fs::exists(dir() / d / "maps")) write(d + "/maps", "");
    fs::create_directories(dir() / d / "fd");
  }
  void remove(std::uint32_t pid) const { fs::remove_all(dir() / std::to_string(pid)); }
};

SignalsOptions fake_options(const FakeProc& fp) {
  SignalsOptions o;
  o.proc_root = fp.root();
  o.clock_ticks_per_s = 100;
  o.nccl_check_every = 1;
  // A fabricated tree cannot say "that process is gone" through an open file (ESRCH is /proc's).
  o.keep_files_open = false;
  return o;
}

TEST(Signals, first_sample_has_no_deltas_then_io_wait_is_summed_over_threads) {
  FakeProc fp;
  fp.process(100, 50, 10, {{100, 10}, {101, 0}});
  SignalSampler s(fake_options(fp));
  const std::vector<std::uint32_t> pids = {100};
  auto r0 = s.sample(pids, 5 * kSecond);
  ASSERT_EQ(r0.size(), 1U);
  EXPECT_EQ(r0[0].pid, 100U);
  EXPECT_FALSE(r0[0].gone);
  EXPECT_FALSE(r0[0].io_wait_fraction.has_value());
  EXPECT_FALSE(r0[0].cpu_time_ns.has_value());
  EXPECT_EQ(r0[0].nccl_active, false);

  // One second later: +20 ticks on 100, +5 on 101 = 0.25 s blocked; +30 ticks of CPU.
  fp.process(100, 70, 20, {{100, 30}, {101, 5}});
  auto r1 = s.sample(pids, 6 * kSecond);
  ASSERT_TRUE(r1[0].io_wait_fraction.has_value());
  EXPECT_FLOAT_EQ(*r1[0].io_wait_fraction, 0.25F);
  EXPECT_EQ(r1[0].cpu_time_ns, 300'000'000U);

  // Half a second: 101 exited (its ticks leave with it), 102 was born with 3 ticks, 100 +7.
  fp.process(100, 70, 20, {{100, 37}, {102, 3}});
  auto r2 = s.sample(pids, 6 * kSecond + kSecond / 2);
  ASSERT_TRUE(r2[0].io_wait_fraction.has_value());
  EXPECT_NEAR(*r2[0].io_wait_fraction, 0.10F / 0.5F, 1e-6);
  EXPECT_EQ(r2[0].cpu_time_ns, 0U);
}

TEST(Signals, several_threads_blocked_at_once_clamp_to_one) {
  FakeProc fp;
  fp.process(100, 0, 0, {{100, 0}, {101, 0}, {102, 0}});
  SignalSampler s(fake_options(fp));
  const std::vector<std::uint32_t> pids = {100};
  (void)s.sample(pids, kSecond);
  // Three threads blocked the whole second: 3 s of blocked time in 1 s.
  fp.process(100, 0, 0, {{100, 100}, {101, 100}, {102, 100}});
  auto r = s.sample(pids, 2 * kSecond);
  ASSERT_TRUE(r[0].io_wait_fraction.has_value());
  EXPECT_FLOAT_EQ(*r[0].io_wait_fraction, 1.0F);
  // No growth: 0. Huge values never overflow into a small fraction.
  auto r2 = s.sample(pids, 3 * kSecond);
  EXPECT_FLOAT_EQ(*r2[0].io_wait_fraction, 0.0F);
  fp.process(100, 0, 0, {{100, 18446744073709551615ULL}, {101, 18446744073709551615ULL}});
  auto r3 = s.sample(pids, 4 * kSecond);
  EXPECT_FLOAT_EQ(*r3[0].io_wait_fraction, 1.0F);
}

TEST(Signals, a_thread_reusing_a_tid_counts_from_zero) {
  FakeProc fp;
  fp.process(100, 0, 0, {{100, 0}, {101, 50}});
  SignalSampler s(fake_options(fp));
  const std::vector<std::uint32_t> pids = {100};
  (void)s.sample(pids, kSecond);
  fp.process(100, 0, 0, {{100, 0}, {101, 20}});  // 101 is a new thread now
  auto r = s.sample(pids, 2 * kSecond);
  EXPECT_FLOAT_EQ(*r[0].io_wait_fraction, 0.2F);
}

TEST(Signals, no_time_elapsed_measures_nothing) {
  FakeProc fp;
  fp.process(100, 0, 0, {{100, 0}});
  SignalSampler s(fake_options(fp));
  const std::vector<std::uint32_t> pids = {100};
  (void)s.sample(pids, kSecond);
  fp.process(100, 10, 0, {{100, 10}});
  auto r = s.sample(pids, kSecond);
  EXPECT_FALSE(r[0].io_wait_fraction.has_value());
  EXPECT_FALSE(r[0].cpu_time_ns.has_value());
}

TEST(Signals, io_wait_is_not_reported_when_delay_accounting_is_off) {
  FakeProc fp;
  fp.process(100, 0, 0, {{100, 0}});
  SignalsOptions o = fake_options(fp);
  o.measure_io_wait = false;
  SignalSampler s(o);
  const std::vector<std::uint32_t> pids = {100};
  (void)s.sample(pids, kSecond);
  fp.process(100, 100, 0, {{100, 50}});
  auto r = s.sample(pids, 2 * kSecond);
  EXPECT_FALSE(r[0].io_wait_fraction.has_value());
  EXPECT_EQ(r[0].cpu_time_ns, kSecond);
  EXPECT_FALSE(r[0].update().io_wait_fraction.has_value());
}

TEST(Signals, exited_zombie_and_reused_processes) {
  FakeProc fp;
  fp.process(100, 0, 0, {{100, 0}});
  fp.process(200, 0, 0, {{200, 0}});
  fp.process(300, 0, 0, {{300, 0}}, 1000);
  SignalSampler s(fake_options(fp));
  const std::vector<std::uint32_t> pids = {100, 200, 300, 400};
  auto r0 = s.sample(pids, kSecond);
  EXPECT_TRUE(r0[3].gone);  // never existed
  EXPECT_EQ(s.tracked(), 3U);

  fp.remove(100);                                // exited
  fp.process(200, 0, 0, {{200, 0}}, 1000, 'Z');  // zombie
  fp.process(300, 5, 0, {{300, 40}}, 7777);      // pid reused
  auto r1 = s.sample(pids, 2 * kSecond);
  EXPECT_TRUE(r1[0].gone);
  EXPECT_TRUE(r1[1].gone);
  EXPECT_FALSE(r1[2].gone);
  EXPECT_TRUE(r1[2].restarted);
  EXPECT_FALSE(r1[2].io_wait_fraction.has_value());  // a first sample again
  EXPECT_FALSE(r1[2].cpu_time_ns.has_value());
  EXPECT_EQ(s.tracked(), 1U);

  fp.process(300, 5, 0, {{300, 50}}, 7777);
  auto r2 = s.sample(pids, 3 * kSecond);
  EXPECT_FALSE(r2[2].restarted);
  EXPECT_FLOAT_EQ(*r2[2].io_wait_fraction, 0.1F);
}

TEST(Signals, pids_no_longer_asked_for_are_forgotten) {
  FakeProc fp;
  fp.process(100, 0, 0, {{100, 0}});
  fp.process(200, 0, 0, {{200, 0}});
  SignalSampler s(fake_options(fp));
  const std::vector<std::uint32_t> both = {100, 200};
  const std::vector<std::uint32_t> one = {200};
  (void)s.sample(both, kSecond);
  EXPECT_EQ(s.tracked(), 2U);
  (void)s.sample(one, 2 * kSecond);
  EXPECT_EQ(s.tracked(), 1U);
  auto r = s.sample(both, 3 * kSecond);  // 100 starts over
  EXPECT_FALSE(r[0].io_wait_fraction.has_value());
  EXPECT_TRUE(r[1].io_wait_fraction.has_value());
}

// A sample that names only some of the followed pids (complete = false: the daemon's ticks
// between publishes) forgets none of the others: the next complete one measures them from their
// last sample.
TEST(Signals, a_partial_sample_keeps_the_pids_it_does_not_name) {
  FakeProc fp;
  fp.process(100, 0, 0, {{100, 0}});
  fp.process(200, 0, 0, {{200, 0}});
  SignalSampler s(fake_options(fp));
  const std::vector<std::uint32_t> both = {100, 200};
  const std::vector<std::uint32_t> one = {200};
  const std::vector<SampleMode> full = {SampleMode::full};
  std::vector<ProcessSignals> out;
  (void)s.sample(both, kSecond);
  s.sample(one, full, 2 * kSecond, out, nullptr, /*complete=*/false);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].pid, 200U);
  EXPECT_EQ(s.tracked(), 2U);
  auto r = s.sample(both, 3 * kSecond);
  EXPECT_TRUE(r[0].io_wait_fraction.has_value()) << "100 measured from its sample at 1 s";
  s.sample(one, full, 4 * kSecond, out, nullptr, /*complete=*/true);
  EXPECT_EQ(s.tracked(), 1U) << "a complete sample forgets the pids it does not name";
}

TEST(Signals, garbled_stat_measures_nothing_but_keeps_the_process) {
  FakeProc fp;
  fp.process(100, 0, 0, {{100, 0}});
  SignalSampler s(fake_options(fp));
  const std::vector<std::uint32_t> pids = {100};
  (void)s.sample(pids, kSecond);
  fp.write("100/stat", "100 (py) S 1 trunc");
  auto r = s.sample(pids, 2 * kSecond);
  EXPECT_FALSE(r[0].gone);
  EXPECT_FALSE(r[0].io_wait_fraction.has_value());
  EXPECT_FALSE(r[0].nccl_active.has_value());
  EXPECT_EQ(s.tracked(), 1U);
  // The next good sample measures from the last good one (1 s -> 3 s); a thread with a garbled
  // stat is skipped, the others count.
  fp.process(100, 0, 0, {{100, 10}, {101, 0}});
  fp.write("100/task/101/stat", "garbage");
  auto r2 = s.sample(pids, 3 * kSecond);
  EXPECT_FLOAT_EQ(*r2[0].io_wait_fraction, 0.05F);
}

TEST(Signals, nccl_is_seen_through_the_library_shm_mappings_or_open_shm_files) {
  FakeProc fp;
  for (std::uint32_t pid : {100U, 200U, 300U, 400U}) fp.process(pid, 0, 0, {{pid, 0}});
  fp.write("100/maps",
           "5600-5700 r-xp 00000000 08:01 10 /usr/bin/python3.11\n"
           "7f00-7f10 r-xp 00000000 08:01 11 /venv/nvidia/nccl/lib/libnccl.so.2\n");
  fp.write("200/maps", "7f00-7f10 rw-s 00000000 00:1a 77 /dev/shm/nccl-Ab12cd (deleted)\n");
  fp.write("300/maps", "5600-5700 r-xp 00000000 08:01 10 /usr/bin/python3.11\n");
  fp.link("300/fd/7", "/dev/shm/nccl-XyZ");
  fp.write("400/maps",
           "5600-5700 r-xp 00000000 08:01 10 /usr/bin/python3.11\n"
           "7f00-7f10 rw-s 00000000 00:1a 78 /dev/shm/torch_99\n");
  fp.link("400/fd/3", "/dev/null");
  SignalSampler s(fake_options(fp));
  const std::vector<std::uint32_t> pids = {100, 200, 300, 400};
  auto r = s.sample(pids, kSecond);
  EXPECT_EQ(r[0].nccl_active, true);
  EXPECT_EQ(r[1].nccl_active, true);
  EXPECT_EQ(r[2].nccl_active, true);
  EXPECT_EQ(r[3].nccl_active, false);
  const policy::TaskUpdate u = r[0].update();
  EXPECT_EQ(u.nccl_active, true);
  EXPECT_FALSE(u.io_wait_fraction.has_value());
  EXPECT_FALSE(u.gpu_utilization.has_value());
  EXPECT_FALSE(u.cpu_burst_duration_ns.has_value());
  EXPECT_FALSE(u.gpu_id.has_value());
}

TEST(Signals, nccl_is_checked_every_nth_sample) {
  FakeProc fp;
  fp.process(100, 0, 0, {{100, 0}});
  SignalsOptions o = fake_options(fp);
  o.nccl_check_every = 3;
  SignalSampler s(o);
  const std::vector<std::uint32_t> pids = {100};
  std::vector<ProcessSignals> out;
  std::vector<bool> checked;
  for (int i = 0; i < 7; ++i) {
    s.sample(pids, static_cast<std::uint64_t>(i + 1) * kSecond, out);
    checked.push_back(out[0].nccl_active.has_value());
  }
  EXPECT_EQ(checked, (std::vector<bool>{true, false, false, true, false, false, true}));
}

TEST(Signals, each_mode_reads_what_it_says_and_skip_keeps_the_baseline) {
  FakeProc fp;
  fp.process(100, 10, 0, {{100, 0}, {101, 0}});
  SignalSampler s(fake_options(fp));
  const std::vector<std::uint32_t> pids = {100};
  std::vector<ProcessSignals> out;
  const auto one = [&](SampleMode m, std::uint64_t t) {
    const SampleMode modes[] = {m};
    s.sample(pids, modes, t * kSecond, out);
    return out[0];
  };
  const ProcessSignals full = one(SampleMode::full, 1);
  EXPECT_TRUE(full.nccl_active.has_value());
  fp.process(100, 30, 0, {{100, 50}, {101, 0}});
  const ProcessSignals skipped = one(SampleMode::skip, 2);
  EXPECT_TRUE(skipped.skipped);
  EXPECT_FALSE(skipped.cpu_time_ns.has_value());
  EXPECT_EQ(s.tracked(), 1U);  // kept
  const ProcessSignals no_nccl = one(SampleMode::no_nccl, 3);
  EXPECT_FALSE(no_nccl.nccl_active.has_value());
  EXPECT_EQ(no_nccl.cpu_time_ns, 200'000'000U);  // since the full sample at 1 s: 20 ticks
  ASSERT_TRUE(no_nccl.io_wait_fraction.has_value());
  EXPECT_FLOAT_EQ(*no_nccl.io_wait_fraction, 0.25F);  // 0.5 s blocked over 2 s
  fp.process(100, 40, 0, {{100, 90}, {101, 0}});
  const ProcessSignals stat_only = one(SampleMode::stat_only, 4);
  EXPECT_EQ(stat_only.cpu_time_ns, 100'000'000U);
  EXPECT_FALSE(stat_only.io_wait_fraction.has_value());
  EXPECT_FALSE(stat_only.nccl_active.has_value());
  EXPECT_EQ(stat_only.state, 'S');
}

TEST(Signals, a_missing_proc_root_reports_nothing) {
  SignalsOptions o;
  o.proc_root = "/nonexistent/zernel-proc";
  SignalSampler s(o);
  const std::vector<std::uint32_t> pids = {1};
  auto r = s.sample(pids, kSecond);
  ASSERT_EQ(r.size(), 1U);
  EXPECT_FALSE(r[0].gone);
  EXPECT_FALSE(r[0].nccl_active.has_value());
}

// ---------------------------------------------------------------------------------------------
// The real system.

std::uint64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * kSecond + static_cast<std::uint64_t>(ts.tv_nsec);
}

TEST(Signals, samples_this_process_on_the_real_proc) {
  SignalSampler s;
  const std::vector<std::uint32_t> pids = {static_cast<std::uint32_t>(::getpid())};
  auto r0 = s.sample(pids, monotonic_ns());
  ASSERT_EQ(r0.size(), 1U);
  EXPECT_FALSE(r0[0].gone);
  EXPECT_EQ(r0[0].nccl_active, false);
  // Burn some CPU so the delta is visible at 10 ms resolution.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(60);
  volatile std::uint64_t sink = 0;
  while (std::chrono::steady_clock::now() < until) sink = sink + 1;
  auto r1 = s.sample(pids, monotonic_ns());
  EXPECT_FALSE(r1[0].gone);
  ASSERT_TRUE(r1[0].io_wait_fraction.has_value());
  EXPECT_GE(*r1[0].io_wait_fraction, 0.0F);
  EXPECT_LE(*r1[0].io_wait_fraction, 1.0F);
  ASSERT_TRUE(r1[0].cpu_time_ns.has_value());
  EXPECT_GT(*r1[0].cpu_time_ns, 0U);
}

TEST(Signals, an_exited_process_is_gone_also_through_its_kept_stat_file) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  SignalsOptions o;
  o.max_open_files = 4;
  SignalSampler s(o);
  const std::vector<std::uint32_t> pids = {static_cast<std::uint32_t>(child)};
  auto r0 = s.sample(pids, monotonic_ns());
  // Through the kept descriptor, until the child has reached pause() (state S).
  std::vector<ProcessSignals> r1;
  for (int i = 0; i < 200; ++i) {
    r1 = s.sample(pids, monotonic_ns() + 1);
    if (r1[0].gone || r1[0].state == 'S') break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(r1[0].gone);
  EXPECT_EQ(r1[0].state, 'S');
  ASSERT_TRUE(r1[0].cpu_time_ns.has_value());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  auto r2 = s.sample(pids, monotonic_ns() + 2);
  EXPECT_TRUE(r2[0].gone);
  EXPECT_EQ(s.tracked(), 0U);
  EXPECT_FALSE(r0[0].gone);
}

TEST(Signals, a_single_threaded_process_that_has_not_run_is_answered_from_schedstat) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  SignalSampler s;
  const std::vector<std::uint32_t> pids = {static_cast<std::uint32_t>(child)};
  std::vector<ProcessSignals> out;
  std::uint64_t t = monotonic_ns();
  for (int i = 0; i < 200; ++i) {  // until it sleeps in pause()
    s.sample(pids, t += 1000, out);
    if (out[0].state == 'S') break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(out[0].state, 'S');
  s.sample(pids, t += 1000, out);  // a full read after the last run: the baseline
  const std::uint64_t before = s.unchanged_samples();
  for (int i = 0; i < 3; ++i) {
    s.sample(pids, t += 1000, out);
    EXPECT_FALSE(out[0].gone);
    EXPECT_EQ(out[0].state, 'S');
    EXPECT_EQ(out[0].cpu_time_ns, 0U);
  }
  EXPECT_EQ(s.unchanged_samples(), before + 3);
  // It runs (a signal it handles by dying): read in full, and gone.
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  s.sample(pids, t += 1000, out);
  EXPECT_TRUE(out[0].gone);
  EXPECT_EQ(s.unchanged_samples(), before + 3);
}

// 2 ms on a CPU, then 2 ms asleep.
void burn_piece() {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
  volatile std::uint64_t sink = 0;
  while (std::chrono::steady_clock::now() < until) sink = sink + 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// A forked child that burns about half of a CPU in burn_piece()s until it is killed (by the
// destructor); a byte from send() starts a second thread that does the same. With `asleep` it
// first sleeps in poll() until a byte comes, and then burns with one thread.
class BusyChild {
 public:
  explicit BusyChild(bool asleep) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(fds[1]);
      run(fds[0], asleep);
    }
    close(fds[0]);
    cmd_ = fds[1];
  }
  ~BusyChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (cmd_ >= 0) close(cmd_);
  }
  BusyChild(const BusyChild&) = delete;
  BusyChild& operator=(const BusyChild&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  bool send() const { return cmd_ >= 0 && write(cmd_, "x", 1) == 1; }

 private:
  [[noreturn]] static void run(int cmd, bool asleep) {
    char c = 0;
    if (asleep) {
      pollfd p{cmd, POLLIN, 0};
      while (poll(&p, 1, -1) != 1) {
      }
      (void)!read(cmd, &c, 1);
    }
    while (read(cmd, &c, 1) != 1) burn_piece();
    std::thread([] {
      for (;;) burn_piece();
    }).detach();
    for (;;) burn_piece();
  }

  pid_t pid_ = -1;
  int cmd_ = -1;
};

// utime + stime of a process, ns (clock ticks of 10 ms).
std::uint64_t stat_cpu_ns(pid_t pid) {
  const auto st = test_support::read_proc_stat(pid);
  if (!st) return 0;
  return (st->utime_ticks + st->stime_ticks) * kSecond /
         static_cast<std::uint64_t>(sysconf(_SC_CLK_TCK));
}

// cpu_time mode: a single-threaded process that runs is answered from its schedstat, its stat
// read every kCpuTimeStatEvery samples; the CPU of a thread it started in between is counted at
// that read, so the sum of what the samples report is the process's CPU time.
TEST(Signals, cpu_time_mode_counts_a_single_threaded_process_from_schedstat_and_its_new_threads) {
  const BusyChild busy(/*asleep=*/false);
  const pid_t child = busy.pid();
  ASSERT_GT(child, 0);
  SignalSampler s;
  const std::vector<std::uint32_t> pids = {static_cast<std::uint32_t>(child)};
  const SampleMode modes[] = {SampleMode::cpu_time};
  std::vector<ProcessSignals> out;
  std::uint64_t reported = 0;
  const auto sample = [&] {
    s.sample(pids, modes, monotonic_ns(), out);
    ASSERT_EQ(out.size(), 1U);
    ASSERT_FALSE(out[0].gone);
    reported += out[0].cpu_time_ns.value_or(0);
  };
  // The baseline, with the child stopped so that its stat says what the sampler read.
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  sample();
  const std::uint64_t first = stat_cpu_ns(child);
  ASSERT_EQ(kill(child, SIGCONT), 0);
  const auto sample_twice_the_stat_period = [&] {
    for (int i = 0; i < 2 * static_cast<int>(SignalSampler::kCpuTimeStatEvery); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      sample();
    }
  };
  sample_twice_the_stat_period();
  const std::uint64_t from_schedstat = s.schedstat_cpu_samples();
  EXPECT_GE(from_schedstat, SignalSampler::kCpuTimeStatEvery);  // most samples: one pread
  // A second thread.
  ASSERT_TRUE(busy.send());
  sample_twice_the_stat_period();
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  sample();
  const std::uint64_t total = stat_cpu_ns(child) - first;
  // Each stat read may differ from the run time by its clock ticks' truncation (two 10 ms ticks).
  constexpr std::uint64_t kSlack = 100'000'000;
  EXPECT_GT(total, 300'000'000U) << "the child hardly ran";
  EXPECT_LE(reported, total + kSlack) << "reported " << reported << " ns of " << total;
  EXPECT_GE(reported + kSlack, total) << "reported " << reported << " ns of " << total;
}

// A TaskCpuSource that says what the test sets: `answer` for `pid` while `answering`, and a
// failed read while `failing`.
class ScriptedTaskCpu final : public TaskCpuSource {
 public:
  void follow(std::span<const std::uint32_t> pids) override {
    asked.assign(pids.begin(), pids.end());
  }
  [[nodiscard]] bool worth_reading(std::size_t wanted) const override {
    return wanted >= worth_from;
  }
  bool read(std::vector<TaskCpu>& out) override {
    out.clear();
    ++reads;
    if (failing) return false;
    if (answering && std::binary_search(asked.begin(), asked.end(), pid)) {
      out.push_back(TaskCpu{pid, threads, answer, timeslices});
    }
    return true;
  }
  std::size_t worth_from = 1;
  std::uint32_t pid = 0;
  std::uint32_t threads = 1;
  std::uint64_t answer = 0;
  std::uint64_t timeslices = 0;
  bool answering = true;
  bool failing = false;
  int reads = 0;
  std::vector<std::uint32_t> asked;
};

// cpu_time with a TaskCpuSource: after the first sample (from /proc, which sets the source's
// baseline) the source answers alone, never backwards; a sample it does not answer reads /proc,
// which only sets its baselines again (the source's samples already counted that time), and the
// source takes over again from the next /proc sample on. Every process is followed; the source
// is not read when it is not worth it.
TEST(Signals, cpu_time_mode_takes_the_task_cpu_source_and_never_counts_twice) {
  const BusyChild busy(/*asleep=*/false);
  const pid_t child = busy.pid();
  ASSERT_GT(child, 0);
  const BusyChild other(/*asleep=*/true);
  ASSERT_GT(other.pid(), 0);
  SignalSampler s;
  std::vector<std::uint32_t> pids = {static_cast<std::uint32_t>(child),
                                     static_cast<std::uint32_t>(other.pid())};
  std::vector<SampleMode> modes = {SampleMode::cpu_time, SampleMode::stat_only};
  if (pids[0] > pids[1]) {
    std::swap(pids[0], pids[1]);
    std::swap(modes[0], modes[1]);
  }
  const std::size_t at = pids[0] == static_cast<std::uint32_t>(child) ? 0 : 1;
  ScriptedTaskCpu src;
  src.pid = static_cast<std::uint32_t>(child);
  std::vector<ProcessSignals> out;
  std::uint64_t t = monotonic_ns();
  const auto sample = [&](std::uint64_t answer) {
    src.answer = answer;
    t += 100'000'000;
    s.sample(pids, modes, t, out, &src);
    EXPECT_EQ(src.asked, pids);
    EXPECT_FALSE(out[at].gone);
    return out[at].cpu_time_ns;
  };
  EXPECT_FALSE(sample(1'000'000'000));  // first sample: /proc, no interval yet
  EXPECT_EQ(s.task_cpu_samples(), 0U);
  EXPECT_EQ(sample(1'300'000'000), 300'000'000U);
  EXPECT_EQ(sample(1'200'000'000), 0U) << "backwards reads as nothing";
  EXPECT_EQ(sample(1'500'000'000), 200'000'000U) << "from the highest figure seen";
  EXPECT_EQ(s.task_cpu_samples(), 3U);
  // Not answered: /proc, whose tick baseline predates what the source reported.
  src.answering = false;
  EXPECT_FALSE(sample(0)) << "a /proc sample after the source's must not count that time again";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(sample(0)) << "the next /proc sample measures again";
  // Answered again: /proc once more (the source's baseline), then the source.
  src.answering = true;
  EXPECT_TRUE(sample(5'000'000'000));
  EXPECT_EQ(sample(5'040'000'000), 40'000'000U);
  EXPECT_EQ(s.task_cpu_samples(), 4U);
  // A failed read: /proc for everyone.
  src.failing = true;
  EXPECT_FALSE(sample(6'000'000'000));
  EXPECT_EQ(s.task_cpu_samples(), 4U);
  // Not worth a read for the two processes: not read, /proc answers.
  src.failing = false;
  src.worth_from = 3;
  const int reads = src.reads;
  EXPECT_TRUE(sample(6'100'000'000));
  EXPECT_EQ(src.reads, reads);
  EXPECT_EQ(s.task_cpu_samples(), 4U);
}

// The source follows the pids of complete samples only: a partial one (some of the followed
// processes) leaves it following all of them.
TEST(Signals, a_partial_sample_leaves_the_task_cpu_source_following_every_process) {
  const BusyChild a(/*asleep=*/true);
  const BusyChild b(/*asleep=*/true);
  ASSERT_GT(a.pid(), 0);
  ASSERT_GT(b.pid(), 0);
  std::vector<std::uint32_t> both = {static_cast<std::uint32_t>(a.pid()),
                                     static_cast<std::uint32_t>(b.pid())};
  std::sort(both.begin(), both.end());
  const std::vector<std::uint32_t> one = {both[1]};
  const std::vector<SampleMode> modes = {SampleMode::full, SampleMode::full};
  ScriptedTaskCpu src;
  SignalSampler s;
  std::vector<ProcessSignals> out;
  std::uint64_t t = monotonic_ns();
  s.sample(both, modes, t += 100'000'000, out, &src);
  EXPECT_EQ(src.asked, both);
  s.sample(one, std::span(modes).first(1), t += 100'000'000, out, &src, /*complete=*/false);
  EXPECT_EQ(src.asked, both);
  EXPECT_EQ(s.tracked(), 2U);
  s.sample(one, std::span(modes).first(1), t += 100'000'000, out, &src);
  EXPECT_EQ(src.asked, one);
  EXPECT_EQ(s.tracked(), 1U);
}

// The other modes with a TaskCpuSource: a process whose CPU time, timeslices and thread count
// are what the source said at its last /proc read is answered as unchanged (its last state, no
// CPU) without a read; any of the three moved, or a process the source does not answer, is read.
TEST(Signals, a_process_the_task_cpu_source_says_did_not_run_is_answered_without_a_read) {
  const BusyChild sleeper(/*asleep=*/true);
  ASSERT_GT(sleeper.pid(), 0);
  SignalSampler s;
  const std::vector<std::uint32_t> pids = {static_cast<std::uint32_t>(sleeper.pid())};
  const SampleMode modes[] = {SampleMode::full};
  ScriptedTaskCpu src;
  src.pid = pids[0];
  src.threads = 3;
  src.answer = 500'000'000;
  src.timeslices = 40;
  std::vector<ProcessSignals> out;
  std::uint64_t t = monotonic_ns();
  const auto sample = [&] {
    t += 100'000'000;
    s.sample(pids, modes, t, out, &src);
    EXPECT_FALSE(out[0].gone);
    return s.task_cpu_samples();
  };
  EXPECT_EQ(sample(), 0U);  // the first: /proc
  const char state = out[0].state;
  EXPECT_NE(state, '?');
  EXPECT_EQ(sample(), 1U);
  EXPECT_EQ(out[0].state, state);
  EXPECT_EQ(out[0].cpu_time_ns, 0U);
  EXPECT_EQ(sample(), 2U);
  src.timeslices = 41;  // a thread was switched in
  EXPECT_EQ(sample(), 2U);
  EXPECT_EQ(sample(), 3U) << "the /proc read took the new figures as its baseline";
  src.threads = 4;
  EXPECT_EQ(sample(), 3U);
  src.answer += 1;
  EXPECT_EQ(sample(), 3U);
  src.answering = false;
  EXPECT_EQ(sample(), 3U);
  src.answering = true;
  EXPECT_EQ(sample(), 3U) << "no baseline after a sample the source did not answer";
  EXPECT_EQ(sample(), 4U);
}

// idle_backoff: a sleeping single-threaded process is looked at less and less often, down to
// once in kIdleBackoffMax + 1 samples; once it runs, at every sample again.
TEST(Signals, idle_backoff_looks_at_a_sleeping_process_less_often_until_it_runs) {
  const BusyChild busy(/*asleep=*/true);
  const pid_t child = busy.pid();
  ASSERT_GT(child, 0);
  SignalSampler s;
  const std::vector<std::uint32_t> pids = {static_cast<std::uint32_t>(child)};
  const SampleMode modes[] = {SampleMode::idle_backoff};
  std::vector<ProcessSignals> out;
  std::uint64_t t = monotonic_ns();
  for (int i = 0; i < 200; ++i) {  // until it sleeps in poll()
    s.sample(pids, modes, t += 1000, out);
    if (out[0].state == 'S') break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(out[0].state, 'S');
  s.sample(pids, modes, t += 1000, out);  // after its last run: the baseline (or its first look)
  // Asleep: the n-th look that finds it idle skips the next min(n, 4) samples. Of 25 samples,
  // 7 look and 18 skip (1 + 2 + 3 + 4 + 4 + 4), or, when the sample above was already a first
  // look, 6 look and 19 skip (1 + 2 + 3 + 4 + 4 + 4 + 1).
  int skipped = 0;
  for (int i = 0; i < 25; ++i) {
    s.sample(pids, modes, t += 1000, out);
    ASSERT_FALSE(out[0].gone);
    if (out[0].skipped) ++skipped;
  }
  EXPECT_GE(skipped, 18);
  EXPECT_LE(skipped, 19);
  EXPECT_EQ(s.idle_skipped_samples(), static_cast<std::uint64_t>(skipped));
  // Woken, it runs: the next look sees it, and from then on every sample reads it.
  ASSERT_TRUE(busy.send());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  int looks_before_run = 0;
  for (; looks_before_run <= static_cast<int>(SignalSampler::kIdleBackoffMax); ++looks_before_run) {
    s.sample(pids, modes, t += 1000, out);
    if (!out[0].skipped) break;
  }
  EXPECT_LE(looks_before_run, static_cast<int>(SignalSampler::kIdleBackoffMax));
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s.sample(pids, modes, t += 1000, out);
    EXPECT_FALSE(out[0].skipped) << "sample " << i;
  }
}

// idle_backoff: a process that wakes often but runs for microseconds each time (a launcher's or
// an agent's poll loop) backs off as a sleeping one does: it runs less than 1 % of each interval.
// A process that runs for longer is read at every sample. The intervals are real (50 ms), so the
// busy child's share of them is what it really got, also on a loaded machine.
TEST(Signals, idle_backoff_backs_off_a_process_that_runs_only_a_little) {
  const pid_t napper = fork();
  if (napper == 0) {
    for (;;) {
      timespec ts{0, 25'000'000};  // wakes every 25 ms, for tens of microseconds
      nanosleep(&ts, nullptr);
    }
  }
  ASSERT_GT(napper, 0);
  const BusyChild busy(/*asleep=*/false);
  ASSERT_GT(busy.pid(), 0);
  SignalSampler s;
  const std::vector<std::uint32_t> pids = {static_cast<std::uint32_t>(napper),
                                           static_cast<std::uint32_t>(busy.pid())};
  const SampleMode modes[] = {SampleMode::idle_backoff, SampleMode::idle_backoff};
  std::vector<ProcessSignals> out;
  int napper_looks = 0;
  int busy_skips = 0;
  std::uint64_t napper_cpu_ns = 0;
  for (int i = 0; i < 30; ++i) {
    // Two wakeups of the napper a sample (about 30 us each on this host, under the 500 us that 1 %
    // of 50 ms is), and tens of ms of the busy child's CPU.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s.sample(pids, modes, monotonic_ns(), out);
    ASSERT_FALSE(out[0].gone);
    ASSERT_FALSE(out[1].gone);
    if (i < 2) continue;  // the first look and the first interval
    if (!out[0].skipped) {
      ++napper_looks;
      napper_cpu_ns += out[0].cpu_time_ns.value_or(0);
    }
    if (out[1].skipped) ++busy_skips;
  }
  kill(napper, SIGKILL);
  waitpid(napper, nullptr, 0);
  // Of 28 samples, with back-offs of 1, 2, 3, 4, 4, 4, 4 skips after the looks: about 8 looks.
  EXPECT_LE(napper_looks, 12) << "the napper was not backed off";
  EXPECT_GE(s.nearly_idle_samples(), 6U);
  EXPECT_EQ(busy_skips, 0) << "a process that runs was backed off";
  // What it ran is still counted, over the whole interval since its last look (stat ticks).
  EXPECT_LT(napper_cpu_ns, 100'000'000U);
}

TEST(Signals, a_process_that_runs_is_read_in_full) {
  SignalSampler s;
  const std::vector<std::uint32_t> pids = {static_cast<std::uint32_t>(::getpid())};
  std::vector<ProcessSignals> out;
  for (int i = 0; i < 3; ++i) {
    s.sample(pids, monotonic_ns(), out);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(15);
    volatile std::uint64_t sink = 0;
    while (std::chrono::steady_clock::now() < until) sink = sink + 1;
  }
  EXPECT_EQ(s.unchanged_samples(), 0U);
}

TEST(Signals, more_processes_than_open_files_allowed_are_still_sampled) {
  SignalsOptions o;
  o.max_open_files = 1;
  SignalSampler s(o);
  const std::vector<std::uint32_t> pids = {static_cast<std::uint32_t>(::getpid()),
                                           static_cast<std::uint32_t>(::getppid())};
  for (int i = 0; i < 3; ++i) {
    auto r = s.sample(pids, monotonic_ns() + static_cast<std::uint64_t>(i));
    ASSERT_EQ(r.size(), 2U);
    EXPECT_FALSE(r[0].gone);
    EXPECT_FALSE(r[1].gone);
    if (i > 0) {
      EXPECT_TRUE(r[0].cpu_time_ns.has_value());
      EXPECT_TRUE(r[1].cpu_time_ns.has_value());
    }
  }
}

TEST(Signals, a_child_with_an_nccl_shm_segment_mapped_is_nccl_active) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm on this system";
  const std::string path = "/dev/shm/nccl-zernel-test-" + std::to_string(::getpid());
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Only async-signal-safe calls here.
    ::close(ready[0]);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || ::ftruncate(fd, 4096) != 0) ::_exit(1);
    void* m = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) ::_exit(1);
    ::close(fd);  // mapped, not open: maps alone must show it
    const char c = 'r';
    if (::write(ready[1], &c, 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  const bool started = ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);

  SignalSampler s;
  const std::vector<std::uint32_t> pids = {static_cast<std::uint32_t>(child),
                                           static_cast<std::uint32_t>(::getpid())};
  auto r = s.sample(pids, monotonic_ns());
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::unlink(path.c_str());
  ASSERT_TRUE(started) << "the child could not map " << path;
  EXPECT_EQ(r[0].nccl_active, true);
  EXPECT_EQ(r[1].nccl_active, false);
  // After it is reaped it is gone.
  auto after = s.sample(pids, monotonic_ns());
  EXPECT_TRUE(after[0].gone);
}

}  // namespace
}  // namespace zernel::collect
