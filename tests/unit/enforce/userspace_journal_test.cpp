// The userspace backend's journal: format round trip, atomic writes, corrupt and truncated
// journals, and crash recovery (restore.hpp) by the next backend or by hand: the pid-reuse guard,
// a live owner, threads born after the journal was written, cgroup weights on a fake tree.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "enforce/userspace/journal.hpp"
#include "enforce/userspace/restore.hpp"
#include "enforce/userspace/userspace_backend.hpp"
#include "support/temp_tree.hpp"
#include "sys/procfs.hpp"
#include "userspace_test_util.hpp"

namespace zernel::enforce::userspace {
namespace {

using testing::Child;
using testing::nice_of;
using testing::privileged;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

Journal sample() {
  Journal j;
  j.owner_pid = 77;
  j.owner_start = 12345;
  ProcessOriginal p;
  p.pid = 100;
  p.start = 500;
  p.nice = 0;
  p.cpus = {0, 1, 2, 3, 8};
  p.applied_cpus = {0, 1};
  p.threads.push_back(ThreadOriginal{100, 500, 0, {0, 1, 2, 3, 8}});
  p.threads.push_back(ThreadOriginal{101, 510, -5, {2}});
  j.processes.push_back(p);
  ProcessOriginal q;
  q.pid = 200;
  q.start = 600;
  q.nice = 19;
  q.threads.push_back(ThreadOriginal{200, 600, 19, {}});
  j.processes.push_back(q);
  j.weights.push_back(WeightOriginal{"/sys/fs/cgroup/odd name\nwith newline", "cpu.weight", 42,
                                     100, {150}});
  j.weights.push_back(WeightOriginal{"/sys/fs/cgroup/cpu/job", "cpu.shares", 43, 1024, {512, 1536}});
  return j;
}

UserspaceOptions options(const TempDir& t) {
  UserspaceOptions o;
  o.sys_root = t.str("sys");
  o.use_cgroups = false;
  o.journal_path = t.str("run/zernel/userspace.journal");
  return o;
}

TEST(UserspaceJournal, formats_and_parses_back_the_same_journal) {
  const Journal j = sample();
  const std::string text = format_journal(j);
  auto back = parse_journal(text);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(*back, j);
  EXPECT_NE(text.find("process 100 500 0 0-3,8 0-1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("thread 100 500 0 0-3,8\n"), std::string::npos) << text;
  EXPECT_NE(text.find(" cpu.shares 43 1024 512,1536\n"), std::string::npos) << text;
  EXPECT_EQ(text.substr(text.size() - 4), "end\n");
}

TEST(UserspaceJournal, formats_cpu_lists_as_ranges) {
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({5}), "5");
  EXPECT_EQ(format_cpu_list({}), "");
}

TEST(UserspaceJournal, writes_atomically_into_a_new_private_directory) {
  TempDir t;
  const std::string path = t.str("run/zernel/userspace.journal");
  ASSERT_TRUE(write_journal(path, sample()));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
  ASSERT_EQ(::stat(t.str("run/zernel").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700U);
  auto back = read_journal(path);
  ASSERT_TRUE(back) << back.error().message();
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ(**back, sample());
  // A second write replaces the whole file.
  Journal small;
  small.owner_pid = 1;
  ASSERT_TRUE(write_journal(path, small));
  auto again = read_journal(path);
  ASSERT_TRUE(again && again->has_value());
  EXPECT_TRUE((*again)->processes.empty());
}

TEST(UserspaceJournal, a_missing_journal_is_not_an_error) {
  TempDir t;
  auto r = read_journal(t.str("none"));
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->has_value());
}

TEST(UserspaceJournal, a_truncated_journal_is_corrupt) {
  const std::string text = format_journal(sample());
  const std::string cut = text.substr(0, text.find("thread 101"));
  auto r = parse_journal(cut);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("truncated"), std::string::npos) << r.error().message();
}

TEST(UserspaceJournal, names_the_line_of_a_bad_record) {
  std::string text = format_journal(sample());
  text.replace(text.find("thread 101 510 -5"), 17, "thread 101 510 -99");
  // line 1 magic, 2 owner, 3 process 100, 4 thread 100, 5 thread 101
  auto r = parse_journal(text);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("line 5"), std::string::npos) << r.error().message();

  for (const char* bad :
       {"", "hello\n", "zernel-userspace-journal 2\nend\n",
        // Version 1 (a backend that moved processes into tenant groups) is not replayed.
        "zernel-userspace-journal 1\nowner 1 2\ncgroup -\nend\n",
        "zernel-userspace-journal 2\nthread 1 2 3 0\nend\n",
        "zernel-userspace-journal 2\nowner 1 2\nprocess x 1 0 - -\nend\n",
        "zernel-userspace-journal 2\nowner 1 2\nprocess 5 1 0 -\nend\n",
        "zernel-userspace-journal 2\nowner 1 2\nend\nend\n",
        "zernel-userspace-journal 2\nowner 1 2\nweight zz cpu.weight 1 100 150\nend\n",
        "zernel-userspace-journal 2\nowner 1 2\nweight 2f cpu.max 1 100 150\nend\n",
        "zernel-userspace-journal 2\nowner 1 2\nweight 2f cpu.weight 1 100 1,2,3\nend\n",
        "zernel-userspace-journal 2\nowner 1 2\nweight 2f cpu.weight 1 100 150\nthread 1 2 3 -\nend\n"}) {
    EXPECT_FALSE(parse_journal(bad)) << bad;
  }
}

TEST(UserspaceJournal, a_corrupt_journal_is_moved_aside_and_the_backend_starts) {
  TempDir t;
  UserspaceOptions o = options(t);
  write_file(o.journal_path, "zernel-userspace-journal 2\nowner 1 2\nproc");
  auto b = UserspaceBackend::create(o);
  ASSERT_TRUE(b) << b.error().message();
  EXPECT_FALSE(std::filesystem::exists(o.journal_path));
  EXPECT_EQ(read_file(o.journal_path + ".corrupt"), "zernel-userspace-journal 2\nowner 1 2\nproc");
}

TEST(UserspaceJournal, a_journal_of_a_running_daemon_refuses_a_second_backend_fail) {
  TempDir t;
  UserspaceOptions o = options(t);
  auto self = sys::read_stat("/proc", static_cast<std::uint32_t>(::getpid()));
  ASSERT_TRUE(self);
  Journal j;
  j.owner_pid = static_cast<std::uint32_t>(::getpid());
  j.owner_start = self->starttime_ticks;
  ASSERT_TRUE(write_journal(o.journal_path, j));
  auto b = UserspaceBackend::create(o);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code(), EBUSY);
  EXPECT_NE(b.error().message().find("running zernel-scheduler"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(o.journal_path));  // untouched
}

TEST(UserspaceJournal, the_next_start_restores_a_dead_daemons_journal_and_skips_reused_pids) {
  if (!privileged()) GTEST_SKIP() << "needs CAP_SYS_NICE to lower nice values back";
  TempDir t;
  UserspaceOptions o = options(t);
  Child a(2);
  Child b(1);
  ASSERT_TRUE(a.ok() && b.ok());
  auto sa = sys::read_stat("/proc", a.pid());
  auto sb = sys::read_stat("/proc", b.pid());
  ASSERT_TRUE(sa && sb);

  Journal j;
  j.owner_pid = 0x7ffffff0;  // no such process: the daemon is dead
  j.owner_start = 1;
  ProcessOriginal pa;
  pa.pid = a.pid();
  pa.start = sa->starttime_ticks;
  for (const std::uint32_t tid : a.tids()) {
    auto ts = sys::read_thread_stat("/proc", a.pid(), tid);
    ASSERT_TRUE(ts);
    pa.threads.push_back(ThreadOriginal{tid, ts->starttime_ticks, 0, {}});
  }
  // b's entry has another start time: its pid now belongs to a different process.
  ProcessOriginal pb;
  pb.pid = b.pid();
  pb.start = sb->starttime_ticks + 1;
  pb.threads = {ThreadOriginal{b.pid(), sb->starttime_ticks + 1, 0, {}}};
  j.processes = {pa, pb};
  ASSERT_TRUE(write_journal(o.journal_path, j));
  // What the dead daemon had set.
  for (const std::uint32_t tid : a.tids()) ASSERT_EQ(::setpriority(PRIO_PROCESS, tid, -7), 0);
  ASSERT_EQ(::setpriority(PRIO_PROCESS, b.pid(), 6), 0);

  auto be = UserspaceBackend::create(o);
  ASSERT_TRUE(be) << be.error().message();
  for (const std::uint32_t tid : a.tids()) EXPECT_EQ(nice_of(tid), 0) << tid;
  EXPECT_EQ(nice_of(b.pid()), 6);  // not ours any more: untouched
  EXPECT_EQ((*be)->stats().recovered_processes, 1U);
  EXPECT_EQ((*be)->stats().recovered_threads, 2U);
  EXPECT_EQ((*be)->stats().recovery_skipped, 1U);
  EXPECT_FALSE(std::filesystem::exists(o.journal_path));
}

// A dead daemon's journal lists two of a process's threads; a third was born after the journal was
// written and inherited the nice the daemon had set (-7), a fourth set its own nice (+3) and is
// the owner's. Replay puts the listed ones and the inheriting one back to the originals and leaves
// the fourth.
TEST(UserspaceJournal, replay_restores_threads_born_after_the_journal_to_the_process_original) {
  if (!privileged()) GTEST_SKIP() << "needs CAP_SYS_NICE to lower nice values back";
  TempDir t;
  const std::string path = t.str("run/userspace.journal");
  Child a(2);
  ASSERT_TRUE(a.ok());
  auto sa = sys::read_stat("/proc", a.pid());
  ASSERT_TRUE(sa);
  Journal j;
  j.owner_pid = 0x7ffffff0;
  j.owner_start = 1;
  ProcessOriginal pa;
  pa.pid = a.pid();
  pa.start = sa->starttime_ticks;
  pa.nice = 0;
  for (const std::uint32_t tid : a.tids()) {
    auto ts = sys::read_thread_stat("/proc", a.pid(), tid);
    ASSERT_TRUE(ts);
    pa.threads.push_back(ThreadOriginal{tid, ts->starttime_ticks, 0, {}});
    ASSERT_EQ(::setpriority(PRIO_PROCESS, tid, -7), 0);
  }
  j.processes = {pa};
  ASSERT_TRUE(write_journal(path, j));
  // Born after the journal: the creator's -7 is inherited at clone.
  ASSERT_EQ(::setpriority(PRIO_PROCESS, a.pid(), -7), 0);
  a.add_thread();
  a.add_thread();
  const std::uint32_t own = a.tids().back();
  ASSERT_EQ(::setpriority(PRIO_PROCESS, own, 3), 0);  // its owner's choice
  auto rep = replay_journal(path);
  ASSERT_TRUE(rep) << rep.error().message();
  EXPECT_TRUE(rep->found);
  for (const std::uint32_t tid : a.tids()) EXPECT_EQ(nice_of(tid), tid == own ? 3 : 0) << tid;
  EXPECT_EQ(rep->processes, 1U);
  EXPECT_EQ(rep->threads, 3U);
  EXPECT_EQ(rep->unlisted_threads, 1U);
  EXPECT_EQ(rep->errors, 0U);
  EXPECT_FALSE(std::filesystem::exists(path));
  ASSERT_FALSE(rep->lines.empty());
  EXPECT_NE(rep->lines[0].find("3 thread(s) restored (1 born after"), std::string::npos)
      << rep->lines[0];
  EXPECT_NE(rep->summary().find("restored 1 process(es) (3 thread(s), 1 born after"),
            std::string::npos)
      << rep->summary();
}

// Cgroup weights on a fake tree: the one still holding what zernel wrote goes back; one someone
// changed since, and one whose directory is another group now (inode), are left as found.
TEST(UserspaceJournal, replay_restores_a_cgroup_weight_only_where_it_still_holds_zernels_value) {
  test_support::TempTree t("zernel-replay");
  t.write("cg/job-a/cpu.weight", "150\n");
  t.write("cg/job-b/cpu.weight", "400\n");
  t.write("cg/job-c/cpu.shares", "512\n");
  t.write("cg/job-d/cpu.weight", "75\n");
  const auto ino = [&](const char* rel) { return *sys::cgroup_inode(t.path(rel).string()); };
  Journal j;
  j.owner_pid = 0x7ffffff0;
  j.owner_start = 1;
  j.weights = {
      WeightOriginal{t.path("cg/job-a").string(), "cpu.weight", ino("cg/job-a"), 100, {150}},
      WeightOriginal{t.path("cg/job-b").string(), "cpu.weight", ino("cg/job-b"), 100, {150}},
      WeightOriginal{t.path("cg/job-c").string(), "cpu.shares", ino("cg/job-c") + 1, 1024, {512}},
      // A crash between the journal write and the file write of a change 75 -> 50.
      WeightOriginal{t.path("cg/job-d").string(), "cpu.weight", ino("cg/job-d"), 100, {50, 75}},
  };
  const std::string path = t.path("run/userspace.journal").string();
  ASSERT_TRUE(write_journal(path, j));
  auto rep = replay_journal(path, t.root());  // no process of that owner under a fake /proc
  ASSERT_TRUE(rep) << rep.error().message();
  EXPECT_EQ(read_file(t.path("cg/job-a/cpu.weight")), "100\n");
  EXPECT_EQ(read_file(t.path("cg/job-b/cpu.weight")), "400\n");
  EXPECT_EQ(read_file(t.path("cg/job-c/cpu.shares")), "512\n");
  EXPECT_EQ(read_file(t.path("cg/job-d/cpu.weight")), "100\n");
  EXPECT_EQ(rep->cgroups, 2U);
  EXPECT_EQ(rep->cgroups_left, 2U);
  ASSERT_EQ(rep->lines.size(), 4U);
  EXPECT_NE(rep->lines[0].find("cpu.weight 150 -> 100 (the original)"), std::string::npos)
      << rep->lines[0];
  EXPECT_NE(rep->lines[1].find("changed by someone else"), std::string::npos) << rep->lines[1];
  EXPECT_NE(rep->lines[2].find("removed or made again"), std::string::npos) << rep->lines[2];
}

TEST(UserspaceJournal, replay_refuses_the_journal_of_a_running_daemon_fail) {
  TempDir t;
  const std::string path = t.str("run/userspace.journal");
  auto self = sys::read_stat("/proc", static_cast<std::uint32_t>(::getpid()));
  ASSERT_TRUE(self);
  Journal j;
  j.owner_pid = static_cast<std::uint32_t>(::getpid());
  j.owner_start = self->starttime_ticks;
  ASSERT_TRUE(write_journal(path, j));
  auto rep = replay_journal(path);
  ASSERT_FALSE(rep);
  EXPECT_EQ(rep.error().code(), EBUSY);
  EXPECT_TRUE(std::filesystem::exists(path));
  auto none = replay_journal(t.str("run/none"));
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->found);
}

}  // namespace
}  // namespace zernel::enforce::userspace
