#pragma once
// Finding the CUDA driver library a process uses, and checking that a file has the entry points
// the GPU synchronisation probes attach to. Plain functions on text and files, no BPF: the
// probes' loader (gpu_sync_probes.hpp) and the tests use them.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace zernel::collect::probes {

// The synchronisation entry points: uprobe and uretprobe on each (docs/probes.md).
inline constexpr const char* kSyncSymbols[] = {"cuCtxSynchronize", "cuStreamSynchronize",
                                               "cuEventSynchronize"};
// Variants the real driver also exports (the per-thread default stream, and the _v2 context
// sync of newer drivers): attached where present, the fake library has none.
inline constexpr const char* kOptionalSyncSymbols[] = {"cuStreamSynchronize_ptsz",
                                                       "cuCtxSynchronize_v2"};

// One file-backed mapping of a CUDA driver library, from a /proc/PID/maps line.
struct MappedLibrary {
  std::string path;  // as the process sees it (its mount namespace)
  std::uint32_t dev_major = 0;
  std::uint32_t dev_minor = 0;
  std::uint64_t inode = 0;
};

// True for a path the probes attach to: its file name starts with "libcuda.so" (libcuda.so,
// libcuda.so.1, libcuda.so.560.35.03), not a deleted file (" (deleted)": a replaced driver,
// which can no longer be opened by path). libcudart, libcudnn and friends do not match.
bool is_libcuda_path(std::string_view path);

// The distinct CUDA driver libraries in a maps text (one entry per (dev, inode)), in order of
// first appearance. Malformed lines are skipped.
std::vector<MappedLibrary> parse_libcuda_mappings(std::string_view maps_text);

// Reads /proc/PID/maps under `proc_root` and returns parse_libcuda_mappings of it; an error with
// code ESRCH when the process is gone.
Result<std::vector<MappedLibrary>> read_libcuda_mappings(const std::string& proc_root,
                                                         std::uint32_t pid);

// A function an ELF file defines, and where its code starts in the file (what a uprobe is
// attached at).
struct ElfFunction {
  std::string name;
  std::uint64_t offset = 0;  // bytes from the start of the file
};

// Which of `names` the ELF file defines as functions (in .dynsym or .symtab), with their file
// offsets, in the order found. An error when the file cannot be opened or is not ELF.
Result<std::vector<ElfFunction>> elf_function_offsets(const std::string& path,
                                                      const std::vector<std::string>& names);

// The names alone.
Result<std::vector<std::string>> elf_defined_functions(const std::string& path,
                                                       const std::vector<std::string>& names);

// The first field of /proc/PID/task/TID/schedstat: the thread's se.sum_exec_runtime in ns.
std::optional<std::uint64_t> parse_schedstat_runtime(std::string_view text);

}  // namespace zernel::collect::probes
