// The small-file family (sys/file.hpp) on a temp dir: whole reads with their cap, trimmed and
// first-line reads, numbers, and the one-write writer with its open flags.

#include "sys/file.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <string>

#include "support/temp_tree.hpp"

namespace zernel::sys {
namespace {

using test_support::TempTree;

std::string path_of(const TempTree& t, const std::string& rel) { return t.path(rel).string(); }

TEST(SysFile, reads_a_whole_file_and_names_a_missing_one) {
  TempTree t{"zernel-sysfile"};
  t.write("a", "one\ntwo\n");
  auto text = read_file(path_of(t, "a"));
  ASSERT_TRUE(text) << text.error().message();
  EXPECT_EQ(*text, "one\ntwo\n");
  auto missing = read_file(path_of(t, "missing"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), ENOENT);
  EXPECT_NE(missing.error().message().find(path_of(t, "missing")), std::string::npos);
}

TEST(SysFile, a_file_larger_than_the_cap_is_an_error_not_a_cut) {
  TempTree t{"zernel-sysfile"};
  t.write("big", std::string(100, 'x'));
  auto r = read_file(path_of(t, "big"), 99);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), EFBIG);
  EXPECT_TRUE(read_file(path_of(t, "big"), 100));
}

TEST(SysFile, trimmed_and_first_line_reads) {
  TempTree t{"zernel-sysfile"};
  t.write("state", "enabled\n");
  t.write("two", "first line\nsecond\n");
  EXPECT_EQ(read_trimmed(path_of(t, "state")), "enabled");
  EXPECT_EQ(read_first_line(path_of(t, "two")), "first line");
  EXPECT_EQ(read_first_line(path_of(t, "missing")), std::nullopt);
}

TEST(SysFile, reads_a_sysfs_number_and_refuses_what_does_not_fit) {
  TempTree t{"zernel-sysfile"};
  t.write("khz", "2400000\n");
  t.write("big", "5000000000\n");
  t.write("junk", "max\n");
  EXPECT_EQ(read_u64(path_of(t, "khz")), 2400000U);
  EXPECT_EQ(read_u32(path_of(t, "khz")), 2400000U);
  EXPECT_EQ(read_u64(path_of(t, "big")), 5000000000ULL);
  EXPECT_EQ(read_u32(path_of(t, "big")), std::nullopt);
  EXPECT_EQ(read_u64(path_of(t, "junk")), std::nullopt);
  EXPECT_EQ(read_u64(path_of(t, "missing")), std::nullopt);
}

TEST(SysFile, reads_into_a_fixed_buffer_and_cuts_there) {
  TempTree t{"zernel-sysfile"};
  t.write("s", "123 456 7\n");
  std::array<char, 4> buf{};
  std::size_t n = 0;
  EXPECT_EQ(read_file_into(path_of(t, "s").c_str(), buf, n), 0);
  EXPECT_EQ(std::string(buf.data(), n), "123 ");
  EXPECT_EQ(read_file_into(path_of(t, "missing").c_str(), buf, n), ENOENT);
}

TEST(SysFile, writes_in_one_write_truncating_or_creating_as_told) {
  TempTree t{"zernel-sysfile"};
  t.write("v", "1000000\n");
  ASSERT_TRUE(write_file(path_of(t, "v"), "5\n"));
  EXPECT_EQ(read_file(path_of(t, "v")).value(), "5\n");
  auto absent = write_file(path_of(t, "new"), "1\n");
  ASSERT_FALSE(absent);
  EXPECT_EQ(absent.error().code(), ENOENT);
  EXPECT_TRUE(write_file(path_of(t, "new"), "1\n", O_TRUNC | O_CREAT));
  EXPECT_EQ(read_file(path_of(t, "new")).value(), "1\n");
  // In place (a sysctl): no O_TRUNC.
  ASSERT_TRUE(write_file(path_of(t, "v"), "7", 0));
  EXPECT_EQ(read_file(path_of(t, "v")).value(), "7\n");
}

}  // namespace
}  // namespace zernel::sys
