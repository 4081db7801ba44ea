#pragma once
// The GPU as a rank drives it: the CUDA driver API (libcuda.so.1), loaded with dlopen at run time
// and never linked, so one binary runs on a real driver and on the project's emulated GPU.
//
// Work is submitted in one of two ways, chosen by what the library offers:
//  - the emulated GPU (tools/fake_gpu) exports zfgEnqueueWork(stream, ns), which queues `ns` of
//    device time and returns at once (see tools/fake_gpu/zernel_fake_cuda.h);
//  - on a real driver, that symbol is absent and a kernel is launched instead: a one-thread PTX
//    kernel that spins on %globaltimer for the requested time (embedded below, JIT-compiled by the
//    driver with cuModuleLoadData). That path needs a real GPU and is not exercised by the tests.
// Either way the host then waits with cuStreamSynchronize, the call the scheduler's uprobes watch.
// On a real driver the primary context is set to CU_CTX_SCHED_BLOCKING_SYNC, so a long wait
// sleeps instead of spinning, as the emulated GPU's does.

#include <cstdint>
#include <memory>
#include <string>

#include "common/result.hpp"

namespace zernel::workload {

struct GpuLibrary {
  std::string path;  // a path, or a soname for the dynamic loader to find
  bool emulated = false;
};

// --emulated-gpu: $ZERNEL_FAKE_LIB_DIR/libcuda.so.1 when that variable is set, else
// <directory of this executable>/../lib/fake/libcuda.so.1; the file must exist. Otherwise the
// system's "libcuda.so.1".
Result<GpuLibrary> resolve_gpu_library(bool emulated);

class Gpu {
 public:
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;
  ~Gpu();

  // Loads the library, initialises the driver, makes the primary context of device
  // `rank % device_count` current, its syncs spinning (`spin`) or blocking, and creates one
  // stream. Call it after forking the DataLoader workers: CUDA may not be used across fork(),
  // and the workers must hold no context.
  static Result<std::unique_ptr<Gpu>> open(const GpuLibrary& lib, int rank, bool spin = false);

  [[nodiscard]] int device() const { return device_; }
  [[nodiscard]] int device_count() const { return device_count_; }
  [[nodiscard]] bool emulated_enqueue() const { return enqueue_ != nullptr; }

  // Queues `ns` of device time on the stream and returns at once, as a kernel launch does.
  Result<void> enqueue(std::uint64_t ns);

  // Blocks until all work queued on the stream has finished (cuStreamSynchronize).
  Result<void> synchronize();

 private:
  struct Api;
  Gpu();
  Result<void> load(const GpuLibrary& lib);
  Result<void> init(int rank, bool spin);
  [[nodiscard]] std::string describe(int rc, const char* call) const;

  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  int (*enqueue_)(void*, unsigned long long) = nullptr;
  int device_ = -1;
  int device_count_ = 0;
  bool ctx_retained_ = false;
  void* stream_ = nullptr;
  void* module_ = nullptr;
  void* spin_fn_ = nullptr;
};

}  // namespace zernel::workload
