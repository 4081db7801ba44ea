#pragma once
// The kubelet's pod-resources API as a source of tenants (docs/kubernetes.md).
//
// PodResourcesClient speaks gRPC (v1 List and GetAllocatableResources, collect/kubelet/api.proto)
// to the kubelet's unix socket, every call under a deadline and a largest answer size, and checks
// what comes back: more pods than max_pods, a name that is no Kubernetes name, an absurd device id
// refuse the whole answer with an error that says which pod and what. scan_pod_cgroups finds the
// pods' cgroups under a cgroup v2 root and the HOSTNAME and NVIDIA_VISIBLE_DEVICES of a process in
// each (config/pod_tenants.hpp explains why those).
//
// PodResourcesSource runs both on a thread of its own every refresh_ms, so a kubelet that never
// answers costs the daemon's loop nothing: the loop takes the latest good snapshot with take().
// A failure is logged once (again only when the error changes) and its recovery once; the
// snapshot of the last good answer stays what take() last gave, so the tenants made from it stay.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/result.hpp"
#include "config/config.hpp"
#include "config/pod_tenants.hpp"

namespace zernel::collect {

struct PodResourcesLimits {
  std::uint32_t timeout_ms = 2000;
  std::uint32_t max_pods = 1000;
  std::uint32_t max_message_bytes = 4U << 20U;
};

class PodResourcesClient {
 public:
  PodResourcesClient(std::string socket_path, PodResourcesLimits limits);

  // List and GetAllocatableResources, checked; cgroups are left empty.
  Result<config::PodSnapshot> fetch() const;

 private:
  std::string socket_path_;
  PodResourcesLimits limits_;
};

// Checks one List answer's pods (exposed for tests): count, names, devices.
Result<void> check_pods(const std::vector<config::PodInfo>& pods, std::uint32_t max_pods);

// The pod cgroups under `cgroup_root` (normally /sys/fs/cgroup): directories named
// pod<uid> (cgroupfs driver) or *-pod<uid with '_'>.slice (systemd driver) below a top-level
// kubepods* directory, with the environment of a process in each read from `proc_root`. At most
// `max_pods` cgroups; a missing kubepods directory is no pods.
std::vector<config::PodCgroup> scan_pod_cgroups(const std::string& cgroup_root,
                                                const std::string& proc_root,
                                                std::uint32_t max_pods);

class PodResourcesSource {
 public:
  PodResourcesSource(const config::KubernetesConfig& k8s, std::string cgroup_root,
                     std::string proc_root);
  ~PodResourcesSource();
  PodResourcesSource(const PodResourcesSource&) = delete;
  PodResourcesSource& operator=(const PodResourcesSource&) = delete;

  // Starts the thread; the first refresh is immediate.
  void start();
  // Stops and joins the thread (waits at most one call's deadline).
  void stop();
  // The snapshot of the latest good refresh not taken yet.
  std::optional<config::PodSnapshot> take();

  // Counters for tests and status: refreshes that failed, and whether the last one did.
  [[nodiscard]] std::uint64_t failures() const { return failures_.load(); }

 private:
  void run();
  void refresh_once();

  PodResourcesClient client_;
  std::string cgroup_root_;
  std::string proc_root_;
  std::string socket_path_;
  std::uint32_t refresh_ms_;
  std::uint32_t max_pods_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::optional<config::PodSnapshot> pending_;
  std::thread thread_;

  // Only the thread touches these.
  std::optional<std::string> last_error_;  // logged; cleared (and logged) on recovery
  bool ever_ok_ = false;
  std::atomic<std::uint64_t> failures_{0};
};

}  // namespace zernel::collect
