// The runtime tenants' state file: its reader and writer on good and hostile files, and
// RuntimeControl saving to it and restoring from it across a "restart" (a second RunningDaemon
// on the same file).

#include "daemon/runtime_state.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/runtime_fakes.hpp"
#include "support/log_capture.hpp"
#include "support/temp_tree.hpp"

namespace zernel::daemon {
namespace {

using test::RunningDaemon;
using test::tenant;
using test_support::LogCapture;
using test_support::TempTree;

RuntimeState sample_state() {
  RuntimeState s;
  policy::TenantSpec a;
  a.id = "team-a";
  a.gpus = 4;
  a.priority_class = policy::PriorityClass::inference;
  a.cpu_weight = 1.5F;
  policy::TenantSpec b;
  b.id = "ns:team-b.x@y";
  b.gpus = 0;
  s.tenants = {a, b};
  s.assigned = {{4242, 777, "team-a"}};
  return s;
}

std::string state_path(const TempTree& t) { return t.path("lib/zernel/runtime-tenants.json"); }

TEST(RuntimeState, written_text_parses_back_to_the_same_state) {
  const RuntimeState s = sample_state();
  auto back = parse_runtime_state(runtime_state_text(s));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->tenants, s.tenants);
  EXPECT_EQ(back->assigned, s.assigned);
}

TEST(RuntimeState, write_creates_a_private_directory_and_a_0600_file_that_reads_back) {
  TempTree t;
  const std::string path = state_path(t);
  ASSERT_TRUE(write_runtime_state(path, sample_state()).ok());
  struct stat st{};
  ASSERT_EQ(::stat(t.path("lib/zernel").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700U);
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600U);
  auto r = read_runtime_state(path);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->tenants, sample_state().tenants);
  // No temporary file is left next to it.
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(t.path("lib/zernel"))) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1U);
}

TEST(RuntimeState, a_missing_file_is_nothing_to_restore) {
  TempTree t;
  auto r = read_runtime_state(state_path(t));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
}

TEST(RuntimeState, a_symlink_is_refused_fail) {
  TempTree t;
  ASSERT_TRUE(write_runtime_state(t.path("real.json"), sample_state()).ok());
  std::filesystem::create_symlink(t.path("real.json"), t.path("link.json"));
  auto r = read_runtime_state(t.path("link.json"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ELOOP);
}

TEST(RuntimeState, a_fifo_is_refused_without_blocking_fail) {
  TempTree t;
  ASSERT_EQ(::mkfifo(t.path("fifo.json").c_str(), 0600), 0);
  auto r = read_runtime_state(t.path("fifo.json"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ENXIO);
}

// (A group-writable file is refused unless the group is root's or the daemon's own:
// trusted_file's rule, tested in tests/unit/common.)
TEST(RuntimeState, a_world_writable_file_is_refused_fail) {
  TempTree t;
  const std::string path = state_path(t);
  ASSERT_TRUE(write_runtime_state(path, sample_state()).ok());
  ASSERT_EQ(::chmod(path.c_str(), 0602), 0);
  auto r = read_runtime_state(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), EPERM);
}

TEST(RuntimeState, a_huge_file_is_refused_unread_fail) {
  TempTree t;
  const std::string path = t.path("huge.json");
  {
    std::ofstream f(path);
    f << std::string(kMaxRuntimeStateBytes + 1, ' ');
  }
  ::chmod(path.c_str(), 0600);
  auto r = read_runtime_state(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), EFBIG);
}

TEST(RuntimeState, truncated_or_invalid_text_is_refused_naming_the_entry_fail) {
  const std::string good = runtime_state_text(sample_state());
  EXPECT_FALSE(parse_runtime_state(good.substr(0, good.size() / 2)).ok());
  EXPECT_FALSE(parse_runtime_state("").ok());
  EXPECT_FALSE(parse_runtime_state("[]").ok());
  EXPECT_FALSE(parse_runtime_state(R"({"version":2,"tenants":[]})").ok());
  EXPECT_FALSE(parse_runtime_state(R"({"version":1,"extra":1})").ok());
  EXPECT_FALSE(parse_runtime_state(R"({"version":1,"tenants":{}})").ok());
  // Each tenant is checked as a `tenant add` request is.
  auto bad_gpus = parse_runtime_state(
      R"({"version":1,"tenants":[{"id":"a","gpus":1,"class":"training"},{"id":"b","gpus":99999,"class":"training"}]})");
  ASSERT_FALSE(bad_gpus.ok());
  EXPECT_NE(bad_gpus.error().message().find("tenants[1]"), std::string::npos)
      << bad_gpus.error().message();
  EXPECT_FALSE(
      parse_runtime_state(R"({"version":1,"tenants":[{"id":"a","gpus":1,"class":"nope"}]})").ok());
  EXPECT_FALSE(
      parse_runtime_state(R"({"version":1,"tenants":[{"op":"tenant_remove","id":"a"}]})").ok());
  EXPECT_FALSE(
      parse_runtime_state(
          R"({"version":1,"tenants":[{"id":"a","gpus":1,"class":"training","cpu_weight":1e9}]})")
          .ok());
  // Each assignment as a `tenant assign` request, plus its start time.
  EXPECT_FALSE(
      parse_runtime_state(R"({"version":1,"assigned":[{"pid":0,"start":1,"tenant":"a"}]})").ok());
  EXPECT_FALSE(parse_runtime_state(R"({"version":1,"assigned":[{"pid":5,"tenant":"a"}]})").ok());
  EXPECT_FALSE(
      parse_runtime_state(R"({"version":1,"assigned":[{"pid":5,"start":-1,"tenant":"a"}]})").ok());
  EXPECT_TRUE(parse_runtime_state(R"({"version":1})").ok()) << "both lists may be absent";
}

TEST(RuntimeControlState, runtime_changes_are_saved_and_restored_by_the_next_daemon) {
  TempTree t;
  const std::string path = state_path(t);
  {
    RunningDaemon d({tenant("config-t", 2)}, path);
    d.host.add_process(4242, "python", 777);
    d.host.add_process(4343, "python", 888);
    ControlRequest add;
    add.op = ControlOp::tenant_add;
    add.tenant = {"team-a", 4, policy::PriorityClass::inference, 2.0F, {}, {}};
    ASSERT_TRUE(d.control.handle(add).at("ok").get<bool>());
    add.tenant = {"team-b", 1, policy::PriorityClass::background, std::nullopt, {}, {}};
    ASSERT_TRUE(d.control.handle(add).at("ok").get<bool>());
    ControlRequest assign;
    assign.op = ControlOp::tenant_assign;
    assign.pid = 4242;
    assign.assign_to = "team-a";
    ASSERT_TRUE(d.control.handle(assign).at("ok").get<bool>());
    assign.pid = 4343;
    assign.assign_to = "config-t";
    ASSERT_TRUE(d.control.handle(assign).at("ok").get<bool>());
    ControlRequest remove;
    remove.op = ControlOp::tenant_remove;
    remove.tenant.id = "team-b";
    ASSERT_TRUE(d.control.handle(remove).at("ok").get<bool>());
  }
  RunningDaemon d({tenant("config-t", 2)}, path);
  d.host.add_process(4242, "python", 777);
  d.host.add_process(4343, "python", 888);
  d.control.restore_saved_state();
  EXPECT_EQ(d.registered(), (std::vector<std::string>{"config-t", "team-a"}));
  EXPECT_TRUE(d.control.runtime_tenants().contains("team-a"));
  EXPECT_EQ(d.engine.tenants().spec(*d.engine.tenants().find("team-a")),
            (policy::TenantSpec{"team-a", 4, policy::PriorityClass::inference, 2.0F, {}, {}}));
  ASSERT_NE(d.engine.tenant_of(4242), nullptr);
  EXPECT_EQ(d.engine.tenant_of(4242)->id, "team-a");
  ASSERT_NE(d.engine.tenant_of(4343), nullptr);
  EXPECT_EQ(d.engine.tenant_of(4343)->id, "config-t");
  using Calls = std::vector<std::pair<std::uint32_t, std::uint64_t>>;
  EXPECT_EQ(d.host.tracked, (Calls{{4242, 777}, {4343, 888}}));
  const nlohmann::json list = d.control.tenant_list();
  ASSERT_EQ(list.size(), 2U);
  EXPECT_EQ(list[1].at("source"), "runtime");
}

TEST(RuntimeControlState, a_process_that_is_gone_or_replaced_is_not_restored) {
  TempTree t;
  const std::string path = state_path(t);
  RuntimeState s;
  s.tenants = {
      policy::TenantSpec{"team-a", 1, policy::PriorityClass::training, std::nullopt, {}, {}}};
  s.assigned = {{100, 5, "team-a"}, {200, 6, "team-a"}, {300, 7, "team-a"}};
  ASSERT_TRUE(write_runtime_state(path, s).ok());
  RunningDaemon d({}, path);
  d.host.add_process(100, "python", 5);   // the same process
  d.host.add_process(200, "python", 60);  // the pid reused by another process
  d.control.restore_saved_state();
  ASSERT_NE(d.engine.tenant_of(100), nullptr);
  EXPECT_EQ(d.engine.tenant_of(200), nullptr);
  EXPECT_EQ(d.engine.tenant_of(300), nullptr);
  using Calls = std::vector<std::pair<std::uint32_t, std::uint64_t>>;
  EXPECT_EQ(d.host.tracked, (Calls{{100, 5}}));
}

TEST(RuntimeControlState, the_configuration_wins_over_a_saved_tenant_of_the_same_id) {
  TempTree t;
  const std::string path = state_path(t);
  RuntimeState s;
  s.tenants = {
      policy::TenantSpec{"team-a", 7, policy::PriorityClass::background, std::nullopt, {}, {}},
      policy::TenantSpec{"team-b", 1, policy::PriorityClass::training, std::nullopt, {}, {}}};
  ASSERT_TRUE(write_runtime_state(path, s).ok());
  RunningDaemon d({tenant("team-a", 2)}, path);
  LogCapture log;
  d.control.restore_saved_state();
  EXPECT_EQ(d.registered(), (std::vector<std::string>{"team-a", "team-b"}));
  EXPECT_EQ(d.engine.tenants().spec(*d.engine.tenants().find("team-a")).gpus, 2U);
  EXPECT_FALSE(d.control.runtime_tenants().contains("team-a"));
  EXPECT_TRUE(d.control.runtime_tenants().contains("team-b"));
  EXPECT_TRUE(test_support::contains(log.text(), "defined by the configuration")) << log.text();
}

TEST(RuntimeControlState, a_reload_that_defines_a_runtime_tenant_drops_it_from_the_file) {
  TempTree t;
  const std::string path = state_path(t);
  RunningDaemon d({}, path);
  ControlRequest add;
  add.op = ControlOp::tenant_add;
  add.tenant = {"team-a", 4, policy::PriorityClass::training, std::nullopt, {}, {}};
  ASSERT_TRUE(d.control.handle(add).at("ok").get<bool>());
  config::Config next;
  next.tenants = {tenant("team-a", 1)};
  ASSERT_TRUE(d.control.reload(next, "test.toml").ok());
  auto r = read_runtime_state(path);
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_TRUE((*r)->tenants.empty());
}

TEST(RuntimeControlState, a_forged_or_corrupt_file_is_logged_and_ignored_fail) {
  TempTree t;
  const std::string path = state_path(t);
  ASSERT_TRUE(write_runtime_state(path, sample_state()).ok());
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  {
    RunningDaemon d({tenant("config-t", 1)}, path);
    LogCapture log;
    d.control.restore_saved_state();
    EXPECT_EQ(d.registered(), (std::vector<std::string>{"config-t"}));
    EXPECT_TRUE(test_support::contains(log.text(), "ignored")) << log.text();
    EXPECT_TRUE(test_support::contains(log.text(), path)) << log.text();
  }
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  {
    std::ofstream f(path, std::ios::trunc);
    f << R"({"version":1,"tenants":[{"id":"x","gpus":1,"cl)";
  }
  RunningDaemon d({}, path);
  LogCapture log;
  d.control.restore_saved_state();
  EXPECT_TRUE(d.registered().empty());
  EXPECT_TRUE(test_support::contains(log.text(), "not valid JSON")) << log.text();
}

TEST(RuntimeControlState, an_unwritable_state_file_is_logged_and_the_change_still_made) {
  TempTree t;
  // A directory where the file should be: the rename fails.
  std::filesystem::create_directories(t.path("lib/zernel/runtime-tenants.json"));
  ::chmod(t.path("lib/zernel").c_str(), 0700);
  RunningDaemon d({}, state_path(t));
  LogCapture log;
  ControlRequest add;
  add.op = ControlOp::tenant_add;
  add.tenant = {"team-a", 4, policy::PriorityClass::training, std::nullopt, {}, {}};
  EXPECT_TRUE(d.control.handle(add).at("ok").get<bool>());
  EXPECT_EQ(d.registered(), (std::vector<std::string>{"team-a"}));
  EXPECT_TRUE(test_support::contains(log.text(), "not saved")) << log.text();
}

}  // namespace
}  // namespace zernel::daemon
