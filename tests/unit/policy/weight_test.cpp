// Priority -> CPU weight (policy/weight.hpp): 1024 at priority 0, x1.25 per step, clamped to
// -20..+20, and the nice mapping for backends that speak nice.

#include "policy/weight.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace zernel::policy {
namespace {

std::uint32_t expected_weight(std::int32_t p) {
  return static_cast<std::uint32_t>(std::lround(1024.0 * std::pow(1.25, static_cast<double>(p))));
}

TEST(Weight, priority_zero_is_the_kernel_nice_zero_weight) {
  EXPECT_EQ(weight_for_priority(0), 1024U);
  EXPECT_EQ(kDefaultWeight, 1024U);
}

TEST(Weight, each_priority_step_multiplies_the_weight_by_1_25) {
  for (std::int32_t p = kMinPriority; p <= kMaxPriority; ++p) {
    EXPECT_EQ(weight_for_priority(p), expected_weight(p)) << "priority " << p;
  }
  EXPECT_EQ(weight_for_priority(1), 1280U);
  EXPECT_EQ(weight_for_priority(-1), 819U);
}

TEST(Weight, weight_strictly_increases_with_priority) {
  for (std::int32_t p = kMinPriority; p < kMaxPriority; ++p) {
    EXPECT_LT(weight_for_priority(p), weight_for_priority(p + 1)) << "priority " << p;
  }
}

TEST(Weight, documented_values_in_weight_hpp_hold) {
  // The table in the comment of src/policy/weight.hpp.
  EXPECT_EQ(weight_for_priority(-10), 110U);
  EXPECT_EQ(weight_for_priority(-5), 336U);
  EXPECT_EQ(weight_for_priority(0), 1024U);
  EXPECT_EQ(weight_for_priority(5), 3125U);
  EXPECT_EQ(weight_for_priority(10), 9537U);
  EXPECT_EQ(weight_for_priority(15), 29104U);
  // "weights 12..88,818"
  EXPECT_EQ(weight_for_priority(kMinPriority), 12U);
  EXPECT_EQ(weight_for_priority(kMaxPriority), 88'818U);
}

TEST(Weight, priorities_outside_the_table_are_clamped) {
  EXPECT_EQ(kMinPriority, -20);
  EXPECT_EQ(kMaxPriority, 20);
  EXPECT_EQ(weight_for_priority(21), weight_for_priority(20));
  EXPECT_EQ(weight_for_priority(1000), weight_for_priority(20));
  EXPECT_EQ(weight_for_priority(std::numeric_limits<std::int32_t>::max()), weight_for_priority(20));
  EXPECT_EQ(weight_for_priority(-21), weight_for_priority(-20));
  EXPECT_EQ(weight_for_priority(std::numeric_limits<std::int32_t>::min()),
            weight_for_priority(-20));
}

TEST(Weight, every_weight_is_positive) {
  for (std::int32_t p = -100; p <= 100; ++p) EXPECT_GT(weight_for_priority(p), 0U);
}

TEST(Weight, nice_is_minus_priority_clamped_to_the_nice_range) {
  EXPECT_EQ(nice_for_priority(0), 0);
  EXPECT_EQ(nice_for_priority(5), -5);
  EXPECT_EQ(nice_for_priority(-5), 5);
  EXPECT_EQ(nice_for_priority(15), -15);
  EXPECT_EQ(nice_for_priority(-10), 10);
  EXPECT_EQ(nice_for_priority(20), -20);
  EXPECT_EQ(nice_for_priority(21), -20);
  EXPECT_EQ(nice_for_priority(-19), 19);
  EXPECT_EQ(nice_for_priority(-20), 19);
  EXPECT_EQ(nice_for_priority(-1000), 19);
  EXPECT_EQ(nice_for_priority(std::numeric_limits<std::int32_t>::max()), -20);
}

TEST(Weight, nice_of_the_most_negative_priority_is_19_without_overflow) {
  // -INT32_MIN overflows (undefined behaviour); the clamp must happen before the negation.
  EXPECT_EQ(nice_for_priority(std::numeric_limits<std::int32_t>::min()), 19);
  EXPECT_EQ(nice_for_priority(std::numeric_limits<std::int32_t>::min() + 1), 19);
}

TEST(Weight, nice_is_monotone_non_increasing_in_priority) {
  for (std::int32_t p = -30; p < 30; ++p) EXPECT_GE(nice_for_priority(p), nice_for_priority(p + 1));
}

}  // namespace
}  // namespace zernel::policy
