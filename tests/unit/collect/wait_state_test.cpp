#include "collect/wait_state.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

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
