#include "config/config.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zernel::config {
namespace {

using policy::PriorityClass;

::testing::AssertionResult contains(const std::string& text, std::string_view part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "\"" << text << "\"\n  does not contain\n\"" << part << "\"";
}

LoadedConfig parse_ok(std::string_view text) {
  auto result = parse_config(text, "config.toml");
  EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message());
  return result.ok() ? *result : LoadedConfig{};
}

std::string parse_error(std::string_view text) {
  auto result = parse_config(text, "config.toml");
  EXPECT_FALSE(result.ok()) << "accepted:\n" << text;
  return result.ok() ? std::string() : result.error().message();
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

std::string temp_path(std::string_view name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

void write_file(const std::string& path, std::string_view text) { std::ofstream(path) << text; }

// Sets or unsets an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// --- defaults, files, paths -------------------------------------------------------------------

TEST(Config, defaults_equal_the_design_values) {
  const Config c;
  EXPECT_EQ(c.general.phase_eval_interval_ms, 100U);
  EXPECT_EQ(c.general.gpu_poll_interval_ms, 500U);
  EXPECT_EQ(c.general.max_tracked_tasks, 65536U);
  EXPECT_EQ(c.general.log_level, "info");
  EXPECT_EQ(c.phase_detection.io_wait_threshold, 0.3F);
  EXPECT_EQ(c.phase_detection.optimizer_burst_max_ns, 5'000'000U);
  EXPECT_EQ(c.phase_detection.gpu_idle_threshold, 10);
  EXPECT_EQ(c.phase_detection.gpu_active_threshold, 80);
  EXPECT_EQ(c.phase_detection.phase_stability_count, 3U);
  EXPECT_TRUE(c.phase_detection.nccl_detection_enabled);
  EXPECT_TRUE(c.numa.enabled);
  EXPECT_TRUE(c.numa.gpu_affinity);
  EXPECT_TRUE(c.numa.memory_affinity);
  EXPECT_FALSE(c.multi_tenant.enabled);
  EXPECT_EQ(c.multi_tenant.default_priority_class, PriorityClass::training);
  EXPECT_EQ(c.telemetry.metrics_port, 9093);
  EXPECT_EQ(c.telemetry.metrics_address, "127.0.0.1");
  EXPECT_EQ(c.telemetry.push_interval_ms, 1000U);
  EXPECT_TRUE(c.tenants.empty());
}

TEST(Config, empty_text_gives_the_defaults_without_warnings) {
  const LoadedConfig loaded = parse_ok("");
  EXPECT_EQ(loaded.config, Config{});
  EXPECT_TRUE(loaded.warnings.empty());
}

TEST(Config, engine_options_carry_the_engine_part_of_the_config) {
  Config c;
  c.phase_detection.phase_stability_count = 7;
  c.numa.gpu_affinity = false;
  c.multi_tenant.enabled = true;
  c.general.max_tracked_tasks = 1234;
  const policy::EngineOptions o = engine_options(c);
  EXPECT_EQ(o.phase, c.phase_detection);
  EXPECT_EQ(o.numa, c.numa);
  EXPECT_TRUE(o.multi_tenant_enabled);
  EXPECT_EQ(o.max_tracked_tasks, 1234U);
}

TEST(Config, missing_file_with_missing_ok_gives_the_defaults) {
  auto loaded = load_config_file(temp_path("does-not-exist.toml"), true);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_EQ(loaded->config, Config{});
  EXPECT_FALSE(loaded->path.has_value());
  EXPECT_TRUE(loaded->warnings.empty());
}

TEST(Config, missing_file_without_missing_ok_is_an_error_naming_the_path) {
  const std::string path = temp_path("does-not-exist.toml");
  auto loaded = load_config_file(path, false);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().code(), ENOENT);
  EXPECT_EQ(loaded.error().message(), path + ": no such file");
}

TEST(Config, a_directory_is_an_error_not_the_defaults) {
  auto loaded = load_config_file(::testing::TempDir(), true);
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(contains(loaded.error().message(), ::testing::TempDir()));
}

TEST(Config, phase_source_is_events_by_default_and_periodic_on_request) {
  EXPECT_EQ(Config{}.phase_detection.mode, policy::PhaseSource::events);
  const LoadedConfig periodic = parse_ok(
      "[phase_detection]\nmode = \"periodic\"\nevent_sync_hysteresis_ns = 0\n"
      "event_idle_hysteresis_ns = 1000000000\nevent_optimizer_max_ns = 1\n");
  EXPECT_EQ(periodic.config.phase_detection.mode, policy::PhaseSource::periodic);
  EXPECT_EQ(periodic.config.phase_detection.event_sync_hysteresis_ns, 0U);
  EXPECT_EQ(periodic.config.phase_detection.event_idle_hysteresis_ns, 1'000'000'000U);
  EXPECT_EQ(periodic.config.phase_detection.event_optimizer_max_ns, 1U);
  EXPECT_TRUE(contains(parse_error("[phase_detection]\nmode = \"sampled\"\n"),
                       "[phase_detection] mode: unknown mode \"sampled\""));
  EXPECT_TRUE(contains(parse_error("[phase_detection]\nmode = 1\n"), "[phase_detection] mode"));
  EXPECT_TRUE(contains(parse_error("[phase_detection]\nevent_sync_hysteresis_ns = 1000000001\n"),
                       "[phase_detection] event_sync_hysteresis_ns"));
  EXPECT_TRUE(contains(parse_error("[phase_detection]\nevent_optimizer_max_ns = 0\n"),
                       "[phase_detection] event_optimizer_max_ns"));
}

TEST(Config, partial_file_keeps_the_defaults_for_the_rest) {
  const std::string path = temp_path("partial.toml");
  write_file(path, "[general]\nlog_level = \"debug\"\n\n[numa]\ngpu_affinity = false\n");
  auto loaded = load_config_file(path, false);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  Config expected;
  expected.general.log_level = "debug";
  expected.numa.gpu_affinity = false;
  EXPECT_EQ(loaded->config, expected);
  EXPECT_EQ(loaded->path, path);
}

TEST(Config, errors_from_a_file_are_prefixed_with_its_path) {
  const std::string path = temp_path("bad.toml");
  write_file(path, "[general]\nphase_eval_interval_ms = 0\n");
  auto loaded = load_config_file(path, false);
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(contains(loaded.error().message(),
                       path + ": [general] phase_eval_interval_ms: must be at least 1, got 0"));
}

TEST(Config, fixture_with_every_section_is_read) {
  auto loaded = load_config_file(ZERNEL_FIXTURES_DIR "/config/full.toml", false);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  const Config& c = loaded->config;
  EXPECT_EQ(c.general.phase_eval_interval_ms, 50U);
  EXPECT_EQ(c.phase_detection.io_wait_threshold, 0.25F);
  EXPECT_TRUE(c.phase_detection.nccl_detection_enabled);
  EXPECT_TRUE(c.multi_tenant.enabled);
  ASSERT_EQ(c.tenants.size(), 2U);
  EXPECT_EQ(c.tenants[0].spec.id, "team-a");
  EXPECT_EQ(c.tenants[0].spec.gpus, 6U);
  EXPECT_EQ(c.tenants[0].match.cgroup, std::vector<std::string>{"/kubepods.slice/team-a"});
  EXPECT_EQ(c.tenants[1].spec.priority_class, PriorityClass::inference);
  EXPECT_EQ(c.tenants[1].spec.cpu_weight, 0.5F);
  EXPECT_EQ(c.tenants[1].match.uid, (std::vector<std::uint32_t>{1001, 1002}));
  EXPECT_TRUE(loaded->warnings.empty()) << join_lines(loaded->warnings);
}

// The examples in docs/configuration.md must stay valid.
TEST(Config, toml_examples_in_the_docs_are_valid) {
  std::ifstream in(ZERNEL_FIXTURES_DIR "/../../docs/configuration.md");
  ASSERT_TRUE(in) << "docs/configuration.md not found";
  std::string line;
  std::string block;
  bool in_block = false;
  int blocks = 0;
  while (std::getline(in, line)) {
    if (!in_block && line == "```toml") {
      in_block = true;
      block.clear();
    } else if (in_block && line == "```") {
      in_block = false;
      ++blocks;
      auto result = parse_config(block, "docs/configuration.md");
      EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message()) << "\n" << block;
    } else if (in_block) {
      block += line + "\n";
    }
  }
  EXPECT_GT(blocks, 0);
}

TEST(Config, cli_path_wins_over_env_and_default) {
  ScopedEnv env("ZERNEL_SCHEDULER_CONFIG", "/from/env.toml");
  const ConfigPath p = resolve_config_path("/from/cli.toml");
  EXPECT_EQ(p.path, "/from/cli.toml");
  EXPECT_EQ(p.source, ConfigPathSource::cli);
  EXPECT_TRUE(p.is_explicit());
}

TEST(Config, env_var_is_used_when_there_is_no_cli_path) {
  ScopedEnv env("ZERNEL_SCHEDULER_CONFIG", "/from/env.toml");
  const ConfigPath p = resolve_config_path(std::nullopt);
  EXPECT_EQ(p.path, "/from/env.toml");
  EXPECT_EQ(p.source, ConfigPathSource::env);
  EXPECT_TRUE(p.is_explicit());
}

TEST(Config, default_path_is_used_without_cli_path_or_env) {
  ScopedEnv env("ZERNEL_SCHEDULER_CONFIG", nullptr);
  const ConfigPath p = resolve_config_path(std::nullopt);
  EXPECT_EQ(p.path, "/etc/zernel/scheduler.toml");
  EXPECT_EQ(p.source, ConfigPathSource::built_in_default);
  EXPECT_FALSE(p.is_explicit());
}

TEST(Config, empty_env_var_counts_as_unset) {
  ScopedEnv env("ZERNEL_SCHEDULER_CONFIG", "");
  EXPECT_EQ(resolve_config_path(std::nullopt).source, ConfigPathSource::built_in_default);
}

TEST(Config, missing_file_named_by_env_var_is_an_error) {
  const std::string path = temp_path("env-missing.toml");
  ScopedEnv env("ZERNEL_SCHEDULER_CONFIG", path.c_str());
  auto loaded = load_config(std::nullopt);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().message(), path + ": no such file");
}

TEST(Config, file_named_by_env_var_is_loaded) {
  const std::string path = temp_path("env.toml");
  write_file(path, "[telemetry]\nmetrics_port = 9100\n");
  ScopedEnv env("ZERNEL_SCHEDULER_CONFIG", path.c_str());
  auto loaded = load_config(std::nullopt);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_EQ(loaded->config.telemetry.metrics_port, 9100);
}

// --- accepted spellings -----------------------------------------------------------------------

TEST(Config, float_written_as_an_integer_is_accepted) {
  EXPECT_EQ(parse_ok("[phase_detection]\nio_wait_threshold = 1\n")
                .config.phase_detection.io_wait_threshold,
            1.0F);
  const LoadedConfig loaded = parse_ok(
      "[multi_tenant]\nenabled = true\n[[tenants]]\nid = \"a\"\ngpus = 1\ncpu_weight = 2\n");
  EXPECT_EQ(loaded.config.tenants.at(0).spec.cpu_weight, 2.0F);
}

TEST(Config, log_level_is_case_insensitive_and_stored_in_lower_case) {
  EXPECT_EQ(parse_ok("[general]\nlog_level = \"DEBUG\"\n").config.general.log_level, "debug");
}

TEST(Config, priority_class_is_case_insensitive) {
  EXPECT_EQ(parse_ok("[multi_tenant]\ndefault_priority_class = \"Inference\"\n")
                .config.multi_tenant.default_priority_class,
            PriorityClass::inference);
}

TEST(Config, normal_default_class_means_training_with_a_warning) {
  const LoadedConfig loaded = parse_ok("[multi_tenant]\ndefault_priority_class = \"normal\"\n");
  EXPECT_EQ(loaded.config.multi_tenant.default_priority_class, PriorityClass::training);
  ASSERT_EQ(loaded.warnings.size(), 1U);
  EXPECT_TRUE(contains(loaded.warnings[0],
                       "config.toml: [multi_tenant] default_priority_class: \"normal\" is not a "
                       "class; treated as \"training\""));
}

TEST(Config, normal_tenant_class_means_training_with_a_warning) {
  const LoadedConfig loaded = parse_ok(
      "[multi_tenant]\nenabled = true\n[[tenants]]\nid = \"a\"\ngpus = 1\nclass = \"normal\"\n");
  EXPECT_EQ(loaded.config.tenants.at(0).spec.priority_class, PriorityClass::training);
  ASSERT_EQ(loaded.warnings.size(), 1U);
  EXPECT_TRUE(contains(loaded.warnings[0],
                       "[[tenants]] #1 (id \"a\"): class: \"normal\" is not a class; treated as "
                       "\"training\""));
}

TEST(Config, tenant_without_class_gets_the_default_class) {
  const LoadedConfig loaded = parse_ok(
      "[multi_tenant]\nenabled = true\ndefault_priority_class = \"background\"\n"
      "[[tenants]]\nid = \"a\"\ngpus = 0\n");
  EXPECT_EQ(loaded.config.tenants.at(0).spec.priority_class, PriorityClass::background);
  EXPECT_FALSE(loaded.config.tenants.at(0).spec.cpu_weight.has_value());
}

TEST(Config, tenants_declared_while_multi_tenant_is_disabled_give_a_warning) {
  const LoadedConfig loaded = parse_ok("[[tenants]]\nid = \"a\"\ngpus = 1\n");
  ASSERT_EQ(loaded.warnings.size(), 1U);
  EXPECT_TRUE(contains(loaded.warnings[0], "[multi_tenant] enabled: is false"));
}

TEST(Config, empty_tenants_array_means_no_tenants) {
  EXPECT_TRUE(parse_ok("tenants = []\n").config.tenants.empty());
}

TEST(Config, ipv6_metrics_address_is_accepted) {
  EXPECT_EQ(parse_ok("[telemetry]\nmetrics_address = \"::1\"\n").config.telemetry.metrics_address,
            "::1");
}

TEST(Config, non_loopback_metrics_address_gives_a_warning) {
  const LoadedConfig loaded = parse_ok("[telemetry]\nmetrics_address = \"0.0.0.0\"\n");
  ASSERT_EQ(loaded.warnings.size(), 1U);
  EXPECT_TRUE(contains(loaded.warnings[0],
                       "[telemetry] metrics_address: \"0.0.0.0\" is not a "
                       "loopback address"));
}

TEST(Config, comm_pattern_longer_than_the_kernel_comm_gives_a_warning) {
  const LoadedConfig loaded = parse_ok(
      "[multi_tenant]\nenabled = true\n[[tenants]]\nid = \"a\"\ngpus = 1\n"
      "[tenants.match]\ncomm = [\"a-very-long-process-name\", \"python*\"]\n");
  ASSERT_EQ(loaded.warnings.size(), 1U);
  EXPECT_TRUE(contains(loaded.warnings[0],
                       "match.comm[0]: \"a-very-long-process-name\" is "
                       "longer than 15 bytes"));
}

// --- errors that name the key -----------------------------------------------------------------

TEST(Config, malformed_toml_reports_the_line_and_column) {
  const std::string msg =
      parse_error("[general]\nlog_level = \"info\"\nphase_eval_interval_ms = = 3\n");
  EXPECT_TRUE(contains(msg, "config.toml: invalid TOML at line 3, column"));
}

TEST(Config, unknown_section_is_an_error_listing_the_valid_sections) {
  const std::string msg = parse_error("[genral]\nlog_level = \"info\"\n");
  EXPECT_TRUE(contains(msg, "config.toml: unknown section [genral] (line 1)"));
  EXPECT_TRUE(
      contains(msg,
               "valid sections: [general], [phase_detection], [numa], "
               "[multi_tenant], [telemetry], [power], [sched_ext], [kubernetes], [[tenants]]"));
  EXPECT_TRUE(contains(msg, "did you mean \"general\"?"));
}

TEST(Config, unknown_top_level_key_is_an_error) {
  EXPECT_TRUE(contains(parse_error("log_level = \"info\"\n"),
                       "unknown top-level key \"log_level\" (keys belong in a section)"));
}

TEST(Config, unknown_key_is_an_error_listing_the_valid_keys) {
  const std::string msg = parse_error("[general]\nphase_eval_interval = 100\n");
  EXPECT_TRUE(contains(msg, "config.toml: [general] phase_eval_interval: unknown key (line 2)"));
  EXPECT_TRUE(contains(msg,
                       "valid keys: phase_eval_interval_ms, gpu_poll_interval_ms, "
                       "max_tracked_tasks, log_level"));
  EXPECT_TRUE(contains(msg, "did you mean \"phase_eval_interval_ms\"?"));
}

TEST(Config, unknown_tenant_and_match_keys_are_errors) {
  EXPECT_TRUE(contains(parse_error("[[tenants]]\nid = \"a\"\ngpus = 1\ngpu = 2\n"),
                       "[[tenants]] #1 (id \"a\"): gpu: unknown key"));
  EXPECT_TRUE(contains(
      parse_error("[[tenants]]\nid = \"a\"\ngpus = 1\n[tenants.match]\nexe = [\"x\"]\n"),
      "[[tenants]] #1 (id \"a\"): match.exe: unknown key (line 5); valid keys: comm, cmdline, "
      "cgroup, uid"));
}

TEST(Config, section_that_is_not_a_table_is_an_error) {
  EXPECT_TRUE(
      contains(parse_error("general = 5\n"), "[general]: expected a table, got an integer"));
}

TEST(Config, wrong_type_is_an_error_naming_the_expected_type) {
  EXPECT_TRUE(contains(parse_error("[general]\nphase_eval_interval_ms = \"100\"\n"),
                       "[general] phase_eval_interval_ms: expected an integer, got a string"));
  EXPECT_TRUE(contains(parse_error("[numa]\nenabled = 1\n"),
                       "[numa] enabled: expected a boolean (true or false), got an integer"));
  EXPECT_TRUE(contains(parse_error("[general]\nlog_level = 3\n"),
                       "[general] log_level: expected a string, got an integer"));
  EXPECT_TRUE(contains(parse_error("[phase_detection]\nio_wait_threshold = \"0.3\"\n"),
                       "[phase_detection] io_wait_threshold: expected a number, got a string"));
}

TEST(Config, integer_written_as_a_float_is_rejected_with_a_hint) {
  EXPECT_TRUE(contains(parse_error("[general]\nphase_eval_interval_ms = 100.0\n"),
                       "[general] phase_eval_interval_ms: expected an integer, got a float "
                       "(100.0) (line 2); write 100 without a decimal point"));
}

TEST(Config, negative_integer_is_an_error) {
  EXPECT_TRUE(contains(parse_error("[general]\nmax_tracked_tasks = -1\n"),
                       "[general] max_tracked_tasks: must not be negative, got -1"));
}

TEST(Config, integer_too_large_for_its_field_is_an_error) {
  EXPECT_TRUE(contains(parse_error("[general]\nphase_eval_interval_ms = 5000000000\n"),
                       "[general] phase_eval_interval_ms: must be at most 4294967295, got "
                       "5000000000"));
}

TEST(Config, zero_intervals_are_errors) {
  EXPECT_TRUE(contains(parse_error("[general]\nphase_eval_interval_ms = 0\n"),
                       "config.toml: [general] phase_eval_interval_ms: must be at least 1, got 0"));
  EXPECT_TRUE(contains(parse_error("[general]\ngpu_poll_interval_ms = 0\n"),
                       "[general] gpu_poll_interval_ms: must be at least 1, got 0"));
  EXPECT_TRUE(contains(parse_error("[telemetry]\npush_interval_ms = 0\n"),
                       "[telemetry] push_interval_ms: must be at least 1, got 0"));
}

TEST(Config, gpu_poll_interval_shorter_than_the_eval_interval_is_an_error_that_explains) {
  const std::string msg =
      parse_error("[general]\nphase_eval_interval_ms = 200\ngpu_poll_interval_ms = 100\n");
  EXPECT_TRUE(contains(msg,
                       "[general] gpu_poll_interval_ms: must not be shorter than "
                       "phase_eval_interval_ms (200 ms), got 100 ms (line 3)"));
  EXPECT_TRUE(contains(msg, "GPUs are polled on evaluation ticks"));
}

TEST(Config, gpu_poll_interval_equal_to_the_eval_interval_is_fine) {
  parse_ok("[general]\nphase_eval_interval_ms = 200\ngpu_poll_interval_ms = 200\n");
}

TEST(Config, eval_interval_above_the_default_poll_interval_is_an_error) {
  EXPECT_TRUE(contains(parse_error("[general]\nphase_eval_interval_ms = 1000\n"),
                       "[general] gpu_poll_interval_ms: must not be shorter than "
                       "phase_eval_interval_ms (1000 ms), got 500 ms (line 2)"));
}

TEST(Config, max_tracked_tasks_zero_or_above_the_limit_is_an_error) {
  EXPECT_TRUE(contains(parse_error("[general]\nmax_tracked_tasks = 0\n"),
                       "[general] max_tracked_tasks: must be at least 1, got 0"));
  EXPECT_TRUE(contains(parse_error("[general]\nmax_tracked_tasks = 4194305\n"),
                       "[general] max_tracked_tasks: must be at most 4194304, got 4194305"));
  parse_ok("[general]\nmax_tracked_tasks = 4194304\n");
}

TEST(Config, invalid_log_level_is_an_error_listing_the_levels) {
  EXPECT_TRUE(contains(parse_error("[general]\nlog_level = \"verbose\"\n"),
                       "[general] log_level: unknown log level \"verbose\" (line 2); valid "
                       "levels: trace, debug, info, warn, error, critical, off"));
}

TEST(Config, io_wait_threshold_outside_zero_to_one_is_an_error) {
  EXPECT_TRUE(contains(parse_error("[phase_detection]\nio_wait_threshold = 1.5\n"),
                       "[phase_detection] io_wait_threshold: must be a fraction from 0 to 1, got "
                       "1.5"));
  EXPECT_TRUE(contains(parse_error("[phase_detection]\nio_wait_threshold = -0.1\n"),
                       "[phase_detection] io_wait_threshold: must be a fraction from 0 to 1"));
  parse_ok("[phase_detection]\nio_wait_threshold = 0.0\n");
}

TEST(Config, nan_and_inf_floats_are_errors) {
  EXPECT_TRUE(contains(parse_error("[phase_detection]\nio_wait_threshold = nan\n"),
                       "[phase_detection] io_wait_threshold: must be a finite number, got nan"));
  EXPECT_TRUE(contains(parse_error("[phase_detection]\nio_wait_threshold = -inf\n"),
                       "[phase_detection] io_wait_threshold: must be a finite number, got -inf"));
  EXPECT_TRUE(contains(parse_error("[[tenants]]\nid = \"a\"\ngpus = 1\ncpu_weight = inf\n"),
                       "[[tenants]] #1 (id \"a\"): cpu_weight: must be a finite number, got inf"));
  // Finite as a double, infinite as the float the engine uses.
  EXPECT_TRUE(contains(parse_error("[[tenants]]\nid = \"a\"\ngpus = 1\ncpu_weight = 1e300\n"),
                       "cpu_weight: must be a finite number"));
}

TEST(Config, percentages_above_100_are_errors) {
  EXPECT_TRUE(contains(parse_error("[phase_detection]\ngpu_active_threshold = 101\n"),
                       "[phase_detection] gpu_active_threshold: must be a percentage from 0 to "
                       "100, got 101"));
  EXPECT_TRUE(contains(parse_error("[phase_detection]\ngpu_idle_threshold = -5\n"),
                       "[phase_detection] gpu_idle_threshold: must be a percentage from 0 to "
                       "100, got -5"));
}

TEST(Config, gpu_idle_threshold_not_below_the_active_threshold_is_an_error) {
  EXPECT_TRUE(contains(
      parse_error("[phase_detection]\ngpu_idle_threshold = 80\ngpu_active_threshold = 80\n"),
      "[phase_detection] gpu_idle_threshold: must be below gpu_active_threshold (80), got 80"));
  EXPECT_TRUE(contains(parse_error("[phase_detection]\ngpu_active_threshold = 5\n"),
                       "must be below gpu_active_threshold (5), got 10 (line 2)"));
}

TEST(Config, optimizer_burst_max_ns_zero_is_an_error) {
  EXPECT_TRUE(contains(parse_error("[phase_detection]\noptimizer_burst_max_ns = 0\n"),
                       "[phase_detection] optimizer_burst_max_ns: must be at least 1, got 0"));
}

TEST(Config, phase_stability_count_zero_or_above_1000_is_an_error) {
  EXPECT_TRUE(contains(parse_error("[phase_detection]\nphase_stability_count = 0\n"),
                       "[phase_detection] phase_stability_count: must be at least 1, got 0"));
  EXPECT_TRUE(contains(parse_error("[phase_detection]\nphase_stability_count = 1001\n"),
                       "[phase_detection] phase_stability_count: must be at most 1000, got 1001"));
}

TEST(Config, metrics_port_zero_or_above_65535_is_an_error) {
  EXPECT_TRUE(contains(parse_error("[telemetry]\nmetrics_port = 0\n"),
                       "[telemetry] metrics_port: must be at least 1, got 0"));
  EXPECT_TRUE(contains(parse_error("[telemetry]\nmetrics_port = 65536\n"),
                       "[telemetry] metrics_port: must be at most 65535, got 65536"));
}

TEST(Config, metrics_address_that_is_not_an_ip_literal_is_an_error) {
  EXPECT_TRUE(contains(parse_error("[telemetry]\nmetrics_address = \"localhost\"\n"),
                       "[telemetry] metrics_address: \"localhost\" is not an IP address"));
  EXPECT_TRUE(contains(parse_error("[telemetry]\nmetrics_address = \"[::1]\"\n"),
                       "[telemetry] metrics_address: \"[::1]\" is not an IP address"));
}

TEST(Config, unknown_priority_class_is_an_error_listing_the_classes) {
  EXPECT_TRUE(contains(parse_error("[multi_tenant]\ndefault_priority_class = \"batch\"\n"),
                       "[multi_tenant] default_priority_class: unknown priority class \"batch\" "
                       "(valid: training, inference, interactive, background)"));
  EXPECT_TRUE(contains(parse_error("[[tenants]]\nid = \"a\"\ngpus = 1\nclass = \"batch\"\n"),
                       "[[tenants]] #1 (id \"a\"): class: unknown priority class \"batch\""));
}

TEST(Config, tenant_validation_errors_name_the_tenant) {
  EXPECT_TRUE(contains(parse_error("[[tenants]]\nid = \"a\"\ngpus = 1\n"
                                   "[[tenants]]\nid = \"big\"\ngpus = 5000\n"),
                       "config.toml: [[tenants]] #2 (id \"big\"): gpus: 5000 is more than 4096"));
  EXPECT_TRUE(contains(parse_error("[[tenants]]\nid = \"team a\"\ngpus = 1\n"),
                       "[[tenants]] #1 (id \"team a\"): id \"team a\": may contain only"));
  EXPECT_TRUE(contains(parse_error("[[tenants]]\nid = \"a\"\ngpus = 1\ncpu_weight = 0.0\n"),
                       "[[tenants]] #1 (id \"a\"): cpu_weight: must be between 0.01 and 100"));
  EXPECT_TRUE(contains(parse_error("[[tenants]]\nid = \"a\"\ngpus = -1\n"),
                       "[[tenants]] #1 (id \"a\"): gpus: must not be negative, got -1"));
}

TEST(Config, tenant_without_id_or_gpus_is_an_error) {
  EXPECT_TRUE(contains(parse_error("[[tenants]]\ngpus = 1\n"),
                       "[[tenants]] #1: id: missing (required) (line 1)"));
  EXPECT_TRUE(contains(parse_error("[[tenants]]\nid = \"a\"\n"),
                       "[[tenants]] #1 (id \"a\"): gpus: missing (required)"));
}

TEST(Config, duplicate_tenant_ids_are_an_error) {
  EXPECT_TRUE(contains(parse_error("[[tenants]]\nid = \"a\"\ngpus = 1\n"
                                   "[[tenants]]\nid = \"b\"\ngpus = 1\n"
                                   "[[tenants]]\nid = \"a\"\ngpus = 2\n"),
                       "[[tenants]] #3 (id \"a\"): id: duplicate; [[tenants]] #1 has the same id"));
}

TEST(Config, more_than_max_tenants_is_an_error) {
  std::string text;
  for (std::size_t i = 0; i <= policy::kMaxTenants; ++i) {
    text += "[[tenants]]\nid = \"t" + std::to_string(i) + "\"\ngpus = 1\n";
  }
  EXPECT_TRUE(contains(parse_error(text), "[[tenants]]: at most 1024 tenants, got 1025"));
}

TEST(Config, tenants_as_a_single_table_is_an_error) {
  EXPECT_TRUE(
      contains(parse_error("[tenants]\nid = \"a\"\ngpus = 1\n"),
               "[[tenants]]: expected an array of tables (write [[tenants]]), got a table"));
}

TEST(Config, bad_match_rules_are_errors_naming_the_element) {
  const std::string head = "[[tenants]]\nid = \"a\"\ngpus = 1\n[tenants.match]\n";
  EXPECT_TRUE(contains(parse_error(head + "cgroup = [\"kubepods.slice\"]\n"),
                       "[[tenants]] #1 (id \"a\"): match.cgroup[0]: \"kubepods.slice\" must start "
                       "with /"));
  EXPECT_TRUE(contains(parse_error(head + "cgroup = [\"/kubepods.slice/\"]\n"),
                       "match.cgroup[0]: \"/kubepods.slice/\" must not end with /"));
  EXPECT_TRUE(contains(parse_error(head + "comm = [\"python\", \"\"]\n"),
                       "[[tenants]] #1 (id \"a\"): match.comm[1]: must not be empty"));
  EXPECT_TRUE(contains(parse_error(head + "cmdline = \"python*\"\n"),
                       "match.cmdline: expected an array of strings, got a string"));
  EXPECT_TRUE(contains(parse_error(head + "uid = [1000, -1]\n"),
                       "match.uid[1]: must not be negative, got -1"));
  EXPECT_TRUE(contains(parse_error(head + "uid = [4294967295]\n"),
                       "match.uid[0]: must be at most 4294967294, got 4294967295"));
  EXPECT_TRUE(contains(parse_error("[[tenants]]\nid = \"a\"\ngpus = 1\nmatch = 3\n"),
                       "[[tenants]] #1 (id \"a\"): match: expected a table ([tenants.match]), got "
                       "an integer"));
}

TEST(Config, every_error_is_reported_in_file_order) {
  const std::string msg = parse_error(
      "[telemetry]\nmetrics_port = 0\n[general]\nphase_eval_interval_ms = 0\nlog_level = \"x\"\n");
  const auto port = msg.find("metrics_port");
  const auto interval = msg.find("phase_eval_interval_ms");
  const auto level = msg.find("log_level");
  ASSERT_NE(port, std::string::npos);
  ASSERT_NE(interval, std::string::npos);
  ASSERT_NE(level, std::string::npos);
  EXPECT_LT(port, interval);
  EXPECT_LT(interval, level);
  EXPECT_EQ(std::count(msg.begin(), msg.end(), '\n'), 2);
}

}  // namespace
}  // namespace zernel::config

namespace zernel::config {
namespace {

// --- [power] -----------------------------------------------------------------------------------

TEST(Config, power_is_off_by_default_and_reads_every_key) {
  auto defaults = parse_config("", "config.toml");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->config.power, PowerConfig{});
  EXPECT_FALSE(defaults->config.power.enabled);
  EXPECT_FALSE(defaults->config.power.dry_run);
  EXPECT_TRUE(defaults->config.power.manage_gpu);
  EXPECT_TRUE(defaults->config.power.manage_cpu);

  auto loaded = parse_config(
      "[power]\nenabled = true\ndry_run = true\nmanage_gpu = false\nmanage_cpu = true\n",
      "config.toml");
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_TRUE(loaded->config.power.enabled);
  EXPECT_TRUE(loaded->config.power.dry_run);
  EXPECT_FALSE(loaded->config.power.manage_gpu);
  EXPECT_TRUE(loaded->config.power.manage_cpu);
  EXPECT_TRUE(loaded->warnings.empty());
}

TEST(Config, power_rejects_wrong_types_and_unknown_keys) {
  auto wrong = parse_config("[power]\nenabled = 1\n", "config.toml");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message().find(
                "config.toml: [power] enabled: expected a boolean (true or false), got an integer"),
            std::string::npos)
      << wrong.error().message();
  auto unknown = parse_config("[power]\ndryrun = true\n", "config.toml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("[power] dryrun: unknown key"), std::string::npos);
  EXPECT_NE(unknown.error().message().find("did you mean \"dry_run\"?"), std::string::npos)
      << unknown.error().message();
}

TEST(Config, power_enabled_with_nothing_to_manage_is_a_warning) {
  auto loaded = parse_config(
      "[power]\nenabled = true\nmanage_gpu = false\nmanage_cpu = false\n", "config.toml");
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->warnings.size(), 1U);
  EXPECT_NE(loaded->warnings[0].find("[power]: enabled, but manage_gpu and manage_cpu are both "
                                     "false: nothing is managed"),
            std::string::npos)
      << loaded->warnings[0];
}

}  // namespace
}  // namespace zernel::config

namespace zernel::config {
namespace {

TEST(Config, runtime_state_file_is_an_absolute_path_or_empty) {
  EXPECT_EQ(Config{}.multi_tenant.runtime_state_file, "/var/lib/zernel/runtime-tenants.json");
  EXPECT_EQ(parse_ok("[multi_tenant]\nruntime_state_file = \"/tmp/x/state.json\"\n")
                .config.multi_tenant.runtime_state_file,
            "/tmp/x/state.json");
  EXPECT_EQ(parse_ok("[multi_tenant]\nruntime_state_file = \"\"\n")
                .config.multi_tenant.runtime_state_file,
            "");
  for (const char* bad : {"relative/state.json", "/var/lib/zernel/"}) {
    EXPECT_TRUE(
        contains(parse_error(std::string("[multi_tenant]\nruntime_state_file = \"") + bad + "\"\n"),
                 "[multi_tenant] runtime_state_file"))
        << bad;
  }
}

}  // namespace
}  // namespace zernel::config
