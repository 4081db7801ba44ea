// The userspace backend's cgroup layer: layout detection from mountinfo on fake trees, the
// tenant_weight -> cpu.shares / cpu.weight conversion, path mapping, and the subtree it writes.

#include <gtest/gtest.h>

#include "enforce/userspace/cgroup.hpp"
#include "userspace_test_util.hpp"

namespace zernel::enforce::userspace {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_file;

// This host's layout: cgroup v1 controllers, cgroup2 at /sys/fs/cgroup/unified without any.
constexpr const char* kHybrid =
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime shared:5 - cgroup2 cgroup2 rw\n";

TEST(UserspaceCgroup, detects_the_v1_cpu_hierarchy_when_cgroup2_has_no_cpu_controller) {
  TempDir t;
  write_file(t.path() / "sys/fs/cgroup/unified/cgroup.controllers", "\n");
  auto l = detect_cpu_cgroup(kHybrid, t.str());
  ASSERT_TRUE(l) << l.error().message();
  EXPECT_EQ(l->version, CgroupVersion::v1);
  EXPECT_EQ(l->mount_point, t.str() + "/sys/fs/cgroup/cpu");
  EXPECT_EQ(l->mount_root, "/");
}

TEST(UserspaceCgroup, prefers_cgroup2_with_the_cpu_controller) {
  TempDir t;
  write_file(t.path() / "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
  const std::string info =
      "31 22 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
      "29 22 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
  auto l = detect_cpu_cgroup(info, t.str());
  ASSERT_TRUE(l) << l.error().message();
  EXPECT_EQ(l->version, CgroupVersion::v2);
  EXPECT_EQ(l->mount_point, t.str() + "/sys/fs/cgroup");
}

TEST(UserspaceCgroup, does_not_take_cpuacct_or_cpuset_for_cpu) {
  TempDir t;
  const std::string info =
      "32 30 0:29 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n"
      "33 30 0:30 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
      "40 30 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
  write_file(t.path() / "sys/fs/cgroup/unified/cgroup.controllers", "memory pids\n");
  auto l = detect_cpu_cgroup(info, t.str());
  ASSERT_FALSE(l);
  EXPECT_EQ(l.error().code(), ENOENT);
  EXPECT_NE(l.error().message().find("no cpu cgroup"), std::string::npos);
}

TEST(UserspaceCgroup, unescapes_mount_points_and_keeps_a_container_mount_root) {
  const std::string info =
      "31 30 0:28 /kubepods/pod1 /sys/fs/cgroup/my\\040cpu rw - cgroup cgroup rw,cpuacct,cpu\n";
  auto l = detect_cpu_cgroup(info);
  ASSERT_TRUE(l) << l.error().message();
  EXPECT_EQ(l->mount_point, "/sys/fs/cgroup/my cpu");
  EXPECT_EQ(l->mount_root, "/kubepods/pod1");
  EXPECT_EQ(cgroup_dir(*l, "/kubepods/pod1"), "/sys/fs/cgroup/my cpu");
  EXPECT_EQ(cgroup_dir(*l, "/kubepods/pod1/a/b"), "/sys/fs/cgroup/my cpu/a/b");
  EXPECT_EQ(cgroup_dir(*l, "/kubepods/pod10"), std::nullopt);  // whole components only
  EXPECT_EQ(cgroup_dir(*l, "/system.slice"), std::nullopt);
  EXPECT_EQ(cgroup_dir(*l, "relative"), std::nullopt);
}

TEST(UserspaceCgroup, skips_malformed_mountinfo_lines) {
  TempDir t;
  const std::string info = std::string("garbage\n\n1 2 3\n") + kHybrid;
  write_file(t.path() / "sys/fs/cgroup/unified/cgroup.controllers", "");
  auto l = detect_cpu_cgroup(info, t.str());
  ASSERT_TRUE(l) << l.error().message();
  EXPECT_EQ(l->version, CgroupVersion::v1);
}

TEST(UserspaceCgroup, detection_from_a_missing_file_is_an_error_naming_it) {
  auto l = detect_cpu_cgroup_from("/nonexistent/mountinfo");
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().message().find("/nonexistent/mountinfo"), std::string::npos);
}

TEST(UserspaceCgroup, converts_tenant_weight_to_cpu_shares_times_1024_over_100) {
  EXPECT_EQ(cgroup_cpu_value(CgroupVersion::v1, 100), 1024U);
  EXPECT_EQ(cgroup_cpu_value(CgroupVersion::v1, 150), 1536U);
  EXPECT_EQ(cgroup_cpu_value(CgroupVersion::v1, 50), 512U);
  EXPECT_EQ(cgroup_cpu_value(CgroupVersion::v1, 25), 256U);
  EXPECT_EQ(cgroup_cpu_value(CgroupVersion::v1, 0), 2U);             // kernel minimum
  EXPECT_EQ(cgroup_cpu_value(CgroupVersion::v1, 1000000), 262144U);  // kernel maximum
  EXPECT_STREQ(cgroup_cpu_file(CgroupVersion::v1), "cpu.shares");
}

TEST(UserspaceCgroup, passes_tenant_weight_to_cpu_weight_clamped_to_1_10000) {
  EXPECT_EQ(cgroup_cpu_value(CgroupVersion::v2, 100), 100U);
  EXPECT_EQ(cgroup_cpu_value(CgroupVersion::v2, 300), 300U);
  EXPECT_EQ(cgroup_cpu_value(CgroupVersion::v2, 0), 1U);
  EXPECT_EQ(cgroup_cpu_value(CgroupVersion::v2, 20000), 10000U);
  EXPECT_STREQ(cgroup_cpu_file(CgroupVersion::v2), "cpu.weight");
}

TEST(UserspaceCgroup, reads_the_cpu_path_of_a_process_for_each_version) {
  const std::string v1 = "12:pids:/a\n4:cpu,cpuacct:/user.slice/x\n1:name=systemd:/b\n0::/c\n";
  EXPECT_EQ(cpu_cgroup_path(CgroupVersion::v1, v1), "/user.slice/x");
  EXPECT_EQ(cpu_cgroup_path(CgroupVersion::v2, v1), "/c");
  EXPECT_EQ(cpu_cgroup_path(CgroupVersion::v1, "2:cpuacct:/a\n3:cpuset:/b\n"), std::nullopt);
}

TEST(UserspaceCgroup, v2_tree_enables_cpu_and_writes_cpu_weight) {
  TempDir t;
  write_file(t.path() / "cgroup.subtree_control", "memory\n");
  CgroupTree tree(CpuCgroupLayout{CgroupVersion::v2, t.str(), "/"}, "zernel");
  ASSERT_TRUE(tree.ensure_tenant(3));
  ASSERT_TRUE(tree.set_tenant_weight(3, 250));
  EXPECT_EQ(read_file(t.path() / "cgroup.subtree_control"), "+cpu");
  EXPECT_EQ(read_file(t.path() / "zernel/cgroup.subtree_control"), "+cpu");
  EXPECT_EQ(read_file(t.path() / "zernel/tenant-3/cpu.weight"), "250\n");
  EXPECT_EQ(tree.tenant_path(3), "/zernel/tenant-3");
  EXPECT_EQ(tree.tenant_slots(), std::vector<std::uint16_t>{3});
}

TEST(UserspaceCgroup, v2_tree_leaves_cpu_alone_when_already_enabled) {
  TempDir t;
  write_file(t.path() / "cgroup.subtree_control", "cpu memory\n");
  CgroupTree tree(CpuCgroupLayout{CgroupVersion::v2, t.str(), "/"}, "zernel");
  ASSERT_TRUE(tree.ensure_subtree());
  EXPECT_EQ(read_file(t.path() / "cgroup.subtree_control"), "cpu memory\n");
}

TEST(UserspaceCgroup, v1_tree_writes_cpu_shares_and_moves_by_cgroup_procs) {
  TempDir t;
  CgroupTree tree(CpuCgroupLayout{CgroupVersion::v1, t.str(), "/"}, "zernel");
  ASSERT_TRUE(tree.ensure_tenant(0));
  ASSERT_TRUE(tree.set_tenant_weight(0, 300));
  ASSERT_TRUE(CgroupTree::move(tree.tenant_dir(0), 4242));
  EXPECT_EQ(read_file(t.path() / "zernel/tenant-0/cpu.shares"), "3072\n");
  EXPECT_EQ(read_file(t.path() / "zernel/tenant-0/cgroup.procs"), "4242\n");
  EXPECT_FALSE(std::filesystem::exists(t.path() / "cgroup.subtree_control"));  // v1: none
  auto procs = read_cgroup_procs(tree.tenant_dir(0));
  ASSERT_TRUE(procs);
  EXPECT_EQ(*procs, std::vector<std::uint32_t>{4242});
}

TEST(UserspaceCgroup, a_write_to_a_missing_directory_is_an_error_with_errno) {
  auto r = write_cgroup_file("/nonexistent-zernel/cpu.shares", "1\n");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), ENOENT);
}

}  // namespace
}  // namespace zernel::enforce::userspace
