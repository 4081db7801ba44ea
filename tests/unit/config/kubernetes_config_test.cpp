// [kubernetes]: reading, validation and the dump round trip.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "config/config.hpp"

namespace zernel::config {
namespace {

using policy::PriorityClass;

std::string error_of(std::string_view text) {
  auto r = parse_config(text, "k.toml");
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.error().message();
}

TEST(KubernetesConfig, reads_every_key) {
  auto r = parse_config(R"(
[multi_tenant]
enabled = true
[kubernetes]
enabled = true
pod_resources_socket = "/run/pr/kubelet.sock"
refresh_ms = 1000
timeout_ms = 500
tenant_by = "namespace"
namespace_classes = { "team-a" = "inference", serving = "Background" }
max_pods = 50
max_message_bytes = 65536
)",
                        "k.toml");
  ASSERT_TRUE(r.ok()) << r.error().message();
  const KubernetesConfig& k = r->config.kubernetes;
  EXPECT_TRUE(k.enabled);
  EXPECT_EQ(k.pod_resources_socket, "/run/pr/kubelet.sock");
  EXPECT_EQ(k.refresh_ms, 1000U);
  EXPECT_EQ(k.timeout_ms, 500U);
  EXPECT_EQ(k.tenant_by, TenantBy::namespace_);
  EXPECT_EQ(k.namespace_classes.at("team-a"), PriorityClass::inference);
  EXPECT_EQ(k.namespace_classes.at("serving"), PriorityClass::background);
  EXPECT_EQ(k.max_pods, 50U);
  EXPECT_EQ(k.max_message_bytes, 65536U);
  EXPECT_TRUE(r->warnings.empty());
}

TEST(KubernetesConfig, defaults_are_off_and_the_kubelets_socket) {
  auto r = parse_config("", "k.toml");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->config.kubernetes.enabled);
  EXPECT_EQ(r->config.kubernetes.pod_resources_socket,
            "/var/lib/kubelet/pod-resources/kubelet.sock");
  EXPECT_EQ(r->config.kubernetes.tenant_by, TenantBy::pod);
}

TEST(KubernetesConfig, rejects_bad_values_naming_the_key) {
  EXPECT_NE(error_of("[kubernetes]\ntenant_by = \"label\"\n")
                .find("[kubernetes] tenant_by: unknown grouping \"label\""),
            std::string::npos);
  EXPECT_NE(error_of("[kubernetes]\npod_resources_socket = \"kubelet.sock\"\n")
                .find("is not an absolute socket path"),
            std::string::npos);
  EXPECT_NE(error_of("[kubernetes]\nrefresh_ms = 10\n").find("must be at least 100"),
            std::string::npos);
  EXPECT_NE(error_of("[kubernetes]\nrefresh_ms = 1000\ntimeout_ms = 2000\n")
                .find("timeout_ms: must not exceed refresh_ms (1000), got 2000"),
            std::string::npos);
  EXPECT_NE(error_of("[kubernetes]\nmax_pods = 20000\n").find("must be at most 10000"),
            std::string::npos);
  EXPECT_NE(error_of("[kubernetes]\nnamespace_classes = { \"Team_A\" = \"training\" }\n")
                .find("\"Team_A\" is not a namespace name"),
            std::string::npos);
  EXPECT_NE(error_of("[kubernetes]\nnamespace_classes = { a = \"gold\" }\n")
                .find("unknown priority class \"gold\""),
            std::string::npos);
  EXPECT_NE(error_of("[kubernetes]\nenable = true\n").find("did you mean"), std::string::npos);
}

TEST(KubernetesConfig, warns_when_multi_tenant_is_off) {
  auto r = parse_config("[kubernetes]\nenabled = true\n", "k.toml");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->warnings.size(), 1U);
  EXPECT_NE(r->warnings[0].find("not scheduled while [multi_tenant] enabled = false"),
            std::string::npos)
      << r->warnings[0];
}

TEST(KubernetesConfig, dump_round_trips) {
  Config c;
  c.kubernetes.enabled = true;
  c.kubernetes.tenant_by = TenantBy::namespace_;
  c.kubernetes.namespace_classes = {{"a", PriorityClass::interactive},
                                    {"b-2", PriorityClass::training}};
  c.kubernetes.refresh_ms = 3000;
  auto r = parse_config(dump_config(c), "dump");
  ASSERT_TRUE(r.ok()) << r.error().message() << "\n" << dump_config(c);
  EXPECT_EQ(r->config.kubernetes, c.kubernetes);
  auto d = parse_config(dump_config(Config{}), "dump");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->config.kubernetes, KubernetesConfig{});
}

}  // namespace
}  // namespace zernel::config
