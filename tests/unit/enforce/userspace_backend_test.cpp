// The userspace backend on real child processes (nice and affinity are real syscalls) with a
// fake sysfs (NUMA nodes) and fake cgroup trees in a temp dir; the tenant-weight tests that need a
// process in a group of its own use the host's real cpu cgroup hierarchy when it is writable.

#include "enforce/userspace/userspace_backend.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <thread>

#include "enforce/backend.hpp"
#include "sys/procfs.hpp"
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
      auto real = sys::detect_cpu_cgroup_from("/proc/self/mountinfo");
      o.cgroup =
          sys::CpuCgroupLayout{real ? real->version : sys::CgroupVersion::v1, t_.str("cg"), "/"};
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

// Threads born after the last tick inherit what the backend set at clone (nice -10 here, and the
// node's CPUs); at shutdown they go back to the process's originals like the threads it saw.
TEST_F(UserspaceBackendTest, shutdown_restores_threads_born_after_the_last_tick) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 CPUs";
  UserspaceOptions o = options();
  std::filesystem::remove_all(t_.path() / "sys");
  write_file(t_.path() / "sys/devices/system/node/node0/cpulist", "0\n");
  write_file(t_.path() / "sys/devices/system/node/node1/cpulist", "1\n");
  Child c(1);
  const auto before = cpus_of(c.pid());
  ASSERT_GE(before.size(), 2U);
  auto b = make(o);
  ASSERT_TRUE(b);
  policy::Decision d = decision(c.pid(), 10);
  d.gpu_id = 0;
  d.preferred_cpu = 1;
  ASSERT_TRUE(b->apply({&d, 1}));
  ASSERT_EQ(nice_of(c.pid()), -10);
  c.add_thread();
  c.add_thread();
  ASSERT_EQ(c.tids().size(), 3U);
  for (const std::uint32_t tid : c.tids()) {
    ASSERT_EQ(nice_of(tid), -10);
    ASSERT_EQ(cpus_of(tid), std::vector<std::uint32_t>{1});
  }
  ASSERT_TRUE(b->shutdown());
  for (const std::uint32_t tid : c.tids()) {
    EXPECT_EQ(nice_of(tid), 0) << tid;
    EXPECT_EQ(cpus_of(tid), before) << tid;
  }
  EXPECT_EQ(b->stats().unlisted_restored, 2U);
}

// The same for forget(): the daemon stops tracking a process that still runs.
TEST_F(UserspaceBackendTest, forget_restores_threads_born_after_the_last_tick) {
  Child c(1);
  auto b = make(options());
  ASSERT_TRUE(b);
  const policy::Decision d = decision(c.pid(), 10);
  ASSERT_TRUE(b->apply({&d, 1}));
  c.add_thread();
  const std::uint32_t mine = c.tids().back();
  c.add_thread();
  const std::uint32_t own = c.tids().back();
  ASSERT_EQ(::setpriority(PRIO_PROCESS, own, 4), 0);  // set by its owner, not by the backend
  b->forget(c.pid());
  EXPECT_EQ(nice_of(c.pid()), 0);
  EXPECT_EQ(nice_of(mine), 0);
  EXPECT_EQ(nice_of(own), 4);
}

// The journal lists, per process, the originals a thread born later is restored to.
TEST_F(UserspaceBackendTest, the_journal_holds_each_processs_originals_for_threads_born_later) {
  Child c(1);
  ASSERT_EQ(::setpriority(PRIO_PROCESS, c.pid(), 3), 0);
  UserspaceOptions o = options();
  auto b = make(o);
  ASSERT_TRUE(b);
  const policy::Decision d = decision(c.pid(), 10);
  ASSERT_TRUE(b->apply({&d, 1}));
  auto j = read_journal(o.journal_path);
  ASSERT_TRUE(j && j->has_value());
  ASSERT_EQ((*j)->processes.size(), 1U);
  EXPECT_EQ((*j)->processes[0].pid, c.pid());
  EXPECT_EQ((*j)->processes[0].nice, 3);
  EXPECT_EQ((*j)->processes[0].cpus, cpus_of(c.pid()));
  EXPECT_TRUE((*j)->processes[0].applied_cpus.empty());  // one node: no affinity given
}

// A tenant process in the root group (where every process of this host's cpu hierarchy runs) or
// with no cpu hierarchy: its share goes through nice, shifted by the tenant weight (150: +2
// levels), and no cgroup file is written or any process moved.
TEST_F(UserspaceBackendTest, a_tenant_in_the_root_group_gets_its_share_as_a_nice_shift) {
  Child c(2);
  UserspaceOptions o = options();
  o.use_cgroups = true;
  o.cgroup = sys::CpuCgroupLayout{sys::CgroupVersion::v2, t_.str("cg"), "/"};
  write_file(t_.path() / "cg/cpu.weight", "100\n");
  write_file(t_.path() / "cg/cgroup.procs", std::to_string(c.pid()) + "\n");
  // The child's real /proc/PID/cgroup line of this version decides its group.
  auto orig = sys::cpu_cgroup_path(sys::CgroupVersion::v2,
                                   read_file("/proc/" + std::to_string(c.pid()) + "/cgroup"));
  if (!orig || *orig != "/") GTEST_SKIP() << "the test process is not in the v2 root group";
  auto b = make(o);
  ASSERT_TRUE(b);
  policy::Decision d = decision(c.pid(), 0);
  d.tenant = 1;
  d.tenant_weight = 150;
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(b->tenant_share(c.pid()), TenantShare::nice);
  EXPECT_NE(b->tenant_share_text(c.pid()).find("root cgroup"), std::string::npos)
      << b->tenant_share_text(c.pid());
  for (const std::uint32_t tid : c.tids()) EXPECT_EQ(nice_of(tid), -2) << tid;
  EXPECT_EQ(read_file(t_.path() / "cg/cpu.weight"), "100\n");
  EXPECT_EQ(b->stats().weight_writes, 0U);
  ASSERT_TRUE(b->shutdown());
  for (const std::uint32_t tid : c.tids()) EXPECT_EQ(nice_of(tid), 0) << tid;
}

TEST_F(UserspaceBackendTest, without_a_cpu_hierarchy_a_tenants_share_goes_by_nice) {
  Child c(1);
  auto b = make(options());  // use_cgroups = false
  ASSERT_TRUE(b);
  policy::Decision d = decision(c.pid(), 5);
  d.tenant = 0;
  d.tenant_weight = 50;  // -3 levels: priority 5 - 3 = 2 -> nice -2
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(b->tenant_share(c.pid()), TenantShare::nice);
  EXPECT_EQ(nice_of(c.pid()), -2);
  d.tenant = policy::kNoTenant;
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(b->tenant_share(c.pid()), TenantShare::none);
  EXPECT_EQ(nice_of(c.pid()), -5);
}

// On the host's real cpu hierarchy: a group of its own under a private parent
// (<mount>/zernel-unit-PID/job). Skips where the hierarchy is not writable.
class RealCgroupTest : public UserspaceBackendTest {
 protected:
  void SetUp() override {
    UserspaceBackendTest::SetUp();
    if (IsSkipped()) return;
    auto layout = sys::detect_cpu_cgroup_from("/proc/self/mountinfo");
    if (!layout) GTEST_SKIP() << layout.error().message();
    layout_ = *layout;
    parent_ = layout_.mount_point + "/zernel-unit-" + std::to_string(::getpid());
    if (::mkdir(parent_.c_str(), 0755) != 0) GTEST_SKIP() << "cannot create " << parent_;
    if (layout_.version == sys::CgroupVersion::v2) {
      (void)sys::write_cgroup_file(layout_.mount_point + "/cgroup.subtree_control", "+cpu");
      (void)sys::write_cgroup_file(parent_ + "/cgroup.subtree_control", "+cpu");
    }
    job_ = parent_ + "/job";
    if (::mkdir(job_.c_str(), 0755) != 0) GTEST_SKIP() << "cannot create " << job_;
    if (!sys::read_cgroup_cpu_value(layout_.version, job_)) {
      GTEST_SKIP() << "no " << sys::cgroup_cpu_file(layout_.version) << " in " << job_;
    }
    original_ = *sys::read_cgroup_cpu_value(layout_.version, job_);
  }
  void TearDown() override {
    // Members back to the root group, then the groups go.
    for (const std::string& dir : {job_, parent_}) {
      if (dir.empty()) continue;
      if (auto procs = sys::read_cgroup_procs(dir)) {
        for (const std::uint32_t pid : *procs) {
          (void)sys::write_cgroup_file(layout_.mount_point + "/cgroup.procs", std::to_string(pid));
        }
      }
    }
    if (!job_.empty()) ::rmdir(job_.c_str());
    if (!parent_.empty()) ::rmdir(parent_.c_str());
  }
  bool enter(const Child& c) {
    return static_cast<bool>(
        sys::write_cgroup_file(job_ + "/cgroup.procs", std::to_string(c.pid())));
  }
  std::string path_of(const Child& c) const {
    return sys::cpu_cgroup_path(layout_.version,
                                read_file("/proc/" + std::to_string(c.pid()) + "/cgroup"))
        .value_or("?");
  }
  std::uint64_t weight() const {
    return sys::read_cgroup_cpu_value(layout_.version, job_).value_or(0);
  }
  UserspaceOptions real_options() {
    UserspaceOptions o = options();
    o.use_cgroups = true;
    o.cgroup = layout_;
    return o;
  }
  sys::CpuCgroupLayout layout_;
  std::string parent_;
  std::string job_;
  std::uint64_t original_ = 0;
};

// The tenant's process stays in the group its owner placed it in; that group's weight becomes the
// tenant's (300: cpu.weight 300, cpu.shares 3072), journaled first, and goes back at shutdown.
TEST_F(RealCgroupTest, a_group_of_the_tenant_alone_carries_its_weight_and_nothing_moves) {
  Child c(2);
  ASSERT_TRUE(enter(c));
  const std::string where = path_of(c);
  UserspaceOptions o = real_options();
  auto b = make(o);
  ASSERT_TRUE(b);
  policy::Decision d = decision(c.pid(), 0);
  d.tenant = 1;
  d.tenant_weight = 300;
  ASSERT_TRUE(b->apply({&d, 1}));
  const std::uint64_t want = layout_.version == sys::CgroupVersion::v2 ? 300 : 3072;
  EXPECT_EQ(weight(), want);
  EXPECT_EQ(b->tenant_share(c.pid()), TenantShare::cgroup);
  EXPECT_EQ(path_of(c), where);  // not moved
  for (const std::uint32_t tid : c.tids()) EXPECT_EQ(nice_of(tid), 0) << tid;  // no nice shift
  auto j = read_journal(o.journal_path);
  ASSERT_TRUE(j && j->has_value());
  ASSERT_EQ((*j)->weights.size(), 1U);
  EXPECT_EQ((*j)->weights[0].dir, job_);
  EXPECT_EQ((*j)->weights[0].original, original_);
  EXPECT_EQ((*j)->weights[0].written, std::vector<std::uint64_t>{want});
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(b->stats().weight_writes, 1U);  // unchanged: not written again
  d.tenant_weight = 100;  // the tenant's weight changed (another tenant joined)
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(weight(), layout_.version == sys::CgroupVersion::v2 ? 100U : 1024U);
  ASSERT_TRUE(b->shutdown());
  EXPECT_EQ(weight(), original_);
  EXPECT_EQ(path_of(c), where);
  EXPECT_FALSE(std::filesystem::exists(o.journal_path));
}

// Another process (of no tenant) joins the group: its weight goes back at once and the tenant's
// share goes through nice; when it leaves, the group carries the tenant again.
TEST_F(RealCgroupTest, a_group_that_becomes_shared_gets_its_original_back_and_nice_takes_over) {
  Child c(1);
  Child other(1);
  ASSERT_TRUE(enter(c));
  auto b = make(real_options());
  ASSERT_TRUE(b);
  policy::Decision d = decision(c.pid(), 0);
  d.tenant = 0;
  d.tenant_weight = 150;
  ASSERT_TRUE(b->apply({&d, 1}));
  ASSERT_EQ(b->tenant_share(c.pid()), TenantShare::cgroup);
  ASSERT_NE(weight(), original_);
  ASSERT_TRUE(enter(other));
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(weight(), original_);
  EXPECT_EQ(b->tenant_share(c.pid()), TenantShare::nice);
  EXPECT_NE(b->tenant_share_text(c.pid()).find("shared with pid " + std::to_string(other.pid())),
            std::string::npos)
      << b->tenant_share_text(c.pid());
  EXPECT_EQ(nice_of(c.pid()), -2);
  EXPECT_EQ(nice_of(other.pid()), 0);
  ASSERT_TRUE(
      sys::write_cgroup_file(layout_.mount_point + "/cgroup.procs", std::to_string(other.pid())));
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(b->tenant_share(c.pid()), TenantShare::cgroup);
  EXPECT_NE(weight(), original_);
  EXPECT_EQ(nice_of(c.pid()), 0);
  ASSERT_TRUE(b->shutdown());
  EXPECT_EQ(weight(), original_);
}

// The group's owner (kubelet, systemd, an operator) writes its own weight while the backend
// manages the group: the backend yields it to them for the rest of its run and never restores
// over their value.
TEST_F(RealCgroupTest, an_owners_own_weight_wins_and_is_not_restored_over) {
  Child c(1);
  ASSERT_TRUE(enter(c));
  auto b = make(real_options());
  ASSERT_TRUE(b);
  policy::Decision d = decision(c.pid(), 0);
  d.tenant = 0;
  d.tenant_weight = 300;
  ASSERT_TRUE(b->apply({&d, 1}));
  ASSERT_EQ(b->tenant_share(c.pid()), TenantShare::cgroup);
  const std::uint64_t owners = layout_.version == sys::CgroupVersion::v2 ? 42 : 430;
  ASSERT_TRUE(sys::write_cgroup_cpu_value(layout_.version, job_, owners));
  ASSERT_TRUE(b->apply({&d, 1}));
  ASSERT_TRUE(b->apply({&d, 1}));
  EXPECT_EQ(weight(), owners);
  EXPECT_EQ(b->tenant_share(c.pid()), TenantShare::nice);
  ASSERT_TRUE(b->shutdown());
  EXPECT_EQ(weight(), owners);
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
  auto b = make_backend("userspace");
  ::unsetenv(kUserspaceJournalEnv);
  ASSERT_TRUE(b) << b.error().message();
  EXPECT_EQ((*b)->name(), "userspace");
  EXPECT_TRUE((*b)->shutdown());
}

}  // namespace
}  // namespace zernel::enforce::userspace
