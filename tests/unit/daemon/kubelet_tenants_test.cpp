// RuntimeControl::apply_kubelet_tenants: the kubelet's tenants beside the file's and the runtime
// ones (daemon/kubelet_tenants.cpp).
#include <gtest/gtest.h>

#include "daemon/runtime_control.hpp"
#include "daemon/runtime_fakes.hpp"
#include "support/log_capture.hpp"

namespace zernel::daemon {
namespace {

using test::RunningDaemon;
using test::tenant;

config::TenantConfig pod_tenant(const std::string& id, float gpus) {
  config::TenantConfig t = tenant(id, 0, {});
  t.spec.gpu_fraction = gpus;
  t.match.cgroup = {"/kubepods.slice/" + id};
  return t;
}

nlohmann::json list_entry(const RunningDaemon& d, const std::string& id) {
  for (const auto& t : d.control.tenant_list()) {
    if (t.at("id") == id) return t;
  }
  return {};
}

TEST(KubeletTenants, come_change_and_go_beside_the_files_tenants) {
  RunningDaemon d({tenant("file", 2)});
  EXPECT_TRUE(
      d.control.apply_kubelet_tenants({pod_tenant("k8s:a:p", 1.0F), pod_tenant("k8s:a:q", 0.25F)}));
  EXPECT_EQ(d.registered(), (std::vector<std::string>{"file", "k8s:a:p", "k8s:a:q"}));
  EXPECT_EQ(list_entry(d, "k8s:a:q").at("source"), "kubelet");
  EXPECT_FLOAT_EQ(list_entry(d, "k8s:a:q").at("gpus").get<float>(), 0.25F);
  EXPECT_EQ(list_entry(d, "file").at("source"), "config");
  EXPECT_FALSE(
      d.control.apply_kubelet_tenants({pod_tenant("k8s:a:p", 1.0F), pod_tenant("k8s:a:q", 0.25F)}))
      << "the same pods change nothing";
  EXPECT_TRUE(d.control.apply_kubelet_tenants({pod_tenant("k8s:a:p", 3.0F)}));
  EXPECT_EQ(d.registered(), (std::vector<std::string>{"file", "k8s:a:p"}));
  EXPECT_FLOAT_EQ(list_entry(d, "k8s:a:p").at("gpus").get<float>(), 3.0F);
  ASSERT_EQ(d.config.tenants.size(), 2U);
  EXPECT_EQ(d.config.tenants[1].match.cgroup, std::vector<std::string>{"/kubepods.slice/k8s:a:p"});
  EXPECT_TRUE(d.control.apply_kubelet_tenants({}));
  EXPECT_EQ(d.registered(), (std::vector<std::string>{"file"}));
}

TEST(KubeletTenants, the_file_wins_a_collision_logged_once_and_control_cannot_change_them) {
  test_support::LogCapture log;
  RunningDaemon d({tenant("k8s:a:p", 2)});
  d.control.apply_kubelet_tenants({pod_tenant("k8s:a:p", 1.0F), pod_tenant("k8s:a:q", 1.0F)});
  d.control.apply_kubelet_tenants({pod_tenant("k8s:a:p", 1.0F), pod_tenant("k8s:a:q", 1.0F)});
  EXPECT_EQ(list_entry(d, "k8s:a:p").at("source"), "config");
  EXPECT_EQ(list_entry(d, "k8s:a:p").at("gpus"), 2);
  std::size_t n = 0;
  for (std::size_t at = 0;
       (at = log.text().find("\"k8s:a:p\" is defined", at)) != std::string::npos; ++at) {
    ++n;
  }
  EXPECT_EQ(n, 1U) << log.text();

  ControlRequest r;
  r.op = ControlOp::tenant_remove;
  r.tenant.id = "k8s:a:q";
  const nlohmann::json reply = d.control.handle(r);
  EXPECT_FALSE(reply.at("ok").get<bool>());
  EXPECT_NE(reply.at("error").get<std::string>().find("comes from the kubelet"), std::string::npos);
  r.op = ControlOp::tenant_add;
  r.tenant.gpus = 1;
  EXPECT_FALSE(d.control.handle(r).at("ok").get<bool>());
}

TEST(KubeletTenants, a_reload_keeps_them_unless_the_file_now_defines_the_id) {
  RunningDaemon d({tenant("file", 1)});
  d.control.apply_kubelet_tenants({pod_tenant("k8s:a:p", 1.0F), pod_tenant("k8s:a:q", 1.0F)});
  config::Config next = d.config;
  next.tenants = {tenant("file", 1), tenant("k8s:a:q", 5)};
  ASSERT_TRUE(d.control.reload(next, "test.toml").ok());
  EXPECT_EQ(d.registered(), (std::vector<std::string>{"file", "k8s:a:p", "k8s:a:q"}));
  EXPECT_EQ(list_entry(d, "k8s:a:p").at("source"), "kubelet");
  EXPECT_EQ(list_entry(d, "k8s:a:q").at("source"), "config");
  EXPECT_FALSE(d.control.kubelet_tenants().contains("k8s:a:q"));
}

}  // namespace
}  // namespace zernel::daemon
