#include "daemon/runtime_control.hpp"

#include <gtest/gtest.h>

#include "daemon/runtime_fakes.hpp"

namespace zernel::daemon {
namespace {

using test::RunningDaemon;
using test::tenant;

ControlRequest add_request(std::string id, std::uint32_t gpus) {
  ControlRequest r;
  r.op = ControlOp::tenant_add;
  r.tenant.id = std::move(id);
  r.tenant.gpus = gpus;
  return r;
}

ControlRequest remove_request(std::string id) {
  ControlRequest r;
  r.op = ControlOp::tenant_remove;
  r.tenant.id = std::move(id);
  return r;
}

ControlRequest assign_request(std::uint32_t pid, std::string to) {
  ControlRequest r;
  r.op = ControlOp::tenant_assign;
  r.pid = pid;
  r.assign_to = std::move(to);
  return r;
}

std::string error_of(const nlohmann::json& reply) {
  EXPECT_FALSE(reply.at("ok").get<bool>()) << reply.dump();
  return reply.value("error", "");
}

TEST(RuntimeControl, tenant_add_registers_a_runtime_tenant) {
  RunningDaemon d;
  const nlohmann::json out = d.control.handle(add_request("team-a", 4));
  ASSERT_TRUE(out.at("ok").get<bool>()) << out.dump();
  EXPECT_FALSE(out.at("replaced").get<bool>());
  ASSERT_EQ(out.at("tenants").size(), 1U);
  EXPECT_EQ(out["tenants"][0]["id"], "team-a");
  EXPECT_EQ(out["tenants"][0]["source"], "runtime");
  EXPECT_TRUE(d.engine.tenants().find("team-a").has_value());
  ASSERT_EQ(d.config.tenants.size(), 1U);
  EXPECT_EQ(d.config.tenants[0].spec.gpus, 4U);
  EXPECT_TRUE(d.control.runtime_tenants().contains("team-a"));
}

TEST(RuntimeControl, tenant_add_of_a_config_tenant_replaces_its_spec_and_keeps_its_rules) {
  RunningDaemon d({tenant("team-a", 2, {"python*"})});
  const nlohmann::json out = d.control.handle(add_request("team-a", 6));
  ASSERT_TRUE(out.at("ok").get<bool>()) << out.dump();
  EXPECT_TRUE(out.at("replaced").get<bool>());
  EXPECT_EQ(out["tenants"][0]["source"], "config");
  ASSERT_EQ(d.config.tenants.size(), 1U);
  EXPECT_EQ(d.config.tenants[0].spec.gpus, 6U);
  EXPECT_EQ(d.config.tenants[0].match.comm, std::vector<std::string>{"python*"});
  EXPECT_FALSE(d.control.runtime_tenants().contains("team-a"));
}

TEST(RuntimeControl, tenant_add_of_an_invalid_spec_is_refused_and_changes_nothing) {
  RunningDaemon d;
  const std::string err = error_of(d.control.handle(add_request("team-a", 5000)));
  EXPECT_NE(err.find("gpus"), std::string::npos) << err;
  EXPECT_TRUE(d.registered().empty());
  EXPECT_TRUE(d.config.tenants.empty());
}

TEST(RuntimeControl, tenant_remove_drops_the_tenant_from_engine_and_config) {
  RunningDaemon d({tenant("team-a", 2), tenant("team-b", 2)});
  const nlohmann::json out = d.control.handle(remove_request("team-a"));
  ASSERT_TRUE(out.at("ok").get<bool>()) << out.dump();
  EXPECT_EQ(d.registered(), std::vector<std::string>{"team-b"});
  ASSERT_EQ(d.config.tenants.size(), 1U);
  EXPECT_EQ(d.config.tenants[0].spec.id, "team-b");
}

TEST(RuntimeControl, tenant_remove_of_an_unknown_tenant_is_refused) {
  RunningDaemon d({tenant("team-a", 2)});
  EXPECT_EQ(error_of(d.control.handle(remove_request("nope"))),
            "tenant \"nope\" is not registered");
  EXPECT_EQ(d.registered(), std::vector<std::string>{"team-a"});
}

TEST(RuntimeControl, tenant_list_lists_every_tenant_with_its_weights) {
  RunningDaemon d({tenant("team-a", 2), tenant("team-b", 6)});
  ControlRequest r;
  r.op = ControlOp::tenant_list;
  const nlohmann::json out = d.control.handle(r);
  ASSERT_TRUE(out.at("ok").get<bool>());
  ASSERT_EQ(out.at("tenants").size(), 2U);
  for (const nlohmann::json& t : out["tenants"]) {
    EXPECT_TRUE(t.contains("weight"));
    EXPECT_TRUE(t.contains("cgroup_weight"));
    EXPECT_EQ(t["tasks"], 0);
  }
}

TEST(RuntimeControl, tenant_assign_assigns_and_tracks_the_process) {
  RunningDaemon d({tenant("team-a", 2)});
  d.host.add_process(4242, "python", 777);
  const nlohmann::json out = d.control.handle(assign_request(4242, "team-a"));
  ASSERT_TRUE(out.at("ok").get<bool>()) << out.dump();
  const policy::TenantSpec* t = d.engine.tenant_of(4242);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->id, "team-a");
  using Calls = std::vector<std::pair<std::uint32_t, std::uint64_t>>;
  EXPECT_EQ(d.host.replaced_checks, (Calls{{4242, 777}})) << "a stale pid is dropped first";
  EXPECT_EQ(d.host.tracked, (Calls{{4242, 777}}));
}

TEST(RuntimeControl, tenant_assign_to_an_unknown_tenant_is_refused) {
  RunningDaemon d;
  d.host.add_process(4242, "python");
  EXPECT_EQ(error_of(d.control.handle(assign_request(4242, "nope"))),
            "tenant \"nope\" is not registered");
  EXPECT_TRUE(d.host.tracked.empty());
}

TEST(RuntimeControl, tenant_assign_of_a_missing_process_is_refused) {
  RunningDaemon d({tenant("team-a", 2)});
  EXPECT_EQ(error_of(d.control.handle(assign_request(4242, "team-a"))), "no process with pid 4242");
  EXPECT_EQ(d.engine.tenant_of(4242), nullptr);
}

TEST(RuntimeControl, tenant_assign_refuses_init_the_daemon_and_protected_processes) {
  RunningDaemon d({tenant("team-a", 2)});
  d.config.multi_tenant.protected_comms = {"sshd*"};
  d.host.add_process(1, "systemd", 1, 0);
  d.host.add_process(test::kSelfPid, "zernel-schedul");
  d.host.add_process(555, "sshd");
  for (std::uint32_t pid : {1U, test::kSelfPid, 555U}) {
    const std::string err = error_of(d.control.handle(assign_request(pid, "team-a")));
    EXPECT_EQ(err.rfind("refused: ", 0), 0U) << pid << ": " << err;
    EXPECT_EQ(d.engine.tenant_of(pid), nullptr) << pid;
  }
  EXPECT_TRUE(d.host.tracked.empty());
  EXPECT_TRUE(d.host.replaced_checks.empty());
}

TEST(RuntimeControl, status_replies_with_the_hosts_snapshot) {
  RunningDaemon d;
  ControlRequest r;
  r.op = ControlOp::status;
  const nlohmann::json out = d.control.handle(r);
  ASSERT_TRUE(out.at("ok").get<bool>());
  EXPECT_EQ(out.at("status").at("backend"), "fake") << out.dump();
}

}  // namespace
}  // namespace zernel::daemon
