// Whole-string unsigned integer parsing for what the kernel and our files write (/proc, sysfs,
// cgroupfs, journals): no sign, no spaces, no trailing text, no overflow, else nullopt.
#pragma once

#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace zernel {

inline std::optional<std::uint64_t> parse_u64(std::string_view s, int base = 10) {
  if (s.empty()) return std::nullopt;
  std::uint64_t v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v, base);
  if (ec != std::errc() || p != end) return std::nullopt;
  return v;
}

inline std::optional<std::uint32_t> parse_u32(std::string_view s) {
  auto v = parse_u64(s);
  if (!v || *v > std::numeric_limits<std::uint32_t>::max()) return std::nullopt;
  return static_cast<std::uint32_t>(*v);
}

}  // namespace zernel
