// The policy engine: the seed scenarios, the decision fields per phase, task
// lifecycle, input sanitising, CPU placement through the engine, and randomized properties of
// the decisions.

#include "policy/engine.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "policy/phase.hpp"
#include "policy/weight.hpp"

namespace zernel::policy {
namespace {

constexpr std::uint64_t kMs = 1'000'000;

// The seed's default_sched(): defaults with phase stability 1 for immediate transitions.
EngineOptions seed_options() {
  EngineOptions o;
  o.phase.phase_stability_count = 1;
  return o;
}

// Node 0: CPUs 0-3 with GPU 0; node 1: CPUs 4-7 with GPU 1.
Topology two_nodes() {
  Topology t;
  NumaNode n0;
  n0.id = 0;
  n0.cpus = {0, 1, 2, 3};
  NumaNode n1;
  n1.id = 1;
  n1.cpus = {4, 5, 6, 7};
  t.add_node(n0);
  t.add_node(n1);
  t.map_gpu(0, 0);
  t.map_gpu(1, 1);
  return t;
}

TaskUpdate gpu_busy() {
  TaskUpdate u;
  u.gpu_utilization = 95;
  u.io_wait_fraction = 0.0F;
  u.cpu_burst_duration_ns = 0;
  return u;
}

TaskUpdate loading() {
  TaskUpdate u;
  u.io_wait_fraction = 0.5F;
  u.gpu_utilization = 5;
  return u;
}

// ---- seed scenarios ----------------------------------------------------------------------------

TEST(EngineSeed, register_and_schedule) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(100, true, 0U).ok());
  TaskUpdate u;
  u.gpu_utilization = 95;
  ASSERT_TRUE(e.update_task(100, u));

  const Decision d = e.schedule(100, 1000);
  EXPECT_EQ(d.priority, -5);  // GpuCompute
  EXPECT_FALSE(d.preempt);
  EXPECT_EQ(d.phase, Phase::gpu_compute);
}

TEST(EngineSeed, data_loading_gets_high_priority) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(100, true, 0U).ok());
  ASSERT_TRUE(e.update_task(100, loading()));

  const Decision d = e.schedule(100, 1000);
  EXPECT_EQ(d.priority, 10);
  EXPECT_TRUE(d.preempt);
  EXPECT_EQ(d.phase, Phase::data_loading);
}

// GpuCompute's yield (-5) is for a waiter that spins; one that blocks in its GPU waits keeps the
// step's critical priority (kBlockedGpuWaitPriority), with GpuCompute's other fields.
TEST(Engine, a_gpu_compute_task_that_blocks_in_its_waits_keeps_the_critical_priority) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(100, true, 0U).ok());
  TaskUpdate u = gpu_busy();
  u.gpu_wait_blocks = false;  // spins
  ASSERT_TRUE(e.update_task(100, u));
  Decision d = e.schedule(100, 1000);
  EXPECT_EQ(d.phase, Phase::gpu_compute);
  EXPECT_EQ(d.priority, -5);
  u.gpu_wait_blocks = true;
  ASSERT_TRUE(e.update_task(100, u));
  d = e.schedule(100, 2000);
  EXPECT_EQ(d.phase, Phase::gpu_compute);
  EXPECT_EQ(d.priority, kBlockedGpuWaitPriority);
  EXPECT_EQ(d.weight, weight_for_priority(kBlockedGpuWaitPriority));
  EXPECT_FALSE(d.preempt);
  EXPECT_EQ(d.latency_target_us, 0U);
  EXPECT_EQ(d.slice_ns, policy_for_phase(Phase::gpu_compute).slice_ns);
  // An update without the field keeps what was last seen.
  ASSERT_TRUE(e.update_task(100, gpu_busy()));
  EXPECT_EQ(e.schedule(100, 3000).priority, kBlockedGpuWaitPriority);
}

TEST(EngineSeed, preferred_cpu_set_with_numa) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(100, true, 0U).ok());
  const Decision d = e.schedule(100, 1000);
  ASSERT_TRUE(d.cpu().has_value());
  EXPECT_LT(*d.cpu(), 4U);  // a CPU of GPU 0's node
}

TEST(EngineSeed, unknown_pid_gets_default) {
  Engine e(seed_options(), two_nodes());
  const Decision d = e.schedule(999, 1000);
  EXPECT_EQ(d.priority, 0);
  EXPECT_EQ(d.pid, 999U);
  EXPECT_FALSE(d.preempt);
  EXPECT_FALSE(d.latency_target().has_value());
  EXPECT_FALSE(d.cpu().has_value());
  EXPECT_EQ(d.weight, kDefaultWeight);
  EXPECT_EQ(d.tenant, kNoTenant);
  EXPECT_EQ(d.tenant_weight, 100U);
  EXPECT_EQ(d.phase, Phase::unknown);
  EXPECT_FALSE(d.phase_changed);
  EXPECT_EQ(e.decisions_made(), 0U);  // not counted
  EXPECT_EQ(e.task(999), nullptr);    // not tracked either
}

TEST(EngineSeed, decisions_counter_increments) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(100, true, std::nullopt).ok());
  e.schedule(100, 1000);
  e.schedule(100, 2000);
  EXPECT_EQ(e.decisions_made(), 2U);
}

// ---- defaults --------------------------------------------------------------------------------

TEST(Engine, default_options_are_the_documented_defaults) {
  const EngineOptions o;
  EXPECT_TRUE(o.numa.enabled);
  EXPECT_TRUE(o.numa.gpu_affinity);
  EXPECT_TRUE(o.numa.memory_affinity);
  EXPECT_FALSE(o.multi_tenant_enabled);
  EXPECT_EQ(o.max_tracked_tasks, 65'536U);
  EXPECT_EQ(o.phase, PhaseDetectionOptions{});
}

// ---- decisions per phase ---------------------------------------------------------------------

void expect_matches_table(const Decision& d, Phase p) {
  const PhasePolicy pol = policy_for_phase(p);
  EXPECT_EQ(d.phase, p) << phase_name(p);
  EXPECT_EQ(d.priority, pol.priority) << phase_name(p);
  EXPECT_EQ(d.preempt, pol.preempt) << phase_name(p);
  EXPECT_EQ(d.latency_target_us, pol.latency_target_us) << phase_name(p);
  EXPECT_EQ(d.slice_ns, pol.slice_ns) << phase_name(p);
  EXPECT_EQ(d.weight, weight_for_priority(pol.priority)) << phase_name(p);
  EXPECT_EQ(d.tenant_weight, 100U);
}

TEST(Engine, each_phase_decision_carries_the_policy_table_values) {
  EngineOptions o = seed_options();
  o.phase.nccl_detection_enabled = true;
  Engine e(o, two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());

  ASSERT_TRUE(e.update_task(1, loading()));
  expect_matches_table(e.schedule(1, 10), Phase::data_loading);

  ASSERT_TRUE(e.update_task(1, gpu_busy()));
  expect_matches_table(e.schedule(1, 20), Phase::gpu_compute);

  TaskUpdate opt;
  opt.gpu_utilization = 50;
  opt.cpu_burst_duration_ns = kMs;
  opt.last_gpu_sync_ns = 15;
  ASSERT_TRUE(e.update_task(1, opt));
  expect_matches_table(e.schedule(1, 30), Phase::optimizer_step);

  TaskUpdate nccl;
  nccl.nccl_active = true;
  nccl.futex_wait_count = 4;
  ASSERT_TRUE(e.update_task(1, nccl));
  expect_matches_table(e.schedule(1, 40), Phase::nccl_collective);

  TaskUpdate idle;
  idle.nccl_active = false;
  idle.cpu_burst_duration_ns = 0;
  idle.gpu_utilization = 50;
  ASSERT_TRUE(e.update_task(1, idle));
  expect_matches_table(e.schedule(1, 50), Phase::unknown);

  EXPECT_EQ(e.phase_transition_count(), 5U);
}

TEST(Engine, latency_target_is_absent_for_throughput_phases) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  ASSERT_TRUE(e.update_task(1, gpu_busy()));
  EXPECT_FALSE(e.schedule(1, 1).latency_target().has_value());
  ASSERT_TRUE(e.update_task(1, loading()));
  EXPECT_EQ(e.schedule(1, 2).latency_target(), 100U);
}

TEST(Engine, phase_changed_is_set_only_on_the_committing_decision) {
  Engine e(EngineOptions{}, two_nodes());  // stability 3
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  ASSERT_TRUE(e.update_task(1, gpu_busy()));
  EXPECT_FALSE(e.schedule(1, 1).phase_changed);
  EXPECT_FALSE(e.schedule(1, 2).phase_changed);
  const Decision d = e.schedule(1, 3);
  EXPECT_TRUE(d.phase_changed);
  EXPECT_EQ(d.phase, Phase::gpu_compute);
  EXPECT_FALSE(e.schedule(1, 4).phase_changed);
  EXPECT_EQ(e.phase_transition_count(), 1U);
  EXPECT_EQ(e.task(1)->current_phase, Phase::gpu_compute);
}

TEST(Engine, decisions_are_recorded_in_the_task_for_status_views) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 1U).ok());
  ASSERT_TRUE(e.update_task(1, loading()));
  const Decision d = e.schedule(1, 5);
  const TaskState* s = e.task(1);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->last_priority, d.priority);
  EXPECT_EQ(s->last_weight, d.weight);
  EXPECT_EQ(s->last_preferred_cpu, d.preferred_cpu);
  EXPECT_GE(d.preferred_cpu, 4);
}

// ---- phase-time accounting through the engine ------------------------------------------------

TEST(Engine, phase_time_is_accounted_from_the_registration_time) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U, 1'000).ok());
  ASSERT_TRUE(e.update_task(1, gpu_busy()));
  e.schedule(1, 3'000);  // Unknown 1000..3000
  ASSERT_TRUE(e.update_task(1, loading()));
  e.schedule(1, 4'500);  // GpuCompute 3000..4500
  const TaskState* s = e.task(1);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->phase_time_ns[index_of(Phase::unknown)], 2'000U);
  EXPECT_EQ(s->phase_time_ns[index_of(Phase::gpu_compute)], 1'500U);
  EXPECT_EQ(s->time_in_phase(Phase::data_loading, 5'000), 500U);
  EXPECT_EQ(s->phase_start_ns, 4'500U);
}

TEST(Engine, a_task_registered_at_time_zero_gets_no_credit_for_its_first_phase) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());  // now_ns defaults to 0
  ASSERT_TRUE(e.update_task(1, gpu_busy()));
  e.schedule(1, 3'000);
  EXPECT_EQ(e.task(1)->phase_time_ns[index_of(Phase::unknown)], 0U);
  EXPECT_EQ(e.task(1)->phase_start_ns, 3'000U);
}

// A 2-step job whose GPU steps (60 ms) fall between two 100 ms ticks: the changes recorded from
// events are accounted at their times, each counted once, and the tick commits nothing more.
TEST(Engine, event_phases_are_accounted_at_their_times_not_at_the_ticks) {
  Engine e(EngineOptions{}, two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U, 5 * kMs).ok());
  ASSERT_TRUE(e.record_event_phase(1, Phase::data_loading, 10 * kMs));
  ASSERT_TRUE(e.record_event_phase(1, Phase::gpu_compute, 20 * kMs));
  ASSERT_TRUE(e.record_event_phase(1, Phase::optimizer_step, 80 * kMs));
  ASSERT_TRUE(e.record_event_phase(1, Phase::optimizer_step, 85 * kMs));  // no change
  const Decision d = e.schedule(1, 100 * kMs);
  EXPECT_EQ(d.phase, Phase::optimizer_step);
  EXPECT_FALSE(d.phase_changed);  // committed at 80 ms already
  ASSERT_TRUE(e.record_event_phase(1, Phase::gpu_compute, 120 * kMs));
  ASSERT_TRUE(e.record_event_phase(1, Phase::optimizer_step, 180 * kMs));
  e.schedule(1, 200 * kMs);
  const TaskState* s = e.task(1);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->time_in_phase(Phase::unknown, 200 * kMs), 5 * kMs);
  EXPECT_EQ(s->time_in_phase(Phase::data_loading, 200 * kMs), 10 * kMs);
  EXPECT_EQ(s->time_in_phase(Phase::gpu_compute, 200 * kMs), 120 * kMs);
  EXPECT_EQ(s->time_in_phase(Phase::optimizer_step, 200 * kMs), 60 * kMs);
  EXPECT_EQ(e.phase_transition_count(), 5U);
}

TEST(Engine, an_event_dated_before_the_phase_in_progress_counts_from_its_start) {
  Engine e(EngineOptions{}, two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U, 50 * kMs).ok());
  ASSERT_TRUE(e.record_event_phase(1, Phase::gpu_compute, 40 * kMs));  // before registration
  EXPECT_EQ(e.task(1)->phase_start_ns, 50 * kMs);
  EXPECT_EQ(e.task(1)->time_in_phase(Phase::unknown, 60 * kMs), 0U);
  EXPECT_EQ(e.task(1)->time_in_phase(Phase::gpu_compute, 60 * kMs), 10 * kMs);
  EXPECT_FALSE(e.record_event_phase(2, Phase::gpu_compute, 60 * kMs));  // not tracked
  EXPECT_EQ(e.phase_transition_count(), 1U);
}

// ---- task lifecycle --------------------------------------------------------------------------

TEST(Engine, update_of_an_untracked_pid_is_refused) {
  Engine e(seed_options(), two_nodes());
  EXPECT_FALSE(e.update_task(5, gpu_busy()));
  EXPECT_EQ(e.task_count(), 0U);
}

TEST(Engine, update_changes_only_the_set_fields) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  TaskUpdate all;
  all.gpu_utilization = 33;
  all.io_wait_fraction = 0.25F;
  all.cpu_burst_duration_ns = 77;
  all.last_gpu_sync_ns = 88;
  all.nccl_active = true;
  all.futex_wait_count = 9;
  all.gpu_id = 1;
  ASSERT_TRUE(e.update_task(1, all));
  TaskUpdate one;
  one.futex_wait_count = 10;
  ASSERT_TRUE(e.update_task(1, one));
  const TaskState* s = e.task(1);
  EXPECT_EQ(s->gpu_utilization, 33);
  EXPECT_FLOAT_EQ(s->io_wait_fraction, 0.25F);
  EXPECT_EQ(s->cpu_burst_duration_ns, 77U);
  EXPECT_EQ(s->last_gpu_sync_ns, 88U);
  EXPECT_TRUE(s->nccl_active);
  EXPECT_EQ(s->futex_wait_count, 10U);
  EXPECT_EQ(s->gpu(), 1U);
}

TEST(Engine, unregister_stops_tracking) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  ASSERT_TRUE(e.register_task(2, false, std::nullopt).ok());
  EXPECT_EQ(e.task_count(), 2U);
  EXPECT_TRUE(e.unregister_task(1));
  EXPECT_FALSE(e.unregister_task(1));
  EXPECT_EQ(e.task_count(), 1U);
  EXPECT_EQ(e.task(1), nullptr);
  EXPECT_EQ(e.schedule(1, 1).priority, 0);
  EXPECT_EQ(e.decisions_made(), 0U);
}

TEST(Engine, re_registering_resets_the_debounce_count) {
  // Re-registering a live pid must not leave its debounce count behind with the state reset.
  Engine e(EngineOptions{}, two_nodes());  // stability 3
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  ASSERT_TRUE(e.update_task(1, gpu_busy()));
  e.schedule(1, 1);
  e.schedule(1, 2);  // two GpuCompute samples counted
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  EXPECT_EQ(e.task(1)->candidate_count, 0U);
  ASSERT_TRUE(e.update_task(1, gpu_busy()));
  // With a stale count of 2 this sample would commit; after the reset it is only the first.
  EXPECT_EQ(e.schedule(1, 3).phase, Phase::unknown);
  EXPECT_EQ(e.schedule(1, 4).phase, Phase::unknown);
  EXPECT_EQ(e.schedule(1, 5).phase, Phase::gpu_compute);
  EXPECT_EQ(e.phase_transition_count(), 1U);
}

TEST(Engine, re_registering_resets_signals_phase_and_accounting) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U, 100).ok());
  ASSERT_TRUE(e.update_task(1, gpu_busy()));
  e.schedule(1, 500);
  ASSERT_EQ(e.task(1)->current_phase, Phase::gpu_compute);
  ASSERT_TRUE(e.register_task(1, false, 1U, 900).ok());
  const TaskState* s = e.task(1);
  EXPECT_EQ(e.task_count(), 1U);
  EXPECT_FALSE(s->is_ml_process);
  EXPECT_EQ(s->gpu(), 1U);
  EXPECT_EQ(s->current_phase, Phase::unknown);
  EXPECT_EQ(s->gpu_utilization, 0);
  EXPECT_EQ(s->phase_start_ns, 900U);
  for (std::uint64_t t : s->phase_time_ns) EXPECT_EQ(t, 0U);
}

TEST(Engine, max_tracked_tasks_is_enforced_with_an_error_and_nothing_changed) {
  EngineOptions o = seed_options();
  o.max_tracked_tasks = 2;
  Engine e(o, two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  ASSERT_TRUE(e.register_task(2, true, 1U).ok());
  auto r = e.register_task(3, true, 0U);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ENOSPC);
  EXPECT_NE(r.error().message().find("max_tracked_tasks"), std::string::npos) << r.error().message();
  EXPECT_EQ(e.task_count(), 2U);
  EXPECT_EQ(e.task(3), nullptr);
  EXPECT_NE(e.task(1), nullptr);
  EXPECT_NE(e.task(2), nullptr);
  // Re-registering a tracked pid is still allowed when full.
  EXPECT_TRUE(e.register_task(2, true, 0U).ok());
  // assign_pid of an untracked pid fails the same way, without registering or counting it.
  ASSERT_TRUE(
      e.upsert_tenant(TenantSpec{"t", 1, PriorityClass::training, std::nullopt, {}, {}}).ok());
  auto a = e.assign_pid(4, "t");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code(), ENOSPC);
  EXPECT_EQ(e.task(4), nullptr);
  EXPECT_EQ(e.tenant_task_count(*e.tenants().find("t")), 0U);
  // After an unregister there is room again.
  EXPECT_TRUE(e.unregister_task(1));
  EXPECT_TRUE(e.register_task(3, true, 0U).ok());
}

// ---- input sanitising ------------------------------------------------------------------------

TEST(Engine, gpu_utilization_above_100_counts_as_100) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  TaskUpdate u;
  u.gpu_utilization = 250;
  ASSERT_TRUE(e.update_task(1, u));
  EXPECT_EQ(e.task(1)->gpu_utilization, 100);
  EXPECT_EQ(e.schedule(1, 1).phase, Phase::gpu_compute);
  u.gpu_utilization = 255;
  ASSERT_TRUE(e.update_task(1, u));
  EXPECT_EQ(e.task(1)->gpu_utilization, 100);
}

TEST(Engine, nan_io_wait_counts_as_zero) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  TaskUpdate u;
  u.io_wait_fraction = std::numeric_limits<float>::quiet_NaN();
  u.gpu_utilization = 0;
  ASSERT_TRUE(e.update_task(1, u));
  EXPECT_EQ(e.task(1)->io_wait_fraction, 0.0F);
  EXPECT_EQ(e.schedule(1, 1).phase, Phase::unknown);
}

TEST(Engine, io_wait_outside_zero_to_one_is_clamped) {
  Engine e(seed_options(), two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  TaskUpdate u;
  u.io_wait_fraction = 7.5F;
  ASSERT_TRUE(e.update_task(1, u));
  EXPECT_EQ(e.task(1)->io_wait_fraction, 1.0F);
  u.io_wait_fraction = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(e.update_task(1, u));
  EXPECT_EQ(e.task(1)->io_wait_fraction, 1.0F);
  u.io_wait_fraction = -0.5F;
  ASSERT_TRUE(e.update_task(1, u));
  EXPECT_EQ(e.task(1)->io_wait_fraction, 0.0F);
  u.io_wait_fraction = -std::numeric_limits<float>::infinity();
  ASSERT_TRUE(e.update_task(1, u));
  EXPECT_EQ(e.task(1)->io_wait_fraction, 0.0F);
}

// ---- CPU placement through the engine --------------------------------------------------------

TEST(Engine, gpu_affinity_off_gives_no_preferred_cpu) {
  EngineOptions o = seed_options();
  o.numa.gpu_affinity = false;
  Engine e(o, two_nodes());
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  EXPECT_FALSE(e.schedule(1, 1).cpu().has_value());
  EXPECT_EQ(e.task(1)->last_preferred_cpu, kNoCpu);
}

TEST(Engine, gpu_tasks_prefer_the_cpus_of_their_gpu_node) {
  Engine e(seed_options(), two_nodes());
  const std::vector<float> loads = {0.9F, 0.9F, 0.9F, 0.9F, 0.0F, 0.0F, 0.0F, 0.0F};
  e.set_cpu_loads(loads);
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  ASSERT_TRUE(e.register_task(2, true, 1U).ok());
  const Decision d0 = e.schedule(1, 1);
  const Decision d1 = e.schedule(2, 1);
  ASSERT_TRUE(d0.cpu().has_value());
  EXPECT_LT(*d0.cpu(), 4U);
  ASSERT_TRUE(d1.cpu().has_value());
  EXPECT_GE(*d1.cpu(), 4U);
}

TEST(Engine, numa_disabled_makes_gpu_tasks_choose_among_all_cpus) {
  // numa.enabled = false must be honoured.
  EngineOptions o = seed_options();
  o.numa.enabled = false;
  Engine e(o, two_nodes());
  const std::vector<float> loads = {0.9F, 0.9F, 0.9F, 0.9F, 0.0F, 0.1F, 0.2F, 0.3F};
  e.set_cpu_loads(loads);
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());  // GPU 0 is on node 0
  EXPECT_EQ(e.schedule(1, 1).cpu(), 4U);
}

TEST(Engine, tasks_of_one_tick_spread_over_the_node) {
  // Tasks of one node must not all get the same CPU.
  Topology t = Topology::single_node(64);
  t.map_gpu(0, 0);
  EngineOptions o = seed_options();
  o.max_tracked_tasks = 1'000;
  Engine e(o, std::move(t));
  e.set_cpu_loads(std::vector<float>(64, 0.0F));
  for (std::uint32_t pid = 1; pid <= 64; ++pid) ASSERT_TRUE(e.register_task(pid, true, 0U).ok());
  std::vector<Decision> out;
  e.schedule_all(1, out);
  ASSERT_EQ(out.size(), 64U);
  std::set<std::int32_t> cpus;
  for (const Decision& d : out) cpus.insert(d.preferred_cpu);
  EXPECT_EQ(cpus.size(), 64U);
  EXPECT_EQ(*cpus.begin(), 0);
  EXPECT_EQ(*cpus.rbegin(), 63);
}

TEST(Engine, set_cpu_loads_starts_a_new_tick_of_placement) {
  Engine e(seed_options(), Topology::single_node(2));
  for (std::uint32_t pid = 1; pid <= 3; ++pid) ASSERT_TRUE(e.register_task(pid, true, std::nullopt).ok());
  const std::vector<float> idle = {0.0F, 0.0F};
  e.set_cpu_loads(idle);
  EXPECT_EQ(e.schedule(1, 1).preferred_cpu, 0);
  EXPECT_EQ(e.schedule(2, 1).preferred_cpu, 1);
  EXPECT_EQ(e.schedule(3, 1).preferred_cpu, 0);
  // Without a new tick the next placement would go to CPU 1 (0.1 < 0.2).
  e.set_cpu_loads(idle);
  EXPECT_EQ(e.schedule(1, 2).preferred_cpu, 0);
  e.set_cpu_loads(std::vector<float>{0.8F, 0.1F});
  EXPECT_EQ(e.schedule(1, 3).preferred_cpu, 1);
}

TEST(Engine, a_less_loaded_cpu_takes_more_tasks_of_a_tick) {
  Engine e(seed_options(), Topology::single_node(2));
  for (std::uint32_t pid = 1; pid <= 10; ++pid) ASSERT_TRUE(e.register_task(pid, false, std::nullopt).ok());
  e.set_cpu_loads(std::vector<float>{0.0F, 0.55F});
  std::vector<Decision> out;
  e.schedule_all(1, out);
  int cpu0 = 0;
  for (const Decision& d : out) cpu0 += d.preferred_cpu == 0 ? 1 : 0;
  EXPECT_GE(cpu0, 7);  // 6 before CPU 1's 0.55 is lower, then they alternate
}

TEST(Engine, a_nan_load_never_wins) {
  Engine e(seed_options(), Topology::single_node(2));
  ASSERT_TRUE(e.register_task(1, true, std::nullopt).ok());
  e.set_cpu_loads(std::vector<float>{std::numeric_limits<float>::quiet_NaN(), 0.95F});
  EXPECT_EQ(e.schedule(1, 1).preferred_cpu, 1);
}

TEST(Engine, a_gpu_whose_node_is_missing_never_gets_a_cpu_outside_the_topology) {
  Topology t;
  NumaNode n;
  n.id = 1;
  n.cpus = {12, 13};
  t.add_node(n);
  t.map_gpu(0, 0);  // node 0 is missing
  Engine e(seed_options(), std::move(t));
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  ASSERT_TRUE(e.register_task(2, true, 5U).ok());  // unmapped GPU
  for (int i = 0; i < 10; ++i) {
    const std::int32_t c1 = e.schedule(1, 1).preferred_cpu;
    const std::int32_t c2 = e.schedule(2, 1).preferred_cpu;
    EXPECT_TRUE(c1 == 12 || c1 == 13) << c1;
    EXPECT_TRUE(c2 == 12 || c2 == 13) << c2;
  }
}

TEST(Engine, an_empty_topology_gives_no_preferred_cpu) {
  Engine e(seed_options(), Topology{});
  ASSERT_TRUE(e.register_task(1, true, 0U).ok());
  const Decision d = e.schedule(1, 1);
  EXPECT_FALSE(d.cpu().has_value());
  EXPECT_EQ(d.preferred_cpu, kNoCpu);
}

TEST(Engine, schedule_all_decides_for_every_task_in_table_order) {
  Engine e(seed_options(), two_nodes());
  for (std::uint32_t pid = 10; pid < 20; ++pid) ASSERT_TRUE(e.register_task(pid, true, pid % 2).ok());
  ASSERT_TRUE(e.unregister_task(13));
  std::vector<Decision> out(100);
  e.schedule_all(1, out);
  ASSERT_EQ(out.size(), 9U);
  const auto tasks = e.tasks();
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].pid, tasks[i].pid);
  EXPECT_EQ(e.decisions_made(), 9U);
}

// ---- properties ------------------------------------------------------------------------------

float random_signal(std::mt19937& rng) {
  switch (rng() % 8) {
    case 0: return std::numeric_limits<float>::quiet_NaN();
    case 1: return std::numeric_limits<float>::infinity();
    case 2: return -std::numeric_limits<float>::infinity();
    case 3: return std::uniform_real_distribution<float>(-5.0F, 5.0F)(rng);
    default: return std::uniform_real_distribution<float>(0.0F, 1.0F)(rng);
  }
}

TEST(EngineProperty, decisions_are_always_sane) {
  std::mt19937 rng(8675309);
  for (int config = 0; config < 8; ++config) {
    EngineOptions o;
    o.multi_tenant_enabled = (config & 1) != 0;
    o.numa.enabled = (config & 2) != 0;
    o.phase.nccl_detection_enabled = (config & 4) != 0;
    o.phase.phase_stability_count = static_cast<std::uint32_t>(rng() % 4);
    o.max_tracked_tasks = 300;
    Topology topo = two_nodes();
    NumaNode extra;
    extra.id = 5;  // memory-only node with a GPU
    topo.add_node(extra);
    topo.map_gpu(2, 5);
    topo.map_gpu(3, 9);  // missing node
    std::set<std::int32_t> valid_cpus = {0, 1, 2, 3, 4, 5, 6, 7};
    Engine e(o, std::move(topo));

    std::vector<std::string> ids;
    for (int i = 0; i < 6; ++i) {
      TenantSpec t;
      t.id = "t" + std::to_string(i);
      t.gpus = static_cast<std::uint32_t>(rng() % 5);  // some 0-GPU tenants
      t.priority_class = kAllPriorityClasses[rng() % kAllPriorityClasses.size()];
      if (rng() % 4 == 0) t.cpu_weight = std::uniform_real_distribution<float>(0.01F, 100.0F)(rng);
      ASSERT_TRUE(e.upsert_tenant(t).ok());
      ids.push_back(t.id);
    }

    std::vector<Decision> out;
    for (int iter = 0; iter < 15'000; ++iter) {
      const auto pid = static_cast<std::uint32_t>(rng() % 400);
      const std::uint64_t now = static_cast<std::uint64_t>(iter) * 1'000;
      out.clear();
      switch (rng() % 10) {
        case 0: {
          std::optional<std::uint32_t> gpu;
          if (rng() % 3 != 0) gpu = static_cast<std::uint32_t>(rng() % 5);
          const bool ok = e.register_task(pid, rng() % 4 != 0, gpu, now).ok();
          ASSERT_TRUE(ok || e.task_count() == o.max_tracked_tasks);
          break;
        }
        case 1: e.unregister_task(pid); break;
        case 2: (void)e.assign_pid(pid, ids[rng() % ids.size()]); break;
        case 3: {
          std::vector<float> loads(rng() % 10);
          for (float& l : loads) l = random_signal(rng);
          e.set_cpu_loads(loads);
          break;
        }
        case 4: {
          if (rng() % 50 == 0) e.remove_tenant(ids[rng() % ids.size()]);
          TenantSpec t;
          t.id = ids[rng() % ids.size()];
          t.gpus = static_cast<std::uint32_t>(rng() % 5);
          t.priority_class = kAllPriorityClasses[rng() % kAllPriorityClasses.size()];
          ASSERT_TRUE(e.upsert_tenant(t).ok());
          break;
        }
        case 5: e.schedule_all(now, out); break;
        default: {
          TaskUpdate u;
          if (rng() % 2 == 0) u.gpu_utilization = static_cast<std::uint8_t>(rng() % 256);
          if (rng() % 2 == 0) u.io_wait_fraction = random_signal(rng);
          if (rng() % 2 == 0) u.cpu_burst_duration_ns = rng() % 3 == 0 ? 0U : rng() % (10 * kMs);
          if (rng() % 2 == 0) u.last_gpu_sync_ns = rng() % 2 == 0 ? 0U : now;
          if (rng() % 2 == 0) u.nccl_active = rng() % 2 == 0;
          if (rng() % 2 == 0) u.futex_wait_count = static_cast<std::uint32_t>(rng() % 3);
          if (rng() % 8 == 0) u.gpu_id = static_cast<std::uint32_t>(rng() % 5);
          e.update_task(pid, u);
          out.assign(1, e.schedule(pid, now));
          break;
        }
      }
      for (const Decision& d : out) {
        ASSERT_GT(d.weight, 0U);
        ASSERT_EQ(d.weight, weight_for_priority(d.priority));
        ASSERT_GE(d.priority, -10) << "iteration " << iter;
        ASSERT_LE(d.priority, 15) << "iteration " << iter;
        ASSERT_GE(d.tenant_weight, 1U);
        ASSERT_LE(d.tenant_weight, 10'000U);
        ASSERT_TRUE(d.preferred_cpu == kNoCpu || valid_cpus.count(d.preferred_cpu) == 1)
            << "iteration " << iter << " cpu " << d.preferred_cpu;
        const TaskState* s = e.task(d.pid);
        // A tracked task always gets a CPU: the topology has CPUs and gpu_affinity is on.
        if (s != nullptr) {
          ASSERT_NE(d.preferred_cpu, kNoCpu) << "iteration " << iter;
        }
        if (!o.multi_tenant_enabled) {
          ASSERT_EQ(d.tenant, kNoTenant);
          ASSERT_EQ(d.tenant_weight, 100U);
        }
        const PhasePolicy pol = policy_for_phase(d.phase);
        ASSERT_EQ(d.slice_ns, pol.slice_ns);
        ASSERT_EQ(d.preempt, pol.preempt);
        if (s != nullptr && !s->is_ml_process) {
          ASSERT_EQ(d.phase, Phase::unknown);
        }
      }
      ASSERT_LE(e.task_count(), o.max_tracked_tasks);
    }
  }
}

TEST(EngineProperty, tenant_task_counts_match_the_assignments) {
  std::mt19937 rng(1234);
  EngineOptions o;
  o.multi_tenant_enabled = true;
  Engine e(o, Topology::single_node(4));
  const std::vector<std::string> ids = {"a", "b", "c"};
  for (const std::string& id : ids) {
    ASSERT_TRUE(
        e.upsert_tenant(TenantSpec{id, 2, PriorityClass::training, std::nullopt, {}, {}}).ok());
  }
  for (int iter = 0; iter < 20'000; ++iter) {
    const auto pid = static_cast<std::uint32_t>(rng() % 50);
    switch (rng() % 6) {
      case 0: (void)e.register_task(pid, true, std::nullopt); break;
      case 1: e.unregister_task(pid); break;
      case 2: e.remove_tenant(ids[rng() % ids.size()]); break;
      case 3:
        ASSERT_TRUE(
            e
                .upsert_tenant(TenantSpec{
                    ids[rng() % ids.size()], 2, PriorityClass::training, std::nullopt, {}, {}})
                .ok());
        break;
      default: (void)e.assign_pid(pid, ids[rng() % ids.size()]); break;
    }
    if (iter % 100 == 0) {
      for (const std::string& id : ids) {
        auto slot = e.tenants().find(id);
        if (!slot) continue;
        std::size_t n = 0;
        for (const TaskState& s : e.tasks()) n += s.tenant == *slot ? 1U : 0U;
        ASSERT_EQ(e.tenant_task_count(*slot), n) << "iteration " << iter << " tenant " << id;
      }
    }
  }
}

}  // namespace
}  // namespace zernel::policy
