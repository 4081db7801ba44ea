#include "collect/sync_signals.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace zernel::collect {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kTick = 100 * kMs;
constexpr std::uint64_t kNow = 10'000 * kMs;

TEST(SyncSignals, a_process_that_never_synced_has_no_burst_and_no_floor) {
  const SyncSignals s = sync_signals(SyncState{}, kNow, kTick);
  EXPECT_EQ(s.cpu_burst_ns, 0U);
  EXPECT_EQ(s.gpu_floor_pct, 0U);
  EXPECT_FALSE(s.long_sync);
}

TEST(SyncSignals, a_long_sync_in_progress_reads_burst_zero_and_gpu_busy) {
  SyncState st;
  st.in_sync = true;
  st.in_sync_since_ns = kNow - 30 * kMs;
  st.last_return_ns = kNow - 500 * kMs;
  st.last_burst_ns = 2 * kMs;
  const SyncSignals s = sync_signals(st, kNow, kTick);
  EXPECT_TRUE(s.long_sync);
  EXPECT_EQ(s.cpu_burst_ns, 0U);
  EXPECT_EQ(s.gpu_floor_pct, 100U);
  EXPECT_EQ(s.wait_blocks, std::optional<bool>(true));  // the main thread sleeps in it
}

TEST(SyncSignals, a_waiter_runnable_while_its_gpu_is_busy_spins) {
  SyncState st;
  st.in_sync = true;
  st.in_sync_since_ns = kNow - 30 * kMs;
  st.runnable = true;
  st.nvml_util_pct = 95;
  const SyncSignals s = sync_signals(st, kNow, kTick);
  EXPECT_TRUE(s.long_sync);
  EXPECT_EQ(s.wait_blocks, std::optional<bool>(false));
}

TEST(SyncSignals, outside_a_long_sync_nothing_is_said_about_how_it_waits) {
  SyncState st;
  st.in_sync = true;
  st.in_sync_since_ns = kNow - kMs / 5;
  st.last_return_ns = kNow - kMs;
  EXPECT_FALSE(sync_signals(st, kNow, kTick).wait_blocks.has_value());
  EXPECT_FALSE(sync_signals(SyncState{}, kNow, kTick).wait_blocks.has_value());
}

TEST(SyncSignals, a_short_sync_between_bursts_reads_the_burst_before_it) {
  SyncState st;
  st.in_sync = true;
  st.in_sync_since_ns = kNow - kMs / 5;  // 0.2 ms into a kernel's sync
  st.last_return_ns = kNow - kMs;
  st.last_burst_ns = 800'000;            // the 0.8 ms burst that ended at the entry
  st.sync_time_delta_ns = 20 * kMs;      // a fifth of the tick in syncs
  st.interval_ns = kTick;
  const SyncSignals s = sync_signals(st, kNow, kTick);
  EXPECT_FALSE(s.long_sync);
  EXPECT_EQ(s.cpu_burst_ns, 800'000U);
  EXPECT_EQ(s.gpu_floor_pct, 20U);
}

TEST(SyncSignals, a_short_sync_after_a_burst_too_short_to_measure_reads_one_ns) {
  SyncState st;
  st.in_sync = true;
  st.in_sync_since_ns = kNow - kMs;
  st.last_return_ns = kNow - 2 * kMs;
  st.last_burst_ns = 0;  // schedstat had not moved
  EXPECT_EQ(sync_signals(st, kNow, kTick).cpu_burst_ns, 1U);
}

TEST(SyncSignals, the_first_sync_of_a_process_reads_burst_zero_even_when_short) {
  SyncState st;
  st.in_sync = true;
  st.in_sync_since_ns = kNow - kMs;
  EXPECT_EQ(sync_signals(st, kNow, kTick).cpu_burst_ns, 0U);
}

TEST(SyncSignals, after_a_return_the_burst_is_the_cpu_since_then_and_at_least_one_ns) {
  SyncState st;
  st.last_return_ns = kNow - 50 * kMs;
  st.burst_since_return_ns = 3 * kMs;
  st.last_burst_ns = 9 * kMs;  // an older burst does not matter once returned
  EXPECT_EQ(sync_signals(st, kNow, kTick).cpu_burst_ns, 3 * kMs);
  st.burst_since_return_ns = 0;
  EXPECT_EQ(sync_signals(st, kNow, kTick).cpu_burst_ns, 1U);
}

TEST(SyncSignals, the_floor_counts_completed_syncs_and_the_one_in_progress_capped_at_100) {
  SyncState st;
  st.in_sync = true;
  st.in_sync_since_ns = kNow - 10 * kMs;  // short: not long_sync
  st.last_return_ns = kNow - 15 * kMs;
  st.sync_time_delta_ns = 30 * kMs;
  st.interval_ns = kTick;
  EXPECT_EQ(sync_signals(st, kNow, kTick).gpu_floor_pct, 40U);
  st.sync_time_delta_ns = 500 * kMs;  // more than the interval (several threads)
  EXPECT_EQ(sync_signals(st, kNow, kTick).gpu_floor_pct, 100U);
}

TEST(SyncSignals, a_first_read_uses_the_tick_as_the_interval) {
  SyncState st;
  st.last_return_ns = kNow - 5 * kMs;
  st.sync_time_delta_ns = 50 * kMs;
  EXPECT_EQ(sync_signals(st, kNow, kTick).gpu_floor_pct, 50U);
  EXPECT_EQ(sync_signals(st, kNow, 0).gpu_floor_pct, 0U);  // no interval at all: no floor
}

TEST(SyncSignals, a_sync_start_in_the_future_is_not_a_long_sync) {
  SyncState st;
  st.in_sync = true;
  st.in_sync_since_ns = kNow + kMs;  // clocks read in a different order: treat as just begun
  st.last_return_ns = kNow - kMs;
  st.last_burst_ns = kMs;
  const SyncSignals s = sync_signals(st, kNow, kTick);
  EXPECT_FALSE(s.long_sync);
  EXPECT_EQ(s.cpu_burst_ns, kMs);
}

TEST(SyncSignals, a_long_sync_whose_thread_is_runnable_while_its_gpu_idles_is_a_gap) {
  // The optimizer's 0.2 ms kernel is done; the thread waits 300 ms for a CPU on a busy machine.
  SyncState st;
  st.in_sync = true;
  st.in_sync_since_ns = kNow - 300 * kMs;
  st.last_return_ns = kNow - 301 * kMs;
  st.last_burst_ns = 800'000;
  st.interval_ns = kTick;
  st.runnable = true;
  st.nvml_util_pct = 3;
  const SyncSignals s = sync_signals(st, kNow, kTick);
  EXPECT_FALSE(s.long_sync);
  EXPECT_EQ(s.cpu_burst_ns, 800'000U);
  EXPECT_EQ(s.gpu_floor_pct, 0U);
}

TEST(SyncSignals, a_long_sync_that_spins_on_a_busy_gpu_is_still_blocked) {
  SyncState st;
  st.in_sync = true;
  st.in_sync_since_ns = kNow - 300 * kMs;
  st.last_return_ns = kNow - 400 * kMs;
  st.runnable = true;     // CUDA's spin mode
  st.nvml_util_pct = 97;  // its GPU is busy
  EXPECT_TRUE(sync_signals(st, kNow, kTick).long_sync);
  st.nvml_util_pct.reset();  // no NVML: the sync's length decides
  EXPECT_TRUE(sync_signals(st, kNow, kTick).long_sync);
  st.runnable = false;  // asleep in the sync: blocked, whatever NVML says
  st.nvml_util_pct = 0;
  EXPECT_TRUE(sync_signals(st, kNow, kTick).long_sync);
}

}  // namespace
}  // namespace zernel::collect
