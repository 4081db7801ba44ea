#pragma once
// The machine's NUMA layout as plain values (collect/ fills it from sysfs or hwloc), and CPU choice.
//
// Topology::select_cpu is the earlier implementation's rule with its defects fixed: a task bound to
// a GPU prefers the CPUs of that GPU's node; without a mapping (or when that node has no CPUs) all
// CPUs; among those the least loaded, ties to the first listed. A NaN or negative load counts as
// 1.0 (fully loaded: a broken reading never wins), a load above 1.0 counts as 1.0, and a CPU
// missing from the loads counts as 0.0. It never returns a CPU that is not in the topology.
//
// CpuPlacer is what the engine uses within a tick: the same preference, but each placement adds
// kPlacementLoad (0.1 of a CPU) to the chosen CPU's effective load, so the tasks of one tick spread
// over the node's CPUs ("water filling": an idle CPU takes several tasks before a half-loaded one
// takes one) instead of all landing on the least-loaded CPU.
//
// Because every placement adds the same amount, the order of placements is known in advance and
// needs no heap. In units of 1/1000 of a CPU, write a CPU's load as q * 100 + r (r < 100); its
// effective loads are (q + j) * 100 + r for j = 0, 1, 2, ... Taking the smallest each time means:
// walk "levels" m = 0, 1, 2, ..., and within a level visit, in order of r (then cpu id), every CPU
// whose q <= m. reset()/set_loads() sort each node's CPUs by (r, cpu) once per tick; place() moves
// a cursor (level, position) forward, so a placement is O(1) amortised and allocates nothing.
// Worked example, loads {cpu0: 0.25, cpu1: 0.0, cpu2: 0.05}: (q, r) = (2,50), (0,0), (0,50); the
// order is cpu1, cpu2 (level 0: 0.0, 0.05), cpu1, cpu2 (level 1: 0.1, 0.15), then
// cpu1, cpu0, cpu2 (level 2: 0.2, 0.25, 0.25) and so on. Loads are read to
// 1/1000 of a CPU; closer loads tie and go to the lower cpu id.
// A task with no GPU (or an unmapped one) takes the best next CPU among the nodes. With NUMA off,
// all CPUs form one group. GPU ids above kMaxPlacerGpu are treated as unmapped.

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace zernel::policy {

struct NumaNode {
  std::uint32_t id = 0;
  std::vector<std::uint32_t> cpus;
  std::uint64_t memory_mb = 0;

  bool operator==(const NumaNode&) const = default;
};

class Topology {
 public:
  Topology() = default;
  // One node 0 with CPUs 0..n-1.
  static Topology single_node(std::uint32_t cpus, std::uint64_t memory_mb = 0);

  // Adds a node; a node id seen before replaces it.
  void add_node(NumaNode node);
  void map_gpu(std::uint32_t gpu, std::uint32_t node_id);

  [[nodiscard]] const std::vector<NumaNode>& nodes() const { return nodes_; }
  // The node of a GPU, nullopt when unmapped.
  [[nodiscard]] std::optional<std::uint32_t> gpu_node(std::uint32_t gpu) const;
  // The node's index in nodes(), nullopt when no such node.
  [[nodiscard]] std::optional<std::size_t> node_index(std::uint32_t node_id) const;
  [[nodiscard]] std::size_t gpu_count() const;
  [[nodiscard]] std::uint32_t total_cpus() const;
  [[nodiscard]] const std::vector<std::pair<std::uint32_t, std::uint32_t>>& gpu_map() const {
    return gpu_nodes_;
  }

  // Least-loaded preferred CPU; nullopt only when the topology has no CPU at all.
  [[nodiscard]] std::optional<std::uint32_t> select_cpu(std::optional<std::uint32_t> gpu,
                                                        std::span<const float> loads) const;

 private:
  std::vector<NumaNode> nodes_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> gpu_nodes_;  // (gpu, node id), sorted by gpu
};

// Load in [0, 1] as select_cpu and CpuPlacer see it.
float sanitize_load(float load);

class CpuPlacer {
 public:
  // Effective load a placed task adds to its CPU for the rest of the tick.
  static constexpr float kPlacementLoad = 0.1F;
  static constexpr std::uint32_t kMaxPlacerGpu = 4095;

  // Builds the groups: one per node, or a single one with numa_enabled false.
  void reset(const Topology& topo, bool numa_enabled, std::span<const float> loads);
  // Re-ranks with fresh loads, keeping the groups (no allocation), and starts a new tick.
  void set_loads(std::span<const float> loads);
  // Chooses a CPU for a task bound to `gpu` (or none) and charges it; nullopt without CPUs.
  std::optional<std::uint32_t> place(std::optional<std::uint32_t> gpu);

 private:
  static constexpr std::uint32_t kUnitsPerCpu = 1000;  // load resolution
  static constexpr std::uint32_t kStep = 100;          // kPlacementLoad in those units

  struct Slot {
    std::uint32_t cpu;
    std::uint32_t level;  // q: load / kStep
    std::uint32_t rest;   // r: load % kStep
  };
  struct Group {
    std::vector<Slot> order;  // sorted by (rest, cpu)
    std::uint32_t max_level = 0;
    std::uint32_t level = 0;  // cursor: current level m ...
    std::size_t pos = 0;      // ... and position in `order`, always at a slot with level <= m
  };
  void rebuild(std::span<const float> loads);
  static void settle(Group& g);  // moves the cursor to the next eligible slot
  static std::uint64_t next_value(const Group& g);
  static std::uint32_t take(Group& g);

  bool numa_ = true;
  std::vector<Group> groups_;
  std::vector<std::int32_t> gpu_group_;  // by gpu id: group index, -1 when unmapped
};

}  // namespace zernel::policy
