// Phase detection (policy/phase_detector.hpp, [phase_detection] in docs/configuration.md): each
// rule with its strict edges, the rule order, the debounce, and a randomized property sweep.

#include "policy/phase_detector.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "policy/engine.hpp"
#include "policy/options.hpp"
#include "policy/phase.hpp"
#include "policy/task_state.hpp"

namespace zernel::policy {
namespace {

constexpr std::uint64_t kMs = 1'000'000;

TaskState ml_task() {
  TaskState s;
  s.pid = 42;
  s.is_ml_process = true;
  return s;
}

PhaseDetectionOptions with_nccl() {
  PhaseDetectionOptions o;
  o.nccl_detection_enabled = true;
  return o;
}

bool is_a_phase(Phase p) {
  return std::find(kAllPhases.begin(), kAllPhases.end(), p) != kAllPhases.end();
}

// Runs detect() and commits the result the way the engine does.
Phase tick(PhaseDetector& d, TaskState& s, std::uint64_t now_ns = 0) {
  const Phase p = d.detect(s);
  if (p != s.current_phase) s.transition_phase(p, now_ns);
  return p;
}

TEST(PhaseDetector, default_options_are_the_documented_defaults) {
  const PhaseDetectionOptions o;
  EXPECT_FLOAT_EQ(o.io_wait_threshold, 0.3F);
  EXPECT_EQ(o.optimizer_burst_max_ns, 5 * kMs);
  EXPECT_EQ(o.gpu_idle_threshold, 10);
  EXPECT_EQ(o.gpu_active_threshold, 80);
  EXPECT_EQ(o.phase_stability_count, 3U);
  // On by default since NCCL activity and futex waits are measured (docs/configuration.md).
  EXPECT_TRUE(o.nccl_detection_enabled);
}

// ---- phases from events ----------------------------------------------------------------------

TEST(PhaseDetector, an_event_phase_is_committed_at_once_whatever_the_signals) {
  PhaseDetector d{PhaseDetectionOptions{}};  // stability 3: a sampled phase needs 3 ticks
  TaskState s = ml_task();
  s.gpu_utilization = 100;  // the sampled rules would say GpuCompute
  s.event_phase = Phase::nccl_collective;
  EXPECT_EQ(tick(d, s, 1), Phase::nccl_collective);
  EXPECT_EQ(d.transition_count(), 1U);
  s.event_phase = Phase::optimizer_step;
  EXPECT_EQ(tick(d, s, 2), Phase::optimizer_step);
  EXPECT_EQ(tick(d, s, 3), Phase::optimizer_step);  // unchanged: no transition
  EXPECT_EQ(d.transition_count(), 2U);
  // Back to the sampled rules: the debounce starts afresh (no stale candidate).
  s.event_phase.reset();
  EXPECT_EQ(tick(d, s, 4), Phase::optimizer_step);
  EXPECT_EQ(tick(d, s, 5), Phase::optimizer_step);
  EXPECT_EQ(tick(d, s, 6), Phase::gpu_compute);
}

TEST(PhaseDetector, the_engine_takes_the_event_phase_from_updates) {
  Engine e(EngineOptions{}, Topology::single_node(2));
  ASSERT_TRUE(e.register_task(7, true, 0U, 1).ok());
  TaskUpdate u;
  u.event_phase = Phase::data_loading;
  ASSERT_TRUE(e.update_task(7, u));
  const Decision dec = e.schedule(7, 2);
  EXPECT_EQ(dec.phase, Phase::data_loading);
  EXPECT_TRUE(dec.phase_changed);
  EXPECT_EQ(dec.priority, policy_for_phase(Phase::data_loading).priority);
}

// ---- rule 1 ----------------------------------------------------------------------------------

TEST(PhaseDetector, a_non_ml_process_is_unknown_whatever_its_signals) {
  const PhaseDetector d(with_nccl());
  TaskState s;
  s.is_ml_process = false;
  s.nccl_active = true;
  s.futex_wait_count = 10;
  EXPECT_EQ(d.classify(s), Phase::unknown);
  s.nccl_active = false;
  s.io_wait_fraction = 0.9F;
  s.gpu_utilization = 0;
  EXPECT_EQ(d.classify(s), Phase::unknown);
  s.io_wait_fraction = 0.0F;
  s.gpu_utilization = 99;
  EXPECT_EQ(d.classify(s), Phase::unknown);
  s.gpu_utilization = 0;
  s.cpu_burst_duration_ns = kMs;
  s.last_gpu_sync_ns = 1;
  EXPECT_EQ(d.classify(s), Phase::unknown);
}

// ---- rule 2 ----------------------------------------------------------------------------------

TEST(PhaseDetector, nccl_active_with_futex_waits_is_nccl_collective_when_enabled) {
  const PhaseDetector d(with_nccl());
  TaskState s = ml_task();
  s.nccl_active = true;
  s.futex_wait_count = 1;
  EXPECT_EQ(d.classify(s), Phase::nccl_collective);
}

TEST(PhaseDetector, nccl_is_never_detected_when_disabled) {
  PhaseDetectionOptions off;
  off.nccl_detection_enabled = false;
  const PhaseDetector d(off);
  TaskState s = ml_task();
  s.nccl_active = true;
  s.futex_wait_count = 1000;
  EXPECT_EQ(d.classify(s), Phase::unknown);
  // Falls through to the later rules instead.
  s.gpu_utilization = 95;
  EXPECT_EQ(d.classify(s), Phase::gpu_compute);
}

TEST(PhaseDetector, nccl_needs_both_activity_and_futex_waits) {
  const PhaseDetector d(with_nccl());
  TaskState s = ml_task();
  s.nccl_active = true;
  s.futex_wait_count = 0;
  EXPECT_EQ(d.classify(s), Phase::unknown);
  s.nccl_active = false;
  s.futex_wait_count = 5;
  EXPECT_EQ(d.classify(s), Phase::unknown);
}

TEST(PhaseDetector, nccl_rule_comes_before_every_other_rule) {
  const PhaseDetector d(with_nccl());
  TaskState s = ml_task();
  s.nccl_active = true;
  s.futex_wait_count = 1;
  s.io_wait_fraction = 0.9F;  // would be rule 3
  s.gpu_utilization = 0;
  EXPECT_EQ(d.classify(s), Phase::nccl_collective);
  s.io_wait_fraction = 0.0F;
  s.gpu_utilization = 100;  // would be rule 4
  EXPECT_EQ(d.classify(s), Phase::nccl_collective);
  s.gpu_utilization = 50;
  s.cpu_burst_duration_ns = kMs;  // would be rule 5
  s.last_gpu_sync_ns = 10;
  EXPECT_EQ(d.classify(s), Phase::nccl_collective);
}

// ---- rule 3 ----------------------------------------------------------------------------------

TEST(PhaseDetector, io_wait_above_threshold_with_idle_gpu_is_data_loading) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.io_wait_fraction = 0.5F;
  s.gpu_utilization = 5;
  EXPECT_EQ(d.classify(s), Phase::data_loading);
  s.gpu_utilization = 9;
  s.io_wait_fraction = 0.31F;
  EXPECT_EQ(d.classify(s), Phase::data_loading);
  s.gpu_utilization = 0;
  s.io_wait_fraction = 1.0F;
  EXPECT_EQ(d.classify(s), Phase::data_loading);
}

TEST(PhaseDetector, io_wait_exactly_at_threshold_is_not_data_loading) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.io_wait_fraction = 0.3F;
  s.gpu_utilization = 0;
  EXPECT_EQ(d.classify(s), Phase::unknown);
  s.io_wait_fraction = std::nextafter(0.3F, 1.0F);
  EXPECT_EQ(d.classify(s), Phase::data_loading);
}

TEST(PhaseDetector, gpu_exactly_at_idle_threshold_is_not_idle) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.io_wait_fraction = 0.9F;
  s.gpu_utilization = 10;
  // Not rule 3 (10 is not < 10) and not rule 6 (10 is not > 10).
  EXPECT_EQ(d.classify(s), Phase::unknown);
}

TEST(PhaseDetector, data_loading_rule_comes_before_optimizer_rule) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.io_wait_fraction = 0.5F;
  s.gpu_utilization = 0;
  s.cpu_burst_duration_ns = kMs;
  s.last_gpu_sync_ns = 5;
  EXPECT_EQ(d.classify(s), Phase::data_loading);
}

// ---- rule 4 ----------------------------------------------------------------------------------

TEST(PhaseDetector, busy_gpu_without_cpu_burst_is_gpu_compute) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.gpu_utilization = 95;
  EXPECT_EQ(d.classify(s), Phase::gpu_compute);
  s.gpu_utilization = 81;
  EXPECT_EQ(d.classify(s), Phase::gpu_compute);
  s.gpu_utilization = 100;
  s.io_wait_fraction = 0.9F;  // io wait does not matter once the GPU is busy
  EXPECT_EQ(d.classify(s), Phase::gpu_compute);
}

TEST(PhaseDetector, gpu_exactly_at_active_threshold_is_not_gpu_compute) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.gpu_utilization = 80;
  EXPECT_EQ(d.classify(s), Phase::unknown);
}

TEST(PhaseDetector, busy_gpu_with_a_cpu_burst_is_not_gpu_compute) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.gpu_utilization = 95;
  s.cpu_burst_duration_ns = 1;
  EXPECT_EQ(d.classify(s), Phase::unknown);  // no sync yet: not rule 5 either
  s.last_gpu_sync_ns = 100;
  EXPECT_EQ(d.classify(s), Phase::optimizer_step);
}

TEST(PhaseDetector, gpu_compute_rule_comes_before_optimizer_rule) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.gpu_utilization = 95;
  s.cpu_burst_duration_ns = 0;
  s.last_gpu_sync_ns = 100;
  EXPECT_EQ(d.classify(s), Phase::gpu_compute);
}

// ---- rule 5 ----------------------------------------------------------------------------------

TEST(PhaseDetector, short_cpu_burst_after_a_gpu_sync_is_optimizer_step) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.cpu_burst_duration_ns = 2 * kMs;
  s.last_gpu_sync_ns = 1;
  EXPECT_EQ(d.classify(s), Phase::optimizer_step);
  s.cpu_burst_duration_ns = 1;
  EXPECT_EQ(d.classify(s), Phase::optimizer_step);
  s.cpu_burst_duration_ns = 5 * kMs - 1;
  EXPECT_EQ(d.classify(s), Phase::optimizer_step);
}

TEST(PhaseDetector, burst_exactly_at_the_optimizer_maximum_is_not_optimizer_step) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.cpu_burst_duration_ns = 5 * kMs;
  s.last_gpu_sync_ns = 1;
  EXPECT_EQ(d.classify(s), Phase::unknown);
  s.cpu_burst_duration_ns = 50 * kMs;
  EXPECT_EQ(d.classify(s), Phase::unknown);
}

TEST(PhaseDetector, optimizer_step_needs_a_previous_gpu_sync) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.cpu_burst_duration_ns = kMs;
  s.last_gpu_sync_ns = 0;
  EXPECT_EQ(d.classify(s), Phase::unknown);
}

TEST(PhaseDetector, optimizer_rule_comes_before_prefetch_rule) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.io_wait_fraction = 0.2F;
  s.gpu_utilization = 50;
  s.cpu_burst_duration_ns = kMs;
  s.last_gpu_sync_ns = 7;
  EXPECT_EQ(d.classify(s), Phase::optimizer_step);
}

TEST(PhaseDetector, optimizer_maximum_follows_the_option) {
  PhaseDetectionOptions o;
  o.optimizer_burst_max_ns = 100;
  const PhaseDetector d(o);
  TaskState s = ml_task();
  s.last_gpu_sync_ns = 1;
  s.cpu_burst_duration_ns = 99;
  EXPECT_EQ(d.classify(s), Phase::optimizer_step);
  s.cpu_burst_duration_ns = 100;
  EXPECT_EQ(d.classify(s), Phase::unknown);
}

// ---- rule 6 ----------------------------------------------------------------------------------

TEST(PhaseDetector, moderate_io_wait_with_partly_busy_gpu_is_prefetch_data_loading) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.io_wait_fraction = 0.2F;  // > 0.15, not > 0.3
  s.gpu_utilization = 50;
  EXPECT_EQ(d.classify(s), Phase::data_loading);
  s.gpu_utilization = 11;
  EXPECT_EQ(d.classify(s), Phase::data_loading);
  s.gpu_utilization = 79;
  EXPECT_EQ(d.classify(s), Phase::data_loading);
  s.io_wait_fraction = 0.9F;  // above the full threshold too, with a partly busy GPU
  EXPECT_EQ(d.classify(s), Phase::data_loading);
}

TEST(PhaseDetector, prefetch_rule_bounds_are_strict) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.io_wait_fraction = 0.2F;
  s.gpu_utilization = 10;  // not > idle
  EXPECT_EQ(d.classify(s), Phase::unknown);
  s.gpu_utilization = 80;  // not < active
  EXPECT_EQ(d.classify(s), Phase::unknown);
  s.gpu_utilization = 50;
  s.io_wait_fraction = 0.3F * 0.5F;  // exactly half the threshold: not >
  EXPECT_EQ(d.classify(s), Phase::unknown);
  s.io_wait_fraction = std::nextafter(0.3F * 0.5F, 1.0F);
  EXPECT_EQ(d.classify(s), Phase::data_loading);
  s.io_wait_fraction = 0.1F;
  EXPECT_EQ(d.classify(s), Phase::unknown);
}

TEST(PhaseDetector, prefetch_rule_uses_half_of_the_configured_threshold) {
  PhaseDetectionOptions o;
  o.io_wait_threshold = 0.6F;
  const PhaseDetector d(o);
  TaskState s = ml_task();
  s.gpu_utilization = 40;
  s.io_wait_fraction = 0.29F;
  EXPECT_EQ(d.classify(s), Phase::unknown);
  s.io_wait_fraction = 0.31F;
  EXPECT_EQ(d.classify(s), Phase::data_loading);
}

TEST(PhaseDetector, custom_gpu_thresholds_move_the_rule_edges) {
  PhaseDetectionOptions o;
  o.gpu_idle_threshold = 30;
  o.gpu_active_threshold = 60;
  const PhaseDetector d(o);
  TaskState s = ml_task();
  s.io_wait_fraction = 0.5F;
  s.gpu_utilization = 29;
  EXPECT_EQ(d.classify(s), Phase::data_loading);  // rule 3
  s.io_wait_fraction = 0.0F;
  s.gpu_utilization = 61;
  EXPECT_EQ(d.classify(s), Phase::gpu_compute);  // rule 4
  s.gpu_utilization = 60;
  EXPECT_EQ(d.classify(s), Phase::unknown);
}

// ---- rule 7 ----------------------------------------------------------------------------------

TEST(PhaseDetector, an_ml_process_with_no_signals_is_unknown) {
  const PhaseDetector d(with_nccl());
  const TaskState s = ml_task();
  EXPECT_EQ(d.classify(s), Phase::unknown);
}

TEST(PhaseDetector, nan_io_wait_matches_no_io_rule) {
  const PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.io_wait_fraction = std::numeric_limits<float>::quiet_NaN();
  s.gpu_utilization = 0;
  EXPECT_EQ(d.classify(s), Phase::unknown);
  s.gpu_utilization = 50;
  EXPECT_EQ(d.classify(s), Phase::unknown);
  s.gpu_utilization = 95;
  EXPECT_EQ(d.classify(s), Phase::gpu_compute);
}

// ---- stability -------------------------------------------------------------------------------

TEST(PhaseDetector, commits_after_three_equal_samples) {
  PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.gpu_utilization = 95;
  EXPECT_EQ(tick(d, s), Phase::unknown);
  EXPECT_EQ(tick(d, s), Phase::unknown);
  EXPECT_EQ(d.transition_count(), 0U);
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);
  EXPECT_EQ(s.current_phase, Phase::gpu_compute);
  EXPECT_EQ(d.transition_count(), 1U);
  // Further equal samples keep the phase and count nothing.
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);
  EXPECT_EQ(d.transition_count(), 1U);
}

TEST(PhaseDetector, detect_does_not_change_the_committed_phase_itself) {
  PhaseDetectionOptions o;
  o.phase_stability_count = 1;
  PhaseDetector d(o);
  TaskState s = ml_task();
  s.gpu_utilization = 95;
  EXPECT_EQ(d.detect(s), Phase::gpu_compute);
  EXPECT_EQ(s.current_phase, Phase::unknown);
}

TEST(PhaseDetector, a_different_raw_result_restarts_the_candidate) {
  PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.gpu_utilization = 95;
  EXPECT_EQ(tick(d, s), Phase::unknown);  // GC x1
  EXPECT_EQ(tick(d, s), Phase::unknown);  // GC x2
  s.gpu_utilization = 5;
  s.io_wait_fraction = 0.5F;
  EXPECT_EQ(tick(d, s), Phase::unknown);  // DL x1 replaces the candidate
  EXPECT_EQ(s.candidate_phase, Phase::data_loading);
  EXPECT_EQ(s.candidate_count, 1U);
  s.gpu_utilization = 95;
  s.io_wait_fraction = 0.0F;
  EXPECT_EQ(tick(d, s), Phase::unknown);  // GC x1 again
  EXPECT_EQ(tick(d, s), Phase::unknown);  // GC x2
  EXPECT_EQ(d.transition_count(), 0U);
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);  // GC x3
  EXPECT_EQ(d.transition_count(), 1U);
}

TEST(PhaseDetector, a_raw_result_equal_to_the_committed_phase_resets_a_pending_change) {
  PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.gpu_utilization = 95;
  for (int i = 0; i < 3; ++i) tick(d, s);
  ASSERT_EQ(s.current_phase, Phase::gpu_compute);
  s.gpu_utilization = 50;  // raw Unknown twice
  tick(d, s);
  tick(d, s);
  s.gpu_utilization = 95;  // back to GpuCompute once
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);
  s.gpu_utilization = 50;  // Unknown must again be seen three times in a row
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);
  EXPECT_EQ(tick(d, s), Phase::unknown);
  EXPECT_EQ(d.transition_count(), 2U);
}

TEST(PhaseDetector, stability_count_follows_the_option) {
  PhaseDetectionOptions o;
  o.phase_stability_count = 5;
  PhaseDetector d(o);
  TaskState s = ml_task();
  s.gpu_utilization = 95;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(tick(d, s), Phase::unknown) << "sample " << i;
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);
  EXPECT_EQ(d.transition_count(), 1U);
}

TEST(PhaseDetector, stability_one_takes_every_result_at_once) {
  PhaseDetectionOptions o;
  o.phase_stability_count = 1;
  PhaseDetector d(o);
  TaskState s = ml_task();
  s.gpu_utilization = 95;
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);
  s.gpu_utilization = 5;
  s.io_wait_fraction = 0.5F;
  EXPECT_EQ(tick(d, s), Phase::data_loading);
  s.gpu_utilization = 95;
  s.io_wait_fraction = 0.0F;
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);  // unchanged: not a transition
  EXPECT_EQ(d.transition_count(), 3U);
}

TEST(PhaseDetector, stability_zero_takes_every_result_at_once) {
  PhaseDetectionOptions o;
  o.phase_stability_count = 0;
  PhaseDetector d(o);
  TaskState s = ml_task();
  s.gpu_utilization = 95;
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);
  s.gpu_utilization = 50;
  EXPECT_EQ(tick(d, s), Phase::unknown);
  s.gpu_utilization = 95;
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);
  EXPECT_EQ(d.transition_count(), 3U);
}

TEST(PhaseDetector, transition_counter_counts_committed_changes_only) {
  PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  // Alternating raw results never commit.
  for (int i = 0; i < 20; ++i) {
    s.gpu_utilization = (i % 2 == 0) ? 95 : 50;
    EXPECT_EQ(tick(d, s), Phase::unknown);
  }
  EXPECT_EQ(d.transition_count(), 0U);
  // Raw results equal to the committed phase never count.
  s.gpu_utilization = 50;
  for (int i = 0; i < 10; ++i) tick(d, s);
  EXPECT_EQ(d.transition_count(), 0U);
  s.gpu_utilization = 95;
  for (int i = 0; i < 10; ++i) tick(d, s);
  EXPECT_EQ(d.transition_count(), 1U);
}

TEST(PhaseDetector, transition_counter_is_shared_across_tasks) {
  PhaseDetectionOptions o;
  o.phase_stability_count = 1;
  PhaseDetector d(o);
  TaskState a = ml_task();
  TaskState b = ml_task();
  b.pid = 43;
  a.gpu_utilization = 95;
  b.gpu_utilization = 5;
  b.io_wait_fraction = 0.9F;
  tick(d, a);
  tick(d, b);
  EXPECT_EQ(a.current_phase, Phase::gpu_compute);
  EXPECT_EQ(b.current_phase, Phase::data_loading);
  EXPECT_EQ(d.transition_count(), 2U);
}

TEST(PhaseDetector, debounce_state_lives_in_the_task) {
  // A fresh TaskState (what re-registering produces) starts with no candidate.
  PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.gpu_utilization = 95;
  tick(d, s);
  tick(d, s);
  EXPECT_EQ(s.candidate_count, 2U);
  s = ml_task();
  s.gpu_utilization = 95;
  EXPECT_EQ(tick(d, s), Phase::unknown);
  EXPECT_EQ(tick(d, s), Phase::unknown);
  EXPECT_EQ(tick(d, s), Phase::gpu_compute);
}

TEST(PhaseDetector, worked_example_of_the_header_holds) {
  PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.gpu_utilization = 95;
  tick(d, s);
  tick(d, s);
  EXPECT_EQ(s.current_phase, Phase::unknown);
  tick(d, s);
  EXPECT_EQ(s.current_phase, Phase::gpu_compute);
  EXPECT_EQ(d.transition_count(), 1U);
  s.gpu_utilization = 5;
  s.io_wait_fraction = 0.5F;
  tick(d, s);
  s.gpu_utilization = 95;
  s.io_wait_fraction = 0.0F;
  tick(d, s);
  EXPECT_EQ(s.current_phase, Phase::gpu_compute);
  EXPECT_EQ(d.transition_count(), 1U);
}

TEST(PhaseDetector, candidate_count_saturates_instead_of_wrapping) {
  PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = ml_task();
  s.gpu_utilization = 95;
  s.current_phase = Phase::gpu_compute;
  s.candidate_phase = Phase::gpu_compute;
  s.candidate_count = std::numeric_limits<std::uint32_t>::max();
  EXPECT_EQ(d.detect(s), Phase::gpu_compute);
  EXPECT_EQ(s.candidate_count, std::numeric_limits<std::uint32_t>::max());
  EXPECT_EQ(d.transition_count(), 0U);
}

// ---- properties ------------------------------------------------------------------------------

float random_fraction(std::mt19937& rng) {
  static constexpr std::array<float, 12> kSpecial = {
      std::numeric_limits<float>::quiet_NaN(),
      -std::numeric_limits<float>::quiet_NaN(),
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::max(),
      std::numeric_limits<float>::lowest(),
      std::numeric_limits<float>::denorm_min(),
      std::numeric_limits<float>::min(),
      -0.0F,
      0.0F,
      1.0F,
      0.3F};
  switch (rng() % 4) {
    case 0: return kSpecial[rng() % kSpecial.size()];
    case 1: return std::uniform_real_distribution<float>(-10.0F, 10.0F)(rng);
    default: return std::uniform_real_distribution<float>(0.0F, 1.0F)(rng);
  }
}

std::uint64_t random_u64(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0: return 0;
    case 1: return std::numeric_limits<std::uint64_t>::max() - (rng() % 3);
    case 2: return rng() % (20 * kMs);
    default: return rng();
  }
}

TEST(PhaseDetectorProperty, any_input_yields_one_of_the_five_phases) {
  std::mt19937 rng(12345);
  std::mt19937_64 rng64(6789);
  std::vector<PhaseDetector> detectors;
  for (int i = 0; i < 16; ++i) {
    PhaseDetectionOptions o;
    o.io_wait_threshold = random_fraction(rng);
    o.optimizer_burst_max_ns = random_u64(rng64);
    o.gpu_idle_threshold = static_cast<std::uint8_t>(rng() % 256);
    o.gpu_active_threshold = static_cast<std::uint8_t>(rng() % 256);
    o.phase_stability_count = static_cast<std::uint32_t>(rng() % 6);
    o.nccl_detection_enabled = (rng() % 2) == 0;
    detectors.emplace_back(o);
  }
  detectors.emplace_back(PhaseDetectionOptions{});
  detectors.emplace_back(with_nccl());

  std::vector<TaskState> tasks(64);
  for (std::size_t i = 0; i < tasks.size(); ++i) tasks[i].pid = static_cast<std::uint32_t>(i + 1);

  std::array<std::uint64_t, kPhaseCount> seen{};
  for (int iter = 0; iter < 100'000; ++iter) {
    TaskState& s = tasks[rng() % tasks.size()];
    s.is_ml_process = (rng() % 8) != 0;
    s.gpu_utilization = static_cast<std::uint8_t>(rng() % 256);  // even out-of-range values
    s.io_wait_fraction = random_fraction(rng);
    s.cpu_burst_duration_ns = random_u64(rng64);
    s.last_gpu_sync_ns = random_u64(rng64);
    s.nccl_active = (rng() % 2) == 0;
    s.futex_wait_count = (rng() % 2) == 0 ? 0U : static_cast<std::uint32_t>(rng());
    PhaseDetector& d = detectors[rng() % detectors.size()];

    const Phase raw = d.classify(s);
    ASSERT_TRUE(is_a_phase(raw)) << "iteration " << iter;
    if (!s.is_ml_process) {
      ASSERT_EQ(raw, Phase::unknown) << "iteration " << iter;
    }
    const Phase committed = tick(d, s, static_cast<std::uint64_t>(iter) + 1);
    ASSERT_TRUE(is_a_phase(committed)) << "iteration " << iter;
    ASSERT_TRUE(is_a_phase(s.current_phase));
    ASSERT_GE(s.candidate_count, 1U);
    ++seen[index_of(raw)];
  }
  // The sweep reached every phase, so the rules were all exercised.
  for (Phase p : kAllPhases) EXPECT_GT(seen[index_of(p)], 0U) << phase_name(p);
}

TEST(PhaseDetectorProperty, non_ml_processes_are_always_unknown) {
  std::mt19937 rng(777);
  std::mt19937_64 rng64(778);
  PhaseDetectionOptions o;
  o.nccl_detection_enabled = true;
  o.phase_stability_count = 1;
  PhaseDetector d(o);
  TaskState s;
  s.is_ml_process = false;
  for (int iter = 0; iter < 100'000; ++iter) {
    s.gpu_utilization = static_cast<std::uint8_t>(rng() % 256);
    s.io_wait_fraction = random_fraction(rng);
    s.cpu_burst_duration_ns = random_u64(rng64);
    s.last_gpu_sync_ns = random_u64(rng64);
    s.nccl_active = (rng() % 2) == 0;
    s.futex_wait_count = static_cast<std::uint32_t>(rng());
    ASSERT_EQ(d.classify(s), Phase::unknown) << "iteration " << iter;
    ASSERT_EQ(tick(d, s), Phase::unknown) << "iteration " << iter;
  }
  EXPECT_EQ(d.transition_count(), 0U);
}

TEST(PhaseDetectorProperty, transition_count_equals_the_number_of_committed_changes) {
  std::mt19937 rng(4242);
  PhaseDetectionOptions o;
  o.nccl_detection_enabled = true;
  for (std::uint32_t stability : {0U, 1U, 2U, 3U, 7U}) {
    o.phase_stability_count = stability;
    PhaseDetector d(o);
    TaskState s = ml_task();
    std::uint64_t changes = 0;
    Phase last_raw = Phase::unknown;
    std::uint32_t run = 0;
    for (int iter = 0; iter < 20'000; ++iter) {
      // Few distinct inputs so that runs of equal raw results happen.
      switch (rng() % 4) {
        case 0: s.gpu_utilization = 95; s.io_wait_fraction = 0.0F; s.nccl_active = false; break;
        case 1: s.gpu_utilization = 5; s.io_wait_fraction = 0.9F; s.nccl_active = false; break;
        case 2: s.nccl_active = true; s.futex_wait_count = 3; break;
        default: s.gpu_utilization = 50; s.io_wait_fraction = 0.0F; s.nccl_active = false; break;
      }
      const Phase raw = d.classify(s);
      run = (run > 0 && raw == last_raw) ? run + 1 : 1;
      last_raw = raw;
      const Phase before = s.current_phase;
      const Phase after = tick(d, s);
      // Reference model of the stability rule.
      const Phase expected = (run >= stability && raw != before) ? raw : before;
      ASSERT_EQ(after, expected) << "stability " << stability << " iteration " << iter;
      if (after != before) ++changes;
    }
    EXPECT_EQ(d.transition_count(), changes) << "stability " << stability;
    EXPECT_GT(changes, 0U);
  }
}

}  // namespace
}  // namespace zernel::policy

namespace zernel::policy {
namespace {

TaskState worker(float cpu, float io) {
  TaskState s;
  s.pid = 7;
  s.is_ml_process = true;
  s.dataloader_worker = true;
  s.cpu_fraction = cpu;
  s.io_wait_fraction = io;
  return s;
}

TEST(PhaseDetectorWorkers, a_busy_worker_is_data_loading) {
  PhaseDetector d(PhaseDetectionOptions{});
  EXPECT_EQ(d.classify(worker(0.9F, 0.0F)), Phase::data_loading);
  EXPECT_EQ(d.classify(worker(kWorkerBusyFraction, 0.0F)), Phase::data_loading);
}

TEST(PhaseDetectorWorkers, a_worker_waiting_on_block_io_is_data_loading) {
  PhaseDetector d(PhaseDetectionOptions{});
  EXPECT_EQ(d.classify(worker(0.0F, 0.5F)), Phase::data_loading);
}

TEST(PhaseDetectorWorkers, an_idle_worker_is_unknown_whatever_its_gpu_signals) {
  PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = worker(0.05F, 0.0F);
  s.gpu_utilization = 95;  // inherited nothing: workers never count as GPU compute
  EXPECT_EQ(d.classify(s), Phase::unknown);
}

TEST(PhaseDetectorWorkers, the_worker_rule_needs_an_ml_process) {
  PhaseDetector d(PhaseDetectionOptions{});
  TaskState s = worker(0.9F, 0.0F);
  s.is_ml_process = false;
  EXPECT_EQ(d.classify(s), Phase::unknown);
}

TEST(PhaseDetectorWorkers, the_engine_takes_the_worker_flag_and_cpu_fraction_from_updates) {
  EngineOptions o;
  o.phase.phase_stability_count = 1;
  Engine e(o, Topology::single_node(2));
  ASSERT_TRUE(e.register_task(10, true, std::nullopt).ok());
  TaskUpdate u;
  u.dataloader_worker = true;
  u.cpu_fraction = 0.7F;
  e.update_task(10, u);
  EXPECT_EQ(e.schedule(10, 1000).phase, Phase::data_loading);
  u.cpu_fraction = std::numeric_limits<float>::quiet_NaN();
  e.update_task(10, u);
  EXPECT_EQ(e.schedule(10, 2000).phase, Phase::unknown);
}

}  // namespace
}  // namespace zernel::policy
