#include "collect/cpu_load.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "support/temp_tree.hpp"

namespace zernel::collect {
namespace {

namespace fs = std::filesystem;

class FakeProcStat : public test_support::TempTree {
 public:
  FakeProcStat() : TempTree("zernel-cpuload") {}
  void write(const std::string& text) const { TempTree::write("stat", text); }
};

// "cpuN user nice system idle iowait irq softirq steal guest guest_nice"
TEST(CpuLoad, first_sample_is_empty_then_busy_share_of_the_delta) {
  FakeProcStat f;
  f.write(
      "cpu  0 0 0 0 0 0 0 0 0 0\n"
      "cpu0 100 0 100 800 0 0 0 0 0 0\n"
      "cpu1 100 0 100 800 0 0 0 0 0 0\n"
      "cpu3 0 0 0 1000 0 0 0 0 0 0\n"
      "intr 1 2 3\n");
  CpuLoadSampler s(f.root());
  auto first = s.sample();
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_TRUE(first->empty());

  // cpu0: +30 user +10 system +5 irq +5 steal, +40 idle +10 iowait -> 50 busy of 100.
  // cpu1: only idle moved -> 0. cpu3: all busy -> 1.
  f.write(
      "cpu  0 0 0 0 0 0 0 0 0 0\n"
      "cpu0 130 0 110 840 10 5 0 5 0 0\n"
      "cpu1 100 0 100 900 0 0 0 0 0 0\n"
      "cpu3 50 50 0 1000 0 0 0 0 0 0\n");
  auto loads = s.sample();
  ASSERT_TRUE(loads.ok());
  ASSERT_EQ(loads->size(), 4U);
  EXPECT_FLOAT_EQ((*loads)[0], 0.5F);
  EXPECT_FLOAT_EQ((*loads)[1], 0.0F);
  EXPECT_FLOAT_EQ((*loads)[2], 0.0F);  // offline: a gap
  EXPECT_FLOAT_EQ((*loads)[3], 1.0F);
}

TEST(CpuLoad, offline_new_and_backwards_counters_read_zero_or_sane) {
  const std::vector<std::optional<sys::CpuTimes>> before = {
      sys::CpuTimes{100, 0, 0, 100, 50, 0, 0, 0}, sys::CpuTimes{0, 0, 0, 0, 0, 0, 0, 0},
      std::nullopt};
  // cpu0: iowait went backwards (a NO_HZ kernel quirk) while user grew: still a load in [0, 1].
  // cpu1: went offline. cpu2: came online (no earlier reading). cpu3: new id.
  const std::vector<std::optional<sys::CpuTimes>> after = {
      sys::CpuTimes{150, 0, 0, 140, 20, 0, 0, 0}, std::nullopt,
      sys::CpuTimes{5, 0, 0, 5, 0, 0, 0, 0}, sys::CpuTimes{1, 0, 0, 1, 0, 0, 0, 0}};
  auto loads = cpu_loads_between(before, after);
  ASSERT_EQ(loads.size(), 4U);
  // busy +50; idle+iowait 150 -> 160: +10.
  EXPECT_FLOAT_EQ(loads[0], 50.0F / 60.0F);
  EXPECT_FLOAT_EQ(loads[1], 0.0F);
  EXPECT_FLOAT_EQ(loads[2], 0.0F);
  EXPECT_FLOAT_EQ(loads[3], 0.0F);
  // Counters that did not move, or all went backwards (a reset), read 0.
  const std::vector<std::optional<sys::CpuTimes>> reset = {sys::CpuTimes{1, 0, 0, 1, 0, 0, 0, 0}};
  EXPECT_FLOAT_EQ(cpu_loads_between(before, before)[0], 0.0F);
  EXPECT_FLOAT_EQ(cpu_loads_between(before, reset)[0], 0.0F);
  EXPECT_TRUE(cpu_loads_between(before, {}).empty());
}

TEST(CpuLoad, a_failed_read_keeps_the_previous_reading) {
  FakeProcStat f;
  f.write("cpu0 0 0 0 100 0 0 0 0\n");
  CpuLoadSampler s(f.root());
  ASSERT_TRUE(s.sample().ok());
  f.write("cpu0 garbage\n");
  auto bad = s.sample();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("/stat"), std::string::npos) << bad.error().message();
  f.write("cpu0 100 0 0 200 0 0 0 0\n");
  auto loads = s.sample();
  ASSERT_TRUE(loads.ok());
  ASSERT_EQ(loads->size(), 1U);
  EXPECT_FLOAT_EQ((*loads)[0], 0.5F);
}

TEST(CpuLoad, a_missing_file_is_an_error) {
  CpuLoadSampler s("/nonexistent/zernel-proc");
  auto r = s.sample();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ENOENT);
}

TEST(CpuLoad, reads_the_real_proc_stat) {
  CpuLoadSampler s;
  auto first = s.sample();
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_TRUE(first->empty());
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  volatile std::uint64_t sink = 0;
  while (std::chrono::steady_clock::now() < until) sink = sink + 1;
  auto loads = s.sample();
  ASSERT_TRUE(loads.ok()) << loads.error().message();
  ASSERT_FALSE(loads->empty());
  float sum = 0.0F;
  for (float l : *loads) {
    EXPECT_GE(l, 0.0F);
    EXPECT_LE(l, 1.0F);
    sum += l;
  }
  EXPECT_GT(sum, 0.0F);  // this test itself kept a CPU busy
}

}  // namespace
}  // namespace zernel::collect
