#include "policy/topology.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace zernel::policy {

Topology Topology::single_node(std::uint32_t cpus, std::uint64_t memory_mb) {
  NumaNode n;
  n.id = 0;
  n.cpus.resize(cpus);
  std::iota(n.cpus.begin(), n.cpus.end(), 0U);
  n.memory_mb = memory_mb;
  Topology t;
  t.add_node(std::move(n));
  return t;
}

void Topology::add_node(NumaNode node) {
  for (NumaNode& n : nodes_) {
    if (n.id == node.id) {
      n = std::move(node);
      return;
    }
  }
  nodes_.push_back(std::move(node));
}

void Topology::map_gpu(std::uint32_t gpu, std::uint32_t node_id) {
  auto it = std::lower_bound(gpu_nodes_.begin(), gpu_nodes_.end(), gpu,
                             [](const auto& e, std::uint32_t g) { return e.first < g; });
  if (it != gpu_nodes_.end() && it->first == gpu) {
    it->second = node_id;
  } else {
    gpu_nodes_.insert(it, {gpu, node_id});
  }
}

std::optional<std::uint32_t> Topology::gpu_node(std::uint32_t gpu) const {
  auto it = std::lower_bound(gpu_nodes_.begin(), gpu_nodes_.end(), gpu,
                             [](const auto& e, std::uint32_t g) { return e.first < g; });
  if (it == gpu_nodes_.end() || it->first != gpu) return std::nullopt;
  return it->second;
}

std::optional<std::size_t> Topology::node_index(std::uint32_t node_id) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].id == node_id) return i;
  }
  return std::nullopt;
}

std::size_t Topology::gpu_count() const { return gpu_nodes_.size(); }

std::uint32_t Topology::total_cpus() const {
  std::size_t n = 0;
  for (const NumaNode& node : nodes_) n += node.cpus.size();
  return static_cast<std::uint32_t>(n);
}

float sanitize_load(float load) {
  if (std::isnan(load) || load < 0.0F) return 1.0F;
  return std::min(load, 1.0F);
}

namespace {

float load_of(std::span<const float> loads, std::uint32_t cpu) {
  return cpu < loads.size() ? sanitize_load(loads[cpu]) : 0.0F;
}

// Least-loaded CPU of a list; ties go to the first. `best` carries the running minimum across
// calls so several lists can be scanned as one.
void scan(const std::vector<std::uint32_t>& cpus, std::span<const float> loads,
          std::optional<std::uint32_t>& best, float& best_load) {
  for (std::uint32_t cpu : cpus) {
    const float l = load_of(loads, cpu);
    if (!best || l < best_load) {
      best = cpu;
      best_load = l;
    }
  }
}

}  // namespace

std::optional<std::uint32_t> Topology::select_cpu(std::optional<std::uint32_t> gpu,
                                                  std::span<const float> loads) const {
  std::optional<std::uint32_t> best;
  float best_load = 0.0F;
  if (gpu) {
    if (auto node = gpu_node(*gpu)) {
      if (auto idx = node_index(*node)) scan(nodes_[*idx].cpus, loads, best, best_load);
    }
    if (best) return best;
  }
  for (const NumaNode& n : nodes_) scan(n.cpus, loads, best, best_load);
  return best;
}

// ---- CpuPlacer -------------------------------------------------------------------------------

void CpuPlacer::reset(const Topology& topo, bool numa_enabled, std::span<const float> loads) {
  numa_ = numa_enabled;
  groups_.clear();
  gpu_group_.clear();
  if (numa_) {
    for (const NumaNode& n : topo.nodes()) {
      if (n.cpus.empty()) continue;
      Group g;
      for (std::uint32_t cpu : n.cpus) g.order.push_back({cpu, 0, 0});
      for (const auto& [gpu, node] : topo.gpu_map()) {
        if (node != n.id || gpu > kMaxPlacerGpu) continue;
        if (gpu_group_.size() <= gpu) gpu_group_.resize(gpu + 1U, -1);
        gpu_group_[gpu] = static_cast<std::int32_t>(groups_.size());
      }
      groups_.push_back(std::move(g));
    }
  } else {
    Group g;
    for (const NumaNode& n : topo.nodes()) {
      for (std::uint32_t cpu : n.cpus) g.order.push_back({cpu, 0, 0});
    }
    if (!g.order.empty()) groups_.push_back(std::move(g));
  }
  rebuild(loads);
}

void CpuPlacer::set_loads(std::span<const float> loads) { rebuild(loads); }

void CpuPlacer::rebuild(std::span<const float> loads) {
  for (Group& g : groups_) {
    g.max_level = 0;
    for (Slot& s : g.order) {
      const auto units = static_cast<std::uint32_t>(
          std::lround(load_of(loads, s.cpu) * static_cast<float>(kUnitsPerCpu)));
      s.level = units / kStep;
      s.rest = units % kStep;
      g.max_level = std::max(g.max_level, s.level);
    }
    std::sort(g.order.begin(), g.order.end(), [](const Slot& a, const Slot& b) {
      return a.rest < b.rest || (a.rest == b.rest && a.cpu < b.cpu);
    });
    g.level = 0;
    g.pos = 0;
    settle(g);
  }
}

void CpuPlacer::settle(Group& g) {
  // Terminates: at level max_level every slot is eligible.
  while (g.order[g.pos].level > g.level) {
    if (++g.pos == g.order.size()) {
      g.pos = 0;
      ++g.level;
    }
  }
}

std::uint64_t CpuPlacer::next_value(const Group& g) {
  // Effective load of the next CPU, with the cpu id as tie-break in the low bits.
  const Slot& s = g.order[g.pos];
  return ((std::uint64_t{g.level} * kStep + s.rest) << 32) | s.cpu;
}

std::uint32_t CpuPlacer::take(Group& g) {
  const std::uint32_t cpu = g.order[g.pos].cpu;
  if (++g.pos == g.order.size()) {
    g.pos = 0;
    ++g.level;  // 32 bits: wraps only after 4e9 rounds over the group within one tick
  }
  settle(g);
  return cpu;
}

std::optional<std::uint32_t> CpuPlacer::place(std::optional<std::uint32_t> gpu) {
  if (groups_.empty()) return std::nullopt;
  if (gpu && *gpu < gpu_group_.size() && gpu_group_[*gpu] >= 0) {
    return take(groups_[static_cast<std::size_t>(gpu_group_[*gpu])]);
  }
  // No GPU, an unmapped GPU, or a GPU whose node has no CPUs: the best CPU of the machine.
  Group* best = &groups_[0];
  std::uint64_t best_value = next_value(*best);
  for (std::size_t i = 1; i < groups_.size(); ++i) {
    const std::uint64_t v = next_value(groups_[i]);
    if (v < best_value) {
      best_value = v;
      best = &groups_[i];
    }
  }
  return take(*best);
}

}  // namespace zernel::policy
