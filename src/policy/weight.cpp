#include "policy/weight.hpp"

#include <algorithm>
#include <array>

namespace zernel::policy {
namespace {

// round(1024 * 1.25^p) for p = -20..20, computed at compile time.
constexpr std::array<std::uint32_t, 41> make_table() {
  std::array<std::uint32_t, 41> t{};
  for (int p = kMinPriority; p <= kMaxPriority; ++p) {
    double w = 1024.0;
    for (int i = 0; i < (p < 0 ? -p : p); ++i) w = p < 0 ? w / 1.25 : w * 1.25;
    // w >= 11.8, so w + 0.5 truncated is round-half-up; std::lround is not constexpr in C++20.
    t[static_cast<std::size_t>(p - kMinPriority)] =
        static_cast<std::uint32_t>(w + 0.5);  // NOLINT(bugprone-incorrect-roundings)
  }
  return t;
}
constexpr auto kWeights = make_table();
static_assert(kWeights[20] == 1024);
static_assert(kWeights[21] == 1280);
static_assert(kWeights[19] == 819);

}  // namespace

std::uint32_t weight_for_priority(std::int32_t priority) {
  const std::int32_t p = std::clamp(priority, kMinPriority, kMaxPriority);
  return kWeights[static_cast<std::size_t>(p - kMinPriority)];
}

std::int32_t nice_for_priority(std::int32_t priority) {
  // Clamp before negating: -INT32_MIN overflows.
  return -std::clamp(priority, -19, 20);
}

}  // namespace zernel::policy
