#include "sys/topology_reader.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/temp_tree.hpp"

namespace zernel::sys {
namespace {

namespace fs = std::filesystem;

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

TEST(TopologyReader, reads_the_real_machine) {
  auto r = read_topology();
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_GE(r->topology.total_cpus(), 1U);
  EXPECT_FALSE(r->topology.nodes().empty());
}

}  // namespace
}  // namespace zernel::sys
