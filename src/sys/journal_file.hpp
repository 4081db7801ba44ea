#pragma once
// What the daemon's on-disk journals share (the userspace backend's, enforce/userspace/journal.hpp,
// and the settings journal, enforce/settings_journal.hpp): writing a file so that a crash at any
// point leaves either the old or the new text, reading one back, and the pieces of their line
// format (space-separated fields, hex-encoded strings, numbers that must be whole fields).

#include <charconv>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace zernel::sys {

// A journal is a few lines per changed setting or thread; anything larger is not one.
inline constexpr std::size_t kMaxJournalBytes = 16U << 20;

// write_trusted_file (sys/trusted_file.hpp): an O_EXCL temporary file in a directory only
// root can write (created 0700), fsynced and renamed over PATH. The file is mode 0600. On
// failure PATH is untouched.
Result<void> write_file_atomically(const std::string& path, const std::string& text);

// The whole file, read as read_trusted_file does (a regular file, not a link, root's, not
// writable by others, at most kMaxJournalBytes); nullopt when it does not exist.
Result<std::optional<std::string>> read_whole_file(const std::string& path);

// Removes PATH; a missing file is not an error.
Result<void> remove_file(const std::string& path);

// Any bytes as lowercase hex, and back (nullopt for an odd length or a non-hex digit).
std::string hex_encode(std::string_view s);
std::optional<std::string> hex_decode(std::string_view s);

// "a b  c" -> {"a", "b", "", "c"}: an empty field is kept, so that a stray space is an error.
std::vector<std::string_view> split_fields(std::string_view line);

// The frame of both journals' text: line 1 is exactly `magic`, the last line "end". Every line
// between is split into fields (never empty) and given to `record`, which returns nullopt when it
// takes the line, else why not. A line "end" closes the journal when `end_ok()` says it may come
// now; otherwise it goes to `record` like any other. Errors (EINVAL) name the line:
// "line N: WHY: \"TEXT\"" (WHY is `bad_magic` for a wrong first line), and "empty journal",
// "truncated after line N (no \"end\")".
using JournalRecordParser =
    std::function<std::optional<std::string>(const std::vector<std::string_view>& fields)>;
Result<void> parse_journal_text(std::string_view text, std::string_view magic,
                                std::string_view bad_magic, const JournalRecordParser& record,
                                const std::function<bool()>& end_ok);

// A decimal number that is the whole field (no sign for unsigned types, no spaces).
template <typename T>
std::optional<T> parse_number(std::string_view s) {
  T v{};
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

}  // namespace zernel::sys
