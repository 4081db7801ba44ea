#include "sys/journal_file.hpp"

#include "sys/trusted_file.hpp"

#include <fmt/format.h>

#include <cerrno>

namespace zernel::sys {
Result<void> write_file_atomically(const std::string& path, const std::string& text) {
  return write_trusted_file(path, text);
}

Result<std::optional<std::string>> read_whole_file(const std::string& path) {
  auto r = read_trusted_file(path, kMaxJournalBytes);
  if (!r) return r.error();
  if (!r->has_value()) return std::optional<std::string>{};
  return std::optional<std::string>(std::move((*r)->text));
}

Result<void> remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return errno_error("removing " + path);
  return Ok{};
}

std::string hex_encode(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  for (const char c : s) out += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return out;
}

std::optional<std::string> hex_decode(std::string_view s) {
  if (s.size() % 2 != 0) return std::nullopt;
  std::string out;
  out.reserve(s.size() / 2);
  for (std::size_t i = 0; i < s.size(); i += 2) {
    unsigned v = 0;
    const auto [p, ec] = std::from_chars(s.data() + i, s.data() + i + 2, v, 16);
    if (ec != std::errc() || p != s.data() + i + 2) return std::nullopt;
    out.push_back(static_cast<char>(v));
  }
  return out;
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    const std::size_t j = std::min(line.find(' ', i), line.size());
    out.push_back(line.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

Result<void> parse_journal_text(std::string_view text, std::string_view magic,
                                std::string_view bad_magic, const JournalRecordParser& record,
                                const std::function<bool()>& end_ok) {
  std::size_t pos = 0;
  int line_no = 0;
  bool ended = false;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const auto bad = [&](std::string_view why) {
      return Error(EINVAL, fmt::format("line {}: {}: \"{}\"", line_no, why, line.substr(0, 120)));
    };
    if (ended) return bad("text after \"end\"");
    if (line_no == 1) {
      if (line != magic) return bad(bad_magic);
      continue;
    }
    const auto f = split_fields(line);
    if (f.empty() || f[0].empty()) return bad("empty line");
    if (f.size() == 1 && f[0] == "end" && end_ok()) {
      ended = true;
      continue;
    }
    if (auto why = record(f)) return bad(*why);
  }
  if (line_no == 0) return Error(EINVAL, "empty journal");
  if (!ended) return Error(EINVAL, fmt::format("truncated after line {} (no \"end\")", line_no));
  return Ok{};
}

}  // namespace zernel::sys
