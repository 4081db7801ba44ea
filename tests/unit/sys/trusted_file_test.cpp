#include "sys/trusted_file.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "config/config.hpp"
#include "support/temp_tree.hpp"
#include "sys/journal_file.hpp"

namespace zernel::sys {
namespace {

using test_support::TempTree;

TEST(TrustedFile, reads_a_private_regular_file_and_a_missing_one_is_nullopt) {
  TempTree t;
  t.write("a", "hello\n");
  ::chmod(t.path("a").c_str(), 0600);
  auto r = read_trusted_file(t.path("a").string(), 1024);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->text, "hello\n");
  auto missing = read_trusted_file(t.path("nope").string(), 1024);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
}

TEST(TrustedFile, a_symlink_even_to_dev_zero_is_refused_without_reading) {
  TempTree t;
  std::filesystem::create_symlink("/dev/zero", t.path("journal"));
  auto r = read_trusted_file(t.path("journal").string(), 1024);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ELOOP);
  EXPECT_NE(r.error().message().find("symbolic link"), std::string::npos);
}

TEST(TrustedFile, a_fifo_is_refused_at_once_instead_of_blocking) {
  TempTree t;
  ASSERT_EQ(::mkfifo(t.path("fifo").c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = read_trusted_file(t.path("fifo").string(), 1024);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ENXIO);
  EXPECT_NE(r.error().message().find("FIFO"), std::string::npos);
}

TEST(TrustedFile, a_file_over_the_cap_is_refused) {
  TempTree t;
  t.write("big", std::string(5000, 'x'));
  auto r = read_trusted_file(t.path("big").string(), 4096);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), EFBIG);
}

TEST(TrustedFile, a_file_others_can_write_or_owned_by_another_user_is_refused) {
  TempTree t;
  t.write("j", "x");
  ::chmod(t.path("j").c_str(), 0666);
  auto r = read_trusted_file(t.path("j").string(), 1024);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), EPERM);
  EXPECT_NE(r.error().message().find("writable by others"), std::string::npos);
  if (::geteuid() != 0) GTEST_SKIP() << "chown to another user needs root";
  ::chmod(t.path("j").c_str(), 0600);
  ASSERT_EQ(::chown(t.path("j").c_str(), 65534, 65534), 0);
  r = read_trusted_file(t.path("j").string(), 1024);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("owned by uid 65534"), std::string::npos);
}

TEST(TrustedFile, a_write_never_follows_a_link_planted_at_the_old_temporary_name) {
  TempTree t;
  t.write("victim", "precious\n");
  std::filesystem::create_directories(t.path("run"));
  std::filesystem::create_symlink(t.path("victim"), t.path("run/journal.tmp"));
  ASSERT_TRUE(write_file_atomically(t.path("run/journal").string(), "new text\n").ok());
  auto v = read_trusted_file(t.path("victim").string(), 1024);
  ASSERT_TRUE(v.ok() && v->has_value());
  EXPECT_EQ((*v)->text, "precious\n");
  auto j = read_whole_file(t.path("run/journal").string());
  ASSERT_TRUE(j.ok() && j->has_value());
  EXPECT_EQ(**j, "new text\n");
  struct stat st{};
  ASSERT_EQ(::stat(t.path("run/journal").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
}

TEST(TrustedFile, a_missing_directory_is_created_0700_and_a_shared_one_is_refused) {
  TempTree t;
  ASSERT_TRUE(write_trusted_file(t.path("new/dir/f").string(), "x").ok());
  struct stat st{};
  ASSERT_EQ(::stat(t.path("new/dir").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700U);
  std::filesystem::create_directories(t.path("shared"));
  ::chmod(t.path("shared").c_str(), 0777);
  auto r = write_trusted_file(t.path("shared/f").string(), "x");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("writable by others"), std::string::npos);
}

TEST(TrustedFile, a_config_that_is_a_fifo_or_world_writable_is_a_clear_error) {
  TempTree t;
  ASSERT_EQ(::mkfifo(t.path("fifo.toml").c_str(), 0600), 0);
  auto fifo = config::load_config_file(t.path("fifo.toml").string(), false);
  ASSERT_FALSE(fifo.ok());
  EXPECT_NE(fifo.error().message().find("not a regular file"), std::string::npos);
  t.write("open.toml", "[general]\n");
  ::chmod(t.path("open.toml").c_str(), 0666);
  auto open = config::load_config_file(t.path("open.toml").string(), false);
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.error().message().find("writable by others"), std::string::npos);
  auto devnull = config::load_config_file("/dev/null", false);
  EXPECT_TRUE(devnull.ok());
}

}  // namespace
}  // namespace zernel::sys

namespace zernel::sys {
namespace {

TEST(TrustedFile, group_write_counts_only_for_a_group_other_than_roots) {
  if (::geteuid() != 0) GTEST_SKIP() << "chgrp to another group needs root";
  test_support::TempTree t;
  t.write("c", "x");
  ::chmod(t.path("c").c_str(), 0664);
  ASSERT_EQ(::chown(t.path("c").c_str(), 0, 0), 0);
  EXPECT_TRUE(read_trusted_file(t.path("c").string(), 1024).ok());  // a umask-002 checkout
  ASSERT_EQ(::chown(t.path("c").c_str(), 0, 65534), 0);
  auto r = read_trusted_file(t.path("c").string(), 1024);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("writable by its group"), std::string::npos);
}

}  // namespace
}  // namespace zernel::sys
