#include "sys/topology_reader.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/temp_tree.hpp"

namespace zernel::sys {
namespace {

// A fabricated sysfs/procfs tree in a fresh temporary directory, removed at the end.
class FakeTree : public test_support::TempTree {
 public:
  FakeTree() : TempTree("zernel-topo") {}
  void node(int id, const std::string& cpulist, std::uint64_t mem_kb) const {
    const std::string d = "sys/devices/system/node/node" + std::to_string(id);
    write(d + "/cpulist", cpulist + "\n");
    write(d + "/meminfo", "Node " + std::to_string(id) + " MemTotal:       " +
                              std::to_string(mem_kb) + " kB\nNode 0 MemFree: 1 kB\n");
  }
  void pci(const std::string& bus, const std::string& vendor, const std::string& cls,
           const std::string& numa) const {
    const std::string d = "sys/bus/pci/devices/" + bus;
    write(d + "/vendor", vendor + "\n");
    write(d + "/class", cls + "\n");
    write(d + "/numa_node", numa + "\n");
  }
  // CPU cpu's cache index idx: its level, type and the CPUs that share it.
  void cache(int cpu, int idx, int level, const std::string& type,
             const std::string& shared) const {
    const std::string d =
        "sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index" + std::to_string(idx);
    write(d + "/level", std::to_string(level) + "\n");
    write(d + "/type", type + "\n");
    write(d + "/shared_cpu_list", shared + "\n");
  }
  // A CPU with its own L1d, L1i and L2, and an L3 shared with l3.
  void cpu_caches(int cpu, const std::string& l3) const {
    cache(cpu, 0, 1, "Data", std::to_string(cpu));
    cache(cpu, 1, 1, "Instruction", std::to_string(cpu));
    cache(cpu, 2, 2, "Unified", std::to_string(cpu));
    cache(cpu, 3, 3, "Unified", l3);
  }
  [[nodiscard]] std::string sys() const { return (dir() / "sys").string(); }
  [[nodiscard]] std::string proc() const { return (dir() / "proc").string(); }
};

TEST(CpuList, parses_ranges_and_single_cpus) {
  auto r = parse_cpu_list("0-3,8,10-11\n");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<std::uint32_t>{0, 1, 2, 3, 8, 10, 11}));
}

TEST(CpuList, empty_list_is_no_cpus) {
  auto r = parse_cpu_list("\n");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST(CpuList, rejects_malformed_entries_naming_them) {
  for (const char* bad : {"0-", "a", "3-1", "1,,2", "0-99999999", "-4"}) {
    auto r = parse_cpu_list(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message().find("bad CPU list entry"), std::string::npos) << bad;
  }
}

TEST(TopologyReader, reads_two_nodes_with_eight_gpus_in_bus_order) {
  FakeTree t;
  t.node(0, "0-63", 262144ULL * 1024);
  t.node(1, "64-127", 262144ULL * 1024);
  // Eight GPUs, four per node; written in an order unlike their bus ids.
  const char* buses[] = {"0000:ca:00.0", "0000:1b:00.0", "0000:db:00.0", "0000:3b:00.0",
                         "0000:9a:00.0", "0000:4c:00.0", "0000:ba:00.0", "0000:5d:00.0"};
  for (const char* b : buses) {
    const bool high = std::string(b) > "0000:80";
    t.pci(b, "0x10de", "0x030200", high ? "1" : "0");
  }
  t.pci("0000:00:1f.0", "0x8086", "0x060100", "0");  // not NVIDIA
  t.pci("0000:02:00.0", "0x10de", "0x040300", "0");  // NVIDIA audio, not a GPU
  auto r = read_topology(t.sys(), t.proc());
  ASSERT_TRUE(r.ok()) << r.error().message();
  const auto& topo = r->topology;
  ASSERT_EQ(topo.nodes().size(), 2U);
  EXPECT_EQ(topo.total_cpus(), 128U);
  EXPECT_EQ(topo.nodes()[0].memory_mb, 262144U);
  ASSERT_EQ(r->gpus.size(), 8U);
  for (std::uint32_t g = 0; g < 8; ++g) {
    EXPECT_EQ(r->gpus[g].index, g);
    EXPECT_EQ(topo.gpu_node(g), g / 4) << "gpu " << g << " at " << r->gpus[g].bus_id;
  }
  EXPECT_EQ(r->gpus[0].bus_id, "0000:1b:00.0");
  EXPECT_EQ(r->gpus[7].bus_id, "0000:db:00.0");
  // CPU choice on the read topology: GPU 5 is on node 1.
  std::vector<float> loads(128, 0.5F);
  loads[70] = 0.1F;
  EXPECT_EQ(topo.select_cpu(5U, loads), 70U);
}

TEST(TopologyReader, uses_the_drivers_device_minor_when_present) {
  FakeTree t;
  t.node(0, "0-3", 1024);
  t.pci("0000:1b:00.0", "0x10de", "0x030000", "0");
  t.pci("0000:3b:00.0", "0x10de", "0x030000", "0");
  t.write("proc/driver/nvidia/gpus/0000:1b:00.0/information", "Model: X\nDevice Minor: 1\n");
  t.write("proc/driver/nvidia/gpus/0000:3b:00.0/information", "Model: X\nDevice Minor: 0\n");
  auto r = read_topology(t.sys(), t.proc());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->gpus.size(), 2U);
  EXPECT_EQ(r->gpus[0].bus_id, "0000:3b:00.0");
  EXPECT_EQ(r->gpus[1].bus_id, "0000:1b:00.0");
}

TEST(TopologyReader, gpu_with_numa_node_minus_one_stays_unmapped) {
  FakeTree t;
  t.node(0, "0-1", 1024);
  t.pci("0000:01:00.0", "0x10de", "0x030000", "-1");
  auto r = read_topology(t.sys(), t.proc());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->gpus.size(), 1U);
  EXPECT_FALSE(r->gpus[0].node.has_value());
  EXPECT_FALSE(r->topology.gpu_node(0).has_value());
  EXPECT_TRUE(r->warnings.empty());
}

TEST(TopologyReader, gpu_on_a_node_that_does_not_exist_is_not_mapped) {
  FakeTree t;
  t.node(0, "0-1", 1024);
  t.pci("0000:01:00.0", "0x10de", "0x030000", "3");
  auto r = read_topology(t.sys(), t.proc());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->topology.gpu_node(0).has_value());
  std::vector<float> loads = {0.9F, 0.2F};
  EXPECT_EQ(r->topology.select_cpu(0U, loads), 1U);
}

TEST(TopologyReader, falls_back_to_online_cpus_without_numa) {
  FakeTree t;
  t.write("sys/devices/system/cpu/online", "0-5\n");
  auto r = read_topology(t.sys(), t.proc());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->topology.nodes().size(), 1U);
  EXPECT_EQ(r->topology.total_cpus(), 6U);
}

TEST(TopologyReader, skips_a_node_with_a_garbled_cpulist_and_warns) {
  FakeTree t;
  t.node(0, "0-3", 1024);
  t.node(1, "garbage", 1024);
  t.pci("0000:01:00.0", "0x10de", "0x030000", "zz");
  auto r = read_topology(t.sys(), t.proc());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->topology.nodes().size(), 1U);
  ASSERT_EQ(r->warnings.size(), 2U);
  EXPECT_NE(r->warnings[0].find("cpulist"), std::string::npos);
  EXPECT_NE(r->warnings[1].find("numa_node"), std::string::npos);
}

TEST(TopologyReader, empty_tree_is_an_error_naming_the_root) {
  FakeTree t;
  auto r = read_topology(t.sys(), t.proc());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find(t.sys()), std::string::npos);
}

TEST(CpuLlcs, groups_cpus_by_their_shared_level_3_cache_in_order_of_first_cpu) {
  FakeTree t;
  // Two LLCs, interleaved as on a two-socket machine that numbers the sockets' CPUs in turn.
  for (int cpu = 0; cpu < 8; ++cpu) t.cpu_caches(cpu, cpu % 2 == 0 ? "0,2,4,6" : "1,3,5,7");
  const CpuLlcs l = read_cpu_llcs(t.sys(), 8, 64);
  EXPECT_EQ(l.nr_llcs, 2U);
  EXPECT_EQ(l.found, 2U);
  EXPECT_EQ(l.llc_of, (std::vector<std::uint32_t>{0, 1, 0, 1, 0, 1, 0, 1}));
}

TEST(CpuLlcs, without_a_level_3_cache_every_cpu_shares_one_queue) {
  FakeTree t;
  for (int cpu = 0; cpu < 4; ++cpu) {
    t.cache(cpu, 0, 1, "Data", std::to_string(cpu));
    t.cache(cpu, 1, 2, "Unified", std::to_string(cpu));  // a per-core L2 is no LLC to queue by
  }
  const CpuLlcs l = read_cpu_llcs(t.sys(), 4, 64);
  EXPECT_EQ(l.nr_llcs, 1U);
  EXPECT_EQ(l.found, 0U);
  EXPECT_EQ(l.llc_of, (std::vector<std::uint32_t>(4, 0)));
}

TEST(CpuLlcs, cpus_without_cache_files_or_with_a_garbled_list_are_in_llc_0) {
  FakeTree t;
  t.cpu_caches(0, "0-1");
  t.cpu_caches(1, "0-1");
  t.cpu_caches(2, "2-3");
  t.cpu_caches(3, "2-x");  // garbled: no LLC of its own
  // CPU 4 (possible, not present) has no cache directory at all.
  const CpuLlcs l = read_cpu_llcs(t.sys(), 5, 64);
  EXPECT_EQ(l.nr_llcs, 2U);
  EXPECT_EQ(l.llc_of, (std::vector<std::uint32_t>{0, 0, 1, 0, 0}));
}

TEST(CpuLlcs, more_llcs_than_queues_fold_onto_them) {
  FakeTree t;
  for (int cpu = 0; cpu < 8; ++cpu) {
    const int first = cpu - cpu % 2;
    t.cpu_caches(cpu, std::to_string(first) + "-" + std::to_string(first + 1));
  }
  const CpuLlcs l = read_cpu_llcs(t.sys(), 8, 3);
  EXPECT_EQ(l.found, 4U);
  EXPECT_EQ(l.nr_llcs, 3U);
  EXPECT_EQ(l.llc_of, (std::vector<std::uint32_t>{0, 0, 1, 1, 2, 2, 0, 0}));
}

TEST(CpuLlcs, an_empty_tree_is_one_queue) {
  FakeTree t;
  const CpuLlcs l = read_cpu_llcs(t.sys(), 3, 64);
  EXPECT_EQ(l.nr_llcs, 1U);
  EXPECT_EQ(l.llc_of, (std::vector<std::uint32_t>(3, 0)));
}

TEST(TopologyReader, reads_the_real_machine) {
  auto r = read_topology();
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_GE(r->topology.total_cpus(), 1U);
  EXPECT_FALSE(r->topology.nodes().empty());
}

}  // namespace
}  // namespace zernel::sys
