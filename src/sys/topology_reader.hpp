#pragma once
// Reads the NUMA layout and the NVIDIA GPUs' locality from sysfs, under a root path so tests can
// point it at a fabricated tree (tests/fixtures/sysfs-*).
//
//   <sys>/devices/system/node/nodeN/cpulist   CPUs of node N ("0-3,8,10-11")
//   <sys>/devices/system/node/nodeN/meminfo   "Node N MemTotal: K kB"
//   <sys>/devices/system/cpu/online           all CPUs, used when there is no node directory
//   <sys>/bus/pci/devices/BUSID/{vendor,class,numa_node}
//       NVIDIA GPUs: vendor 0x10de, class 0x0300xx or 0x0302xx
//   <proc>/driver/nvidia/gpus/BUSID/information   "Device Minor: N", the driver's GPU number
//   <sys>/devices/system/cpu/cpuN/cache/indexK/{level,type,shared_cpu_list}   the caches of CPU N
//
// GPUs are numbered as the driver numbers them (its device minor, which is what /dev/nvidiaN
// and NVML use); without the driver's files, in PCI bus id order, which is the order the driver
// assigns on a standard system. A GPU whose numa_node is -1 (single-node machines) stays unmapped,
// so tasks bound to it may use every CPU.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "policy/topology.hpp"

namespace zernel::sys {

struct GpuLocation {
  std::uint32_t index = 0;            // driver's number
  std::string bus_id;                 // "0000:3b:00.0"
  std::optional<std::uint32_t> node;  // NUMA node, nullopt when unknown
};

struct TopologyInfo {
  policy::Topology topology;
  std::vector<GpuLocation> gpus;
  std::vector<std::string> warnings;  // odd contents that were skipped
};

// Parses a kernel CPU list ("0-3,8,10-11"); an error names the bad part.
Result<std::vector<std::uint32_t>> parse_cpu_list(const std::string& text);

// Fails only when no CPU at all can be found.
Result<TopologyInfo> read_topology(const std::string& sys_root = "/sys",
                                   const std::string& proc_root = "/proc");

// The last-level cache of each CPU id below nr_cpus, as dense ids (0, 1, ... in the order of
// each LLC's first CPU): CPUs whose level-3 (or higher) cache lists the same CPUs share one.
// A CPU with no such cache (offline, or a machine whose caches the kernel does not describe)
// is in LLC 0; with none found at all, every CPU is. More than max_llcs LLCs fold onto
// max_llcs ids (id % max_llcs): LLCs of the same id then share a queue.
struct CpuLlcs {
  std::vector<std::uint32_t> llc_of;  // nr_cpus entries
  std::uint32_t nr_llcs = 1;
  std::uint32_t found = 0;  // LLCs found before folding (0: no cache topology)
};
CpuLlcs read_cpu_llcs(const std::string& sys_root, std::uint32_t nr_cpus, std::uint32_t max_llcs);

}  // namespace zernel::sys
