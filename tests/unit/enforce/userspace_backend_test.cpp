// The userspace backend on real child processes (nice and affinity are real syscalls) with a
// fake sysfs (NUMA nodes) and a fake cgroup tree in a temp dir; one test on the host's real cpu
// cgroup hierarchy when it is writable.

#include "enforce/userspace/userspace_backend.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <thread>

#include "collect/procfs.hpp"
#include "enforce/backend.hpp"
#include "userspace_test_util.hpp"

namespace zernel::enforce::userspace {
namespace {

using testing::Child;
using testing::cpus_of;
using testing::nice_of;
using testing::privileged;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

class UserspaceBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!privileged()) GTEST_SKIP() << "needs root or CAP_SYS_NICE (lowers nice values)";
  }
  // With cgroups: a fake hierarchy of the host's own version (the children's real
  // /proc/PID/cgroup is what the backend reads their original group from).
  UserspaceOptions options(bool cgroups = false) {
    UserspaceOptions o;
    o.sys_root = t_.str("sys");
    write_file(t_.path() / "sys/devices/system/node/node0/cpulist", "0-1\n");
    o.use_cgroups = cgroups;
    if (cgroups) {
      auto real = detect_cpu_cgroup_from("/proc/self/mountinfo");
      o.cgroup = CpuCgroupLayout{real ? real->version : CgroupVersion::v1, t_.str("cg"), "/"};
    }
    std::filesystem::create_directories(t_.path() / "cg");
    o.journal_path = t_.str("run/userspace.journal");
    return o;
  }
  std::unique_ptr<UserspaceBackend> make(const UserspaceOptions& o) {
    auto b = UserspaceBackend::create(o);
    EXPECT_TRUE(b) << b.error().message();
    return b ? std::move(b.value()) : nullptr;
  }
  static policy::Decision decision(std::uint32_t pid, std::int32_t priority) {
    policy::Decision d;
    d.pid = pid;
    d.priority = priority;
    d.weight = policy::weight_for_priority(priority);
    return d;
  }
  TempDir t_;
};

TEST_F(UserspaceBackendTest, sets_nice_from_priority_on_every_thread_and_restores_on_forget) {
  Child c(3);
  ASSERT_EQ(c.tids().size(), 3U);
  auto b = make(options());
  ASSERT_TRUE(b);
  const policy::Decision d = decision(c.pid(), 10);  // DataLoading: nice -10
  ASSERT_TRUE(b->apply({&d, 1}));
  for (const std::uint32_t tid : c.tids()) EXPECT_EQ(nice_of(tid), -10) << tid;
  EXPECT_EQ(b->stats().nice_writes, 3U);
  b->forget(c.pid());
  for (const std::uint32_t tid : c.tids()) EXPECT_EQ(nice_of(tid), 0) << tid;
}

TEST_F(UserspaceBackendTest, writes_only_what_changed) {
  Child c(2);
  auto b = make(options());
  ASSERT_TRUE(b);
  policy::Decision d = decision(c.pid(), 5);  // nice -5
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(b->stats().nice_writes, 2U);
  const auto journal_writes = b->stats().journal_writes;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(b->stats().nice_writes, 2U);
  EXPECT_EQ(b->stats().affinity_writes, 0U);             // one node: the mask is the original
  EXPECT_EQ(b->stats().journal_writes, journal_writes);  // nothing new to record
  d = decision(c.pid(), 0);  // back to the original nice 0: written back
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(b->stats().nice_writes, 4U);
  for (const std::uint32_t tid : c.tids()) EXPECT_EQ(nice_of(tid), 0);
}

// A GPU waiter (GpuCompute, priority -5 -> nice +5) is not pushed below its original nice: this
// backend could not raise it again when the wait ends, before the next tick.
TEST_F(UserspaceBackendTest, a_negative_priority_never_raises_nice_above_the_original) {
  Child c(2);
  ASSERT_EQ(::setpriority(PRIO_PROCESS, c.pid(), 2), 0);
  for (const std::uint32_t tid : c.tids()) {
    if (tid != c.pid()) {
      ASSERT_EQ(::setpriority(PRIO_PROCESS, tid, 2), 0);
    }
  }
  auto b = make(options());
  ASSERT_TRUE(b);
  policy::Decision d = decision(c.pid(), -5);
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(b->stats().nice_writes, 0U);
  for (const std::uint32_t tid : c.tids()) EXPECT_EQ(nice_of(tid), 2) << tid;
  d = decision(c.pid(), -1);  // nice 1 is stronger than the original 2: written
  ASSERT_TRUE(b->apply({&d, 1}));
  for (const std::uint32_t tid : c.tids()) EXPECT_EQ(nice_of(tid), 1) << tid;
  d = decision(c.pid(), -5);  // back to the original, not to 5
  ASSERT_TRUE(b->apply({&d, 1}));
  for (const std::uint32_t tid : c.tids()) EXPECT_EQ(nice_of(tid), 2) << tid;
}

TEST_F(UserspaceBackendTest, a_thread_started_between_ticks_gets_the_nice_on_the_next_apply) {
  Child c(1);
  ASSERT_EQ(::setpriority(PRIO_PROCESS, c.pid(), 2), 0);  // the process's own nice
  auto b = make(options());
  ASSERT_TRUE(b);
  const policy::Decision d = decision(c.pid(), 10);
  ASSERT_TRUE(b->apply({&d, 1}));
  c.add_thread();  // inherits -10 from the main thread
  ASSERT_EQ(c.tids().size(), 2U);
  ASSERT_TRUE(b->apply({&d, 1}));
  for (const std::uint32_t tid : c.tids()) EXPECT_EQ(nice_of(tid), -10);
  ASSERT_TRUE(b->shutdown());
  // The new thread's original is the process's original (2), not the inherited -10.
  for (const std::uint32_t tid : c.tids()) EXPECT_EQ(nice_of(tid), 2) << tid;
}

TEST_F(UserspaceBackendTest, does_not_touch_processes_it_is_not_given) {
  Child mine(1);
  Child other(1);
  ASSERT_EQ(::setpriority(PRIO_PROCESS, other.pid(), 3), 0);
  auto b = make(options());
  ASSERT_TRUE(b);
  const policy::Decision d = decision(mine.pid(), 10);
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(nice_of(mine.pid()), -10);
  EXPECT_EQ(nice_of(other.pid()), 3);
}

TEST_F(UserspaceBackendTest, a_process_that_exited_is_not_an_error) {
  std::uint32_t dead = 0;
  {
    Child c(1);
    dead = c.pid();
  }
  auto b = make(options());
  ASSERT_TRUE(b);
  const policy::Decision d = decision(dead, 10);
  EXPECT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(b->stats().write_errors, 0U);
  b->forget(dead);
  EXPECT_TRUE(b->shutdown());
}

TEST_F(UserspaceBackendTest, pins_gpu_tasks_to_the_preferred_cpus_node_and_restores) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 CPUs";
  UserspaceOptions o = options();
  // A fake two-node machine: CPU 0 on node 0, CPU 1 on node 1.
  std::filesystem::remove_all(t_.path() / "sys");
  write_file(t_.path() / "sys/devices/system/node/node0/cpulist", "0\n");
  write_file(t_.path() / "sys/devices/system/node/node1/cpulist", "1\n");
  Child c(2);
  const auto before = cpus_of(c.pid());
  ASSERT_GE(before.size(), 2U);
  auto b = make(o);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->node_cpus_of(1), std::vector<std::uint32_t>{1});
  policy::Decision d = decision(c.pid(), -5);
  d.preferred_cpu = 1;  // without a GPU: not pinned
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(b->stats().affinity_writes, 0U);
  EXPECT_EQ(cpus_of(c.pid()), before);
  d.gpu_id = 0;
  ASSERT_TRUE(b->apply({&d, 1}));
  for (const std::uint32_t tid : c.tids()) EXPECT_EQ(cpus_of(tid), std::vector<std::uint32_t>{1});
  EXPECT_EQ(b->stats().affinity_writes, 2U);
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(b->stats().affinity_writes, 2U);
  ASSERT_TRUE(b->shutdown());
  for (const std::uint32_t tid : c.tids()) EXPECT_EQ(cpus_of(tid), before);
}

TEST_F(UserspaceBackendTest, a_node_outside_an_operators_pin_leaves_the_pin_alone) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 CPUs";
  UserspaceOptions o = options();
  std::filesystem::remove_all(t_.path() / "sys");
  write_file(t_.path() / "sys/devices/system/node/node0/cpulist", "0\n");
  write_file(t_.path() / "sys/devices/system/node/node1/cpulist", "1\n");
  Child c(1);
  cpu_set_t only0;
  CPU_ZERO(&only0);
  CPU_SET(0, &only0);
  ASSERT_EQ(::sched_setaffinity(static_cast<pid_t>(c.pid()), sizeof only0, &only0), 0);
  auto b = make(o);
  ASSERT_TRUE(b);
  policy::Decision d = decision(c.pid(), 0);
  d.preferred_cpu = 1;
  d.gpu_id = 0;
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(cpus_of(c.pid()), std::vector<std::uint32_t>{0});
  EXPECT_EQ(b->stats().affinity_writes, 0U);
}

TEST_F(UserspaceBackendTest,
       journals_originals_before_changing_and_removes_the_journal_at_shutdown) {
  Child c(2);
  ASSERT_EQ(::setpriority(PRIO_PROCESS, c.pid(), 4), 0);
  UserspaceOptions o = options();
  auto b = make(o);
  ASSERT_TRUE(b);
  const policy::Decision d = decision(c.pid(), 10);
  ASSERT_TRUE(b->apply({&d, 1}));
  auto j = read_journal(o.journal_path);
  ASSERT_TRUE(j && j->has_value());
  ASSERT_EQ((*j)->processes.size(), 1U);
  const ProcessOriginal& p = (*j)->processes[0];
  EXPECT_EQ(p.pid, c.pid());
  ASSERT_EQ(p.threads.size(), 2U);
  EXPECT_EQ(p.threads[0].tid, c.pid());
  EXPECT_EQ(p.threads[0].nice, 4);
  EXPECT_EQ(p.threads[1].nice, 0);  // nice is per thread: the other thread kept its 0
  EXPECT_EQ((*j)->owner_pid, static_cast<std::uint32_t>(::getpid()));
  ASSERT_TRUE(b->shutdown());
  const auto tids = c.tids();
  EXPECT_EQ(nice_of(tids[0]), 4);
  EXPECT_EQ(nice_of(tids[1]), 0);
  EXPECT_FALSE(std::filesystem::exists(o.journal_path));
  EXPECT_TRUE(b->shutdown());  // idempotent
}

TEST_F(UserspaceBackendTest, makes_no_change_whose_original_cannot_be_journaled) {
  Child c(1);
  UserspaceOptions o = options();
  o.journal_path = t_.str("file-not-dir/journal");
  write_file(t_.path() / "file-not-dir", "x");  // a file where the directory should be
  auto b = make(o);
  ASSERT_TRUE(b);
  const policy::Decision d = decision(c.pid(), 10);
  ASSERT_TRUE(b->apply({&d, 1}));  // not fatal for the tick
  EXPECT_EQ(nice_of(c.pid()), 0);
  EXPECT_EQ(b->stats().nice_writes, 0U);
  EXPECT_GE(b->stats().write_errors, 1U);
}

TEST_F(UserspaceBackendTest, moves_tenant_processes_into_a_group_with_cpu_shares_and_back) {
  Child a(2);
  Child c(1);
  UserspaceOptions o = options(true);
  const bool v2 = o.cgroup->version == CgroupVersion::v2;
  const std::string file = v2 ? "cg/zernel/tenant-2/cpu.weight" : "cg/zernel/tenant-2/cpu.shares";
  // The child's real group, mirrored in the fake tree so that the move back has a target.
  auto orig =
      cpu_cgroup_path(o.cgroup->version, read_file("/proc/" + std::to_string(a.pid()) + "/cgroup"));
  if (!orig) GTEST_SKIP() << "no cpu cgroup line of this version in /proc/PID/cgroup";
  const auto orig_dir = cgroup_dir(*o.cgroup, *orig);
  ASSERT_TRUE(orig_dir);
  std::filesystem::create_directories(*orig_dir);
  auto b = make(o);
  ASSERT_TRUE(b);
  policy::Decision da = decision(a.pid(), 5);
  da.tenant = 2;
  da.tenant_weight = 150;
  const policy::Decision dc = decision(c.pid(), 0);  // no tenant: stays where it is
  std::vector<policy::Decision> ds{da, dc};
  ASSERT_TRUE(b->apply(ds));
  EXPECT_EQ(read_file(t_.path() / file), v2 ? "150\n" : "1536\n");
  EXPECT_EQ(read_file(t_.path() / "cg/zernel/tenant-2/cgroup.procs"),
            std::to_string(a.pid()) + "\n");
  EXPECT_EQ(b->stats().cgroup_moves, 1U);
  EXPECT_EQ(b->stats().weight_writes, 1U);
  ASSERT_TRUE(b->apply(ds));
  EXPECT_EQ(b->stats().cgroup_moves, 1U);  // unchanged: nothing written
  EXPECT_EQ(b->stats().weight_writes, 1U);
  ds[0].tenant_weight = 50;  // the tenant's weight changed (another tenant joined)
  ASSERT_TRUE(b->apply(ds));
  EXPECT_EQ(read_file(t_.path() / file), v2 ? "50\n" : "512\n");
  EXPECT_EQ(b->stats().weight_writes, 2U);
  // The journal holds the original cgroup (this host's cpu path of the child).
  auto j = read_journal(o.journal_path);
  ASSERT_TRUE(j && j->has_value());
  ASSERT_TRUE(j.value()->cgroup.has_value());
  bool found = false;
  for (const auto& p : (*j)->processes) {
    if (p.pid == a.pid()) found = p.cgroup.has_value();
  }
  EXPECT_TRUE(found);
  // Unassigned: back to the original group.
  ds[0].tenant = policy::kNoTenant;
  ASSERT_TRUE(b->apply(ds));
  EXPECT_EQ(b->stats().cgroup_moves, 2U);
  EXPECT_EQ(read_file(*orig_dir + "/cgroup.procs"), std::to_string(a.pid()) + "\n");
  EXPECT_EQ(b->stats().write_errors, 0U);
}

TEST_F(UserspaceBackendTest, the_real_cpu_cgroup_holds_the_tenant_and_shutdown_removes_it) {
  auto layout = detect_cpu_cgroup_from("/proc/self/mountinfo");
  if (!layout) GTEST_SKIP() << layout.error().message();
  UserspaceOptions o = options();
  o.use_cgroups = true;
  o.cgroup = *layout;
  o.cgroup_name = "zernel-unit-" + std::to_string(::getpid());
  Child c(2);
  std::string before = read_file("/proc/" + std::to_string(c.pid()) + "/cgroup");
  auto b = UserspaceBackend::create(o);
  ASSERT_TRUE(b) << b.error().message();
  policy::Decision d = decision(c.pid(), 5);
  d.tenant = 1;
  d.tenant_weight = 300;
  ASSERT_TRUE((*b)->apply({&d, 1}));
  if ((*b)->stats().cgroup_moves == 0) {
    (void)(*b)->shutdown();
    GTEST_SKIP() << "the cpu cgroup hierarchy is not writable here";
  }
  const std::string group = "/" + o.cgroup_name + "/tenant-1";
  EXPECT_NE(read_file("/proc/" + std::to_string(c.pid()) + "/cgroup").find(group),
            std::string::npos);
  const std::string file = layout->version == CgroupVersion::v2 ? "cpu.weight" : "cpu.shares";
  EXPECT_EQ(read_file((*b)->cgroups()->tenant_dir(1) + "/" + file),
            layout->version == CgroupVersion::v2 ? "300\n" : "3072\n");
  ASSERT_TRUE((*b)->shutdown()) << "restore";
  EXPECT_EQ(read_file("/proc/" + std::to_string(c.pid()) + "/cgroup"), before);
  EXPECT_FALSE(std::filesystem::exists(layout->mount_point + "/" + o.cgroup_name));
}

TEST_F(UserspaceBackendTest, a_process_whose_original_group_was_removed_goes_to_the_root_group) {
  auto layout = detect_cpu_cgroup_from("/proc/self/mountinfo");
  if (!layout) GTEST_SKIP() << layout.error().message();
  const std::string home = layout->mount_point + "/zernel-unit-home-" + std::to_string(::getpid());
  if (::mkdir(home.c_str(), 0755) != 0) GTEST_SKIP() << "cannot create " << home;
  Child c(1);
  const std::string pid = std::to_string(c.pid());
  ASSERT_TRUE(write_cgroup_file(home + "/cgroup.procs", pid + "\n"));
  UserspaceOptions o = options();
  o.use_cgroups = true;
  o.cgroup = *layout;
  o.cgroup_name = "zernel-unit-" + std::to_string(::getpid());
  auto b = make(o);
  ASSERT_TRUE(b);
  policy::Decision d = decision(c.pid(), 0);
  d.tenant = 0;
  ASSERT_TRUE(b->apply({&d, 1}));
  ASSERT_EQ(b->stats().cgroup_moves, 1U);
  EXPECT_EQ(::rmdir(home.c_str()), 0);  // empty now: the process is in the tenant group
  d.tenant = policy::kNoTenant;
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(b->stats().write_errors, 0U);
  EXPECT_EQ(cpu_cgroup_path(layout->version, read_file("/proc/" + pid + "/cgroup")), "/");
  ASSERT_TRUE(b->shutdown());
}

TEST(UserspaceBackend, refuses_to_start_without_cap_sys_nice_fail) {
  TempDir t;
  write_file(t.path() / "proc/self/status", "Name:\tx\nCapEff:\t0000000000000000\n");
  UserspaceOptions o;
  o.proc_root = t.str("proc");
  o.journal_path = t.str("journal");
  auto b = UserspaceBackend::create(o);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code(), EPERM);
  EXPECT_NE(b.error().message().find("CAP_SYS_NICE"), std::string::npos) << b.error().message();
}

TEST(UserspaceBackend, make_backend_builds_it_by_name) {
  if (!privileged()) GTEST_SKIP() << "needs root or CAP_SYS_NICE";
  TempDir t;
  ::setenv(kUserspaceJournalEnv, t.str("journal").c_str(), 1);
  ::setenv(kUserspaceCgroupEnv, ("zernel-unit-mk-" + std::to_string(::getpid())).c_str(), 1);
  auto b = make_backend("userspace");
  ::unsetenv(kUserspaceJournalEnv);
  ::unsetenv(kUserspaceCgroupEnv);
  ASSERT_TRUE(b) << b.error().message();
  EXPECT_EQ((*b)->name(), "userspace");
  EXPECT_TRUE((*b)->shutdown());
}

}  // namespace
}  // namespace zernel::enforce::userspace
