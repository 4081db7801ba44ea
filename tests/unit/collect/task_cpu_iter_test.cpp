// The task iterator behind the tenants' CPU time (bpf/task_cpu.bpf.c,
// src/collect/probes/task_cpu_iter.cpp) on the host's real kernel, against a forked child whose
// CPU time the test knows: a thread that burned 150 ms and exited, then the main thread's 150 ms.
// Needs root and BPF; each test skips with the reason otherwise. Built only with the BPF
// toolchain (ZERNEL_HAVE_PROBES).
#ifdef ZERNEL_HAVE_PROBES

#include "collect/probes/task_cpu_iter.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "support/proc_stat.hpp"

namespace zernel::collect {
namespace {

constexpr std::uint64_t kMsNs = 1'000'000;

// Burns `ms` of this thread's CPU time.
void burn_thread_cpu(std::uint64_t ms) {
  timespec t0{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  const auto start = static_cast<std::uint64_t>(t0.tv_sec) * 1'000'000'000U +
                     static_cast<std::uint64_t>(t0.tv_nsec);
  for (;;) {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    const auto now = static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000U +
                     static_cast<std::uint64_t>(t.tv_nsec);
    if (now - start >= ms * kMsNs) return;
  }
}

// A child that burns 150 ms in a thread that then exits and 150 ms in its main thread, says so
// on a pipe and sleeps until killed.
class BurntChild {
 public:
  BurntChild() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(fds[0]);
      std::thread([] { burn_thread_cpu(150); }).join();
      burn_thread_cpu(150);
      (void)!write(fds[1], "r", 1);
      for (;;) pause();
    }
    close(fds[1]);
    char c = 0;
    ready_ = pid_ > 0 && read(fds[0], &c, 1) == 1;
    close(fds[0]);
  }
  ~BurntChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  BurntChild(const BurntChild&) = delete;
  BurntChild& operator=(const BurntChild&) = delete;
  [[nodiscard]] std::uint32_t pid() const { return static_cast<std::uint32_t>(pid_); }
  [[nodiscard]] bool ready() const { return ready_; }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

std::optional<TaskCpu> find(const std::vector<TaskCpu>& v, std::uint32_t pid) {
  for (const TaskCpu& t : v) {
    if (t.pid == pid) return t;
  }
  return std::nullopt;
}

// A pid that no process has: a child that has been reaped.
std::uint32_t reaped_pid() {
  const pid_t p = fork();
  if (p == 0) _exit(0);
  waitpid(p, nullptr, 0);
  return static_cast<std::uint32_t>(p);
}

class TaskCpuIter : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = TaskCpuIterator::open();
    if (!r) GTEST_SKIP() << r.error().message();
    it_ = std::move(r.value());
  }
  std::unique_ptr<TaskCpuIterator> it_;
};

// One read answers each asked process that lives with its CPU time since it started, the time of
// its exited threads included, as /proc/PID/stat's utime + stime says it (to its clock ticks);
// a pid without a process is not answered; a process no longer asked is no longer reported.
TEST_F(TaskCpuIter, reports_the_asked_processes_cpu_time_with_their_exited_threads) {
  const BurntChild child;
  ASSERT_TRUE(child.ready());
  const std::uint32_t self = static_cast<std::uint32_t>(getpid());
  const std::uint32_t none = reaped_pid();
  std::vector<std::uint32_t> pids = {child.pid(), self, none};
  std::sort(pids.begin(), pids.end());
  std::vector<TaskCpu> out;
  it_->follow(pids);
  ASSERT_TRUE(it_->read(out));
  const auto found = find(out, child.pid());
  ASSERT_TRUE(found.has_value()) << "the child was not reported";
  const std::uint64_t ns = found->cpu_ns;
  EXPECT_GE(ns, 300 * kMsNs) << "the exited thread's 150 ms must be counted";
  EXPECT_EQ(found->threads, 1U) << "the burning thread has exited";
  EXPECT_GE(found->timeslices, 1U);
  const auto st = test_support::read_proc_stat(static_cast<pid_t>(child.pid()));
  ASSERT_TRUE(st.has_value());
  const std::uint64_t stat_ns = (st->utime_ticks + st->stime_ticks) * 1'000'000'000U /
                                static_cast<std::uint64_t>(sysconf(_SC_CLK_TCK));
  EXPECT_LE(ns, stat_ns + 30 * kMsNs) << "stat says " << stat_ns;
  EXPECT_GE(ns + 30 * kMsNs, stat_ns) << "stat says " << stat_ns;
  EXPECT_TRUE(find(out, self).has_value());
  EXPECT_FALSE(find(out, none).has_value());
  EXPECT_TRUE(std::is_sorted(out.begin(), out.end(),
                             [](const TaskCpu& a, const TaskCpu& b) { return a.pid < b.pid; }));

  // The child alone: this process leaves the map. Asleep, the child has not moved.
  const std::vector<std::uint32_t> only = {child.pid()};
  it_->follow(only);
  ASSERT_TRUE(it_->read(out));
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].pid, child.pid());
  EXPECT_EQ(out[0].cpu_ns, ns) << "a sleeping process's CPU time stays";
  EXPECT_EQ(out[0].timeslices, found->timeslices);
  it_->follow({});
  ASSERT_TRUE(it_->read(out));
  EXPECT_TRUE(out.empty());
  // Each read walked the node's tasks: this process's two and more.
  EXPECT_GE(it_->tasks_walked(), 3U);
  EXPECT_TRUE(it_->worth_reading(it_->tasks_walked()));
  EXPECT_FALSE(it_->worth_reading(1));
  EXPECT_EQ(it_->failed_reads(), 0U);
  EXPECT_EQ(it_->refused(), 0U);
}

// A process with many threads is one entry, the sum of its threads, live and exited.
TEST_F(TaskCpuIter, sums_a_process_threads_into_one_entry) {
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([] { burn_thread_cpu(20); });
  for (auto& t : threads) t.join();
  std::atomic<bool> stop{false};
  std::thread live([&] {
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  const std::vector<std::uint32_t> pids = {static_cast<std::uint32_t>(getpid())};
  std::vector<TaskCpu> out;
  it_->follow(pids);
  const bool ok = it_->read(out);
  stop = true;
  live.join();
  ASSERT_TRUE(ok);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_GE(out[0].cpu_ns, 80 * kMsNs);
  EXPECT_GE(out[0].threads, 2U) << "the main thread and the live one";
}

}  // namespace
}  // namespace zernel::collect

#endif  // ZERNEL_HAVE_PROBES
