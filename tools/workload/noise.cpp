#include "workload/noise.hpp"

#include <sys/resource.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "workload/clock.hpp"
#include "workload/stop.hpp"

namespace zernel::workload {
namespace {

// Iterations between two looks at the clock and the stop flag (~50-100 us).
constexpr std::uint64_t kCheckEvery = 1U << 16;

std::uint64_t spin(std::uint64_t deadline_ns) {
  std::uint64_t x = 0x853c49e6748fea9bULL;
  std::uint64_t n = 0;
  for (;;) {
    for (std::uint64_t i = 0; i < kCheckEvery; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;  // PCG step
      x ^= x >> 33;
    }
    n += kCheckEvery;
    if (stop_requested() || (deadline_ns != 0 && monotonic_ns() >= deadline_ns)) break;
  }
  // Keeps the loop from being optimised away.
  if (x == 0) n += 1;
  return n;
}

double process_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int run_noise(const NoiseOptions& o) {
  install_stop_handlers();
  const std::uint64_t start = monotonic_ns();
  const std::uint64_t deadline = o.seconds > 0 ? start + ms_to_ns(o.seconds * 1000.0) : 0;
  std::vector<std::uint64_t> iterations(static_cast<std::size_t>(o.threads), 0);
  {
    std::vector<std::jthread> threads;
    threads.reserve(iterations.size());
    for (std::uint64_t& count : iterations) {
      threads.emplace_back([&count, deadline] { count = spin(deadline); });
    }
  }
  const double elapsed_s = static_cast<double>(monotonic_ns() - start) / 1e9;
  std::uint64_t total = 0;
  for (std::uint64_t n : iterations) total += n;

  nlohmann::ordered_json j;
  j["mode"] = "noise";
  j["threads"] = o.threads;
  j["elapsed_s"] = std::round(elapsed_s * 1e4) / 1e4;
  j["cpu_s"] = std::round(process_cpu_s() * 1e4) / 1e4;
  j["iterations"] = total;
  j["interrupted"] = stop_requested();
  fmt::print("{}\n", j.dump());
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace zernel::workload
