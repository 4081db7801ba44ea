#include "collect/pod_resources.hpp"

#include <dirent.h>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <utility>

#include "collect/kubelet/api.grpc.pb.h"
#include "sys/cgroup.hpp"
#include "sys/file.hpp"

namespace zernel::collect {

namespace {

// Names and ids longer than these are not what a kubelet sends.
constexpr std::size_t kMaxNameBytes = 253;      // a DNS subdomain
constexpr std::size_t kMaxNamespaceBytes = 63;  // a DNS label
constexpr std::size_t kMaxDeviceIdBytes = 256;
constexpr std::size_t kMaxDevicesPerPod = 1024;
constexpr std::size_t kMaxAllocatableDevices = 65536;
// Processes of a pod cgroup tried for the environment, and how much of an environment is read.
constexpr std::size_t kMaxEnvironProcs = 16;
constexpr std::size_t kMaxEnvironBytes = std::size_t{64} * 1024;
// How deep below a kubepods* directory pod cgroups are looked for (QoS class, pod).
constexpr int kMaxScanDepth = 3;

// At most 64 bytes of `s`, unprintable bytes as \xNN, for messages.
std::string shown(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (s.size() > 64) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

bool is_name(std::string_view s, std::size_t max) {
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
  });
}

bool is_token(std::string_view s, std::size_t max) {
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u < 0x7f && c != ',';
  });
}

std::string status_text(const grpc::Status& s) {
  static constexpr std::array<std::string_view, 17> kCodes = {"OK",
                                                              "CANCELLED",
                                                              "UNKNOWN",
                                                              "INVALID_ARGUMENT",
                                                              "DEADLINE_EXCEEDED",
                                                              "NOT_FOUND",
                                                              "ALREADY_EXISTS",
                                                              "PERMISSION_DENIED",
                                                              "RESOURCE_EXHAUSTED",
                                                              "FAILED_PRECONDITION",
                                                              "ABORTED",
                                                              "OUT_OF_RANGE",
                                                              "UNIMPLEMENTED",
                                                              "INTERNAL",
                                                              "UNAVAILABLE",
                                                              "DATA_LOSS",
                                                              "UNAUTHENTICATED"};
  const auto code = static_cast<std::size_t>(s.error_code());
  const std::string_view name = code < kCodes.size() ? kCodes[code] : "?";
  return fmt::format("{} ({})", name, shown(s.error_message()));
}

void fill_devices(const google::protobuf::RepeatedPtrField<v1::ContainerDevices>& in,
                  std::vector<config::PodDevices>& out) {
  for (const v1::ContainerDevices& d : in) {
    config::PodDevices pd;
    pd.resource_name = d.resource_name();
    pd.device_ids.assign(d.device_ids().begin(), d.device_ids().end());
    out.push_back(std::move(pd));
  }
}

Result<void> check_devices(const std::vector<config::PodDevices>& devices, std::string_view what,
                           std::size_t max_devices) {
  std::size_t n = 0;
  for (const config::PodDevices& d : devices) {
    if (!is_token(d.resource_name, kMaxNameBytes)) {
      return Error(EBADMSG, fmt::format("{}: resource name \"{}\" is not a resource name", what,
                                        shown(d.resource_name)));
    }
    for (const std::string& id : d.device_ids) {
      if (!is_token(id, kMaxDeviceIdBytes)) {
        return Error(EBADMSG, fmt::format("{}: {} device id \"{}\" is not a device id", what,
                                          shown(d.resource_name), shown(id)));
      }
    }
    n += d.device_ids.size();
  }
  if (n > max_devices) {
    return Error(EBADMSG, fmt::format("{}: {} devices, more than {}", what, n, max_devices));
  }
  return Ok{};
}

}  // namespace

Result<void> check_pods(const std::vector<config::PodInfo>& pods, std::uint32_t max_pods) {
  if (pods.size() > max_pods) {
    return Error(EBADMSG, fmt::format("List answered {} pods, more than [kubernetes] max_pods ({})",
                                      pods.size(), max_pods));
  }
  for (std::size_t i = 0; i < pods.size(); ++i) {
    const config::PodInfo& p = pods[i];
    if (!is_name(p.namespace_, kMaxNamespaceBytes)) {
      return Error(EBADMSG, fmt::format("pod #{}: namespace \"{}\" is not a Kubernetes name", i + 1,
                                        shown(p.namespace_)));
    }
    if (!is_name(p.name, kMaxNameBytes)) {
      return Error(EBADMSG, fmt::format("pod #{} in {}: name \"{}\" is not a Kubernetes name",
                                        i + 1, p.namespace_, shown(p.name)));
    }
    if (auto r = check_devices(p.devices, fmt::format("pod {}/{}", p.namespace_, p.name),
                               kMaxDevicesPerPod);
        !r) {
      return r;
    }
  }
  return Ok{};
}

PodResourcesClient::PodResourcesClient(std::string socket_path, PodResourcesLimits limits)
    : socket_path_(std::move(socket_path)), limits_(limits) {}

Result<config::PodSnapshot> PodResourcesClient::fetch() const {
  struct stat st{};
  if (::stat(socket_path_.c_str(), &st) != 0) {
    const int err = errno;
    return Error(err, fmt::format("{}: {}", socket_path_, std::strerror(err)));
  }
  if (!S_ISSOCK(st.st_mode)) return Error(ENOTSOCK, socket_path_ + ": not a socket");

  // A fresh channel per refresh: a socket that went away and came back is used at once, without
  // a channel's reconnection back-off (up to two minutes).
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(limits_.max_message_bytes));
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  const auto channel =
      grpc::CreateCustomChannel("unix:" + socket_path_, grpc::InsecureChannelCredentials(), args);
  const auto stub = v1::PodResourcesLister::NewStub(channel);
  const auto deadline = [this] {
    return std::chrono::system_clock::now() + std::chrono::milliseconds(limits_.timeout_ms);
  };

  config::PodSnapshot out;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::ListPodResourcesRequest req;
    v1::ListPodResourcesResponse resp;
    const grpc::Status s = stub->List(&ctx, req, &resp);
    if (!s.ok()) return Error(EIO, socket_path_ + ": List: " + status_text(s));
    if (static_cast<std::size_t>(resp.pod_resources_size()) > limits_.max_pods) {
      return Error(EBADMSG, fmt::format("{}: List answered {} pods, more than [kubernetes] "
                                        "max_pods ({})",
                                        socket_path_, resp.pod_resources_size(), limits_.max_pods));
    }
    out.pods.reserve(static_cast<std::size_t>(resp.pod_resources_size()));
    for (const v1::PodResources& p : resp.pod_resources()) {
      config::PodInfo pod;
      pod.name = p.name();
      pod.namespace_ = p.namespace_();
      for (const v1::ContainerResources& c : p.containers()) fill_devices(c.devices(), pod.devices);
      out.pods.push_back(std::move(pod));
    }
    if (auto r = check_pods(out.pods, limits_.max_pods); !r) {
      return r.error().context(socket_path_ + ": List");
    }
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::AllocatableResourcesRequest req;
    v1::AllocatableResourcesResponse resp;
    const grpc::Status s = stub->GetAllocatableResources(&ctx, req, &resp);
    if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      // Kubelets before 1.21 (or with the feature gate off): replicas then count as whole GPUs.
      return out;
    }
    if (!s.ok()) return Error(EIO, socket_path_ + ": GetAllocatableResources: " + status_text(s));
    fill_devices(resp.devices(), out.allocatable);
    if (auto r = check_devices(out.allocatable, "allocatable devices", kMaxAllocatableDevices);
        !r) {
      return r.error().context(socket_path_ + ": GetAllocatableResources");
    }
  }
  return out;
}

namespace {

// "pod0123abcd-..." or "kubepods-burstable-pod0123abcd_...slice" -> the UID, with '-'.
std::optional<std::string> pod_uid(std::string_view name) {
  std::string_view rest;
  if (name.substr(0, 3) == "pod") {
    rest = name.substr(3);
  } else if (const std::size_t at = name.rfind("-pod"); at != std::string_view::npos &&
                                                        name.size() > 6 &&
                                                        name.substr(name.size() - 6) == ".slice") {
    rest = name.substr(at + 4, name.size() - 6 - at - 4);
  } else {
    return std::nullopt;
  }
  if (rest.size() != 36) return std::nullopt;
  std::string uid(rest);
  for (std::size_t i = 0; i < uid.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash) {
      if (uid[i] != '-' && uid[i] != '_') return std::nullopt;
      uid[i] = '-';
    } else if (!std::isxdigit(static_cast<unsigned char>(uid[i]))) {
      return std::nullopt;
    }
  }
  return uid;
}

std::vector<std::string> subdirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    out.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// HOSTNAME and NVIDIA_VISIBLE_DEVICES of the first process (of at most kMaxEnvironProcs) that has
// a HOSTNAME.
void read_environment(const std::string& dir, const std::string& proc_root, config::PodCgroup& cg) {
  auto procs = sys::read_subtree_procs(dir, kMaxEnvironProcs);
  if (!procs) return;
  std::string buf(kMaxEnvironBytes, '\0');
  for (std::uint32_t pid : procs->pids) {
    std::size_t len = 0;
    const std::string path = fmt::format("{}/{}/environ", proc_root, pid);
    if (sys::read_file_into(path.c_str(), buf, len) != 0) continue;
    std::optional<std::string> hostname;
    std::vector<std::string> visible;
    std::string_view env(buf.data(), len);
    while (!env.empty()) {
      const std::size_t end = env.find('\0');
      const std::string_view var = env.substr(0, end);
      if (var.substr(0, 9) == "HOSTNAME=") {
        hostname = std::string(var.substr(9));
      } else if (var.substr(0, 23) == "NVIDIA_VISIBLE_DEVICES=") {
        std::string_view list = var.substr(23);
        while (!list.empty()) {
          const std::size_t comma = list.find(',');
          const std::string_view id = list.substr(0, comma);
          if (!id.empty() && id != "all" && id != "none" && id != "void") visible.emplace_back(id);
          list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
        }
      }
      env = end == std::string_view::npos ? std::string_view{} : env.substr(end + 1);
    }
    if (hostname || !visible.empty()) {
      cg.hostname = std::move(hostname);
      cg.visible_devices = std::move(visible);
      if (cg.hostname) return;
    }
  }
}

void scan(const std::string& root, const std::string& rel, int depth, const std::string& proc_root,
          std::uint32_t max_pods, std::vector<config::PodCgroup>& out) {
  for (const std::string& name : subdirs(root + rel)) {
    if (out.size() >= max_pods) return;
    const std::string child = rel + "/" + name;
    if (auto uid = pod_uid(name)) {
      config::PodCgroup cg;
      cg.path = child;
      cg.uid = std::move(*uid);
      read_environment(root + child, proc_root, cg);
      out.push_back(std::move(cg));
    } else if (depth < kMaxScanDepth) {
      scan(root, child, depth + 1, proc_root, max_pods, out);
    }
  }
}

}  // namespace

std::vector<config::PodCgroup> scan_pod_cgroups(const std::string& cgroup_root,
                                                const std::string& proc_root,
                                                std::uint32_t max_pods) {
  std::vector<config::PodCgroup> out;
  for (const std::string& top : subdirs(cgroup_root)) {
    if (top.rfind("kubepods", 0) != 0) continue;
    scan(cgroup_root, "/" + top, 1, proc_root, max_pods, out);
  }
  return out;
}

PodResourcesSource::PodResourcesSource(const config::KubernetesConfig& k8s, std::string cgroup_root,
                                       std::string proc_root)
    : client_(k8s.pod_resources_socket,
              PodResourcesLimits{k8s.timeout_ms, k8s.max_pods, k8s.max_message_bytes}),
      cgroup_root_(std::move(cgroup_root)),
      proc_root_(std::move(proc_root)),
      socket_path_(k8s.pod_resources_socket),
      refresh_ms_(k8s.refresh_ms),
      max_pods_(k8s.max_pods) {}

PodResourcesSource::~PodResourcesSource() { stop(); }

void PodResourcesSource::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
}

void PodResourcesSource::stop() {
  {
    const std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<config::PodSnapshot> PodResourcesSource::take() {
  const std::lock_guard lock(mu_);
  return std::exchange(pending_, std::nullopt);
}

void PodResourcesSource::run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    refresh_once();
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(refresh_ms_), [this] { return stopping_; });
  }
}

void PodResourcesSource::refresh_once() {
  auto snap = client_.fetch();
  if (!snap) {
    failures_.fetch_add(1);
    const std::string msg = snap.error().message();
    if (last_error_ != msg) {
      spdlog::warn(
          "kubernetes: pod-resources: {}; tenants from the kubelet stay as last known ({}), "
          "retrying every {} ms (logged again only when this changes)",
          msg, ever_ok_ ? "from the last good answer" : "none yet", refresh_ms_);
      last_error_ = msg;
    }
    return;
  }
  if (last_error_) {
    spdlog::info("kubernetes: pod-resources: {} answers again ({} pods)", socket_path_,
                 snap->pods.size());
    last_error_.reset();
  } else if (!ever_ok_) {
    spdlog::info("kubernetes: pod-resources: connected to {} ({} pods)", socket_path_,
                 snap->pods.size());
  }
  ever_ok_ = true;
  snap->cgroups = scan_pod_cgroups(cgroup_root_, proc_root_, max_pods_);
  const std::lock_guard lock(mu_);
  pending_ = std::move(*snap);
}

}  // namespace zernel::collect
