#include <gtest/gtest.h>

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "config/config.hpp"
#include "config/format.hpp"

namespace zernel::config {
namespace {

using policy::PriorityClass;

// Dumps, parses back and returns what came back (defaults and a failure when it did not parse).
Config round_trip(const Config& c) {
  const std::string text = dump_config(c);
  auto parsed = parse_config(text, "<dump>");
  EXPECT_TRUE(parsed.ok()) << (parsed.ok() ? "" : parsed.error().message()) << "\n" << text;
  return parsed.ok() ? parsed->config : Config{};
}

TEST(Config, dump_of_the_defaults_round_trips) { EXPECT_EQ(round_trip(Config{}), Config{}); }

TEST(Config, dump_writes_every_key_of_every_section) {
  Config c;
  c.tenants.push_back(TenantConfig{{"a", 1, PriorityClass::training, 1.5F, {}, {}}, {}});
  const std::string text = dump_config(c);
  EXPECT_EQ(text.rfind("# ", 0), 0U) << "starts with a comment header";
  for (const char* key : {"[general]",
                          "phase_eval_interval_ms = 100",
                          "gpu_poll_interval_ms = 500",
                          "max_tracked_tasks = 65536",
                          "log_level = \"info\"",
                          "[phase_detection]",
                          "io_wait_threshold = 0.3",
                          "optimizer_burst_max_ns = 5000000",
                          "gpu_idle_threshold = 10",
                          "gpu_active_threshold = 80",
                          "phase_stability_count = 3",
                          "nccl_detection_enabled = true",
                          "[numa]",
                          "enabled = true",
                          "gpu_affinity = true",
                          "memory_affinity = true",
                          "[multi_tenant]",
                          "enabled = false",
                          "default_priority_class = \"training\"",
                          "[telemetry]",
                          "metrics_port = 9093",
                          "metrics_address = \"127.0.0.1\"",
                          "push_interval_ms = 1000",
                          "[power]",
                          "dry_run = false",
                          "manage_gpu = true",
                          "manage_cpu = true",
                          "[[tenants]]",
                          "id = \"a\"",
                          "gpus = 1",
                          "class = \"training\"",
                          "cpu_weight = 1.5",
                          "[tenants.match]",
                          "comm = []",
                          "cmdline = []",
                          "cgroup = []",
                          "uid = []"}) {
    EXPECT_NE(text.find(key), std::string::npos) << key << " missing from\n" << text;
  }
}

TEST(Config, dump_round_trips_tenants_odd_floats_and_odd_strings) {
  Config c;
  c.general.log_level = "warn";
  c.phase_detection.io_wait_threshold = 0.1F + 0.2F;  // not the float nearest 0.3
  c.phase_detection.gpu_idle_threshold = 0;
  c.phase_detection.gpu_active_threshold = 100;
  c.phase_detection.optimizer_burst_max_ns = std::numeric_limits<std::int64_t>::max();
  c.multi_tenant.enabled = true;
  c.multi_tenant.default_priority_class = PriorityClass::interactive;
  c.telemetry.metrics_address = "fe80::1";
  c.telemetry.metrics_port = 65535;
  c.power = PowerConfig{true, true, false, true};
  TenantConfig a{{"team-a", 0, PriorityClass::background, 0.01F, {}, {}}, {}};
  a.match.comm = {"py\"thon*", "back\\slash", "tab\there", "日本語"};
  a.match.cmdline = {"*train.py --rank [0-9]*", std::string("ctl\x01\x7f", 5)};
  a.match.cgroup = {"/kubepods.slice/team-a"};
  a.match.uid = {0, 4294967294U};
  c.tenants.push_back(a);
  c.tenants.push_back(
      TenantConfig{{"b.c:d@e_f", 4096, PriorityClass::inference, 100.0F, {}, {}}, {}});
  c.tenants.push_back(TenantConfig{{"g", 3, PriorityClass::training, 1.0F / 3.0F, {}, {}}, {}});
  c.tenants.push_back(TenantConfig{{"h", 3, PriorityClass::training, std::nullopt, {}, {}}, {}});
  EXPECT_EQ(round_trip(c), c);
}

// Every float the config can hold must come back bit for bit, including those whose shortest
// float spelling would be rounded twice (to double, then to float) by the parser.
TEST(Config, floats_are_printed_so_that_they_read_back_exactly) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> bits(0, 0x7f7fffffU);  // all finite non-negative
  for (int i = 0; i < 200'000; ++i) {
    const float value = std::bit_cast<float>(bits(rng));
    const std::string text = detail::format_float(value);
    ASSERT_NE(text.find_first_of(".e"), std::string::npos) << text;
    double parsed = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
    ASSERT_EQ(ec, std::errc()) << text;
    ASSERT_EQ(end, text.data() + text.size()) << text;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(static_cast<float>(parsed)),
              std::bit_cast<std::uint32_t>(value))
        << text;
  }
  // The one positive finite float whose shortest spelling, 7.038531e-26, reads back as another
  // float through a double (found by an exhaustive sweep): it must take the fallback spelling.
  const float twice_rounded = std::bit_cast<float>(0x15ae43fdU);
  const std::string text = detail::format_float(twice_rounded);
  EXPECT_NE(text, "7.038531e-26");
  double parsed = 0;
  std::from_chars(text.data(), text.data() + text.size(), parsed);
  EXPECT_EQ(static_cast<float>(parsed), twice_rounded) << text;
  Config c;
  c.phase_detection.io_wait_threshold = twice_rounded;
  EXPECT_EQ(round_trip(c), c);

  EXPECT_EQ(detail::format_float(0.3F), "0.3");
  EXPECT_EQ(detail::format_float(1.0F), "1.0");
  EXPECT_EQ(detail::format_float(100.0F), "100.0");
}

// Random valid configs, generated with a fixed seed so a failure reproduces.
class RandomConfig {
 public:
  explicit RandomConfig(std::uint32_t seed) : rng_(seed) {}

  Config next() {
    Config c;
    c.general.phase_eval_interval_ms = uniform<std::uint32_t>(1, 60'000);
    c.general.gpu_poll_interval_ms =
        uniform<std::uint32_t>(c.general.phase_eval_interval_ms, 4'000'000'000U);
    c.general.max_tracked_tasks = uniform<std::uint32_t>(1, policy::kMaxTrackedTasksLimit);
    c.general.log_level =
        pick({"trace", "debug", "info", "warn", "warning", "error", "critical", "off"});
    c.phase_detection.io_wait_threshold = fraction();
    c.phase_detection.optimizer_burst_max_ns =
        uniform<std::uint64_t>(1, std::numeric_limits<std::int64_t>::max());
    c.phase_detection.gpu_idle_threshold = static_cast<std::uint8_t>(uniform<unsigned>(0, 99));
    c.phase_detection.gpu_active_threshold = static_cast<std::uint8_t>(
        uniform<unsigned>(c.phase_detection.gpu_idle_threshold + 1U, 100));
    c.phase_detection.phase_stability_count = uniform<std::uint32_t>(1, kMaxPhaseStabilityCount);
    c.phase_detection.nccl_detection_enabled = coin();
    c.numa = {coin(), coin(), coin()};
    c.multi_tenant = {coin(), priority_class()};
    c.telemetry.metrics_port = static_cast<std::uint16_t>(uniform<unsigned>(1, 65535));
    c.telemetry.metrics_address = pick({"127.0.0.1", "::1", "0.0.0.0", "10.1.2.3", "fe80::1"});
    c.telemetry.push_interval_ms = uniform<std::uint32_t>(1, 4'000'000'000U);
    c.power = {coin(), coin(), coin(), coin()};
    const unsigned tenants = uniform<unsigned>(0, 6);
    for (unsigned i = 0; i < tenants; ++i) c.tenants.push_back(tenant(i));
    return c;
  }

 private:
  template <typename T>
  T uniform(T lo, T hi) {
    return std::uniform_int_distribution<T>(lo, hi)(rng_);
  }
  bool coin() { return uniform<int>(0, 1) == 1; }
  std::string pick(std::initializer_list<const char*> items) {
    return *(items.begin() + uniform<std::size_t>(0, items.size() - 1));
  }
  PriorityClass priority_class() {
    return policy::kAllPriorityClasses.at(uniform<std::size_t>(0, 3));
  }

  // Mostly arbitrary bit patterns in [0, 1], sometimes the edges and tiny subnormals.
  float fraction() {
    switch (uniform<int>(0, 5)) {
      case 0:
        return 0.0F;
      case 1:
        return 1.0F;
      case 2:
        return std::bit_cast<float>(uniform<std::uint32_t>(1, 0x007fffffU));  // subnormal
      default:
        return std::bit_cast<float>(uniform<std::uint32_t>(0, 0x3f800000U));
    }
  }

  float weight() {
    const auto lo = std::bit_cast<std::uint32_t>(policy::kMinExplicitWeight);
    const auto hi = std::bit_cast<std::uint32_t>(policy::kMaxExplicitWeight);
    return std::bit_cast<float>(uniform<std::uint32_t>(lo, hi));
  }

  std::string text(std::string_view alphabet, std::size_t min_len, std::size_t max_len) {
    std::string out;
    const std::size_t n = uniform<std::size_t>(min_len, max_len);
    for (std::size_t i = 0; i < n; ++i)
      out += alphabet[uniform<std::size_t>(0, alphabet.size() - 1)];
    return out;
  }

  // ASCII with every character TOML must escape, plus a multi-byte UTF-8 character.
  std::string pattern() {
    std::string s = text("abcXYZ019 *?[]!-_./\"\\\t\n\x01\x7f", 1, 24);
    if (coin()) s += "é";
    return s;
  }

  std::vector<std::string> patterns() {
    std::vector<std::string> out(uniform<std::size_t>(0, 3));
    for (auto& p : out) p = pattern();
    return out;
  }

  TenantConfig tenant(unsigned index) {
    TenantConfig t;
    // The index keeps ids unique.
    t.spec.id = text("abcdefghijklmnopqrstuvwxyzABC0123456789-_.:@", 1, 40) + std::to_string(index);
    t.spec.gpus = uniform<std::uint32_t>(0, 4096);
    t.spec.priority_class = priority_class();
    if (coin()) t.spec.cpu_weight = weight();
    t.match.comm = patterns();
    t.match.cmdline = patterns();
    for (std::size_t i = uniform<std::size_t>(0, 2); i > 0; --i) {
      // "/" alone is the root; other paths must not end in "/".
      if (coin()) {
        t.match.cgroup.emplace_back("/");
      } else {
        // Appended, not "/" + text(...): GCC 12 at -O3 gives a false -Wrestrict warning on that.
        std::string path = "/";
        path += text("abc./-_ XYZ", 0, 30);
        path += 'z';
        t.match.cgroup.push_back(std::move(path));
      }
    }
    for (std::size_t i = uniform<std::size_t>(0, 3); i > 0; --i) {
      t.match.uid.push_back(uniform<std::uint32_t>(0, 4294967294U));
    }
    return t;
  }

  std::mt19937 rng_;
};

TEST(Config, random_valid_configs_round_trip_through_dump) {
  RandomConfig generator(20240611);
  for (int i = 0; i < 2000; ++i) {
    const Config c = generator.next();
    const Config back = round_trip(c);
    ASSERT_EQ(back, c) << "config #" << i << ":\n" << dump_config(c);
  }
}

}  // namespace
}  // namespace zernel::config
