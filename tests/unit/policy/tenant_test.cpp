// Tenants ([multi_tenant] and [[tenants]] in docs/configuration.md, and the tenant cases an
// earlier implementation got wrong): the seed scenarios, class priorities, GPU-proportional
// weights, the fixes,
// and randomized properties of the weights.

#include "policy/tenant.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "policy/engine.hpp"
#include "policy/phase.hpp"
#include "policy/topology.hpp"

namespace zernel::policy {
namespace {

TenantSpec tenant(std::string id, std::uint32_t gpus,
                  PriorityClass cls = PriorityClass::training,
                  std::optional<float> cpu_weight = std::nullopt) {
  TenantSpec t;
  t.id = std::move(id);
  t.gpus = gpus;
  t.priority_class = cls;
  t.cpu_weight = cpu_weight;
  return t;
}

EngineOptions multi_tenant_options() {
  EngineOptions o;
  o.multi_tenant_enabled = true;
  o.phase.phase_stability_count = 1;
  return o;
}

std::uint16_t must_upsert(TenantRegistry& r, const TenantSpec& spec) {
  auto slot = r.upsert(spec);
  EXPECT_TRUE(slot.ok()) << (slot.ok() ? "" : slot.error().message());
  return slot.ok() ? *slot : kNoTenant;
}

// ---- seed scenarios, on the Engine API ----------------------------------------------------------

TEST(TenantSeed, gpu_proportional_weight) {
  Engine e(multi_tenant_options(), Topology::single_node(8));
  ASSERT_TRUE(e.upsert_tenant(tenant("job-a", 2)).ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("job-b", 6)).ok());
  ASSERT_TRUE(e.assign_pid(100, "job-a").ok());
  ASSERT_TRUE(e.assign_pid(200, "job-b").ok());

  const float w_a = e.cpu_weight_for_pid(100);
  const float w_b = e.cpu_weight_for_pid(200);
  // Job B should get 3x the weight of Job A.
  EXPECT_LT(std::fabs(w_b / w_a - 3.0F), 0.01F);
}

// The seed added the class to every task's priority; inside a tenant that cancels out, so the
// class now scales the tenant's weight instead (tenant.hpp) and the priority is the phase's.
TEST(TenantSeed, priority_class_affects_the_tenant_weight_not_the_priority) {
  Engine e(multi_tenant_options(), Topology::single_node(8));
  ASSERT_TRUE(e.upsert_tenant(tenant("train", 4, PriorityClass::training)).ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("bg", 4, PriorityClass::background)).ok());
  ASSERT_TRUE(e.register_task(100, true, std::nullopt).ok());
  ASSERT_TRUE(e.register_task(200, true, std::nullopt).ok());
  ASSERT_TRUE(e.assign_pid(100, "train").ok());
  ASSERT_TRUE(e.assign_pid(200, "bg").ok());

  const Decision train = e.schedule(100, 1);
  const Decision bg = e.schedule(200, 1);
  EXPECT_EQ(train.priority, bg.priority);
  EXPECT_EQ(train.tenant_weight, 305U);
  EXPECT_EQ(bg.tenant_weight, 33U);
}

TEST(TenantSeed, unregistered_pid_gets_default_weight) {
  const Engine e(multi_tenant_options(), Topology::single_node(8));
  EXPECT_EQ(e.cpu_weight_for_pid(999), 1.0F);
}

TEST(TenantSeed, unregister_tenant_cleans_up) {
  Engine e(multi_tenant_options(), Topology::single_node(8));
  ASSERT_TRUE(e.upsert_tenant(tenant("job-a", 4)).ok());
  ASSERT_TRUE(e.assign_pid(100, "job-a").ok());
  EXPECT_EQ(e.tenants().count(), 1U);

  EXPECT_TRUE(e.remove_tenant("job-a"));
  EXPECT_EQ(e.tenants().count(), 0U);
  EXPECT_EQ(e.cpu_weight_for_pid(100), 1.0F);  // cleaned up
  EXPECT_EQ(e.tenant_of(100), nullptr);
}

// The same scenarios on TenantRegistry, by slot.

TEST(TenantRegistry, gpu_proportional_weight_is_three_times_for_six_versus_two_gpus) {
  TenantRegistry r;
  const std::uint16_t a = must_upsert(r, tenant("job-a", 2));
  const std::uint16_t b = must_upsert(r, tenant("job-b", 6));
  EXPECT_FLOAT_EQ(r.weight(a), 0.5F);
  EXPECT_FLOAT_EQ(r.weight(b), 1.5F);
  EXPECT_LT(std::fabs(r.weight(b) / r.weight(a) - 3.0F), 0.01F);
  // Times the training class factor (1.25^5).
  EXPECT_EQ(r.cgroup_weight(a), 153U);
  EXPECT_EQ(r.cgroup_weight(b), 458U);
  EXPECT_EQ(r.total_gpus(), 8U);
}

TEST(TenantRegistry, class_priority_is_added_per_slot) {
  TenantRegistry r;
  const std::uint16_t t = must_upsert(r, tenant("train", 4, PriorityClass::training, 1.0F));
  const std::uint16_t b = must_upsert(r, tenant("bg", 4, PriorityClass::background, 1.0F));
  EXPECT_GT(r.class_priority(t), r.class_priority(b));
  EXPECT_EQ(r.class_priority(kNoTenant), 0);
}

TEST(TenantRegistry, the_class_scales_the_cgroup_weight_of_a_gpu_share) {
  TenantRegistry r;
  const std::uint16_t t = must_upsert(r, tenant("train", 4, PriorityClass::training));
  const std::uint16_t i = must_upsert(r, tenant("infer", 4, PriorityClass::inference));
  const std::uint16_t x = must_upsert(r, tenant("inter", 4, PriorityClass::interactive));
  const std::uint16_t b = must_upsert(r, tenant("bg", 4, PriorityClass::background));
  EXPECT_EQ(r.cgroup_weight(t), 305U);
  EXPECT_EQ(r.cgroup_weight(i), 195U);
  EXPECT_EQ(r.cgroup_weight(x), 125U);
  EXPECT_EQ(r.cgroup_weight(b), 33U);
  // The GPU share itself does not depend on the class.
  EXPECT_FLOAT_EQ(r.weight(t), r.weight(b));
}

TEST(TenantRegistry, an_unknown_slot_has_weight_one_and_no_class_priority) {
  const TenantRegistry r;
  EXPECT_EQ(r.weight(0), 1.0F);
  EXPECT_EQ(r.weight(kNoTenant), 1.0F);
  EXPECT_EQ(r.cgroup_weight(kNoTenant), 100U);
  EXPECT_EQ(r.class_priority(0), 0);
  EXPECT_FALSE(r.valid(0));
}

TEST(TenantRegistry, remove_forgets_the_tenant_and_its_gpus) {
  TenantRegistry r;
  const std::uint16_t a = must_upsert(r, tenant("job-a", 4));
  must_upsert(r, tenant("job-b", 4));
  EXPECT_EQ(r.count(), 2U);
  EXPECT_EQ(r.remove("job-a"), a);
  EXPECT_EQ(r.count(), 1U);
  EXPECT_FALSE(r.valid(a));
  EXPECT_FALSE(r.find("job-a").has_value());
  EXPECT_EQ(r.total_gpus(), 4U);
  EXPECT_FALSE(r.remove("job-a").has_value());
  EXPECT_FALSE(r.remove("never").has_value());
  // The remaining tenant is now the only one: weight 1.
  EXPECT_FLOAT_EQ(r.weight(*r.find("job-b")), 1.0F);
}

TEST(TenantRegistry, slots_are_reused_after_removal_and_listed_in_order) {
  TenantRegistry r;
  const std::uint16_t a = must_upsert(r, tenant("a", 1));
  const std::uint16_t b = must_upsert(r, tenant("b", 1));
  const std::uint16_t c = must_upsert(r, tenant("c", 1));
  EXPECT_EQ(r.slots(), (std::vector<std::uint16_t>{a, b, c}));
  ASSERT_TRUE(r.remove("b").has_value());
  EXPECT_EQ(r.slots(), (std::vector<std::uint16_t>{a, c}));
  const std::uint16_t d = must_upsert(r, tenant("d", 1));
  EXPECT_EQ(d, b);
  EXPECT_EQ(r.spec(d).id, "d");
}

// ---- classes ---------------------------------------------------------------------------------

TEST(PriorityClass, base_priorities_are_plus5_plus3_plus1_minus5) {
  EXPECT_EQ(base_priority(PriorityClass::training), 5);
  EXPECT_EQ(base_priority(PriorityClass::inference), 3);
  EXPECT_EQ(base_priority(PriorityClass::interactive), 1);
  EXPECT_EQ(base_priority(PriorityClass::background), -5);
}

TEST(PriorityClass, names_round_trip_case_insensitively) {
  for (PriorityClass c : kAllPriorityClasses) {
    auto parsed = parse_priority_class(class_name(c));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, c);
  }
  EXPECT_EQ(class_name(PriorityClass::training), "training");
  EXPECT_EQ(class_name(PriorityClass::inference), "inference");
  EXPECT_EQ(class_name(PriorityClass::interactive), "interactive");
  EXPECT_EQ(class_name(PriorityClass::background), "background");
  auto upper = parse_priority_class("BACKGROUND");
  ASSERT_TRUE(upper.ok());
  EXPECT_EQ(*upper, PriorityClass::background);
  auto mixed = parse_priority_class("Inference");
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(*mixed, PriorityClass::inference);
}

TEST(PriorityClass, an_unknown_class_name_is_an_error_not_training) {
  // An unknown class name must be an error, not silently Training (as the seed's parser and its
  // config default "normal" made it).
  for (const char* bad : {"normal", "", "train", "batch", "training "}) {
    auto parsed = parse_priority_class(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.error().code(), EINVAL);
    EXPECT_NE(parsed.error().message().find("training, inference, interactive, background"),
              std::string::npos)
        << parsed.error().message();
  }
}

TEST(TenantSpec, default_class_is_training_with_no_explicit_weight) {
  const TenantSpec t;
  EXPECT_EQ(t.priority_class, PriorityClass::training);
  EXPECT_FALSE(t.cpu_weight.has_value());
  EXPECT_EQ(t.gpus, 0U);
}

// ---- validation ------------------------------------------------------------------------------

TEST(TenantValidation, accepts_a_well_formed_spec) {
  EXPECT_TRUE(validate_tenant(tenant("team-a_1.prod:x@y", 4096)).ok());
  EXPECT_TRUE(validate_tenant(tenant("t", 0, PriorityClass::background, 0.01F)).ok());
  EXPECT_TRUE(validate_tenant(tenant("t", 0, PriorityClass::background, 100.0F)).ok());
  EXPECT_TRUE(validate_tenant(tenant(std::string(kMaxTenantIdLength, 'x'), 1)).ok());
}

TEST(TenantValidation, rejects_bad_fields_and_names_them) {
  auto empty = validate_tenant(tenant("", 1));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message().find("id"), std::string::npos);

  EXPECT_FALSE(validate_tenant(tenant(std::string(kMaxTenantIdLength + 1, 'x'), 1)).ok());
  EXPECT_FALSE(validate_tenant(tenant("has space", 1)).ok());
  EXPECT_FALSE(validate_tenant(tenant("new\nline", 1)).ok());
  EXPECT_FALSE(validate_tenant(tenant("slash/", 1)).ok());

  auto gpus = validate_tenant(tenant("t", 4097));
  ASSERT_FALSE(gpus.ok());
  EXPECT_NE(gpus.error().message().find("gpus"), std::string::npos);

  for (float w : {0.0F, -1.0F, 0.009F, 100.5F, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::infinity()}) {
    auto r = validate_tenant(tenant("t", 1, PriorityClass::training, w));
    ASSERT_FALSE(r.ok()) << w;
    EXPECT_NE(r.error().message().find("cpu_weight"), std::string::npos);
  }
}

TEST(TenantRegistry, an_invalid_spec_changes_nothing) {
  TenantRegistry r;
  const std::uint16_t a = must_upsert(r, tenant("a", 2));
  must_upsert(r, tenant("b", 6));
  EXPECT_FALSE(r.upsert(tenant("a", 5000)).ok());  // replacing with an invalid spec
  EXPECT_FALSE(r.upsert(tenant("", 1)).ok());
  EXPECT_EQ(r.count(), 2U);
  EXPECT_EQ(r.total_gpus(), 8U);
  EXPECT_EQ(r.spec(a).gpus, 2U);
  EXPECT_FLOAT_EQ(r.weight(a), 0.5F);
}

TEST(TenantRegistry, refuses_more_than_the_maximum_number_of_tenants) {
  TenantRegistry r;
  for (std::size_t i = 0; i < kMaxTenants; ++i) {
    ASSERT_TRUE(r.upsert(tenant("t" + std::to_string(i), 1)).ok()) << i;
  }
  auto extra = r.upsert(tenant("one-too-many", 1));
  ASSERT_FALSE(extra.ok());
  EXPECT_EQ(extra.error().code(), ENOSPC);
  EXPECT_EQ(r.count(), kMaxTenants);
  EXPECT_FALSE(r.find("one-too-many").has_value());
  // Replacing an existing one still works at the limit.
  EXPECT_TRUE(r.upsert(tenant("t7", 3)).ok());
  EXPECT_EQ(r.count(), kMaxTenants);
}

// ---- section 2 fixes -------------------------------------------------------------------------

TEST(TenantRegistry, a_zero_gpu_tenant_gets_a_positive_weight) {
  // A tenant with 0 GPUs must not get weight 0 (starved).
  TenantRegistry r;
  const std::uint16_t z = must_upsert(r, tenant("no-gpu", 0));
  const std::uint16_t g = must_upsert(r, tenant("gpu", 4));
  EXPECT_GT(r.weight(z), 0.0F);
  EXPECT_GE(r.cgroup_weight(z), 1U);
  EXPECT_GT(r.weight(g), r.weight(z));
  // kZeroGpuShare: 0.25 / 4.25 * 2 and 4 / 4.25 * 2.
  EXPECT_NEAR(static_cast<double>(r.weight(z)), 0.25 / 4.25 * 2.0, 1e-5);
  EXPECT_NEAR(static_cast<double>(r.weight(g)), 4.0 / 4.25 * 2.0, 1e-5);
}

TEST(TenantRegistry, only_zero_gpu_tenants_share_equally) {
  TenantRegistry r;
  const std::uint16_t a = must_upsert(r, tenant("a", 0));
  const std::uint16_t b = must_upsert(r, tenant("b", 0));
  EXPECT_FLOAT_EQ(r.weight(a), 1.0F);
  EXPECT_FLOAT_EQ(r.weight(b), 1.0F);
  EXPECT_EQ(r.total_gpus(), 0U);
}

TEST(TenantRegistry, registering_an_existing_id_replaces_it_without_double_counting_gpus) {
  // Registering an existing id again must not count its GPUs twice.
  TenantRegistry r;
  const std::uint16_t a = must_upsert(r, tenant("job-a", 2));
  const std::uint16_t b = must_upsert(r, tenant("job-b", 6));
  EXPECT_EQ(must_upsert(r, tenant("job-a", 2)), a);  // same spec again
  EXPECT_EQ(r.count(), 2U);
  EXPECT_EQ(r.total_gpus(), 8U);
  EXPECT_FLOAT_EQ(r.weight(a), 0.5F);

  EXPECT_EQ(must_upsert(r, tenant("job-a", 6, PriorityClass::inference)), a);  // changed spec
  EXPECT_EQ(r.count(), 2U);
  EXPECT_EQ(r.total_gpus(), 12U);
  EXPECT_FLOAT_EQ(r.weight(a), 1.0F);
  EXPECT_FLOAT_EQ(r.weight(b), 1.0F);
  EXPECT_EQ(r.class_priority(a), 3);
}

TEST(TenantRegistry, an_explicit_weight_replaces_the_gpu_share) {
  TenantRegistry r;
  const std::uint16_t a = must_upsert(r, tenant("a", 2, PriorityClass::training, 4.0F));
  const std::uint16_t b = must_upsert(r, tenant("b", 6));
  EXPECT_FLOAT_EQ(r.weight(a), 4.0F);
  EXPECT_EQ(r.cgroup_weight(a), 400U);
  // a's GPUs still count in b's share: 6 / 8 * 2.
  EXPECT_FLOAT_EQ(r.weight(b), 1.5F);
}

TEST(TenantRegistry, cgroup_weight_is_weight_times_100_clamped) {
  TenantRegistry r;
  const std::uint16_t hi = must_upsert(r, tenant("hi", 1, PriorityClass::training, 100.0F));
  const std::uint16_t lo = must_upsert(r, tenant("lo", 1, PriorityClass::training, 0.01F));
  EXPECT_EQ(r.cgroup_weight(hi), 10000U);
  EXPECT_EQ(r.cgroup_weight(lo), 1U);
}

TEST(EngineTenant, a_bigger_tenant_never_pushes_a_negative_phase_priority_further_down) {
  // The tenant weight must not multiply the phase priority (that pushed a bigger tenant in a
  // negative-priority phase further down). The seed gave GpuCompute (-5) of a 1.5x
  // Background tenant (int)(-5 * 1.5) - 5 = -12; the priority is now the phase's (-5) and the
  // share, class included, travels separately as tenant_weight.
  Engine e(multi_tenant_options(), Topology::single_node(4));
  ASSERT_TRUE(e.upsert_tenant(tenant("big", 6, PriorityClass::background)).ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("small", 2, PriorityClass::training)).ok());
  ASSERT_TRUE(e.register_task(100, true, std::nullopt).ok());
  ASSERT_TRUE(e.register_task(200, true, std::nullopt).ok());
  ASSERT_TRUE(e.assign_pid(100, "big").ok());
  ASSERT_TRUE(e.assign_pid(200, "small").ok());
  TaskUpdate busy;
  busy.gpu_utilization = 95;
  ASSERT_TRUE(e.update_task(100, busy));
  ASSERT_TRUE(e.update_task(200, busy));

  const Decision big = e.schedule(100, 1000);
  EXPECT_EQ(big.phase, Phase::gpu_compute);
  EXPECT_EQ(big.priority, -5);
  EXPECT_EQ(big.weight, weight_for_priority(-5));
  EXPECT_EQ(big.tenant_weight, 49U);  // 1.5 x the background factor (0.33)
  const Decision small = e.schedule(200, 1000);
  EXPECT_EQ(small.priority, -5);  // seed: (int)(-5 * 0.5) + 5 = 3
  EXPECT_EQ(small.tenant_weight, 153U);
}

TEST(EngineTenant, priority_is_the_phase_priority_for_every_share_and_class) {
  for (float w : {0.01F, 0.5F, 1.0F, 1.5F, 3.0F, 100.0F}) {
    for (PriorityClass c : kAllPriorityClasses) {
      Engine e(multi_tenant_options(), Topology::single_node(2));
      ASSERT_TRUE(e.upsert_tenant(tenant("t", 4, c, w)).ok());
      ASSERT_TRUE(e.register_task(7, true, std::nullopt).ok());
      ASSERT_TRUE(e.assign_pid(7, "t").ok());
      const Decision d = e.schedule(7, 1);
      EXPECT_EQ(d.priority, policy_for_phase(d.phase).priority)
          << "weight " << w << " class " << class_name(c);
      EXPECT_EQ(d.tenant_weight, e.tenants().cgroup_weight(d.tenant));
    }
  }
}

TEST(EngineTenant, a_zero_gpu_tenant_keeps_its_phase_priority_and_a_positive_share) {
  // The seed gave a 0-GPU tenant weight 0, which turned every phase priority into 0 (a data
  // loader of such a tenant lost its +10).
  Engine e(multi_tenant_options(), Topology::single_node(2));
  ASSERT_TRUE(e.upsert_tenant(tenant("zero", 0, PriorityClass::interactive)).ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("other", 8)).ok());
  ASSERT_TRUE(e.register_task(5, true, std::nullopt).ok());
  ASSERT_TRUE(e.assign_pid(5, "zero").ok());
  TaskUpdate loading;
  loading.io_wait_fraction = 0.9F;
  loading.gpu_utilization = 0;
  ASSERT_TRUE(e.update_task(5, loading));
  EXPECT_GT(e.cpu_weight_for_pid(5), 0.0F);
  const Decision d = e.schedule(5, 10);
  EXPECT_EQ(d.phase, Phase::data_loading);
  EXPECT_EQ(d.priority, 10);
  EXPECT_GE(d.tenant_weight, 1U);
}

TEST(EngineTenant, the_share_belongs_to_the_tenant_not_to_each_process) {
  // A tenant that starts more processes must not take more CPU. The tenant weight
  // of each decision is the tenant's cgroup weight, independent of how many processes it has.
  Engine e(multi_tenant_options(), Topology::single_node(16));
  ASSERT_TRUE(e.upsert_tenant(tenant("a", 2)).ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("b", 6)).ok());
  ASSERT_TRUE(e.assign_pid(1000, "b").ok());
  ASSERT_TRUE(e.assign_pid(1, "a").ok());
  const Decision one = e.schedule(1, 1);
  const float w_one = e.cpu_weight_for_pid(1);
  for (std::uint32_t pid = 2; pid <= 20; ++pid) ASSERT_TRUE(e.assign_pid(pid, "a").ok());
  EXPECT_EQ(e.tenant_task_count(*e.tenants().find("a")), 20U);
  EXPECT_EQ(e.tenant_task_count(*e.tenants().find("b")), 1U);
  for (std::uint32_t pid = 1; pid <= 20; ++pid) {
    const Decision d = e.schedule(pid, 2);
    EXPECT_EQ(d.tenant_weight, one.tenant_weight) << pid;
    EXPECT_EQ(d.tenant_weight, 153U) << pid;
    EXPECT_EQ(e.cpu_weight_for_pid(pid), w_one) << pid;
  }
  EXPECT_EQ(e.schedule(1000, 2).tenant_weight, 458U);
}

TEST(EngineTenant, assigning_an_untracked_pid_registers_it_as_a_non_ml_task) {
  Engine e(multi_tenant_options(), Topology::single_node(4));
  ASSERT_TRUE(e.upsert_tenant(tenant("inf", 3, PriorityClass::inference)).ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("other", 1)).ok());
  EXPECT_EQ(e.task(77), nullptr);
  ASSERT_TRUE(e.assign_pid(77, "inf").ok());
  const TaskState* s = e.task(77);
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->is_ml_process);
  EXPECT_EQ(e.task_count(), 1U);
  ASSERT_NE(e.tenant_of(77), nullptr);
  EXPECT_EQ(e.tenant_of(77)->id, "inf");
}

TEST(EngineTenant, a_non_ml_process_of_a_tenant_is_scheduled_with_the_tenant_share) {
  Engine e(multi_tenant_options(), Topology::single_node(4));
  ASSERT_TRUE(e.upsert_tenant(tenant("inf", 3, PriorityClass::inference)).ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("other", 1)).ok());
  ASSERT_TRUE(e.assign_pid(77, "inf").ok());
  const Decision d = e.schedule(77, 100);
  EXPECT_EQ(d.phase, Phase::unknown);
  EXPECT_EQ(d.tenant, *e.tenants().find("inf"));
  EXPECT_EQ(d.tenant_weight, 293U);  // 3 / 4 * 2 = 1.5, x the inference factor 1.95
  EXPECT_EQ(d.priority, 0);          // Unknown; the class is in tenant_weight
  EXPECT_EQ(d.weight, weight_for_priority(0));
  EXPECT_EQ(e.decisions_made(), 1U);
}

TEST(EngineTenant, assigning_to_an_unknown_tenant_fails_and_changes_nothing) {
  Engine e(multi_tenant_options(), Topology::single_node(4));
  auto r = e.assign_pid(5, "nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ENOENT);
  EXPECT_EQ(e.task(5), nullptr);
  EXPECT_EQ(e.task_count(), 0U);
}

TEST(EngineTenant, reassigning_moves_the_process_between_tenants) {
  Engine e(multi_tenant_options(), Topology::single_node(4));
  ASSERT_TRUE(e.upsert_tenant(tenant("a", 1)).ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("b", 3, PriorityClass::background)).ok());
  const std::uint16_t a = *e.tenants().find("a");
  const std::uint16_t b = *e.tenants().find("b");
  ASSERT_TRUE(e.assign_pid(9, "a").ok());
  ASSERT_TRUE(e.assign_pid(9, "a").ok());  // same tenant twice counts once
  EXPECT_EQ(e.tenant_task_count(a), 1U);
  ASSERT_TRUE(e.assign_pid(9, "b").ok());
  EXPECT_EQ(e.tenant_task_count(a), 0U);
  EXPECT_EQ(e.tenant_task_count(b), 1U);
  EXPECT_EQ(e.schedule(9, 1).tenant, b);
}

TEST(EngineTenant, unregistering_a_task_drops_its_tenant_mapping) {
  // Unregistering a task must drop its tenant mapping (a reused pid must not inherit the tenant).
  Engine e(multi_tenant_options(), Topology::single_node(4));
  ASSERT_TRUE(e.upsert_tenant(tenant("a", 2)).ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("b", 6)).ok());
  const std::uint16_t a = *e.tenants().find("a");
  ASSERT_TRUE(e.register_task(100, true, std::nullopt).ok());
  ASSERT_TRUE(e.assign_pid(100, "a").ok());
  EXPECT_EQ(e.tenant_task_count(a), 1U);
  EXPECT_TRUE(e.unregister_task(100));
  EXPECT_EQ(e.tenant_task_count(a), 0U);
  EXPECT_EQ(e.cpu_weight_for_pid(100), 1.0F);

  ASSERT_TRUE(e.register_task(100, true, std::nullopt).ok());  // the pid is reused
  EXPECT_EQ(e.tenant_of(100), nullptr);
  EXPECT_EQ(e.cpu_weight_for_pid(100), 1.0F);
  const Decision d = e.schedule(100, 5);
  EXPECT_EQ(d.tenant, kNoTenant);
  EXPECT_EQ(d.tenant_weight, 100U);
  EXPECT_EQ(d.priority, 0);
  EXPECT_EQ(e.tenant_task_count(a), 0U);
}

TEST(EngineTenant, re_registering_a_live_pid_keeps_its_tenant) {
  Engine e(multi_tenant_options(), Topology::single_node(4));
  ASSERT_TRUE(e.upsert_tenant(tenant("a", 2)).ok());
  const std::uint16_t a = *e.tenants().find("a");
  ASSERT_TRUE(e.assign_pid(100, "a").ok());
  ASSERT_TRUE(e.register_task(100, true, 0U).ok());
  ASSERT_NE(e.tenant_of(100), nullptr);
  EXPECT_EQ(e.tenant_of(100)->id, "a");
  EXPECT_EQ(e.tenant_task_count(a), 1U);
  EXPECT_TRUE(e.task(100)->is_ml_process);
}

TEST(EngineTenant, removing_a_tenant_unassigns_its_processes_only) {
  Engine e(multi_tenant_options(), Topology::single_node(4));
  ASSERT_TRUE(e.upsert_tenant(tenant("a", 2)).ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("b", 6, PriorityClass::inference)).ok());
  ASSERT_TRUE(e.assign_pid(1, "a").ok());
  ASSERT_TRUE(e.assign_pid(2, "a").ok());
  ASSERT_TRUE(e.assign_pid(3, "b").ok());
  EXPECT_TRUE(e.remove_tenant("a"));
  EXPECT_FALSE(e.remove_tenant("a"));
  EXPECT_EQ(e.task_count(), 3U);  // the processes stay tracked
  EXPECT_EQ(e.tenant_of(1), nullptr);
  EXPECT_EQ(e.tenant_of(2), nullptr);
  ASSERT_NE(e.tenant_of(3), nullptr);
  EXPECT_EQ(e.tenant_of(3)->id, "b");
  // b is now the only tenant: weight 1.0.
  EXPECT_FLOAT_EQ(e.cpu_weight_for_pid(3), 1.0F);
  EXPECT_EQ(e.schedule(1, 1).tenant, kNoTenant);
  EXPECT_EQ(e.schedule(3, 1).tenant, *e.tenants().find("b"));
  // A new tenant that reuses the slot does not inherit the old processes.
  ASSERT_TRUE(e.upsert_tenant(tenant("c", 1)).ok());
  EXPECT_EQ(e.tenant_of(1), nullptr);
  EXPECT_EQ(e.tenant_task_count(*e.tenants().find("c")), 0U);
}

TEST(EngineTenant, upserting_an_existing_tenant_keeps_its_processes) {
  Engine e(multi_tenant_options(), Topology::single_node(4));
  ASSERT_TRUE(e.upsert_tenant(tenant("a", 2)).ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("b", 6)).ok());
  ASSERT_TRUE(e.assign_pid(1, "a").ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("a", 6, PriorityClass::background)).ok());
  EXPECT_EQ(e.tenants().count(), 2U);
  EXPECT_EQ(e.tenants().total_gpus(), 12U);
  ASSERT_NE(e.tenant_of(1), nullptr);
  EXPECT_EQ(e.tenant_of(1)->gpus, 6U);
  EXPECT_FLOAT_EQ(e.cpu_weight_for_pid(1), 1.0F);
  EXPECT_EQ(e.tenant_of(1)->priority_class, PriorityClass::background);
  EXPECT_EQ(e.tenant_task_count(*e.tenants().find("a")), 1U);
}

TEST(EngineTenant, an_invalid_tenant_is_refused_with_context) {
  Engine e(multi_tenant_options(), Topology::single_node(4));
  auto r = e.upsert_tenant(tenant("x", 9999));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("tenant \"x\""), std::string::npos) << r.error().message();
  EXPECT_EQ(e.tenants().count(), 0U);
}

TEST(EngineTenant, multi_tenant_disabled_ignores_tenants_in_decisions_and_priority) {
  EngineOptions o;
  o.phase.phase_stability_count = 1;
  ASSERT_FALSE(o.multi_tenant_enabled);  // the default
  Engine e(o, Topology::single_node(4));
  ASSERT_TRUE(e.upsert_tenant(tenant("a", 6, PriorityClass::background)).ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("b", 2)).ok());
  ASSERT_TRUE(e.register_task(1, true, std::nullopt).ok());
  ASSERT_TRUE(e.assign_pid(1, "a").ok());
  TaskUpdate loading;
  loading.io_wait_fraction = 0.9F;
  ASSERT_TRUE(e.update_task(1, loading));
  const Decision d = e.schedule(1, 1);
  EXPECT_EQ(d.phase, Phase::data_loading);
  EXPECT_EQ(d.priority, 10);
  EXPECT_EQ(d.weight, weight_for_priority(10));
  EXPECT_EQ(d.tenant, kNoTenant);
  EXPECT_EQ(d.tenant_weight, 100U);
}

TEST(EngineTenant, cpu_weight_for_pid_is_one_when_multi_tenant_is_disabled) {
  // engine.hpp documents cpu_weight_for_pid as "the tenant weight a pid is scheduled with"; with
  // multi-tenancy off every decision carries tenant_weight 100 (1.0), so the weight query must
  // agree with it.
  EngineOptions o;
  Engine e(o, Topology::single_node(4));
  ASSERT_TRUE(e.upsert_tenant(tenant("a", 6)).ok());
  ASSERT_TRUE(e.upsert_tenant(tenant("b", 2)).ok());
  ASSERT_TRUE(e.assign_pid(1, "a").ok());
  const Decision d = e.schedule(1, 1);
  EXPECT_EQ(d.tenant_weight, 100U);
  EXPECT_EQ(e.cpu_weight_for_pid(1), 1.0F);
}

TEST(EngineTenant, a_process_without_a_tenant_has_weight_one_and_no_class_adjustment) {
  Engine e(multi_tenant_options(), Topology::single_node(4));
  ASSERT_TRUE(e.upsert_tenant(tenant("a", 2, PriorityClass::background)).ok());
  ASSERT_TRUE(e.register_task(3, true, std::nullopt).ok());
  EXPECT_EQ(e.cpu_weight_for_pid(3), 1.0F);
  EXPECT_EQ(e.tenant_of(3), nullptr);
  const Decision d = e.schedule(3, 1);
  EXPECT_EQ(d.tenant, kNoTenant);
  EXPECT_EQ(d.tenant_weight, 100U);
  EXPECT_EQ(d.priority, 0);
}

// ---- properties ------------------------------------------------------------------------------

TEST(TenantProperty, average_gpu_proportional_weight_is_one) {
  std::mt19937 rng(2024);
  std::size_t samples = 0;
  for (int trial = 0; trial < 2'000; ++trial) {
    TenantRegistry r;
    const std::size_t n = 1 + rng() % 100;
    for (std::size_t i = 0; i < n; ++i) {
      const auto gpus = static_cast<std::uint32_t>(1 + rng() % (rng() % 2 == 0 ? 8U : 4096U));
      ASSERT_TRUE(r.upsert(tenant("t" + std::to_string(i), gpus)).ok());
    }
    // Some churn: replace and remove a few.
    for (int k = 0; k < 3 && n > 2; ++k) {
      const std::string id = "t" + std::to_string(rng() % n);
      if (rng() % 2 == 0) {
        r.remove(id);
      } else {
        ASSERT_TRUE(r.upsert(tenant(id, static_cast<std::uint32_t>(1 + rng() % 64))).ok());
      }
    }
    double sum = 0.0;
    std::uint64_t gpus = 0;
    for (std::uint16_t s : r.slots()) {
      const float w = r.weight(s);
      ASSERT_TRUE(std::isfinite(w));
      ASSERT_GT(w, 0.0F);
      sum += static_cast<double>(w);
      gpus += r.spec(s).gpus;
      // Proportional to the GPU count.
      const double expected = static_cast<double>(r.spec(s).gpus) /
                              static_cast<double>(r.total_gpus()) *
                              static_cast<double>(r.count());
      ASSERT_NEAR(static_cast<double>(w), expected, 1e-4 * std::max(1.0, expected));
      ++samples;
    }
    EXPECT_EQ(gpus, r.total_gpus());
    ASSERT_NEAR(sum / static_cast<double>(r.count()), 1.0, 1e-4) << "trial " << trial;
  }
  EXPECT_GT(samples, 50'000U);
}

TEST(TenantProperty, weights_stay_positive_with_zero_gpu_tenants_mixed_in) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 2'000; ++trial) {
    TenantRegistry r;
    const std::size_t n = 1 + rng() % 64;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t gpus = 0;
      if (rng() % 3 != 0) gpus = static_cast<std::uint32_t>(rng() % 4097);
      std::optional<float> explicit_w;
      if (rng() % 10 == 0) explicit_w = std::uniform_real_distribution<float>(0.01F, 100.0F)(rng);
      TenantSpec t = tenant("t" + std::to_string(i), gpus, PriorityClass::training, explicit_w);
      ASSERT_TRUE(r.upsert(t).ok());
    }
    double sum_auto = 0.0;
    std::size_t n_auto = 0;
    bool any_explicit = false;
    for (std::uint16_t s : r.slots()) {
      const float w = r.weight(s);
      ASSERT_TRUE(std::isfinite(w)) << "trial " << trial;
      ASSERT_GT(w, 0.0F) << "trial " << trial;
      ASSERT_GE(r.cgroup_weight(s), 1U);
      ASSERT_LE(r.cgroup_weight(s), 10'000U);
      if (r.spec(s).cpu_weight) {
        any_explicit = true;
      } else {
        sum_auto += static_cast<double>(w);
        ++n_auto;
      }
    }
    // Without explicit weights the average is still 1 when 0-GPU tenants are mixed in.
    if (!any_explicit) {
      ASSERT_NEAR(sum_auto / static_cast<double>(n_auto), 1.0, 1e-4) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace zernel::policy
