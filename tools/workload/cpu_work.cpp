#include "workload/cpu_work.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "workload/clock.hpp"
#include "workload/stop.hpp"

namespace zernel::workload {
namespace {

// Work between two reads of the thread CPU clock (a syscall of a few hundred ns): ~10-20 us.
constexpr std::size_t kDecodeChunk = 16 * 1024;
constexpr std::size_t kParams = 4096;

}  // namespace

std::uint64_t decode(std::span<const std::byte> in, std::span<std::byte> out,
                     std::uint64_t cpu_ns) {
  const std::size_t n = std::min(in.size(), out.size());
  const std::uint64_t start = thread_cpu_ns();
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;
  std::uint64_t sum = 0;
  if (n == 0) return 0;
  // The first pass always completes (every byte is decoded once); later passes stop as soon as the
  // CPU time is spent.
  for (bool first = true;; first = false) {
    for (std::size_t off = 0; off < n; off += kDecodeChunk) {
      const std::size_t end = std::min(n, off + kDecodeChunk);
      for (std::size_t i = off; i < end; ++i) {
        state = (state ^ static_cast<std::uint64_t>(in[i])) * 0x100000001b3ULL;
        state ^= state >> 29;
        const auto o = static_cast<std::uint8_t>(state ^ (state >> 17));
        out[i] = static_cast<std::byte>(o);
        sum = sum * 31 + o;
      }
      if (!first && thread_cpu_ns() - start >= cpu_ns) return sum ^ state;
      if (stop_requested()) return sum ^ state;
    }
    if (thread_cpu_ns() - start >= cpu_ns) return sum ^ state;
  }
}

std::uint64_t burn_cpu(std::uint64_t cpu_ns) {
  std::array<float, kParams> params{};
  std::array<float, kParams> grads{};
  for (std::size_t i = 0; i < kParams; ++i) {
    params[i] = static_cast<float>(i) * 0.001f;
    grads[i] = static_cast<float>(i % 97) * 0.01f - 0.5f;
  }
  const std::uint64_t start = thread_cpu_ns();
  std::uint64_t rounds = 0;
  do {
    const float lr = 1e-3f / static_cast<float>(rounds + 1);
    for (std::size_t i = 0; i < kParams; ++i) {
      params[i] -= lr * grads[i];
      grads[i] = grads[i] * 0.999f + params[i] * 1e-4f;
    }
    ++rounds;
  } while (thread_cpu_ns() - start < cpu_ns);
  std::uint32_t bits = 0;
  std::memcpy(&bits, &params[kParams / 2], sizeof bits);
  return rounds ^ bits;
}

}  // namespace zernel::workload
