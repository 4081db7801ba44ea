#include "policy/power_policy.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace zernel::policy {
namespace {

TaskState task(std::int32_t gpu, Phase phase) {
  TaskState t;
  t.gpu_id = gpu;
  t.current_phase = phase;
  return t;
}

TEST(PowerPolicy, targets_follow_the_design_table) {
  EXPECT_EQ(gpu_power_target(Phase::data_loading), (GpuPowerTarget{1, 3, 78}));
  EXPECT_EQ(gpu_power_target(Phase::nccl_collective), (GpuPowerTarget{1, 2, 85}));
  EXPECT_TRUE(gpu_power_target(Phase::gpu_compute).full());
  EXPECT_TRUE(gpu_power_target(Phase::optimizer_step).full());
  EXPECT_TRUE(gpu_power_target(Phase::unknown).full());
  EXPECT_EQ(cpu_freq_target(Phase::data_loading), CpuFreqTarget::full);
  EXPECT_EQ(cpu_freq_target(Phase::optimizer_step), CpuFreqTarget::full);
  EXPECT_EQ(cpu_freq_target(Phase::unknown), CpuFreqTarget::full);
  EXPECT_EQ(cpu_freq_target(Phase::gpu_compute), CpuFreqTarget::minimum);
  EXPECT_EQ(cpu_freq_target(Phase::nccl_collective), CpuFreqTarget::minimum);
}

TEST(PowerPolicy, dominant_phase_ignores_unknown_and_breaks_ties_toward_power) {
  std::array<std::uint32_t, kPhaseCount> c{};
  EXPECT_EQ(dominant_phase(c), Phase::unknown);
  c[index_of(Phase::unknown)] = 10;
  EXPECT_EQ(dominant_phase(c), Phase::unknown);
  c[index_of(Phase::data_loading)] = 2;
  EXPECT_EQ(dominant_phase(c), Phase::data_loading);
  c[index_of(Phase::nccl_collective)] = 2;
  EXPECT_EQ(dominant_phase(c), Phase::nccl_collective);  // tie: the one that needs more power
  c[index_of(Phase::gpu_compute)] = 2;
  EXPECT_EQ(dominant_phase(c), Phase::gpu_compute);
  c[index_of(Phase::data_loading)] = 3;
  EXPECT_EQ(dominant_phase(c), Phase::data_loading);
}

TEST(PowerPolicy, plans_every_gpu_separately_and_the_cpus_over_all_gpu_tasks) {
  const std::vector<TaskState> tasks = {
      task(0, Phase::data_loading), task(0, Phase::data_loading), task(0, Phase::gpu_compute),
      task(1, Phase::gpu_compute),  task(1, Phase::unknown),      task(3, Phase::nccl_collective),
      task(kNoGpu, Phase::data_loading), task(kNoGpu, Phase::data_loading),
      task(kNoGpu, Phase::data_loading), task(7, Phase::gpu_compute)};
  const PowerPlan plan = plan_power(tasks, 4);
  ASSERT_EQ(plan.gpu_phase.size(), 4U);
  EXPECT_EQ(plan.gpu_phase[0], Phase::data_loading);
  EXPECT_EQ(plan.gpu_phase[1], Phase::gpu_compute);
  EXPECT_EQ(plan.gpu_phase[2], Phase::unknown);  // no task
  EXPECT_EQ(plan.gpu_phase[3], Phase::nccl_collective);
  // CPUs: tasks of any GPU (GPU 7 included), not the unbound ones: 2 DL, 3 GC, 1 NCCL.
  EXPECT_EQ(plan.cpu_phase, Phase::gpu_compute);
  EXPECT_EQ(plan_power({}, 2).cpu_phase, Phase::unknown);
}

}  // namespace
}  // namespace zernel::policy
