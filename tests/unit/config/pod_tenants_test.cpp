#include "config/pod_tenants.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.hpp"

namespace zernel::config {
namespace {

using policy::PriorityClass;

PodInfo pod(const std::string& ns, const std::string& name, std::vector<PodDevices> devices) {
  return PodInfo{name, ns, std::move(devices)};
}

PodDevices gpus(std::vector<std::string> ids) { return {"nvidia.com/gpu", std::move(ids)}; }

PodCgroup cgroup(const std::string& uid, std::optional<std::string> hostname,
                 std::vector<std::string> visible = {}) {
  return PodCgroup{"/kubepods.slice/kubepods-pod" + uid + ".slice", uid, std::move(hostname),
                   std::move(visible)};
}

TEST(PodTenants, counts_whole_gpus_per_device_id) {
  EXPECT_DOUBLE_EQ(pod_gpus(pod("a", "p", {gpus({"GPU-a", "GPU-b"})}), {}), 2.0);
}

TEST(PodTenants, counts_a_time_sliced_replica_as_one_over_the_gpus_replicas) {
  const std::vector<PodDevices> alloc = {
      gpus({"GPU-a::0", "GPU-a::1", "GPU-a::2", "GPU-a::3", "GPU-b::0", "GPU-b::1"})};
  EXPECT_DOUBLE_EQ(pod_gpus(pod("a", "p", {gpus({"GPU-a::2"})}), alloc), 0.25);
  EXPECT_DOUBLE_EQ(pod_gpus(pod("a", "p", {gpus({"GPU-a::0", "GPU-b::1"})}), alloc), 0.75);
  // Not among the allocatable devices (no GetAllocatableResources): a whole GPU.
  EXPECT_DOUBLE_EQ(pod_gpus(pod("a", "p", {gpus({"GPU-c::1"})}), alloc), 1.0);
}

TEST(PodTenants, counts_a_mig_slice_by_its_compute_slices_over_seven) {
  EXPECT_NEAR(pod_gpus(pod("a", "p", {{"nvidia.com/mig-3g.40gb", {"MIG-x"}}}), {}), 0.429, 1e-9);
  EXPECT_NEAR(pod_gpus(pod("a", "p", {{"nvidia.com/mig-1g.10gb", {"MIG-x", "MIG-y"}}}), {}), 0.286,
              1e-9);
  EXPECT_NEAR(pod_gpus(pod("a", "p", {{"nvidia.com/mig-7g.80gb", {"MIG-x"}}}), {}), 1.0, 1e-9);
  // Unreadable profile: the smallest slice.
  EXPECT_NEAR(pod_gpus(pod("a", "p", {{"nvidia.com/mig-weird", {"MIG-x"}}}), {}), 0.143, 1e-9);
}

TEST(PodTenants, ignores_resources_that_are_not_gpus) {
  EXPECT_DOUBLE_EQ(pod_gpus(pod("a", "p", {{"example.com/nic", {"eth1"}}}), {}), 0.0);
}

TEST(PodTenants, worked_example_of_the_header_sums_a_mig_slice_and_a_replica) {
  const std::vector<PodDevices> alloc = {gpus({"GPU-a::0", "GPU-a::1", "GPU-a::2", "GPU-a::3"})};
  EXPECT_NEAR(
      pod_gpus(pod("a", "p", {{"nvidia.com/mig-3g.40gb", {"MIG-x"}}, gpus({"GPU-a::2"})}), alloc),
      0.679, 1e-9);
}

TEST(PodTenants, makes_one_tenant_per_gpu_pod_with_its_cgroup) {
  PodSnapshot s;
  s.pods = {pod("team-a", "train-0", {gpus({"GPU-a", "GPU-b"})}),
            pod("team-b", "web", {}),  // no GPU: no tenant
            pod("team-b", "infer-1", {gpus({"GPU-c"})})};
  s.cgroups = {cgroup("11111111-1111-1111-1111-111111111111", "train-0"),
               cgroup("22222222-2222-2222-2222-222222222222", "infer-1"),
               cgroup("33333333-3333-3333-3333-333333333333", "web")};
  KubernetesConfig k;
  k.namespace_classes = {{"team-b", PriorityClass::inference}};
  const PodTenants t = pod_tenants(s, k, PriorityClass::background);
  EXPECT_TRUE(t.problems.empty());
  ASSERT_EQ(t.tenants.size(), 2U);
  EXPECT_EQ(t.tenants[0].spec.id, "k8s:team-a:train-0");
  EXPECT_EQ(t.tenants[0].spec.gpus, 2U);
  EXPECT_FLOAT_EQ(*t.tenants[0].spec.gpu_fraction, 2.0F);
  EXPECT_EQ(t.tenants[0].spec.priority_class, PriorityClass::background);
  EXPECT_EQ(t.tenants[0].match.cgroup,
            std::vector<std::string>{"/kubepods.slice/kubepods-pod11111111-1111-1111-1111-"
                                     "111111111111.slice"});
  EXPECT_EQ(t.tenants[1].spec.id, "k8s:team-b:infer-1");
  EXPECT_EQ(t.tenants[1].spec.priority_class, PriorityClass::inference);
  EXPECT_EQ(t.tenants[1].match.cgroup.size(), 1U);
}

TEST(PodTenants, groups_pods_by_namespace_and_sums_their_gpus) {
  PodSnapshot s;
  s.allocatable = {gpus({"GPU-c::0", "GPU-c::1"})};
  s.pods = {pod("team-a", "train-0", {gpus({"GPU-a"})}),
            pod("team-a", "train-1", {gpus({"GPU-b"}), gpus({"GPU-c::1"})}),
            pod("team-b", "infer", {{"nvidia.com/mig-1g.10gb", {"MIG-z"}}})};
  s.cgroups = {cgroup("11111111-1111-1111-1111-111111111111", "train-0"),
               cgroup("22222222-2222-2222-2222-222222222222", "train-1")};
  KubernetesConfig k;
  k.tenant_by = TenantBy::namespace_;
  const PodTenants t = pod_tenants(s, k, PriorityClass::training);
  ASSERT_EQ(t.tenants.size(), 2U);
  EXPECT_EQ(t.tenants[0].spec.id, "k8s:team-a");
  EXPECT_FLOAT_EQ(*t.tenants[0].spec.gpu_fraction, 2.5F);
  EXPECT_EQ(t.tenants[0].spec.gpus, 3U);  // rounded up for the totals
  EXPECT_EQ(t.tenants[0].match.cgroup.size(), 2U);
  EXPECT_EQ(t.tenants[1].spec.id, "k8s:team-b");
  EXPECT_NEAR(*t.tenants[1].spec.gpu_fraction, 0.143F, 1e-6);
  EXPECT_TRUE(t.tenants[1].match.cgroup.empty());  // its cgroup was not found: GPUs still count
}

TEST(PodTenants, matches_a_cgroup_by_the_hostname_cut_to_63_bytes) {
  const std::string long_name = std::string(62, 'a') + "-b";  // 64 bytes: cut to 63, '-' dropped
  EXPECT_EQ(pod_hostname(long_name), std::string(62, 'a'));
  PodSnapshot s;
  s.pods = {pod("ns", long_name, {gpus({"GPU-a"})})};
  s.cgroups = {cgroup("11111111-1111-1111-1111-111111111111", std::string(62, 'a'))};
  const PodTenants t = pod_tenants(s, KubernetesConfig{}, PriorityClass::training);
  ASSERT_EQ(t.tenants.size(), 1U);
  EXPECT_EQ(t.tenants[0].match.cgroup.size(), 1U);
}

TEST(PodTenants, same_pod_name_in_two_namespaces_is_decided_by_visible_devices) {
  PodSnapshot s;
  s.pods = {pod("a", "worker", {gpus({"GPU-a"})}), pod("b", "worker", {gpus({"GPU-b"})})};
  s.cgroups = {cgroup("11111111-1111-1111-1111-111111111111", "worker", {"GPU-b"}),
               cgroup("22222222-2222-2222-2222-222222222222", "worker")};  // no devices: unknown
  const PodTenants t = pod_tenants(s, KubernetesConfig{}, PriorityClass::training);
  ASSERT_EQ(t.tenants.size(), 2U);
  EXPECT_TRUE(t.tenants[0].match.cgroup.empty());
  ASSERT_EQ(t.tenants[1].match.cgroup.size(), 1U);
  EXPECT_NE(t.tenants[1].match.cgroup[0].find("11111111"), std::string::npos);
  ASSERT_EQ(t.problems.size(), 1U);
  EXPECT_NE(t.problems[0].find("could belong to 2 pods"), std::string::npos) << t.problems[0];
}

TEST(PodTenants, a_cgroup_without_hostname_is_matched_by_its_gpus_alone) {
  PodSnapshot s;
  s.pods = {pod("a", "host-net", {gpus({"GPU-a::1"})}), pod("a", "other", {gpus({"GPU-b"})})};
  s.cgroups = {cgroup("11111111-1111-1111-1111-111111111111", std::nullopt, {"GPU-a"}),
               cgroup("22222222-2222-2222-2222-222222222222", std::nullopt)};
  const PodTenants t = pod_tenants(s, KubernetesConfig{}, PriorityClass::training);
  ASSERT_EQ(t.tenants.size(), 2U);
  EXPECT_EQ(t.tenants[0].spec.id, "k8s:a:host-net");
  EXPECT_EQ(t.tenants[0].match.cgroup.size(), 1U);
  EXPECT_TRUE(t.tenants[1].match.cgroup.empty());
  EXPECT_TRUE(t.problems.empty());
}

TEST(PodTenants, a_tenant_id_past_the_longest_is_reported_not_made) {
  PodSnapshot s;
  s.pods = {pod("ns", std::string(200, 'p'), {gpus({"GPU-a"})})};
  const PodTenants t = pod_tenants(s, KubernetesConfig{}, PriorityClass::training);
  EXPECT_TRUE(t.tenants.empty());
  ASSERT_EQ(t.problems.size(), 1U);
  EXPECT_NE(t.problems[0].find("longer than 128 bytes"), std::string::npos);
}

TEST(PodTenants, fractional_gpus_weigh_in_the_share_formula) {
  policy::TenantRegistry reg;
  policy::TenantSpec whole{"whole", 1, PriorityClass::training, std::nullopt, {}, {}, std::nullopt};
  policy::TenantSpec slice{"slice", 1, PriorityClass::training, std::nullopt, {}, {}, 0.25F};
  const auto a = reg.upsert(whole);
  const auto b = reg.upsert(slice);
  ASSERT_TRUE(a.ok() && b.ok());
  // 1 : 0.25 over 2 tenants: 1.6 and 0.4.
  EXPECT_FLOAT_EQ(reg.weight(*a), 1.6F);
  EXPECT_FLOAT_EQ(reg.weight(*b), 0.4F);
  slice.gpu_fraction = -1.0F;
  EXPECT_FALSE(reg.upsert(slice).ok());
}

}  // namespace
}  // namespace zernel::config
