#pragma once
// A private emulated GPU (tools/fake_gpu) for one test: its own shared-memory segment, so that
// tests do not share devices, removed at the end. The fake libnvidia-ml.so.1 and libcuda.so.1
// the test loads attach to it (ZERNEL_FAKE_GPU_SHM); DEVICES GPUs are made at the first attach,
// and the setters work without root (ZERNEL_FAKE_GPU_UNRESTRICTED) for the tests that are not
// about permissions.

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <string>

namespace zernel::test_support {

class EmulatedGpu {
 public:
  explicit EmulatedGpu(int devices = 2) {
    static std::atomic<int> counter{0};
    std::random_device rd;
    name_ = "/zernel-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
            std::to_string(rd());
    ::setenv("ZERNEL_FAKE_GPU_SHM", name_.c_str(), 1);
    ::setenv("ZERNEL_FAKE_GPU_COUNT", std::to_string(devices).c_str(), 1);
    ::setenv("ZERNEL_FAKE_GPU_UNRESTRICTED", "1", 1);
  }
  ~EmulatedGpu() {
    ::shm_unlink(name_.c_str());
    ::unsetenv("ZERNEL_FAKE_GPU_SHM");
    ::unsetenv("ZERNEL_FAKE_GPU_COUNT");
    ::unsetenv("ZERNEL_FAKE_GPU_UNRESTRICTED");
  }
  EmulatedGpu(const EmulatedGpu&) = delete;
  EmulatedGpu& operator=(const EmulatedGpu&) = delete;

  // The segment's name ("/zernel-test-..."), for shm_open.
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  std::string name_;
};

}  // namespace zernel::test_support
