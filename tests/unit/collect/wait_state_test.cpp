#include "collect/wait_state.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace zernel::collect {
namespace {

TEST(WaitState, classifies_system_calls) {
  EXPECT_EQ(parse_syscall_file("running\n"), MainThreadWait::running);
  EXPECT_EQ(parse_syscall_file("0 0x3 0x7f 0x20000 0x0 0x0 0x0 0x7ffc 0x7f9\n"),
            MainThreadWait::input);
  EXPECT_EQ(parse_syscall_file("7 0x1 0x1 0x0 0 0 0 0x1 0x2\n"), MainThreadWait::input);
  EXPECT_EQ(parse_syscall_file("202 0x7f 0x80 0x0 0 0 0 0x1 0x2\n"), MainThreadWait::futex);
  EXPECT_EQ(parse_syscall_file("230 0x0 0x0 0x7ff 0x7ff 0x0 0x0 0x7ff 0x7fe\n"),
            MainThreadWait::other);
  EXPECT_EQ(parse_syscall_file("-1 0x7ffc 0x7f9\n"), MainThreadWait::other);
}

TEST(WaitState, children_lists_are_parsed_up_to_the_first_bad_token) {
  std::vector<std::uint32_t> out = {99};
  parse_children("", out);
  EXPECT_TRUE(out.empty());
  parse_children("4711 4712 ", out);
  EXPECT_EQ(out, (std::vector<std::uint32_t>{4711, 4712}));
  parse_children("12 x 13", out);
  EXPECT_EQ(out, (std::vector<std::uint32_t>{12}));
  parse_children("0 5", out);  // pid 0 is not a child
  EXPECT_TRUE(out.empty());
  parse_children("99999999999 5", out);  // does not fit
  EXPECT_TRUE(out.empty());
}

TEST(WaitState, a_forked_child_is_listed_in_the_main_threads_children) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  std::vector<std::uint32_t> out;
  const bool ok = read_main_thread_children("/proc", static_cast<std::uint32_t>(getpid()), out);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  if (!ok) GTEST_SKIP() << "no /proc/PID/task/PID/children (CONFIG_PROC_CHILDREN off)";
  EXPECT_NE(std::find(out.begin(), out.end(), static_cast<std::uint32_t>(child)), out.end());
  EXPECT_FALSE(read_main_thread_children("/proc", 0, out));
}

TEST(WaitState, futex_now_or_running_just_after_a_futex_wait_is_a_futex_wait) {
  constexpr std::uint64_t kMs = 1'000'000;
  const std::uint64_t now = 5'000 * kMs;
  EXPECT_TRUE(main_thread_in_futex_wait(MainThreadWait::futex, 0, now));
  EXPECT_TRUE(main_thread_in_futex_wait(MainThreadWait::running, now - 10 * kMs, now));
  EXPECT_FALSE(main_thread_in_futex_wait(MainThreadWait::running, now - kFutexLoopNs, now));
  EXPECT_FALSE(main_thread_in_futex_wait(MainThreadWait::running, 0, now));
  // Blocked in something else now: not a futex wait, however recent the last one.
  EXPECT_FALSE(main_thread_in_futex_wait(MainThreadWait::input, now - kMs, now));
  EXPECT_FALSE(main_thread_in_futex_wait(MainThreadWait::other, now - kMs, now));
  EXPECT_FALSE(main_thread_in_futex_wait(MainThreadWait::unknown, now - kMs, now));
  // A stamp read after now_ns was taken.
  EXPECT_TRUE(main_thread_in_futex_wait(MainThreadWait::running, now + kMs, now));
}

TEST(WaitState, odd_contents_are_unknown) {
  for (const char* bad : {"", "x", "12a 0x0", "-7 0x0", "99999999999999999999 0x0"}) {
    EXPECT_EQ(parse_syscall_file(bad), MainThreadWait::unknown) << bad;
  }
}

TEST(WaitState, a_missing_process_is_unknown) {
  EXPECT_EQ(read_main_thread_wait("/proc", 0x7fffffff), MainThreadWait::unknown);
  EXPECT_EQ(read_main_thread_wait("/nonexistent", 1), MainThreadWait::unknown);
}

TEST(WaitState, sees_a_real_child_blocked_reading_a_pipe) {
  if (geteuid() != 0) GTEST_SKIP() << "/proc/PID/syscall needs root";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c;
    (void)!read(fds[0], &c, 1);
    _exit(0);
  }
  MainThreadWait w = MainThreadWait::unknown;
  for (int i = 0; i < 200 && w != MainThreadWait::input; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    w = read_main_thread_wait("/proc", static_cast<std::uint32_t>(child));
  }
  EXPECT_EQ(w, MainThreadWait::input);
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  waitpid(child, nullptr, 0);
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace zernel::collect

namespace zernel::collect {
namespace {

TEST(SchedStat, parses_the_three_fields) {
  auto st = parse_schedstat("123456 7890 42\n");
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->run_ns, 123456U);
  EXPECT_EQ(st->wait_ns, 7890U);
  EXPECT_EQ(st->timeslices, 42U);
}

TEST(SchedStat, rejects_truncated_or_garbled_text) {
  for (const char* bad : {"", "1 2", "a b c", "1 2 3x", "99999999999999999999999 1 1",
                          "1 2 3"}) {
    EXPECT_FALSE(parse_schedstat(bad).has_value()) << bad;
  }
}

TEST(SchedStat, reads_this_process) {
  auto st = read_schedstat("/proc", static_cast<std::uint32_t>(getpid()));
  ASSERT_TRUE(st.has_value());
  EXPECT_GT(st->run_ns, 0U);
}

}  // namespace
}  // namespace zernel::collect
