// NUMA-aware CPU choice ([numa] in docs/configuration.md; the load and missing-node cases an
// earlier implementation got wrong): Topology::select_cpu and CpuPlacer.

#include "policy/topology.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

namespace zernel::policy {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

NumaNode node(std::uint32_t id, std::vector<std::uint32_t> cpus, std::uint64_t mem = 0) {
  NumaNode n;
  n.id = id;
  n.cpus = std::move(cpus);
  n.memory_mb = mem;
  return n;
}

// Node 0: CPUs 0-3 with GPU 0; node 1: CPUs 4-7 with GPU 1.
Topology two_nodes() {
  Topology t;
  t.add_node(node(0, {0, 1, 2, 3}));
  t.add_node(node(1, {4, 5, 6, 7}));
  t.map_gpu(0, 0);
  t.map_gpu(1, 1);
  return t;
}

std::set<std::uint32_t> all_cpus(const Topology& t) {
  std::set<std::uint32_t> s;
  for (const NumaNode& n : t.nodes()) s.insert(n.cpus.begin(), n.cpus.end());
  return s;
}

// ---- Topology --------------------------------------------------------------------------------

TEST(Topology, single_node_has_cpus_0_to_n_minus_1) {
  const Topology t = Topology::single_node(4, 1024);
  ASSERT_EQ(t.nodes().size(), 1U);
  EXPECT_EQ(t.nodes()[0].id, 0U);
  EXPECT_EQ(t.nodes()[0].cpus, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(t.nodes()[0].memory_mb, 1024U);
  EXPECT_EQ(t.total_cpus(), 4U);
  EXPECT_EQ(t.gpu_count(), 0U);
}

TEST(Topology, add_node_with_a_known_id_replaces_it) {
  Topology t = two_nodes();
  t.add_node(node(1, {9}));
  ASSERT_EQ(t.nodes().size(), 2U);
  EXPECT_EQ(t.total_cpus(), 5U);
  EXPECT_EQ(t.node_index(1), 1U);
  EXPECT_EQ(t.nodes()[1].cpus, (std::vector<std::uint32_t>{9}));
  EXPECT_FALSE(t.node_index(7).has_value());
}

TEST(Topology, gpu_map_is_sorted_and_remapping_replaces) {
  Topology t;
  t.add_node(node(0, {0}));
  t.map_gpu(3, 0);
  t.map_gpu(1, 0);
  t.map_gpu(2, 5);
  t.map_gpu(3, 7);
  EXPECT_EQ(t.gpu_count(), 3U);
  EXPECT_EQ(t.gpu_node(3), 7U);
  EXPECT_EQ(t.gpu_node(2), 5U);
  EXPECT_FALSE(t.gpu_node(0).has_value());
  ASSERT_EQ(t.gpu_map().size(), 3U);
  EXPECT_EQ(t.gpu_map()[0].first, 1U);
  EXPECT_EQ(t.gpu_map()[1].first, 2U);
  EXPECT_EQ(t.gpu_map()[2].first, 3U);
}

TEST(Topology, a_gpu_task_prefers_the_cpus_of_its_gpu_node) {
  const Topology t = two_nodes();
  // Node 1's CPUs are busier than node 0's, still a GPU-1 task stays on node 1.
  const std::vector<float> loads = {0.0F, 0.0F, 0.0F, 0.0F, 0.9F, 0.5F, 0.7F, 0.8F};
  EXPECT_EQ(t.select_cpu(1U, loads), 5U);
  EXPECT_EQ(t.select_cpu(0U, loads), 0U);
}

TEST(Topology, a_task_without_gpu_chooses_among_all_cpus) {
  const Topology t = two_nodes();
  const std::vector<float> loads = {0.9F, 0.9F, 0.9F, 0.9F, 0.9F, 0.9F, 0.2F, 0.9F};
  EXPECT_EQ(t.select_cpu(std::nullopt, loads), 6U);
}

TEST(Topology, an_unmapped_gpu_chooses_among_all_cpus) {
  const Topology t = two_nodes();
  const std::vector<float> loads = {0.9F, 0.9F, 0.9F, 0.9F, 0.9F, 0.9F, 0.2F, 0.9F};
  EXPECT_EQ(t.select_cpu(42U, loads), 6U);
}

TEST(Topology, the_least_loaded_cpu_wins_and_ties_go_to_the_first_listed) {
  Topology t;
  t.add_node(node(0, {3, 1, 2}));
  const std::vector<float> tie = {0.5F, 0.5F, 0.5F, 0.5F};
  EXPECT_EQ(t.select_cpu(std::nullopt, tie), 3U);
  const std::vector<float> loads = {0.0F, 0.4F, 0.3F, 0.6F};
  EXPECT_EQ(t.select_cpu(std::nullopt, loads), 2U);
}

TEST(Topology, a_cpu_missing_from_the_loads_counts_as_idle) {
  const Topology t = Topology::single_node(4);
  const std::vector<float> loads = {0.5F, 0.2F};
  EXPECT_EQ(t.select_cpu(std::nullopt, loads), 2U);
  EXPECT_EQ(t.select_cpu(std::nullopt, {}), 0U);
}

TEST(Topology, a_nan_load_never_wins) {
  // A NaN load must never win.
  const Topology t = Topology::single_node(2);
  EXPECT_EQ(t.select_cpu(std::nullopt, std::vector<float>{kNaN, 0.99F}), 1U);
  EXPECT_EQ(t.select_cpu(std::nullopt, std::vector<float>{0.99F, kNaN}), 0U);
  EXPECT_EQ(t.select_cpu(std::nullopt, std::vector<float>{-kNaN, 0.99F}), 1U);
  // Both broken: some CPU of the topology still comes back.
  const auto cpu = t.select_cpu(std::nullopt, std::vector<float>{kNaN, kNaN});
  ASSERT_TRUE(cpu.has_value());
  EXPECT_LT(*cpu, 2U);
}

TEST(Topology, a_negative_load_never_wins) {
  const Topology t = Topology::single_node(2);
  EXPECT_EQ(t.select_cpu(std::nullopt, std::vector<float>{-1.0F, 0.99F}), 1U);
  EXPECT_EQ(t.select_cpu(std::nullopt, std::vector<float>{-kInf, 0.99F}), 1U);
}

TEST(Topology, loads_above_one_are_clamped_to_one) {
  const Topology t = Topology::single_node(3);
  // 5.0 and inf count as 1.0: a tie with CPU 1's 1.0, so the first listed wins.
  EXPECT_EQ(t.select_cpu(std::nullopt, std::vector<float>{5.0F, 1.0F, kInf}), 0U);
  EXPECT_EQ(t.select_cpu(std::nullopt, std::vector<float>{2.0F, 0.99F, 1.5F}), 1U);
}

TEST(Topology, sanitize_load_maps_every_float_into_zero_to_one) {
  EXPECT_EQ(sanitize_load(kNaN), 1.0F);
  EXPECT_EQ(sanitize_load(-kNaN), 1.0F);
  EXPECT_EQ(sanitize_load(-0.5F), 1.0F);
  EXPECT_EQ(sanitize_load(-kInf), 1.0F);
  EXPECT_EQ(sanitize_load(kInf), 1.0F);
  EXPECT_EQ(sanitize_load(1.5F), 1.0F);
  EXPECT_EQ(sanitize_load(0.25F), 0.25F);
  EXPECT_EQ(sanitize_load(0.0F), 0.0F);
  EXPECT_EQ(sanitize_load(1.0F), 1.0F);
}

TEST(Topology, a_gpu_whose_node_is_missing_falls_back_to_all_cpus_never_cpu_0) {
  // A GPU whose node is missing must not get CPU 0, which may not exist.
  Topology t;
  t.add_node(node(0, {4, 5}));
  t.add_node(node(1, {8, 9}));
  t.map_gpu(0, 7);  // node 7 does not exist
  const std::vector<float> loads(16, 0.5F);
  const auto cpu = t.select_cpu(0U, loads);
  ASSERT_TRUE(cpu.has_value());
  EXPECT_TRUE(all_cpus(t).count(*cpu) == 1) << *cpu;
  EXPECT_EQ(*cpu, 4U);
  std::vector<float> l2(16, 0.5F);
  l2[9] = 0.1F;
  EXPECT_EQ(t.select_cpu(0U, l2), 9U);
}

TEST(Topology, a_gpu_whose_node_has_no_cpus_falls_back_to_all_cpus) {
  Topology t;
  t.add_node(node(0, {4, 5}));
  t.add_node(node(2, {}));  // memory-only node
  t.map_gpu(1, 2);
  std::vector<float> loads(8, 0.5F);
  loads[5] = 0.0F;
  EXPECT_EQ(t.select_cpu(1U, loads), 5U);
}

TEST(Topology, an_empty_topology_has_no_cpu_to_offer) {
  const Topology t;
  EXPECT_FALSE(t.select_cpu(std::nullopt, {}).has_value());
  EXPECT_FALSE(t.select_cpu(0U, std::vector<float>{0.0F}).has_value());
  EXPECT_EQ(t.total_cpus(), 0U);
}

TEST(TopologyProperty, select_cpu_always_returns_a_cpu_of_the_topology) {
  std::mt19937 rng(31337);
  const float specials[] = {kNaN, -kNaN, kInf, -kInf, -1.0F, 2.0F, 0.0F, 1.0F};
  for (int trial = 0; trial < 2'000; ++trial) {
    Topology t;
    const std::uint32_t nodes = static_cast<std::uint32_t>(rng() % 4);
    std::uint32_t next_cpu = static_cast<std::uint32_t>(rng() % 3);
    for (std::uint32_t n = 0; n < nodes; ++n) {
      std::vector<std::uint32_t> cpus;
      const std::uint32_t count = static_cast<std::uint32_t>(rng() % 5);
      for (std::uint32_t c = 0; c < count; ++c) {
        cpus.push_back(next_cpu);
        next_cpu += 1 + static_cast<std::uint32_t>(rng() % 2);  // sparse CPU ids
      }
      t.add_node(node(n * 2, std::move(cpus)));
    }
    for (std::uint32_t g = 0; g < 4; ++g) {
      if (rng() % 3 != 0) t.map_gpu(g, static_cast<std::uint32_t>(rng() % 8));
    }
    const auto cpus = all_cpus(t);
    for (int q = 0; q < 25; ++q) {
      std::vector<float> loads(rng() % 24);
      for (float& l : loads) {
        l = (rng() % 4 == 0) ? specials[rng() % 8]
                             : std::uniform_real_distribution<float>(0.0F, 1.0F)(rng);
      }
      std::optional<std::uint32_t> gpu;
      if (rng() % 4 != 0) gpu = static_cast<std::uint32_t>(rng() % 6);
      const auto cpu = t.select_cpu(gpu, loads);
      if (cpus.empty()) {
        ASSERT_FALSE(cpu.has_value());
      } else {
        ASSERT_TRUE(cpu.has_value());
        ASSERT_EQ(cpus.count(*cpu), 1U) << "trial " << trial << " cpu " << *cpu;
        // Never worse than any CPU of the preferred set, never a NaN winner over a real load.
        const float chosen = *cpu < loads.size() ? sanitize_load(loads[*cpu]) : 0.0F;
        ASSERT_FALSE(std::isnan(chosen));
      }
    }
  }
}

// ---- CpuPlacer -------------------------------------------------------------------------------

TEST(CpuPlacer, tasks_of_one_tick_spread_over_an_idle_node) {
  // Tasks placed in one tick must spread, not all get the node's same CPU.
  Topology t = Topology::single_node(64);
  t.map_gpu(0, 0);
  CpuPlacer p;
  p.reset(t, true, {});
  std::set<std::uint32_t> used;
  for (int i = 0; i < 64; ++i) {
    const auto cpu = p.place(0U);
    ASSERT_TRUE(cpu.has_value());
    ASSERT_LT(*cpu, 64U);
    used.insert(*cpu);
  }
  EXPECT_EQ(used.size(), 64U);
}

TEST(CpuPlacer, gpu_tasks_stay_on_their_node_while_spreading) {
  const Topology t = two_nodes();
  CpuPlacer p;
  p.reset(t, true, {});
  std::map<std::uint32_t, int> per_cpu;
  for (int i = 0; i < 8; ++i) {
    const auto cpu = p.place(1U);
    ASSERT_TRUE(cpu.has_value());
    ASSERT_GE(*cpu, 4U);
    ASSERT_LE(*cpu, 7U);
    ++per_cpu[*cpu];
  }
  EXPECT_EQ(per_cpu.size(), 4U);
  for (const auto& [cpu, n] : per_cpu) EXPECT_EQ(n, 2) << cpu;
}

TEST(CpuPlacer, a_less_loaded_cpu_takes_more_tasks) {
  const Topology t = Topology::single_node(2);
  CpuPlacer p;
  const std::vector<float> loads = {0.0F, 0.55F};
  p.reset(t, true, loads);
  // CPU 0 goes 0.0, 0.1, ..., 0.5 before CPU 1's 0.55 is the least loaded.
  for (int i = 0; i < 6; ++i) EXPECT_EQ(p.place(std::nullopt), 0U) << "placement " << i;
  EXPECT_EQ(p.place(std::nullopt), 1U);
  int cpu0 = 6;
  int cpu1 = 1;
  for (int i = 0; i < 13; ++i) (p.place(std::nullopt) == 0U ? cpu0 : cpu1)++;
  EXPECT_GT(cpu0, cpu1);
}

TEST(CpuPlacer, placement_order_is_water_filling_of_the_effective_loads) {
  // The worked example of topology.hpp: loads {cpu0: 0.25, cpu1: 0.0, cpu2: 0.05}. Effective
  // loads after each placement rise by 0.1; the smallest goes next, ties to the lower cpu id.
  const Topology t = Topology::single_node(3);
  CpuPlacer p;
  p.reset(t, true, std::vector<float>{0.25F, 0.0F, 0.05F});
  const std::vector<std::uint32_t> expected = {1, 2, 1, 2, 1, 0, 2, 1, 0, 2, 1, 0, 2};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(p.place(std::nullopt), expected[i]) << "placement " << i;
  }
}

TEST(CpuPlacer, loads_closer_than_a_thousandth_tie_to_the_lower_cpu) {
  const Topology t = Topology::single_node(2);
  CpuPlacer p;
  p.reset(t, true, std::vector<float>{0.5003F, 0.5F});
  EXPECT_EQ(p.place(std::nullopt), 0U);
  p.set_loads(std::vector<float>{0.502F, 0.5F});
  EXPECT_EQ(p.place(std::nullopt), 1U);
}

TEST(CpuPlacer, a_gpu_id_beyond_the_placer_limit_counts_as_unmapped) {
  Topology t = Topology::single_node(2);
  NumaNode far;
  far.id = 1;
  far.cpus = {8, 9};
  t.add_node(far);
  t.map_gpu(CpuPlacer::kMaxPlacerGpu + 1, 1);
  CpuPlacer p;
  p.reset(t, true, std::vector<float>{0.0F, 0.0F, 0, 0, 0, 0, 0, 0, 0.5F, 0.5F});
  EXPECT_EQ(p.place(CpuPlacer::kMaxPlacerGpu + 1), 0U);
  // A mapped GPU at the limit is still honoured.
  t.map_gpu(CpuPlacer::kMaxPlacerGpu, 1);
  p.reset(t, true, std::vector<float>{0.0F, 0.0F, 0, 0, 0, 0, 0, 0, 0.5F, 0.5F});
  EXPECT_EQ(p.place(CpuPlacer::kMaxPlacerGpu), 8U);
}

TEST(CpuPlacer, set_loads_starts_the_placement_over) {
  const Topology t = Topology::single_node(2);
  CpuPlacer p;
  p.reset(t, true, {});
  EXPECT_EQ(p.place(std::nullopt), 0U);
  EXPECT_EQ(p.place(std::nullopt), 1U);
  EXPECT_EQ(p.place(std::nullopt), 0U);
  // Without a new tick CPU 1 (0.1) would be next; fresh loads forget the placements.
  p.set_loads(std::vector<float>{0.0F, 0.0F});
  EXPECT_EQ(p.place(std::nullopt), 0U);
  p.set_loads(std::vector<float>{0.7F, 0.2F});
  EXPECT_EQ(p.place(std::nullopt), 1U);
}

TEST(CpuPlacer, broken_loads_never_win) {
  const Topology t = Topology::single_node(3);
  CpuPlacer p;
  p.reset(t, true, std::vector<float>{kNaN, -3.0F, 0.95F});
  EXPECT_EQ(p.place(std::nullopt), 2U);
  p.set_loads(std::vector<float>{9.0F, 1.0F, kInf});
  EXPECT_EQ(p.place(std::nullopt), 0U);  // all count as 1.0: lowest CPU id
}

TEST(CpuPlacer, without_gpu_takes_the_best_cpu_of_the_machine) {
  const Topology t = two_nodes();
  CpuPlacer p;
  p.reset(t, true, std::vector<float>{0.5F, 0.5F, 0.5F, 0.5F, 0.5F, 0.5F, 0.1F, 0.5F});
  EXPECT_EQ(p.place(std::nullopt), 6U);
  EXPECT_EQ(p.place(99U), 6U);  // unmapped GPU: the same
}

TEST(CpuPlacer, numa_disabled_makes_gpu_tasks_choose_among_all_cpus) {
  // numa.enabled = false must be honoured.
  const Topology t = two_nodes();
  const std::vector<float> loads = {0.9F, 0.9F, 0.9F, 0.9F, 0.1F, 0.2F, 0.3F, 0.4F};
  CpuPlacer on;
  on.reset(t, true, loads);
  const auto near = on.place(0U);
  ASSERT_TRUE(near.has_value());
  EXPECT_LT(*near, 4U);

  CpuPlacer off;
  off.reset(t, false, loads);
  EXPECT_EQ(off.place(0U), 4U);
  // CPU 4 is now at 0.2, tied with CPU 5: the lower id wins, then CPU 5.
  EXPECT_EQ(off.place(0U), 4U);
  EXPECT_EQ(off.place(0U), 5U);
  for (int i = 0; i < 20; ++i) {
    const auto cpu = off.place(0U);
    ASSERT_TRUE(cpu.has_value());
    EXPECT_GE(*cpu, 4U);  // node 1 stays less loaded than node 0 for these 20 placements
  }
}

TEST(CpuPlacer, a_gpu_whose_node_is_missing_or_empty_uses_the_whole_machine) {
  Topology t;
  t.add_node(node(0, {4, 5}));
  t.add_node(node(3, {}));
  t.add_node(node(1, {8, 9}));
  t.map_gpu(0, 7);  // missing node
  t.map_gpu(1, 3);  // node without CPUs
  CpuPlacer p;
  std::vector<float> loads(10, 0.5F);
  loads[9] = 0.0F;
  p.reset(t, true, loads);
  EXPECT_EQ(p.place(0U), 9U);
  EXPECT_EQ(p.place(1U), 9U);
  const auto cpus = all_cpus(t);
  for (int i = 0; i < 50; ++i) {
    const auto cpu = p.place(static_cast<std::uint32_t>(i % 3));
    ASSERT_TRUE(cpu.has_value());
    EXPECT_EQ(cpus.count(*cpu), 1U) << *cpu;
  }
}

TEST(CpuPlacer, no_cpus_means_no_placement) {
  CpuPlacer p;
  EXPECT_FALSE(p.place(std::nullopt).has_value());
  const Topology empty;
  p.reset(empty, true, {});
  EXPECT_FALSE(p.place(0U).has_value());
  p.reset(empty, false, {});
  EXPECT_FALSE(p.place(std::nullopt).has_value());
  Topology memory_only;
  memory_only.add_node(node(0, {}));
  p.reset(memory_only, true, {});
  EXPECT_FALSE(p.place(std::nullopt).has_value());
}

TEST(CpuPlacer, reset_replaces_the_previous_topology) {
  CpuPlacer p;
  p.reset(Topology::single_node(2), true, {});
  Topology t;
  t.add_node(node(0, {10, 11}));
  p.reset(t, true, {});
  for (int i = 0; i < 10; ++i) {
    const auto cpu = p.place(std::nullopt);
    ASSERT_TRUE(cpu.has_value());
    EXPECT_TRUE(*cpu == 10U || *cpu == 11U) << *cpu;
  }
}

TEST(CpuPlacerProperty, placements_are_in_the_preferred_set_and_balanced) {
  std::mt19937 rng(5150);
  const Topology t = two_nodes();
  CpuPlacer p;
  for (int tick = 0; tick < 500; ++tick) {
    std::vector<float> loads(8);
    for (float& l : loads) l = std::uniform_real_distribution<float>(0.0F, 1.0F)(rng);
    const bool numa = rng() % 2 == 0;
    p.reset(t, numa, loads);
    std::vector<float> eff = loads;
    for (int i = 0; i < 40; ++i) {
      std::optional<std::uint32_t> gpu;
      if (rng() % 3 != 0) gpu = static_cast<std::uint32_t>(rng() % 3);  // GPU 2 is unmapped
      const auto cpu = p.place(gpu);
      ASSERT_TRUE(cpu.has_value());
      ASSERT_LT(*cpu, 8U);
      std::uint32_t lo = 0;
      std::uint32_t hi = 8;
      if (numa && gpu && *gpu < 2) {
        lo = *gpu * 4;
        hi = lo + 4;
        ASSERT_GE(*cpu, lo);
        ASSERT_LT(*cpu, hi);
      }
      // Water filling: the chosen CPU had the least effective load of its set (loads are read
      // to 1/1000 of a CPU, so closer loads may go either way).
      for (std::uint32_t c = lo; c < hi; ++c) {
        ASSERT_LE(eff[*cpu], eff[c] + 1.01e-3F) << "tick " << tick << " placement " << i;
      }
      eff[*cpu] += CpuPlacer::kPlacementLoad;
    }
  }
}

}  // namespace
}  // namespace zernel::policy
