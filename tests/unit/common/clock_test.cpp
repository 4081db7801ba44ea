#include "common/clock.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace zernel {
namespace {

TEST(Clock, elapsed_is_the_time_between_two_readings) {
  EXPECT_EQ(elapsed(1'500, 1'000), 500U);
  EXPECT_EQ(elapsed(1'000, 1'000), 0U);
}

// A loop reads `now`, then handles an event that stamps its own, later time: the age of that
// event at `now` is 0, not 2^64 - 1 (which made the HTTP server's sweep close a lingering
// connection at once, with a reset, in one CI run).
TEST(Clock, elapsed_since_a_later_time_is_zero) {
  EXPECT_EQ(elapsed(1'000, 1'001), 0U);
  EXPECT_EQ(elapsed(0, UINT64_MAX), 0U);
}

TEST(Clock, monotonic_readings_never_go_back) {
  const std::uint64_t a = monotonic_ns();
  const std::uint64_t b = monotonic_ns();
  EXPECT_LE(a, b);
}

}  // namespace
}  // namespace zernel
