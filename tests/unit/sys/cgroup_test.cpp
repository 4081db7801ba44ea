// The cgroup layer (sys/cgroup.hpp): layout detection from mountinfo on fake trees, the
// tenant_weight -> cpu.shares / cpu.weight conversion, path mapping, reading and writing a group's
// weight.

#include <gtest/gtest.h>

#include "enforce/userspace_test_util.hpp"
#include "policy/task_state.hpp"
#include "support/temp_tree.hpp"
#include "sys/cgroup.hpp"

namespace zernel::sys {
namespace {

using enforce::userspace::testing::read_file;
using enforce::userspace::testing::TempDir;
using enforce::userspace::testing::write_file;

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

TEST(UserspaceCgroup, reads_and_writes_a_groups_weight_and_its_identity) {
  test_support::TempTree t("zernel-cg");
  t.write("job/cpu.weight", "100\n");
  t.write("v1job/cpu.shares", "1024\n");
  t.write("odd/cpu.weight", "max\n");
  const std::string job = t.path("job").string();
  EXPECT_EQ(read_cgroup_cpu_value(CgroupVersion::v2, job), 100U);
  EXPECT_EQ(read_cgroup_cpu_value(CgroupVersion::v1, t.path("v1job").string()), 1024U);
  EXPECT_EQ(read_cgroup_cpu_value(CgroupVersion::v2, t.path("odd").string()), std::nullopt);
  EXPECT_EQ(read_cgroup_cpu_value(CgroupVersion::v2, t.path("none").string()), std::nullopt);
  ASSERT_TRUE(write_cgroup_cpu_value(CgroupVersion::v2, job, 250));
  EXPECT_EQ(read_file(t.path("job/cpu.weight")), "250\n");
  EXPECT_TRUE(cgroup_inode(job).has_value());
  EXPECT_NE(cgroup_inode(job), cgroup_inode(t.path("v1job").string()));
  EXPECT_EQ(cgroup_inode(t.path("none").string()), std::nullopt);
  EXPECT_EQ(cgroup_inode(t.path("job/cpu.weight").string()), std::nullopt);  // not a directory
}

TEST(UserspaceCgroup, lists_the_processes_of_a_group_and_every_group_below_it) {
  test_support::TempTree t("zernel-cg");
  t.write("job/cgroup.procs", "10\n11\n");
  t.write("job/a/cgroup.procs", "12\n");
  t.write("job/a/b/cgroup.procs", "13\n");
  t.write("job/c/cgroup.procs", "");
  auto procs = read_subtree_procs(t.path("job").string());
  ASSERT_TRUE(procs);
  auto pids = procs->pids;
  std::sort(pids.begin(), pids.end());
  EXPECT_EQ(pids, (std::vector<std::uint32_t>{10, 11, 12, 13}));
  EXPECT_TRUE(procs->complete);
  auto capped = read_subtree_procs(t.path("job").string(), 2);
  ASSERT_TRUE(capped);
  EXPECT_FALSE(capped->complete);
  EXPECT_FALSE(read_subtree_procs(t.path("missing").string()));
}

TEST(UserspaceCgroup, a_path_outside_the_cgroup_namespace_has_no_directory) {
  const CpuCgroupLayout l{CgroupVersion::v2, "/sys/fs/cgroup", "/"};
  EXPECT_EQ(cgroup_dir(l, "/a/b"), "/sys/fs/cgroup/a/b");
  EXPECT_EQ(cgroup_dir(l, "/"), "/sys/fs/cgroup");
  EXPECT_EQ(cgroup_dir(l, "/../../kubepods/pod-a"), std::nullopt);
  EXPECT_EQ(cgroup_dir(l, "/a/../b"), std::nullopt);
  EXPECT_EQ(cgroup_dir(l, "/a/./b"), std::nullopt);
  EXPECT_EQ(cgroup_dir(l, "/a/..b"), "/sys/fs/cgroup/a/..b");  // a name, not a parent
  EXPECT_EQ(cgroup_dir(l, "a/b"), std::nullopt);
}

TEST(UserspaceCgroup, a_write_to_a_missing_directory_is_an_error_with_errno) {
  auto r = write_cgroup_file("/nonexistent-zernel/cpu.shares", "1\n");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), ENOENT);
}

}  // namespace
}  // namespace zernel::sys
