// Per-thread phase times from the phase events: accounted at the events' times, ended by a
// thread's exit, bounded per process.
#include "telemetry/thread_phases.hpp"

#include <gtest/gtest.h>

namespace zernel::telemetry {
namespace {

using policy::index_of;
using policy::Phase;

constexpr std::uint64_t kMs = 1'000'000;

std::uint64_t ms_in(const ThreadView& v, Phase p) { return v.phase_time_ns[index_of(p)] / kMs; }

TEST(ThreadPhaseTimes, each_thread_is_accounted_at_its_events_and_stops_at_its_exit) {
  ThreadPhaseTimes t;
  t.record(100, 100, Phase::data_loading, 10 * kMs);
  t.record(100, 100, Phase::gpu_compute, 20 * kMs);
  t.record(100, 101, Phase::data_loading, 30 * kMs);
  t.record(100, 100, Phase::optimizer_step, 80 * kMs);
  t.exited(100, 101, 50 * kMs);
  t.exited(100, 999, 50 * kMs);  // never seen: ignored
  const auto v = t.threads(100, 100 * kMs);
  ASSERT_EQ(v.size(), 2U);
  EXPECT_EQ(v[0].tid, 100U);
  EXPECT_EQ(v[0].phase, Phase::optimizer_step);
  EXPECT_EQ(ms_in(v[0], Phase::data_loading), 10U);
  EXPECT_EQ(ms_in(v[0], Phase::gpu_compute), 60U);
  EXPECT_EQ(ms_in(v[0], Phase::optimizer_step), 20U);
  EXPECT_EQ(v[1].tid, 101U);
  EXPECT_TRUE(v[1].exited);
  EXPECT_EQ(ms_in(v[1], Phase::data_loading), 20U);  // 30..50, not to now
  EXPECT_TRUE(t.threads(200, 100 * kMs).empty());
}

TEST(ThreadPhaseTimes, a_change_dated_before_the_last_one_counts_as_made_at_it) {
  ThreadPhaseTimes t;
  t.record(1, 1, Phase::gpu_compute, 50 * kMs);
  t.record(1, 1, Phase::optimizer_step, 40 * kMs);
  const auto v = t.threads(1, 60 * kMs);
  ASSERT_EQ(v.size(), 1U);
  EXPECT_EQ(ms_in(v[0], Phase::gpu_compute), 0U);
  EXPECT_EQ(ms_in(v[0], Phase::optimizer_step), 10U);
}

TEST(ThreadPhaseTimes, forget_drops_the_process) {
  ThreadPhaseTimes t;
  t.record(1, 2, Phase::gpu_compute, kMs);
  EXPECT_EQ(t.processes(), 1U);
  t.forget(1);
  EXPECT_EQ(t.processes(), 0U);
  EXPECT_TRUE(t.threads(1, 2 * kMs).empty());
}

TEST(ThreadPhaseTimes, a_full_process_makes_room_with_an_exited_thread_first_then_the_oldest) {
  ThreadPhaseTimes t;
  const auto n = static_cast<std::uint32_t>(ThreadPhaseTimes::kMaxThreadsPerProcess);
  for (std::uint32_t i = 0; i < n; ++i) t.record(1, 1000 + i, Phase::unknown, (i + 1) * kMs);
  t.exited(1, 1000 + 7, 500 * kMs);
  t.record(1, 5000, Phase::data_loading, 600 * kMs);  // takes the exited thread's place
  t.record(1, 5001, Phase::data_loading, 601 * kMs);  // takes 1000's (oldest change)
  const auto v = t.threads(1, 700 * kMs);
  EXPECT_EQ(v.size(), n);
  EXPECT_EQ(t.evicted(), 2U);
  for (const ThreadView& th : v) {
    EXPECT_NE(th.tid, 1000U + 7);
    EXPECT_NE(th.tid, 1000U);
  }
  EXPECT_EQ(v.back().tid, 5001U);
}

}  // namespace
}  // namespace zernel::telemetry
