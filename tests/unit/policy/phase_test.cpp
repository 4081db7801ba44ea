// The phase enum, its names and labels, the policy table (policy/phase.hpp) and the phase-time
// accounting of TaskState::transition_phase.

#include "policy/phase.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>

#include "policy/task_state.hpp"

namespace zernel::policy {
namespace {

TEST(PhasePolicy, data_loading_is_priority_10_preempting_with_100us_target_and_5ms_slice) {
  const PhasePolicy p = policy_for_phase(Phase::data_loading);
  EXPECT_EQ(p.priority, 10);
  EXPECT_TRUE(p.preempt);
  EXPECT_EQ(p.latency_target_us, 100U);
  EXPECT_EQ(p.slice_ns, 5'000'000U);
}

TEST(PhasePolicy, gpu_compute_is_priority_minus_5_not_preempting_without_target_and_20ms_slice) {
  const PhasePolicy p = policy_for_phase(Phase::gpu_compute);
  EXPECT_EQ(p.priority, -5);
  EXPECT_FALSE(p.preempt);
  EXPECT_EQ(p.latency_target_us, 0U);
  EXPECT_EQ(p.slice_ns, 20'000'000U);
}

TEST(PhasePolicy, nccl_collective_is_priority_10_preempting_with_50us_target_and_10ms_slice) {
  const PhasePolicy p = policy_for_phase(Phase::nccl_collective);
  EXPECT_EQ(p.priority, 10);
  EXPECT_TRUE(p.preempt);
  EXPECT_EQ(p.latency_target_us, 50U);
  EXPECT_EQ(p.slice_ns, 10'000'000U);
}

TEST(PhasePolicy, optimizer_step_is_priority_10_preempting_with_100us_target_and_3ms_slice) {
  const PhasePolicy p = policy_for_phase(Phase::optimizer_step);
  EXPECT_EQ(p.priority, 10);
  EXPECT_TRUE(p.preempt);
  EXPECT_EQ(p.latency_target_us, 100U);
  EXPECT_EQ(p.slice_ns, 3'000'000U);
}

TEST(PhasePolicy, unknown_is_priority_0_not_preempting_without_target_and_default_slice) {
  const PhasePolicy p = policy_for_phase(Phase::unknown);
  EXPECT_EQ(p.priority, 0);
  EXPECT_FALSE(p.preempt);
  EXPECT_EQ(p.latency_target_us, 0U);
  EXPECT_EQ(p.slice_ns, kDefaultSliceNs);
  EXPECT_EQ(kDefaultSliceNs, 20'000'000U);
}

TEST(PhasePolicy, only_latency_critical_phases_preempt_and_every_preempting_phase_has_a_target) {
  for (Phase p : kAllPhases) {
    const PhasePolicy pol = policy_for_phase(p);
    EXPECT_EQ(pol.preempt, pol.latency_target_us != 0) << phase_name(p);
    EXPECT_GT(pol.slice_ns, 0U) << phase_name(p);
  }
}

TEST(PhasePolicy, the_table_is_usable_at_compile_time) {
  static_assert(policy_for_phase(Phase::gpu_compute).priority == -5);
  static_assert(policy_for_phase(Phase::nccl_collective).latency_target_us == 50);
  SUCCEED();
}

TEST(Phase, enum_values_are_the_bpf_contract_order) {
  EXPECT_EQ(index_of(Phase::data_loading), 0U);
  EXPECT_EQ(index_of(Phase::gpu_compute), 1U);
  EXPECT_EQ(index_of(Phase::nccl_collective), 2U);
  EXPECT_EQ(index_of(Phase::optimizer_step), 3U);
  EXPECT_EQ(index_of(Phase::unknown), 4U);
  EXPECT_EQ(kPhaseCount, 5U);
  for (std::size_t i = 0; i < kAllPhases.size(); ++i) EXPECT_EQ(index_of(kAllPhases[i]), i);
}

TEST(Phase, default_task_phase_is_unknown) {
  const TaskState s;
  EXPECT_EQ(s.current_phase, Phase::unknown);
}

TEST(Phase, display_names_are_exactly_the_phase_words) {
  EXPECT_EQ(phase_name(Phase::data_loading), "DataLoading");
  EXPECT_EQ(phase_name(Phase::gpu_compute), "GpuCompute");
  EXPECT_EQ(phase_name(Phase::nccl_collective), "NcclCollective");
  EXPECT_EQ(phase_name(Phase::optimizer_step), "OptimizerStep");
  EXPECT_EQ(phase_name(Phase::unknown), "Unknown");
}

TEST(Phase, metric_labels_are_the_dashboard_names) {
  EXPECT_EQ(phase_label(Phase::data_loading), "data_loading");
  EXPECT_EQ(phase_label(Phase::gpu_compute), "gpu_compute");
  EXPECT_EQ(phase_label(Phase::nccl_collective), "nccl_collective");
  EXPECT_EQ(phase_label(Phase::optimizer_step), "optimizer_step");
  EXPECT_EQ(phase_label(Phase::unknown), "unknown");
}

TEST(Phase, names_and_labels_are_distinct) {
  std::set<std::string> seen;
  for (Phase p : kAllPhases) {
    seen.insert(std::string(phase_name(p)));
    seen.insert(std::string(phase_label(p)));
  }
  EXPECT_EQ(seen.size(), 2 * kPhaseCount);
}

TEST(Phase, parse_accepts_both_spellings_and_round_trips) {
  for (Phase p : kAllPhases) {
    EXPECT_EQ(parse_phase(phase_name(p)), p);
    EXPECT_EQ(parse_phase(phase_label(p)), p);
  }
}

TEST(Phase, parse_rejects_other_strings) {
  EXPECT_FALSE(parse_phase("").has_value());
  EXPECT_FALSE(parse_phase("gpucompute").has_value());
  EXPECT_FALSE(parse_phase("GPU_COMPUTE").has_value());
  EXPECT_FALSE(parse_phase("Unknown ").has_value());
  EXPECT_FALSE(parse_phase("idle").has_value());
}

// ---- TaskState::transition_phase ---------------------------------------------------------------

TEST(TaskStateAccounting, a_transition_credits_the_old_phase_with_the_elapsed_time) {
  TaskState s;
  s.phase_start_ns = 1'000;
  s.transition_phase(Phase::gpu_compute, 3'500);
  EXPECT_EQ(s.phase_time_ns[index_of(Phase::unknown)], 2'500U);
  EXPECT_EQ(s.current_phase, Phase::gpu_compute);
  EXPECT_EQ(s.phase_start_ns, 3'500U);

  s.transition_phase(Phase::data_loading, 4'000);
  EXPECT_EQ(s.phase_time_ns[index_of(Phase::gpu_compute)], 500U);
  EXPECT_EQ(s.phase_time_ns[index_of(Phase::unknown)], 2'500U);
  EXPECT_EQ(s.current_phase, Phase::data_loading);
  EXPECT_EQ(s.phase_start_ns, 4'000U);
}

TEST(TaskStateAccounting, time_accumulates_over_repeated_visits_to_a_phase) {
  TaskState s;
  s.phase_start_ns = 100;
  s.transition_phase(Phase::gpu_compute, 200);     // unknown +100
  s.transition_phase(Phase::data_loading, 1'200);  // gpu +1000
  s.transition_phase(Phase::gpu_compute, 1'300);   // data +100
  s.transition_phase(Phase::unknown, 2'300);       // gpu +1000
  EXPECT_EQ(s.phase_time_ns[index_of(Phase::gpu_compute)], 2'000U);
  EXPECT_EQ(s.phase_time_ns[index_of(Phase::data_loading)], 100U);
  EXPECT_EQ(s.phase_time_ns[index_of(Phase::unknown)], 100U);
}

TEST(TaskStateAccounting, no_credit_when_phase_start_is_zero) {
  TaskState s;
  ASSERT_EQ(s.phase_start_ns, 0U);
  s.transition_phase(Phase::gpu_compute, 5'000);
  for (std::uint64_t t : s.phase_time_ns) EXPECT_EQ(t, 0U);
  EXPECT_EQ(s.current_phase, Phase::gpu_compute);
  EXPECT_EQ(s.phase_start_ns, 5'000U);
}

TEST(TaskStateAccounting, no_credit_when_now_equals_the_phase_start) {
  TaskState s;
  s.phase_start_ns = 7'000;
  s.transition_phase(Phase::optimizer_step, 7'000);
  for (std::uint64_t t : s.phase_time_ns) EXPECT_EQ(t, 0U);
  EXPECT_EQ(s.current_phase, Phase::optimizer_step);
  EXPECT_EQ(s.phase_start_ns, 7'000U);
}

TEST(TaskStateAccounting, no_credit_when_now_is_before_the_phase_start_and_the_new_start_is_now) {
  TaskState s;
  s.phase_start_ns = 9'000;
  s.transition_phase(Phase::nccl_collective, 4'000);
  for (std::uint64_t t : s.phase_time_ns) EXPECT_EQ(t, 0U);
  EXPECT_EQ(s.current_phase, Phase::nccl_collective);
  EXPECT_EQ(s.phase_start_ns, 4'000U);
  // The clock going backwards did not wrap the accounting; time counts again from the new start.
  s.transition_phase(Phase::unknown, 4'600);
  EXPECT_EQ(s.phase_time_ns[index_of(Phase::nccl_collective)], 600U);
}

TEST(TaskStateAccounting, a_transition_at_time_zero_leaves_the_next_one_uncredited) {
  TaskState s;
  s.phase_start_ns = 10;
  s.transition_phase(Phase::gpu_compute, 0);  // now < start: no credit, start = 0
  EXPECT_EQ(s.phase_start_ns, 0U);
  s.transition_phase(Phase::unknown, 50);  // start == 0: no credit
  for (std::uint64_t t : s.phase_time_ns) EXPECT_EQ(t, 0U);
}

TEST(TaskStateAccounting, time_in_phase_includes_the_phase_in_progress) {
  TaskState s;
  s.phase_start_ns = 1'000;
  s.transition_phase(Phase::gpu_compute, 2'000);
  EXPECT_EQ(s.time_in_phase(Phase::unknown, 10'000), 1'000U);
  EXPECT_EQ(s.time_in_phase(Phase::gpu_compute, 2'750), 750U);
  EXPECT_EQ(s.time_in_phase(Phase::gpu_compute, 2'000), 0U);
  EXPECT_EQ(s.time_in_phase(Phase::gpu_compute, 1'500), 0U);  // now before start: nothing added
  EXPECT_EQ(s.time_in_phase(Phase::data_loading, 99'999), 0U);
}

TEST(TaskState, gpu_is_absent_for_negative_ids) {
  TaskState s;
  EXPECT_FALSE(s.gpu().has_value());
  s.gpu_id = 3;
  EXPECT_EQ(s.gpu(), 3U);
  s.gpu_id = kNoGpu;
  EXPECT_FALSE(s.gpu().has_value());
}

}  // namespace
}  // namespace zernel::policy
