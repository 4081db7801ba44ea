#include "sys/delayacct.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "sys/procfs.hpp"

namespace zernel::sys {
namespace {

namespace fs = std::filesystem;

class FakeSysctl {
 public:
  FakeSysctl() {
    std::random_device rd;
    root_ = fs::temp_directory_path() / ("zernel-delayacct-" + std::to_string(rd()));
    fs::create_directories(root_ / "sys/kernel");
  }
  ~FakeSysctl() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  FakeSysctl(const FakeSysctl&) = delete;
  FakeSysctl& operator=(const FakeSysctl&) = delete;

  void set(const std::string& text) const {
    std::ofstream(root_ / "sys/kernel/task_delayacct", std::ios::trunc) << text;
  }
  [[nodiscard]] std::string value() const {
    std::ifstream in(root_ / "sys/kernel/task_delayacct");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  [[nodiscard]] std::string root() const { return root_.string(); }
  [[nodiscard]] fs::path file() const { return root_ / "sys/kernel/task_delayacct"; }

 private:
  fs::path root_;
};

TEST(DelayAcct, turns_it_on_and_restores_the_original_explicitly) {
  FakeSysctl f;
  f.set("0\n");
  auto g = DelayAcctGuard::enable(f.root());
  ASSERT_TRUE(g.ok()) << g.error().message();
  EXPECT_FALSE(g->original());
  EXPECT_TRUE(g->changed());
  EXPECT_EQ(*read_task_delayacct(f.root()), true);
  ASSERT_TRUE(g->restore().ok());
  EXPECT_FALSE(g->changed());
  EXPECT_EQ(*read_task_delayacct(f.root()), false);
  // Idempotent: a second restore does not write again.
  f.set("1\n");
  ASSERT_TRUE(g->restore().ok());
  EXPECT_EQ(f.value(), "1\n");
}

TEST(DelayAcct, the_guard_restores_when_it_goes_out_of_scope) {
  FakeSysctl f;
  f.set("0\n");
  {
    auto g = DelayAcctGuard::enable(f.root());
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(*read_task_delayacct(f.root()), true);
    // Moving hands the duty to restore to the new owner, once.
    DelayAcctGuard moved = std::move(*g);
    EXPECT_TRUE(moved.changed());
    EXPECT_FALSE(g->changed());
  }
  EXPECT_EQ(*read_task_delayacct(f.root()), false);
}

TEST(DelayAcct, the_journal_has_the_original_before_the_change_and_forgets_it_after_restore) {
  FakeSysctl f;
  f.set("0\n");
  std::vector<std::string> events;
  DelayAcctJournal journal;
  journal.record = [&](bool original) -> Result<void> {
    // The sysctl is still off when the original is recorded.
    events.push_back("record " + std::to_string(original) + " while " + f.value().substr(0, 1));
    return Ok{};
  };
  journal.forget = [&]() -> Result<void> {
    events.push_back("forget while " + f.value().substr(0, 1));
    return Ok{};
  };
  {
    auto g = DelayAcctGuard::enable(f.root(), journal);
    ASSERT_TRUE(g.ok()) << g.error().message();
    EXPECT_EQ(events, std::vector<std::string>{"record 0 while 0"});
    DelayAcctGuard moved = std::move(*g);  // the journal goes with the duty to restore
  }
  EXPECT_EQ(events, (std::vector<std::string>{"record 0 while 0", "forget while 0"}));
}

TEST(DelayAcct, a_journal_that_cannot_record_leaves_the_sysctl_alone_fail) {
  FakeSysctl f;
  f.set("0\n");
  DelayAcctJournal journal;
  journal.record = [](bool) -> Result<void> { return Error(EROFS, "/run/zernel: read-only"); };
  auto g = DelayAcctGuard::enable(f.root(), journal);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code(), EROFS);
  EXPECT_NE(g.error().message().find("recording the original"), std::string::npos)
      << g.error().message();
  EXPECT_EQ(f.value(), "0\n");
}

TEST(DelayAcct, already_on_records_nothing) {
  FakeSysctl f;
  f.set("1\n");
  bool recorded = false;
  DelayAcctJournal journal;
  journal.record = [&](bool) -> Result<void> {
    recorded = true;
    return Ok{};
  };
  auto g = DelayAcctGuard::enable(f.root(), journal);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(recorded);
}

TEST(DelayAcct, already_on_is_left_alone) {
  FakeSysctl f;
  f.set("1\n");
  {
    auto g = DelayAcctGuard::enable(f.root());
    ASSERT_TRUE(g.ok());
    EXPECT_TRUE(g->original());
    EXPECT_FALSE(g->changed());
  }
  EXPECT_EQ(*read_task_delayacct(f.root()), true);
}

TEST(DelayAcct, a_missing_sysctl_is_a_clear_error) {
  FakeSysctl f;
  auto g = DelayAcctGuard::enable(f.root());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code(), ENOENT);
  EXPECT_NE(g.error().message().find("enabling delay accounting"), std::string::npos);
  EXPECT_NE(g.error().message().find("5.14"), std::string::npos) << g.error().message();
}

TEST(DelayAcct, a_garbled_value_is_an_error_and_nothing_is_written) {
  FakeSysctl f;
  f.set("maybe\n");
  auto g = DelayAcctGuard::enable(f.root());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(f.value(), "maybe\n");
}

TEST(DelayAcct, an_unwritable_sysctl_is_a_clear_error_fail) {
  if (::geteuid() == 0) GTEST_SKIP() << "root bypasses file permissions on the fake tree";
  FakeSysctl f;
  f.set("0\n");
  fs::permissions(f.file(), fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  auto g = DelayAcctGuard::enable(f.root());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code(), EACCES);
  EXPECT_NE(g.error().message().find("CAP_SYS_ADMIN"), std::string::npos) << g.error().message();
}

TEST(DelayAcct, a_sysctl_that_cannot_be_written_reports_why_fail) {
  // A directory in place of the file fails for root too.
  FakeSysctl f;
  fs::create_directories(f.file());
  auto w = write_task_delayacct(f.root(), true);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message().find("task_delayacct"), std::string::npos);
}

TEST(DelayAcct, toggles_and_restores_the_real_sysctl) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to write /proc/sys/kernel/task_delayacct";
  if (!fs::exists("/proc/sys/kernel/task_delayacct")) {
    GTEST_SKIP() << "this kernel has no kernel.task_delayacct";
  }
  auto before = read_task_delayacct("/proc");
  ASSERT_TRUE(before.ok()) << before.error().message();
  auto g = DelayAcctGuard::enable("/proc");
  if (!g.ok() &&
      (g.error().code() == EROFS || g.error().code() == EACCES || g.error().code() == EPERM)) {
    GTEST_SKIP() << "cannot write the sysctl here: " << g.error().message();
  }
  ASSERT_TRUE(g.ok()) << g.error().message();
  EXPECT_EQ(g->original(), *before);
  EXPECT_EQ(*read_task_delayacct("/proc"), true);
  ASSERT_TRUE(g->restore().ok());
  EXPECT_EQ(*read_task_delayacct("/proc"), *before);
}

}  // namespace
}  // namespace zernel::sys

// ---- shared by several daemons (sys/delayacct_share.hpp) ----
namespace zernel::sys {
namespace {

void fake_stat(const FakeSysctl& f, std::uint32_t pid, std::uint64_t start) {
  std::filesystem::create_directories(f.root() + "/" + std::to_string(pid));
  std::ofstream out(f.root() + "/" + std::to_string(pid) + "/stat");
  out << pid << " (zernel-schedule) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 " << start;
  for (int i = 23; i <= 52; ++i) out << " 0";
  out << "\n";
}

TEST(DelayAcctShare, a_daemon_leaving_while_another_holds_it_leaves_it_on) {
  FakeSysctl f;
  f.set("1\n");  // turned on by the other daemon, pid 777
  fake_stat(f, static_cast<std::uint32_t>(::getpid()), 5000);
  fake_stat(f, 777, 4000);
  const std::string holders = f.root() + "/run/delayacct.holders";
  std::filesystem::create_directories(f.root() + "/run");
  std::ofstream(holders) << "zernel-delayacct-holders 1\noriginal 0\nholder 777 4000\nend\n";
  ::chmod(holders.c_str(), 0600);
  DelayAcctJournal j;
  j.holders_path = holders;
  {
    auto g = DelayAcctGuard::enable(f.root(), j);
    ASSERT_TRUE(g.ok()) << g.error().message();
    EXPECT_FALSE(g->original());  // the first holder's original, not the 1 it found
    ASSERT_TRUE(g->restore().ok());
  }
  EXPECT_EQ(*read_task_delayacct(f.root()), true);  // 777 still uses it
  std::ifstream in(holders);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("holder 777 4000"), std::string::npos) << ss.str();
  EXPECT_EQ(ss.str().find("holder " + std::to_string(::getpid())), std::string::npos) << ss.str();

  // 777 died (kill -9): the last holder to leave restores the first one's original.
  std::filesystem::remove_all(f.root() + "/777");
  {
    auto g = DelayAcctGuard::enable(f.root(), j);
    ASSERT_TRUE(g.ok()) << g.error().message();
    ASSERT_TRUE(g->restore().ok());
  }
  EXPECT_EQ(*read_task_delayacct(f.root()), false);
  EXPECT_FALSE(std::filesystem::exists(holders));
}

}  // namespace
}  // namespace zernel::sys
