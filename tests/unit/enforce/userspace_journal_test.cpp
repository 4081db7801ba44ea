// The userspace backend's journal: format round trip, atomic writes, corrupt and truncated
// journals, and crash recovery by the next backend (pid-reuse guard, a live owner).

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "collect/procfs.hpp"
#include "enforce/userspace/journal.hpp"
#include "enforce/userspace/userspace_backend.hpp"
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
  j.cgroup = JournalCgroup{CpuCgroupLayout{CgroupVersion::v1, "/sys/fs/cgroup/cpu", "/"}, "zernel"};
  ProcessOriginal p;
  p.pid = 100;
  p.start = 500;
  p.cgroup = "/user.slice/odd name\nwith newline";
  p.threads.push_back(ThreadOriginal{100, 500, 0, {0, 1, 2, 3, 8}});
  p.threads.push_back(ThreadOriginal{101, 510, -5, {2}});
  j.processes.push_back(p);
  ProcessOriginal q;
  q.pid = 200;
  q.start = 600;
  q.threads.push_back(ThreadOriginal{200, 600, 19, {}});
  j.processes.push_back(q);
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
  EXPECT_NE(text.find("thread 100 500 0 0-3,8\n"), std::string::npos) << text;
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
  auto r = parse_journal(text);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("line 6"), std::string::npos) << r.error().message();

  for (const char* bad : {"", "hello\n", "zernel-userspace-journal 2\nend\n",
                          "zernel-userspace-journal 1\nthread 1 2 3 0\nend\n",
                          "zernel-userspace-journal 1\nowner 1 2\ncgroup -\nprocess x 1 -\nend\n",
                          "zernel-userspace-journal 1\nowner 1 2\ncgroup -\nend\nend\n",
                          "zernel-userspace-journal 1\nowner 1 2\ncgroup v1 zz 00 00\nend\n"}) {
    EXPECT_FALSE(parse_journal(bad)) << bad;
  }
}

TEST(UserspaceJournal, a_corrupt_journal_is_moved_aside_and_the_backend_starts) {
  TempDir t;
  UserspaceOptions o = options(t);
  write_file(o.journal_path, "zernel-userspace-journal 1\nowner 1 2\ncgro");
  auto b = UserspaceBackend::create(o);
  ASSERT_TRUE(b) << b.error().message();
  EXPECT_FALSE(std::filesystem::exists(o.journal_path));
  EXPECT_EQ(read_file(o.journal_path + ".corrupt"), "zernel-userspace-journal 1\nowner 1 2\ncgro");
}

TEST(UserspaceJournal, a_journal_of_a_running_daemon_refuses_a_second_backend_fail) {
  TempDir t;
  UserspaceOptions o = options(t);
  auto self = collect::read_stat("/proc", static_cast<std::uint32_t>(::getpid()));
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
  auto sa = collect::read_stat("/proc", a.pid());
  auto sb = collect::read_stat("/proc", b.pid());
  ASSERT_TRUE(sa && sb);

  Journal j;
  j.owner_pid = 0x7ffffff0;  // no such process: the daemon is dead
  j.owner_start = 1;
  ProcessOriginal pa{a.pid(), sa->starttime_ticks, std::nullopt, {}};
  for (const std::uint32_t tid : a.tids()) {
    auto ts = collect::read_thread_stat("/proc", a.pid(), tid);
    ASSERT_TRUE(ts);
    pa.threads.push_back(ThreadOriginal{tid, ts->starttime_ticks, 0, {}});
  }
  // b's entry has another start time: its pid now belongs to a different process.
  ProcessOriginal pb{b.pid(),
                     sb->starttime_ticks + 1,
                     std::nullopt,
                     {ThreadOriginal{b.pid(), sb->starttime_ticks + 1, 0, {}}}};
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

}  // namespace
}  // namespace zernel::enforce::userspace
