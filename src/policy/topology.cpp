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

namespace {

// std heap functions build a max-heap under `less`; "greater" makes the smallest (load, cpu) the top.
struct SlotGreater {
  template <typename S>
  bool operator()(const S& a, const S& b) const {
    return a.load > b.load || (a.load == b.load && a.cpu > b.cpu);
  }
};

}  // namespace

void CpuPlacer::reset(const Topology& topo, bool numa_enabled, std::span<const float> loads) {
  numa_ = numa_enabled;
  groups_.clear();
  gpu_group_.clear();
  if (numa_) {
    for (const NumaNode& n : topo.nodes()) {
      if (n.cpus.empty()) continue;
      Group g;
      g.heap.reserve(n.cpus.size());
      for (std::uint32_t cpu : n.cpus) g.heap.push_back({0.0F, cpu});
      for (const auto& [gpu, node] : topo.gpu_map()) {
        if (node == n.id) gpu_group_.emplace_back(gpu, static_cast<std::uint32_t>(groups_.size()));
      }
      groups_.push_back(std::move(g));
    }
    std::sort(gpu_group_.begin(), gpu_group_.end());
  } else {
    Group g;
    for (const NumaNode& n : topo.nodes()) {
      for (std::uint32_t cpu : n.cpus) g.heap.push_back({0.0F, cpu});
    }
    if (!g.heap.empty()) groups_.push_back(std::move(g));
  }
  rebuild(loads);
}

void CpuPlacer::set_loads(std::span<const float> loads) { rebuild(loads); }

void CpuPlacer::rebuild(std::span<const float> loads) {
  for (Group& g : groups_) {
    for (Slot& s : g.heap) s.load = load_of(loads, s.cpu);
    std::make_heap(g.heap.begin(), g.heap.end(), SlotGreater{});
  }
}

std::optional<std::uint32_t> CpuPlacer::place_in(Group& g) {
  std::pop_heap(g.heap.begin(), g.heap.end(), SlotGreater{});
  Slot& s = g.heap.back();
  const std::uint32_t cpu = s.cpu;
  s.load += kPlacementLoad;
  std::push_heap(g.heap.begin(), g.heap.end(), SlotGreater{});
  return cpu;
}

std::optional<std::uint32_t> CpuPlacer::place(std::optional<std::uint32_t> gpu) {
  if (groups_.empty()) return std::nullopt;
  if (gpu && numa_) {
    auto it = std::lower_bound(gpu_group_.begin(), gpu_group_.end(), *gpu,
                               [](const auto& e, std::uint32_t g) { return e.first < g; });
    if (it != gpu_group_.end() && it->first == *gpu) return place_in(groups_[it->second]);
  }
  // No GPU, an unmapped GPU, or a GPU whose node has no CPUs: the best CPU of the machine.
  Group* best = &groups_[0];
  for (Group& g : groups_) {
    if (SlotGreater{}(best->heap.front(), g.heap.front())) best = &g;
  }
  return place_in(*best);
}

}  // namespace zernel::policy
