// Which cgroups may carry a tenant's weight (enforce/userspace/tenant_share.hpp), on a fake
// cgroup2 tree.

#include <gtest/gtest.h>

#include "enforce/userspace/tenant_share.hpp"
#include "policy/task_state.hpp"
#include "support/temp_tree.hpp"
#include "sys/cgroup.hpp"

namespace zernel::enforce::userspace {
namespace {

// A fake v2 hierarchy: /job1 holds tenant 0's pids 100 and 101 (101 untracked, a child of 100),
// /shared holds tenant 0's 200 and pid 300 of no tenant, /nocpu has no cpu.weight (its parent did
// not enable the controller), /nested holds 400 of tenant 0 and, in a child group, 500 of tenant 1;
// /self holds the daemon (pid 999).
class TenantShareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    t_.write("cg/cpu.weight", "100\n");
    t_.write("cg/job1/cpu.weight", "100\n");
    t_.write("cg/job1/cgroup.procs", "100\n101\n");
    t_.write("cg/shared/cpu.weight", "100\n");
    t_.write("cg/shared/cgroup.procs", "200\n300\n");
    t_.write("cg/nocpu/cgroup.procs", "600\n");
    t_.write("cg/nested/cpu.weight", "100\n");
    t_.write("cg/nested/cgroup.procs", "400\n");
    t_.write("cg/nested/inner/cgroup.procs", "500\n");
    t_.write("cg/self/cpu.weight", "100\n");
    t_.write("cg/self/cgroup.procs", "999\n");
    layout_ = sys::CpuCgroupLayout{sys::CgroupVersion::v2, t_.path("cg").string(), "/"};
  }
  std::optional<std::string> why(std::string_view path, std::uint16_t tenant) {
    const TenantOfPid tenant_of = [](std::uint32_t pid) -> std::optional<std::uint16_t> {
      switch (pid) {
        case 100:
        case 101:
        case 200:
        case 400:
        case 600:
          return 0;
        case 500:
          return 1;
        case 300:
          return policy::kNoTenant;
        default:
          return std::nullopt;
      }
    };
    return why_group_cannot_carry(layout_, path, tenant, tenant_of, 999);
  }
  test_support::TempTree t_{"zernel-share"};
  sys::CpuCgroupLayout layout_;
};

TEST_F(TenantShareTest, a_group_holding_only_the_tenants_processes_carries_its_weight) {
  EXPECT_EQ(why("/job1", 0), std::nullopt);
}

TEST_F(TenantShareTest, the_root_group_never_carries_a_tenant) {
  auto w = why("/", 0);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("root cgroup"), std::string::npos) << *w;
  // A container's view: the mount shows its own group as the root.
  layout_.mount_root = "/job1";
  layout_.mount_point = t_.path("cg/job1").string();
  EXPECT_TRUE(why("/job1", 0));
}

TEST_F(TenantShareTest, a_group_shared_with_other_work_goes_by_nice) {
  auto w = why("/shared", 0);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("shared with pid 300 (no tenant)"), std::string::npos) << *w;
}

TEST_F(TenantShareTest, a_child_group_of_another_tenant_makes_the_group_shared) {
  auto w = why("/nested", 0);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("shared with pid 500 (another tenant)"), std::string::npos) << *w;
}

TEST_F(TenantShareTest, a_group_without_the_cpu_controller_goes_by_nice) {
  auto w = why("/nocpu", 0);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("no cpu.weight"), std::string::npos) << *w;
}

TEST_F(TenantShareTest, the_daemons_own_group_is_never_touched) {
  auto w = why("/self", 0);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("zernel-scheduler itself"), std::string::npos) << *w;
}

TEST_F(TenantShareTest, a_group_outside_the_mount_or_missing_goes_by_nice) {
  layout_.mount_root = "/kubepods";
  EXPECT_TRUE(why("/system.slice/x", 0));
  layout_.mount_root = "/";
  EXPECT_TRUE(why("/gone", 0));
}

TEST(TenantShare, the_priority_shift_is_one_nice_level_per_factor_1_25) {
  EXPECT_EQ(tenant_priority_shift(100), 0);
  EXPECT_EQ(tenant_priority_shift(305), 5);  // training class alone: 1.25^5
  EXPECT_EQ(tenant_priority_shift(33), -5);  // background: 1.25^-5
  EXPECT_EQ(tenant_priority_shift(150), 2);  // 6 of 8 GPUs: log1.25(1.5) = 1.8
  EXPECT_EQ(tenant_priority_shift(50), -3);  // log1.25(0.5) = -3.1
  EXPECT_EQ(tenant_priority_shift(0), -20);  // clamped
  EXPECT_EQ(tenant_priority_shift(1000000), 20);
}

}  // namespace
}  // namespace zernel::enforce::userspace
