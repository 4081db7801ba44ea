#include "common/utf8.hpp"

#include <gtest/gtest.h>

namespace zernel {
namespace {

TEST(Utf8, valid_text_is_unchanged) {
  EXPECT_EQ(valid_utf8("python3 \xC3\xA9t\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "python3 \xC3\xA9t\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
}

TEST(Utf8, each_invalid_byte_becomes_one_replacement_character) {
  EXPECT_EQ(valid_utf8("a\xFF"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong '/'
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(valid_utf8("x\xE2\x82"), "x\xEF\xBF\xBD\xEF\xBF\xBD");                // truncated
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80").size(), 12U);                          // above U+10FFFF
}

}  // namespace
}  // namespace zernel
