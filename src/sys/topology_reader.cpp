#include "sys/topology_reader.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <sstream>

#include "common/parse_number.hpp"
#include "sys/file.hpp"

namespace zernel::sys {
namespace fs = std::filesystem;

namespace {

std::string trim(std::string s) {
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

// "0x10de\n" -> 0x10de
std::optional<std::uint64_t> parse_hex_file(const fs::path& p) {
  auto text = read_file(p.string());
  if (!text) return std::nullopt;
  std::string t = trim(*text);
  if (t.rfind("0x", 0) == 0) t = t.substr(2);
  return parse_u64(t, 16);
}

std::optional<std::uint32_t> node_number(const std::string& name) {
  if (name.rfind("node", 0) != 0) return std::nullopt;
  auto v = parse_u64(std::string_view(name).substr(4));
  if (!v || *v > UINT32_MAX) return std::nullopt;
  return static_cast<std::uint32_t>(*v);
}

// "Node 0 MemTotal:       32768 kB" -> 32 (MiB)
std::uint64_t node_memory_mb(const fs::path& meminfo) {
  auto text = read_file(meminfo.string());
  if (!text) return 0;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    auto pos = line.find("MemTotal:");
    if (pos == std::string::npos) continue;
    std::istringstream fields(line.substr(pos + 9));
    std::uint64_t kb = 0;
    if (fields >> kb) return kb / 1024;
  }
  return 0;
}

std::optional<std::uint32_t> driver_minor(const fs::path& proc_root, const std::string& bus_id) {
  auto text = read_file((proc_root / "driver/nvidia/gpus" / bus_id / "information").string());
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Device Minor:", 0) != 0) continue;
    auto v = parse_u64(trim(line.substr(13)));
    if (v && *v <= UINT32_MAX) return static_cast<std::uint32_t>(*v);
  }
  return std::nullopt;
}

void read_gpus(const fs::path& sys, const fs::path& proc, TopologyInfo& info) {
  std::error_code ec;
  fs::directory_iterator it(sys / "bus/pci/devices", ec);
  if (ec) return;
  std::vector<GpuLocation> gpus;
  std::vector<std::optional<std::uint32_t>> minors;
  for (const auto& dev : it) {
    const fs::path& d = dev.path();
    auto vendor = parse_hex_file(d / "vendor");
    auto cls = parse_hex_file(d / "class");
    if (!vendor || *vendor != 0x10de || !cls) continue;
    const std::uint64_t base_sub = *cls >> 8;  // class code without the programming interface
    if (base_sub != 0x0300 && base_sub != 0x0302) continue;
    GpuLocation g;
    g.bus_id = d.filename().string();
    if (auto text = read_file((d / "numa_node").string())) {
      std::string t = trim(*text);
      if (auto v = parse_u64(t); v && *v <= UINT32_MAX) {
        g.node = static_cast<std::uint32_t>(*v);
      } else if (t != "-1") {
        info.warnings.push_back(g.bus_id + ": unreadable numa_node \"" + t + "\"");
      }
    }
    minors.push_back(driver_minor(proc, g.bus_id));
    gpus.push_back(std::move(g));
  }
  // Bus id order first; the driver's minor numbers, when all are known and distinct, win.
  std::vector<std::size_t> order(gpus.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return gpus[a].bus_id < gpus[b].bus_id; });
  bool use_minor = !gpus.empty() && std::all_of(minors.begin(), minors.end(),
                                                [](const auto& m) { return m.has_value(); });
  if (use_minor) {
    std::vector<std::uint32_t> seen;
    seen.reserve(minors.size());
    for (const auto& m : minors) seen.push_back(*m);
    std::sort(seen.begin(), seen.end());
    use_minor = std::adjacent_find(seen.begin(), seen.end()) == seen.end();
  }
  for (std::size_t rank = 0; rank < order.size(); ++rank) {
    GpuLocation g = gpus[order[rank]];
    g.index = use_minor ? *minors[order[rank]] : static_cast<std::uint32_t>(rank);
    info.gpus.push_back(std::move(g));
  }
  std::sort(info.gpus.begin(), info.gpus.end(),
            [](const GpuLocation& a, const GpuLocation& b) { return a.index < b.index; });
}

}  // namespace

Result<std::vector<std::uint32_t>> parse_cpu_list(const std::string& text) {
  std::vector<std::uint32_t> cpus;
  const std::string t = trim(text);
  if (t.empty()) return cpus;
  std::istringstream in(t);
  std::string part;
  while (std::getline(in, part, ',')) {
    const auto dash = part.find('-');
    auto lo = parse_u64(part.substr(0, dash));
    auto hi = dash == std::string::npos ? lo : parse_u64(part.substr(dash + 1));
    if (!lo || !hi || *hi < *lo || *hi > 65535) {
      return Error("bad CPU list entry \"" + part + "\" in \"" + t + "\"");
    }
    for (std::uint64_t c = *lo; c <= *hi; ++c) cpus.push_back(static_cast<std::uint32_t>(c));
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

Result<TopologyInfo> read_topology(const std::string& sys_root, const std::string& proc_root) {
  TopologyInfo info;
  const fs::path sys(sys_root);
  std::error_code ec;
  std::vector<policy::NumaNode> nodes;
  for (fs::directory_iterator it(sys / "devices/system/node", ec), end; !ec && it != end;
       it.increment(ec)) {
    auto id = node_number(it->path().filename().string());
    if (!id) continue;
    auto text = read_file((it->path() / "cpulist").string());
    if (!text) continue;
    auto cpus = parse_cpu_list(*text);
    if (!cpus) {
      info.warnings.push_back(it->path().string() + "/cpulist: " + cpus.error().message());
      continue;
    }
    nodes.push_back({*id, std::move(*cpus), node_memory_mb(it->path() / "meminfo")});
  }
  if (nodes.empty()) {
    // No NUMA directory (CONFIG_NUMA=n): one node with every online CPU.
    auto text = read_file((sys / "devices/system/cpu/online").string());
    if (!text) return Error(ENOENT, "no CPUs found under " + sys_root + "/devices/system");
    auto cpus = parse_cpu_list(*text);
    if (!cpus) return cpus.error().context(sys_root + "/devices/system/cpu/online");
    nodes.push_back({0, std::move(*cpus), 0});
  }
  std::sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  for (auto& n : nodes) info.topology.add_node(std::move(n));
  if (info.topology.total_cpus() == 0) {
    return Error(ENOENT, "no CPUs found under " + sys_root + "/devices/system");
  }
  read_gpus(sys, fs::path(proc_root), info);
  for (const GpuLocation& g : info.gpus) {
    if (g.node && info.topology.node_index(*g.node)) info.topology.map_gpu(g.index, *g.node);
  }
  return info;
}

namespace {

// The CPUs sharing CPU cpu's cache of the highest level >= 3 that holds data, or none.
std::optional<std::vector<std::uint32_t>> llc_cpus(const fs::path& cpu_dir) {
  std::error_code ec;
  std::optional<std::vector<std::uint32_t>> best;
  std::uint64_t best_level = 0;
  for (fs::directory_iterator it(cpu_dir / "cache", ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind("index", 0) != 0) continue;
    auto level_text = read_file((it->path() / "level").string());
    auto type_text = read_file((it->path() / "type").string());
    auto shared = read_file((it->path() / "shared_cpu_list").string());
    if (!level_text || !shared) continue;
    auto level = parse_u64(trim(*level_text));
    if (!level || *level < 3 || *level <= best_level) continue;
    if (type_text && trim(*type_text) == "Instruction") continue;
    auto cpus = parse_cpu_list(*shared);
    if (!cpus || cpus->empty()) continue;
    best_level = *level;
    best = std::move(*cpus);
  }
  return best;
}

}  // namespace

CpuLlcs read_cpu_llcs(const std::string& sys_root, std::uint32_t nr_cpus, std::uint32_t max_llcs) {
  CpuLlcs out;
  out.llc_of.assign(nr_cpus, 0);
  if (max_llcs == 0) max_llcs = 1;
  const fs::path cpus_dir = fs::path(sys_root) / "devices/system/cpu";
  // Each LLC by its first CPU; dense ids in the order of first CPUs.
  std::vector<std::uint32_t> first_of(nr_cpus, UINT32_MAX);
  std::vector<std::uint32_t> firsts;
  for (std::uint32_t cpu = 0; cpu < nr_cpus; ++cpu) {
    auto shared = llc_cpus(cpus_dir / ("cpu" + std::to_string(cpu)));
    if (!shared) continue;
    first_of[cpu] = *std::min_element(shared->begin(), shared->end());
    firsts.push_back(first_of[cpu]);
  }
  std::sort(firsts.begin(), firsts.end());
  firsts.erase(std::unique(firsts.begin(), firsts.end()), firsts.end());
  out.found = static_cast<std::uint32_t>(firsts.size());
  if (firsts.size() <= 1) return out;
  for (std::uint32_t cpu = 0; cpu < nr_cpus; ++cpu) {
    if (first_of[cpu] == UINT32_MAX) continue;
    const auto id = static_cast<std::uint32_t>(
        std::lower_bound(firsts.begin(), firsts.end(), first_of[cpu]) - firsts.begin());
    out.llc_of[cpu] = id % max_llcs;
  }
  out.nr_llcs = std::min<std::uint32_t>(out.found, max_llcs);
  return out;
}

}  // namespace zernel::sys
