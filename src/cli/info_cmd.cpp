#include "cli/info_cmd.hpp"

#include <sys/utsname.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/version.hpp"
#include "sys/cgroup.hpp"
#include "sys/file.hpp"
#include "sys/nvml.hpp"
#include "sys/procfs.hpp"
#include "sys/sched_ext.hpp"
#include "sys/topology_reader.hpp"

namespace zernel::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json kernel_info() {
  utsname u{};
  if (uname(&u) != 0) return {{"error", "uname failed"}};
  return {{"sysname", u.sysname}, {"release", u.release}, {"version", u.version},
          {"machine", u.machine}};
}

// Through the same functions the daemon uses, so that info says what the daemon would find.
json sched_ext_info(const fs::path& sys_root) {
  const auto state = sys::read_sched_ext_state(sys_root);
  if (!state) {
    return {{"supported", false},
            {"reason", fmt::format("no {}: the kernel lacks CONFIG_SCHED_CLASS_EXT (--backend "
                                   "auto uses the userspace backend here)",
                                   (sys_root / "kernel/sched_ext").string())}};
  }
  json j = {{"supported", true}};
  j["state"] = state->state;
  j["ops"] = state->ops.empty() ? json(nullptr) : json(state->ops);
  if (!state->enable_seq.empty()) j["enable_seq"] = state->enable_seq;
  return j;
}

json btf_info(const fs::path& sys) {
  const fs::path p = sys / "kernel/btf/vmlinux";
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (ec) return {{"available", false}, {"path", p.string()}};
  return {{"available", true}, {"path", p.string()}, {"bytes", size}};
}

json cgroup_info(const fs::path& proc) {
  std::optional<std::string> v2_at;
  std::vector<std::string> v1;
  const auto mountinfo = sys::read_file((proc / "self/mountinfo").string(), std::size_t{64} << 20);
  for (const sys::CgroupMount& m :
       mountinfo ? sys::parse_cgroup_mounts(*mountinfo) : std::vector<sys::CgroupMount>{}) {
    if (m.version == sys::CgroupVersion::v2) {
      if (!v2_at) v2_at = m.mount_point;
    } else {
      v1.push_back(m.mount_point);
    }
  }
  // A cgroup2 mount anywhere beside v1 hierarchies is hybrid.
  std::string version;
  if (!v1.empty()) {
    version = v2_at ? "hybrid" : "v1";
  } else if (v2_at) {
    version = "v2";
  } else {
    version = "none";
  }
  json j = {{"version", version}, {"v2_mount", v2_at ? json(*v2_at) : json(nullptr)},
            {"v1_mounts", v1.size()}};
  return j;
}

json nvml_info(const std::string& library) {
  auto nvml = sys::Nvml::load(library);
  if (!nvml) return {{"available", false}, {"reason", nvml.error().message()}};
  json gpus = json::array();
  for (const sys::GpuDevice& d : (*nvml)->devices()) {
    gpus.push_back({{"index", d.index}, {"name", d.name}, {"bus_id", d.bus_id}});
  }
  return {{"available", true},
          {"library", (*nvml)->library()},
          {"driver_version", (*nvml)->driver_version()},
          {"gpus", gpus}};
}

json delayacct_info(const fs::path& proc) {
  const auto on = sys::read_task_delayacct(proc.string());
  if (!on) return {{"available", false}};
  return {{"available", true}, {"enabled", *on}};
}

json topology_info(const std::string& sys_root, const std::string& proc_root) {
  auto info = sys::read_topology(sys_root, proc_root);
  if (!info) return {{"error", info.error().message()}};
  json nodes = json::array();
  for (const policy::NumaNode& n : info->topology.nodes()) {
    nodes.push_back({{"id", n.id}, {"cpus", n.cpus.size()}, {"memory_mb", n.memory_mb}});
  }
  json gpus = json::array();
  for (const sys::GpuLocation& g : info->gpus) {
    gpus.push_back(
        {{"index", g.index}, {"bus_id", g.bus_id}, {"numa_node", g.node ? json(*g.node) : json(nullptr)}});
  }
  return {{"cpus", info->topology.total_cpus()}, {"numa_nodes", nodes}, {"sysfs_gpus", gpus},
          {"warnings", info->warnings}};
}

void print_text(const json& j) {
  const json& k = j["kernel"];
  if (k.contains("release")) {
    fmt::print("kernel:          {} {} ({})\n", k["sysname"].get<std::string>(),
               k["release"].get<std::string>(), k["machine"].get<std::string>());
  }
  const json& s = j["sched_ext"];
  if (s["supported"].get<bool>()) {
    fmt::print("sched_ext:       {}{}\n", s["state"].get<std::string>(),
               s["ops"].is_null() ? std::string(", no scheduler attached")
                                  : ", scheduler " + s["ops"].get<std::string>());
  } else {
    fmt::print("sched_ext:       not supported ({})\n", s["reason"].get<std::string>());
  }
  const json& b = j["btf"];
  if (b["available"].get<bool>()) {
    fmt::print("BTF:             {} ({} bytes)\n", b["path"].get<std::string>(),
               b["bytes"].get<std::uint64_t>());
  } else {
    fmt::print("BTF:             missing ({}): BPF programs cannot be loaded\n",
               b["path"].get<std::string>());
  }
  const json& c = j["cgroup"];
  fmt::print("cgroup:          {}{}\n", c["version"].get<std::string>(),
             c["v2_mount"].is_null() ? std::string()
                                     : " (cgroup2 at " + c["v2_mount"].get<std::string>() + ")");
  const json& n = j["nvml"];
  if (n["available"].get<bool>()) {
    fmt::print("NVML:            driver {} ({}), {} GPU(s)\n", n["driver_version"].get<std::string>(),
               n["library"].get<std::string>(), n["gpus"].size());
    for (const json& g : n["gpus"]) {
      fmt::print("  GPU {}:         {} at {}\n", g["index"].get<std::uint32_t>(),
                 g["name"].get<std::string>(), g["bus_id"].get<std::string>());
    }
  } else {
    fmt::print("NVML:            not available: {}\n", n["reason"].get<std::string>());
  }
  const json& t = j["topology"];
  if (t.contains("error")) {
    fmt::print("topology:        {}\n", t["error"].get<std::string>());
  } else {
    fmt::print("sysfs GPUs:      {}\n", t["sysfs_gpus"].size());
    for (const json& g : t["sysfs_gpus"]) {
      fmt::print("  GPU {}:         {} on NUMA node {}\n", g["index"].get<std::uint32_t>(),
                 g["bus_id"].get<std::string>(),
                 g["numa_node"].is_null() ? std::string("unknown") : g["numa_node"].dump());
    }
    fmt::print("CPUs:            {} on {} NUMA node(s)\n", t["cpus"].get<std::uint32_t>(),
               t["numa_nodes"].size());
    for (const json& node : t["numa_nodes"]) {
      fmt::print("  node {}:        {} CPUs, {} MB\n", node["id"].get<std::uint32_t>(),
                 node["cpus"].get<std::size_t>(), node["memory_mb"].get<std::uint64_t>());
    }
  }
  const json& d = j["delay_accounting"];
  if (d["available"].get<bool>()) {
    fmt::print("delay accounting: kernel.task_delayacct = {}{}\n", d["enabled"].get<bool>() ? 1 : 0,
               d["enabled"].get<bool>() ? "" : " (the daemon turns it on while it runs)");
  } else {
    fmt::print("delay accounting: not available (no kernel.task_delayacct): io wait is not "
               "measured\n");
  }
}

}  // namespace

std::string emulated_nvml_path() {
  if (const char* dir = std::getenv("ZERNEL_FAKE_LIB_DIR"); dir != nullptr && *dir != '\0') {
    return std::string(dir) + "/libnvidia-ml.so.1";
  }
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "libnvidia-ml.so.1";
  return (exe.parent_path().parent_path() / "lib/fake/libnvidia-ml.so.1").string();
}

int run_info_at(const std::string& sys_root, const std::string& proc_root,
                const std::string& nvml_library, bool json_out) {
  json j;
  j["version"] = std::string(kVersion);
  j["kernel"] = kernel_info();
  j["sched_ext"] = sched_ext_info(sys_root);
  j["btf"] = btf_info(sys_root);
  j["cgroup"] = cgroup_info(proc_root);
  j["nvml"] = nvml_info(nvml_library);
  j["topology"] = topology_info(sys_root, proc_root);
  j["delay_accounting"] = delayacct_info(proc_root);
  if (json_out) {
    fmt::print("{}\n", j.dump(2));
  } else {
    print_text(j);
  }
  std::fflush(stdout);
  return 0;
}

int run_info(bool emulated_gpu, bool json_out) {
  return run_info_at("/sys", "/proc", emulated_gpu ? emulated_nvml_path() : std::string(),
                     json_out);
}

}  // namespace zernel::cli
