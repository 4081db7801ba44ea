#include "collect/pod_resources.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/temp_tree.hpp"

namespace zernel::collect {
namespace {

using test_support::TempTree;

constexpr char kUid[] = "0f2c1a3b-4d5e-6f70-8192-a3b4c5d6e7f8";
constexpr char kUidSystemd[] = "0f2c1a3b_4d5e_6f70_8192_a3b4c5d6e7f8";

TEST(PodResources, scan_finds_pod_cgroups_of_both_drivers_and_reads_their_environment) {
  TempTree t;
  // systemd driver, burstable QoS; the container's process has the pod's environment.
  const std::string sd = std::string("cg/kubepods.slice/kubepods-burstable.slice/") +
                         "kubepods-burstable-pod" + kUidSystemd + ".slice";
  t.write(sd + "/cri-containerd-abc.scope/cgroup.procs", "4242\n");
  t.write(sd + "/cgroup.procs", "");
  constexpr char kEnviron[] = "PATH=/bin\0HOSTNAME=train-0\0NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b\0";
  t.write("proc/4242/environ", std::string(kEnviron, sizeof(kEnviron) - 1));
  // cgroupfs driver, guaranteed QoS (directly below kubepods); no process.
  t.write(std::string("cg/kubepods/pod") + "11111111-2222-3333-4444-555555555555" + "/cgroup.procs",
          "");
  // Not pods.
  t.write("cg/kubepods.slice/kubepods-burstable.slice/cgroup.procs", "");
  t.write("cg/system.slice/pod" + std::string(kUid) + "/cgroup.procs", "");
  t.write("cg/kubepods.slice/kubepods-podnot-a-uid.slice/cgroup.procs", "");

  const std::vector<config::PodCgroup> found =
      scan_pod_cgroups(t.root() + "/cg", t.root() + "/proc", 100);
  ASSERT_EQ(found.size(), 2U);  // in name order: kubepods before kubepods.slice
  EXPECT_EQ(found[0].path, "/kubepods/pod11111111-2222-3333-4444-555555555555");
  EXPECT_FALSE(found[0].hostname.has_value());
  EXPECT_EQ(found[1].path, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                               std::string(kUidSystemd) + ".slice");
  EXPECT_EQ(found[1].uid, kUid);
  EXPECT_EQ(found[1].hostname, "train-0");
  EXPECT_EQ(found[1].visible_devices, (std::vector<std::string>{"GPU-a", "GPU-b"}));

  EXPECT_EQ(scan_pod_cgroups(t.root() + "/cg", t.root() + "/proc", 1).size(), 1U);
  EXPECT_TRUE(scan_pod_cgroups(t.root() + "/nothing", t.root() + "/proc", 100).empty());
}

config::PodInfo pod(const std::string& ns, const std::string& name) {
  return config::PodInfo{name, ns, {{"nvidia.com/gpu", {"GPU-a"}}}};
}

TEST(PodResources, check_refuses_too_many_pods) {
  const std::vector<config::PodInfo> pods(3, pod("a", "p"));
  EXPECT_TRUE(check_pods(pods, 3).ok());
  const auto r = check_pods(pods, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("3 pods, more than [kubernetes] max_pods (2)"),
            std::string::npos)
      << r.error().message();
}

TEST(PodResources, check_refuses_names_that_are_no_kubernetes_names) {
  auto r = check_pods({pod("a", std::string("bad\x01name", 8))}, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("pod #1 in a: name \"bad\\x01name\" is not a Kubernetes name"),
            std::string::npos)
      << r.error().message();
  r = check_pods({pod(std::string(64, 'n'), "p")}, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("namespace"), std::string::npos);
  r = check_pods({pod("a", "")}, 10);
  EXPECT_FALSE(r.ok());
  r = check_pods({pod("a", std::string(5000, 'x'))}, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("(5000 bytes)"), std::string::npos) << r.error().message();
}

TEST(PodResources, check_refuses_absurd_device_ids) {
  config::PodInfo p = pod("a", "p");
  p.devices[0].device_ids.emplace_back("GPU a");
  auto r = check_pods({p}, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("pod a/p: nvidia.com/gpu device id \"GPU a\""),
            std::string::npos)
      << r.error().message();
  p = pod("a", "p");
  p.devices[0].device_ids.assign(2000, "GPU-x");
  r = check_pods({p}, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("2000 devices"), std::string::npos);
}

TEST(PodResources, fetch_from_a_missing_socket_names_the_path) {
  TempTree t;
  const PodResourcesClient c(t.root() + "/kubelet.sock", PodResourcesLimits{});
  const auto r = c.fetch();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find(t.root() + "/kubelet.sock: No such file or directory"),
            std::string::npos)
      << r.error().message();
  t.write("plain", "x");
  const auto r2 = PodResourcesClient(t.root() + "/plain", PodResourcesLimits{}).fetch();
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error().message().find("not a socket"), std::string::npos);
}

}  // namespace
}  // namespace zernel::collect
