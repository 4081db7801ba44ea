#pragma once
// `zernel-scheduler info`: what this machine offers the scheduler, in one look. Kernel version,
// sched_ext (state, the scheduler attached), BTF, the cgroup version, NVML (library, driver,
// GPUs with bus ids, or why not), the NVIDIA GPUs in sysfs with their NUMA nodes, delay
// accounting, CPUs and NUMA nodes. Read only; nothing needs root (fields root alone may read say
// so). --json prints one JSON object with the same facts.

#include <string>

namespace zernel::cli {

// Prints the report to stdout (text, or JSON with `json`). `emulated_gpu`: load the project's
// fake NVML (as the daemon's --emulated-gpu) instead of libnvidia-ml.so.1. Returns 0.
int run_info(bool emulated_gpu, bool json);

// The fake NVML of --emulated-gpu: $ZERNEL_FAKE_LIB_DIR/libnvidia-ml.so.1, else
// <dir of this binary>/../lib/fake/libnvidia-ml.so.1 (the daemon and `info` find it alike).
std::string emulated_nvml_path();

// The same with other roots (tests): sysfs under sys_root, procfs under proc_root; `nvml_library`
// empty: the system's libnvidia-ml.so.1.
int run_info_at(const std::string& sys_root, const std::string& proc_root,
                const std::string& nvml_library, bool json);

}  // namespace zernel::cli
