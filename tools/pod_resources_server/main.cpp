// zernel-pod-resources-server: a stand-in for the kubelet's pod-resources API, for tests. It
// serves v1 List and GetAllocatableResources (the real protocol: gRPC on a unix socket, the
// project's collect/kubelet/api.proto) from a JSON file that it reads again on every call, so a
// test adds, changes and removes pods by rewriting the file (write a temporary file and rename
// it over the old one):
//
//   {
//     "pods": [{"name": "train-0", "namespace": "team-a",
//               "containers": [{"name": "main",
//                               "devices": [{"resource_name": "nvidia.com/gpu",
//                                            "device_ids": ["GPU-a"]}]}]}],
//     "allocatable": [{"resource_name": "nvidia.com/gpu", "device_ids": ["GPU-a", "GPU-b"]}],
//     "behaviour": "normal",   // or "hang" (answer nothing until the caller gives up),
//                              // "error" (UNAVAILABLE), "no_allocatable" (UNIMPLEMENTED there)
//     "extra_pods": 0,         // that many more pods gen-<i> in namespace "gen", one GPU each
//     "pad_bytes": 0           // one more pod whose container name has that many bytes
//   }
//
// A file that cannot be read or parsed is answered with INTERNAL and the reason. Each call is
// logged to stderr. SIGTERM or SIGINT stops it and removes the socket.

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "collect/kubelet/api.grpc.pb.h"

namespace {

using nlohmann::json;

struct Loaded {
  json doc;
  std::string error;
};

Loaded load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {json(), path + ": cannot be read"};
  std::stringstream ss;
  ss << in.rdbuf();
  json doc = json::parse(ss.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return {json(), path + ": not a JSON object"};
  return {std::move(doc), ""};
}

void fill_devices(const json& list, google::protobuf::RepeatedPtrField<v1::ContainerDevices>* out) {
  if (!list.is_array()) return;
  for (const json& d : list) {
    v1::ContainerDevices* cd = out->Add();
    cd->set_resource_name(d.value("resource_name", ""));
    for (const json& id : d.value("device_ids", json::array())) {
      if (id.is_string()) cd->add_device_ids(id.get<std::string>());
    }
  }
}

class Server final : public v1::PodResourcesLister::Service {
 public:
  explicit Server(std::string path) : path_(std::move(path)) {}

  grpc::Status List(grpc::ServerContext* ctx, const v1::ListPodResourcesRequest* /*req*/,
                    v1::ListPodResourcesResponse* resp) override {
    Loaded l = load(path_);
    if (!l.error.empty()) return fail("List", l.error);
    if (auto s = behave("List", ctx, l.doc); !s.ok()) return s;
    for (const json& p : l.doc.value("pods", json::array())) {
      v1::PodResources* pr = resp->add_pod_resources();
      pr->set_name(p.value("name", ""));
      pr->set_namespace_(p.value("namespace", ""));
      for (const json& c : p.value("containers", json::array())) {
        v1::ContainerResources* cr = pr->add_containers();
        cr->set_name(c.value("name", ""));
        fill_devices(c.value("devices", json::array()), cr->mutable_devices());
      }
    }
    const int extra = l.doc.value("extra_pods", 0);
    for (int i = 0; i < extra; ++i) {
      v1::PodResources* pr = resp->add_pod_resources();
      pr->set_name("gen-" + std::to_string(i));
      pr->set_namespace_("gen");
      v1::ContainerDevices* d = pr->add_containers()->add_devices();
      d->set_resource_name("nvidia.com/gpu");
      d->add_device_ids("GPU-gen-" + std::to_string(i));
    }
    const std::size_t pad = l.doc.value("pad_bytes", std::size_t{0});
    if (pad > 0) {
      v1::PodResources* pr = resp->add_pod_resources();
      pr->set_name("padded");
      pr->set_namespace_("gen");
      pr->add_containers()->set_name(std::string(pad, 'x'));
    }
    std::cerr << "pod-resources-server: List: " << resp->pod_resources_size() << " pods\n";
    return grpc::Status::OK;
  }

  grpc::Status GetAllocatableResources(grpc::ServerContext* ctx,
                                       const v1::AllocatableResourcesRequest* /*req*/,
                                       v1::AllocatableResourcesResponse* resp) override {
    Loaded l = load(path_);
    if (!l.error.empty()) return fail("GetAllocatableResources", l.error);
    if (l.doc.value("behaviour", "normal") == "no_allocatable") {
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "not served (no_allocatable)");
    }
    if (auto s = behave("GetAllocatableResources", ctx, l.doc); !s.ok()) return s;
    fill_devices(l.doc.value("allocatable", json::array()), resp->mutable_devices());
    std::cerr << "pod-resources-server: GetAllocatableResources: " << resp->devices_size()
              << " resources\n";
    return grpc::Status::OK;
  }

 private:
  static grpc::Status fail(const char* call, const std::string& why) {
    std::cerr << "pod-resources-server: " << call << ": " << why << "\n";
    return grpc::Status(grpc::StatusCode::INTERNAL, why);
  }

  static grpc::Status behave(const char* call, grpc::ServerContext* ctx, const json& doc) {
    const std::string b = doc.value("behaviour", "normal");
    if (b == "hang") {
      std::cerr << "pod-resources-server: " << call << ": hanging\n";
      for (int i = 0; i < 600 && !ctx->IsCancelled(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "hung");
    }
    if (b == "error") {
      std::cerr << "pod-resources-server: " << call << ": answering UNAVAILABLE\n";
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "test server told to fail");
    }
    return grpc::Status::OK;
  }

  std::string path_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string socket_path;
  std::string pods_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--socket") {
      socket_path = argv[i + 1];
    } else if (flag == "--pods") {
      pods_path = argv[i + 1];
    }
  }
  if (socket_path.empty() || pods_path.empty() || argc != 5) {
    std::cerr << "usage: zernel-pod-resources-server --socket PATH --pods FILE.json\n";
    return 2;
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before gRPC starts its threads

  ::unlink(socket_path.c_str());
  Server service(pods_path);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  builder.SetMaxSendMessageSize(256 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    std::cerr << "pod-resources-server: cannot listen on " << socket_path << "\n";
    return 1;
  }
  std::cerr << "pod-resources-server: serving " << pods_path << " on " << socket_path << "\n";
  int sig = 0;
  sigwait(&stop, &sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  ::unlink(socket_path.c_str());
  std::cerr << "pod-resources-server: stopped\n";
  return 0;
}
