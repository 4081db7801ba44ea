#include "daemon/ticker.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

namespace zernel::daemon {
namespace {

TEST(Ticker, deadlines_are_start_plus_multiples_of_the_period) {
  const std::uint64_t period = 5'000'000;
  const std::uint64_t start = monotonic_ns();
  Ticker t(period, start);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(t.wait(-1));
    EXPECT_EQ((t.deadline_ns() - start) % period, 0U);
    EXPECT_GE(monotonic_ns(), t.deadline_ns());
  }
  EXPECT_EQ(t.ticks(), 5U);
}

TEST(Ticker, an_overrun_skips_missed_deadlines_instead_of_bursting) {
  const std::uint64_t period = 5'000'000;
  const std::uint64_t start = monotonic_ns();
  Ticker t(period, start);
  ASSERT_TRUE(t.wait(-1));
  const std::uint64_t first = t.deadline_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // a tick that overran ~6 periods
  ASSERT_TRUE(t.wait(-1));
  EXPECT_GE(t.skipped(), 4U);
  EXPECT_EQ((t.deadline_ns() - first) % period, 0U);
  EXPECT_GT(t.deadline_ns(), first + 4 * period);
}

TEST(Ticker, returns_false_when_the_stop_fd_becomes_readable) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  Ticker t(10'000'000'000ULL, monotonic_ns());  // a 10 s period: only the fd can end the wait
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  EXPECT_FALSE(t.wait(fds[0]));
  close(fds[0]);
  close(fds[1]);
}

TEST(Ticker, a_zero_period_is_treated_as_one_nanosecond) {
  Ticker t(0, monotonic_ns());
  EXPECT_EQ(t.period_ns(), 1U);
  EXPECT_TRUE(t.wait(-1));
}

}  // namespace
}  // namespace zernel::daemon
