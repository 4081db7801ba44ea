#pragma once
// Priority -> CPU weight, on the kernel's scale (1024 = priority 0 = nice 0).
//
// Each priority step multiplies the weight by 1.25, as each nice level does in Linux, so a task
// with priority +1 gets about 25% more CPU than one with 0 when both are busy. The table covers
// priorities -20..+20 (weights 12..88,818); priorities outside are clamped. Phase priorities are
// -5..+10 and class priorities -5..+5, so decisions use -10..+15:
//
//   priority  -10  -5    0     5     10     15
//   weight    110  336  1024  3125  9537  29104
//
// priority_for_nice() maps the other way for backends that speak nice (nice = -priority, clamped
// to -20..19).

#include <cstdint>

namespace zernel::policy {

inline constexpr std::int32_t kMinPriority = -20;
inline constexpr std::int32_t kMaxPriority = 20;
inline constexpr std::uint32_t kDefaultWeight = 1024;

std::uint32_t weight_for_priority(std::int32_t priority);

// The nice value whose kernel weight is closest: -priority clamped to -20..19.
std::int32_t nice_for_priority(std::int32_t priority);

}  // namespace zernel::policy
