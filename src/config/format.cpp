#include "config/format.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <system_error>

namespace zernel::config::detail {
namespace {

template <typename T>
std::string shortest(T value) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return ec == std::errc() ? std::string(buf, end) : std::string();
}

bool reads_back_as(const std::string& text, float value) {
  double parsed = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  return ec == std::errc() && end == text.data() + text.size() &&
         static_cast<float>(parsed) == value;
}

// "1" is an integer to TOML; "1.0" (or "1e+20", which to_chars may give) is a float.
std::string with_point(std::string text) {
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

// The escapes TOML spells with one letter; nullptr for any other character.
const char* short_escape(char ch) {
  switch (ch) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\b':
      return "\\b";
    case '\t':
      return "\\t";
    case '\n':
      return "\\n";
    case '\f':
      return "\\f";
    case '\r':
      return "\\r";
    default:
      return nullptr;
  }
}

}  // namespace

std::string format_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return with_point(shortest(value));
}

std::string format_float(float value) {
  if (!std::isfinite(value)) return format_double(static_cast<double>(value));
  std::string text = shortest(value);
  if (!reads_back_as(text, value)) text = shortest(static_cast<double>(value));
  return with_point(std::move(text));
}

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    if (const char* escape = short_escape(ch)) {
      out += escape;
    } else if (static_cast<unsigned char>(ch) < 0x20 || ch == '\x7f') {
      // Control characters without a short escape; UTF-8 bytes (>= 0x80) pass through as text.
      out += fmt::format("\\u{:04X}", static_cast<unsigned>(static_cast<unsigned char>(ch)));
    } else {
      out += ch;
    }
  }
  out += '"';
  return out;
}

}  // namespace zernel::config::detail
