#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include "daemon/runtime_control.hpp"
#include "daemon/runtime_fakes.hpp"
#include "support/log_capture.hpp"
#include "support/temp_tree.hpp"

namespace zernel::daemon {
namespace {

using test::RunningDaemon;
using test::tenant;

// Puts the global log level back after a test that reloads a log_level.
class LevelGuard {
 public:
  LevelGuard() : level_(spdlog::get_level()) {}
  ~LevelGuard() { spdlog::set_level(level_); }
  LevelGuard(const LevelGuard&) = delete;
  LevelGuard& operator=(const LevelGuard&) = delete;

 private:
  spdlog::level::level_enum level_;
};

void add_runtime_tenant(RunningDaemon& d, const std::string& id) {
  ControlRequest r;
  r.op = ControlOp::tenant_add;
  r.tenant.id = id;
  r.tenant.gpus = 1;
  ASSERT_TRUE(d.control.handle(r).at("ok").get<bool>());
}

TEST(Reload, a_good_config_applies_every_runtime_setting) {
  LevelGuard level;
  RunningDaemon d({tenant("old", 2), tenant("kept", 2, {"python*"})});
  config::Config next = d.config;
  next.tenants = {tenant("kept", 4, {"torchrun*"}), tenant("new", 1)};
  next.multi_tenant.protected_comms = {"sshd*"};
  next.multi_tenant.default_priority_class = policy::PriorityClass::inference;
  next.general.log_level = "debug";

  ASSERT_TRUE(d.control.reload(next, "test.toml").ok());
  EXPECT_EQ(d.registered(), (std::vector<std::string>{"kept", "new"}));
  EXPECT_EQ(d.config.tenants, next.tenants) << "specs and match rules";
  const auto slot = d.engine.tenants().find("kept");
  ASSERT_TRUE(slot.has_value());
  EXPECT_EQ(d.engine.tenants().spec(*slot).gpus, 4U);
  EXPECT_EQ(d.config.multi_tenant.protected_comms, std::vector<std::string>{"sshd*"});
  EXPECT_EQ(d.config.multi_tenant.default_priority_class, policy::PriorityClass::inference);
  EXPECT_EQ(d.config.general.log_level, "debug");
  EXPECT_EQ(spdlog::get_level(), spdlog::level::debug);
}

TEST(Reload, a_config_with_an_invalid_tenant_changes_nothing) {
  LevelGuard level;
  RunningDaemon d({tenant("a", 2), tenant("b", 2)});
  const config::Config before = d.config;
  config::Config next = d.config;
  next.tenants = {tenant("c", 1), tenant("d", 5000)};  // d: more GPUs than validate_tenant allows
  next.multi_tenant.protected_comms = {"sshd*"};
  next.general.log_level = "trace";

  auto r = d.control.reload(next, "test.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("tenant \"d\""), std::string::npos) << r.error().message();
  EXPECT_EQ(d.config, before);
  EXPECT_EQ(d.registered(), (std::vector<std::string>{"a", "b"}));
  EXPECT_NE(spdlog::get_level(), spdlog::level::trace);
}

TEST(Reload, too_many_tenants_with_the_runtime_ones_changes_nothing) {
  RunningDaemon d;
  add_runtime_tenant(d, "runtime");
  const config::Config before = d.config;
  config::Config next = d.config;
  next.tenants.clear();
  for (std::size_t i = 0; i < policy::kMaxTenants; ++i) {
    next.tenants.push_back(tenant("t" + std::to_string(i), 1));
  }
  auto r = d.control.reload(next, "test.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(),
            "test.toml: with the tenants added at run time, more than 1024 tenants");
  EXPECT_EQ(d.config, before);
  EXPECT_EQ(d.registered(), std::vector<std::string>{"runtime"});
}

TEST(Reload, runtime_tenants_are_kept_unless_the_file_defines_them) {
  RunningDaemon d({tenant("file", 2)});
  add_runtime_tenant(d, "kept");
  add_runtime_tenant(d, "defined");
  config::Config next = d.config;
  next.tenants = {tenant("defined", 3, {"python*"})};

  ASSERT_TRUE(d.control.reload(next, "test.toml").ok());
  EXPECT_EQ(d.registered(), (std::vector<std::string>{"defined", "kept"}));
  EXPECT_TRUE(d.control.runtime_tenants().contains("kept"));
  EXPECT_FALSE(d.control.runtime_tenants().contains("defined")) << "the file's now";
  ASSERT_EQ(d.config.tenants.size(), 2U);
  EXPECT_EQ(d.config.tenants[0], next.tenants[0]);
  EXPECT_EQ(d.config.tenants[1].spec.id, "kept");
}

TEST(Reload, settings_fixed_at_start_are_logged_and_not_applied) {
  test_support::LogCapture log;
  RunningDaemon d;
  config::Config next = d.config;
  next.general.phase_eval_interval_ms = 50;
  next.numa.enabled = !next.numa.enabled;
  next.telemetry.metrics_port = 9999;

  ASSERT_TRUE(d.control.reload(next, "test.toml").ok());
  EXPECT_EQ(
      settings_needing_restart(d.config, next),
      (std::vector<std::string>{"[general] phase_eval_interval_ms", "[numa]", "[telemetry]"}));
  EXPECT_NE(d.config.general.phase_eval_interval_ms, 50U);
  EXPECT_TRUE(
      test_support::contains(log.text(), "[general] phase_eval_interval_ms, [numa], [telemetry]"))
      << log.text();
}

TEST(Reload, an_unreadable_or_invalid_file_changes_nothing) {
  test_support::TempTree tree;
  tree.write("bad.toml", "[general]\nphase_eval_interval_ms = \"fast\"\n");
  RunningDaemon d({tenant("a", 2)});
  const config::Config before = d.config;
  EXPECT_FALSE(d.control.reload_file(tree.path("bad.toml").string(), false).ok());
  EXPECT_FALSE(d.control.reload_file(tree.path("missing.toml").string(), false).ok());
  auto none = d.control.reload_file("", false);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message(), "no configuration file to reload");
  EXPECT_EQ(d.config, before);
  EXPECT_EQ(d.registered(), std::vector<std::string>{"a"});
}

TEST(Reload, a_file_is_read_and_applied) {
  test_support::TempTree tree;
  tree.write("ok.toml",
             "[[tenants]]\nid = \"team-a\"\ngpus = 2\nclass = \"training\"\n"
             "[tenants.match]\ncomm = [\"python*\"]\n");
  RunningDaemon d;
  ASSERT_TRUE(d.control.reload_file(tree.path("ok.toml").string(), false).ok());
  EXPECT_EQ(d.registered(), std::vector<std::string>{"team-a"});
  ASSERT_EQ(d.config.tenants.size(), 1U);
  EXPECT_EQ(d.config.tenants[0].match.comm, std::vector<std::string>{"python*"});
}

}  // namespace
}  // namespace zernel::daemon
