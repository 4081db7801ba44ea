// The NVML collector against the emulated GPU (tools/fake_gpu): the fake libnvidia-ml.so.1 it
// loads by path, and the fake libcuda.so.1 that this test process, or a forked child playing a
// training job, drives. Each test gets its own shared-memory segment (ZERNEL_FAKE_GPU_SHM, a
// unique name, removed at the end), so tests never see each other's GPUs.

#include "sys/nvml.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/emulated_gpu.hpp"
#include "sys/nvml_abi.h"

#ifndef ZERNEL_FAKE_LIB_DIR
#define ZERNEL_FAKE_LIB_DIR ""
#endif

namespace zernel::sys {
namespace {

using test_support::EmulatedGpu;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC, the emulated GPU's clock

constexpr int kCudaSuccess = 0;
constexpr int kCudaErrorInvalidContext = 201;
constexpr int kCudaErrorInvalidHandle = 400;
constexpr int kCudaErrorInvalidDevice = 101;
constexpr int kCudaErrorNotReady = 600;
constexpr std::uint64_t kMs = 1'000'000;

#define REQUIRE_FAKE_GPU()                                                                    \
  do {                                                                                        \
    if (std::string(ZERNEL_FAKE_LIB_DIR).empty()) {                                           \
      GTEST_SKIP() << "the build does not define ZERNEL_FAKE_LIB_DIR (tests/CMakeLists.txt)"; \
    }                                                                                         \
  } while (0)

std::string fake_lib(const char* name) { return std::string(ZERNEL_FAKE_LIB_DIR) + "/" + name; }

std::unique_ptr<Nvml> load_fake_nvml() {
  auto nvml = Nvml::load(fake_lib("libnvidia-ml.so.1"));
  if (!nvml) {
    ADD_FAILURE() << nvml.error().message();
    return nullptr;
  }
  return std::move(nvml.value());
}

// The fake libcuda, loaded into this process by path, as a program would load the driver.
struct Cuda {
  using Handle = void*;
  void* lib = nullptr;
  int (*init)(unsigned) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*ctx_create)(Handle*, unsigned, int) = nullptr;
  int (*ctx_destroy)(Handle) = nullptr;
  int (*ctx_set_current)(Handle) = nullptr;
  int (*ctx_synchronize)() = nullptr;
  int (*primary_retain)(Handle*, int) = nullptr;
  int (*primary_release)(int) = nullptr;
  int (*primary_set_flags)(int, unsigned) = nullptr;
  int (*stream_create)(Handle*, unsigned) = nullptr;
  int (*stream_destroy)(Handle) = nullptr;
  int (*stream_synchronize)(Handle) = nullptr;
  int (*stream_query)(Handle) = nullptr;
  int (*event_create)(Handle*, unsigned) = nullptr;
  int (*event_record)(Handle, Handle) = nullptr;
  int (*event_synchronize)(Handle) = nullptr;
  int (*event_destroy)(Handle) = nullptr;
  int (*enqueue)(Handle, unsigned long long) = nullptr;  // zfgEnqueueWork

  Cuda() {
    lib = dlopen(fake_lib("libcuda.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    sym("cuInit", init);
    sym("cuDeviceGet", device_get);
    sym("cuCtxCreate_v2", ctx_create);
    sym("cuCtxDestroy_v2", ctx_destroy);
    sym("cuCtxSetCurrent", ctx_set_current);
    sym("cuCtxSynchronize", ctx_synchronize);
    sym("cuDevicePrimaryCtxRetain", primary_retain);
    sym("cuDevicePrimaryCtxRelease_v2", primary_release);
    sym("cuDevicePrimaryCtxSetFlags_v2", primary_set_flags);
    sym("cuStreamCreate", stream_create);
    sym("cuStreamDestroy_v2", stream_destroy);
    sym("cuStreamSynchronize", stream_synchronize);
    sym("cuStreamQuery", stream_query);
    sym("cuEventCreate", event_create);
    sym("cuEventRecord", event_record);
    sym("cuEventSynchronize", event_synchronize);
    sym("cuEventDestroy_v2", event_destroy);
    sym("zfgEnqueueWork", enqueue);
  }
  ~Cuda() {
    if (lib != nullptr) dlclose(lib);
  }
  Cuda(const Cuda&) = delete;
  Cuda& operator=(const Cuda&) = delete;

  [[nodiscard]] bool ok() const { return lib != nullptr && complete_; }

 private:
  template <typename Fn>
  void sym(const char* name, Fn& out) {
    out = reinterpret_cast<Fn>(dlsym(lib, name));
    if (out == nullptr) complete_ = false;
  }
  bool complete_ = true;
};

// What the child reports once its work is done.
struct ChildReport {
  int rc = -1;               // 0, or the failing CUDA call's result
  int step = 0;              // which call failed
  std::int64_t sync_ns = 0;  // from before the first enqueue to the return of the sync
};

// A forked process that uses the emulated GPU like a training step: it loads the fake libcuda by
// its build path, creates a context on `device`, queues `chunks` pieces of `chunk_ms` of work,
// synchronises, reports, and stays alive until killed.
class GpuChild {
 public:
  GpuChild(int device, int chunks, int chunk_ms) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(fds[0]);
      run(fds[1], device, chunks, chunk_ms);
    }
    close(fds[1]);
    fd_ = fds[0];
  }
  ~GpuChild() {
    stop();
    if (fd_ >= 0) close(fd_);
  }
  GpuChild(const GpuChild&) = delete;
  GpuChild& operator=(const GpuChild&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }

  // Waits (10 s at most) for the child's report.
  [[nodiscard]] bool wait_report(ChildReport& out) const {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 10'000) != 1) return false;
    return read(fd_, &out, sizeof(out)) == static_cast<ssize_t>(sizeof(out));
  }

  // Kills the child (no clean-up: the fake NVML must prune it) and reaps it.
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  [[noreturn]] static void run(int fd, int device, int chunks, int chunk_ms) {
    ChildReport r;
    const auto report = [&](int rc, int step) {
      r.rc = rc;
      r.step = step;
      (void)!write(fd, &r, sizeof(r));
    };
    Cuda cuda;
    if (!cuda.ok()) {
      report(-1, 0);
      _exit(1);
    }
    int dev = 0;
    void* ctx = nullptr;
    void* stream = nullptr;
    int rc = cuda.init(0);
    if (rc == kCudaSuccess) rc = cuda.device_get(&dev, device);
    if (rc == kCudaSuccess) rc = cuda.ctx_create(&ctx, 0, dev);
    if (rc == kCudaSuccess) rc = cuda.stream_create(&stream, 0);
    if (rc != kCudaSuccess) {
      report(rc, 1);
      _exit(1);
    }
    const auto t0 = Clock::now();
    for (int i = 0; i < chunks && rc == kCudaSuccess; ++i) {
      rc = cuda.enqueue(stream, static_cast<unsigned long long>(chunk_ms) * kMs);
    }
    if (rc == kCudaSuccess) rc = cuda.stream_synchronize(stream);
    r.sync_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    report(rc, rc == kCudaSuccess ? 0 : 2);
    for (;;) pause();
  }

  pid_t pid_ = -1;
  int fd_ = -1;
};

bool lists(const std::vector<ComputeProcess>& list, std::uint32_t pid, std::uint32_t device) {
  for (const auto& p : list) {
    if (p.pid == pid && p.device == device) return true;
  }
  return false;
}

std::int64_t ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

TEST(Nvml, bus_ids_are_normalised_to_the_sysfs_form) {
  EXPECT_EQ(normalize_bus_id("00000000:1B:00.0").value(), "0000:1b:00.0");
  EXPECT_EQ(normalize_bus_id("0000:3B:00.0").value(), "0000:3b:00.0");
  EXPECT_EQ(normalize_bus_id("00000001:AB:1F.7").value(), "0001:ab:1f.7");
  for (const char* bad : {"", "1B:00.0", "0000:1G:00.0", "0000:1b:00", "0000:1b:20.0",
                          "0000:1b:00.8", "000000000:1b:00.0", "0000:1b:00.0x"}) {
    auto r = normalize_bus_id(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), EINVAL);
  }
}

TEST(Nvml, a_missing_library_is_one_clear_error) {
  auto r = Nvml::load("/nonexistent/zernel/libnvidia-ml.so.1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ENOENT);
  EXPECT_EQ(r.error().message(),
            "/nonexistent/zernel/libnvidia-ml.so.1 not found: GPU metrics are off");

  // The system library: on a machine without a driver, the sentence the daemon logs.
  auto sys = Nvml::load();
  if (!sys.ok() && sys.error().code() == ENOENT) {
    EXPECT_EQ(sys.error().message(), "libnvidia-ml.so.1 not found: GPU metrics are off");
  }
}

TEST(Nvml, a_library_without_the_required_symbols_is_refused_naming_them) {
  REQUIRE_FAKE_GPU();
  auto r = Nvml::load(fake_lib("libcuda.so.1"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ENOSYS);
  EXPECT_NE(r.error().message().find("nvmlInit_v2"), std::string::npos) << r.error().message();
  EXPECT_NE(r.error().message().find("GPU metrics are off"), std::string::npos);
}

TEST(Nvml, loads_the_emulated_gpus_and_unloads_them) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu(3);
  {
    auto nvml = load_fake_nvml();
    ASSERT_NE(nvml, nullptr);
    EXPECT_EQ(nvml->library(), fake_lib("libnvidia-ml.so.1"));
    EXPECT_NE(nvml->driver_version().find("emulated"), std::string::npos);
    ASSERT_EQ(nvml->devices().size(), 3U);
    const char* bus_ids[] = {"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0"};
    for (std::uint32_t i = 0; i < 3; ++i) {
      EXPECT_EQ(nvml->devices()[i].index, i);
      EXPECT_NE(nvml->devices()[i].name.find("H200"), std::string::npos);
      EXPECT_EQ(nvml->devices()[i].bus_id, bus_ids[i]);
    }
    for (auto f :
         {NvmlFeature::device_utilization, NvmlFeature::process_utilization,
          NvmlFeature::compute_processes, NvmlFeature::clocks, NvmlFeature::application_clocks,
          NvmlFeature::locked_clocks, NvmlFeature::power_limits, NvmlFeature::set_power_limit}) {
      EXPECT_TRUE(nvml->has(f)) << static_cast<int>(f);
    }
    auto idle = nvml->utilization(2);
    ASSERT_TRUE(idle.ok()) << idle.error().message();
    EXPECT_EQ(idle->gpu_percent, 0U);
    auto none = nvml->compute_process_list();
    ASSERT_TRUE(none.ok()) << none.error().message();
    EXPECT_TRUE(none->empty());
    auto bad = nvml->utilization(3);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().code(), EINVAL);
  }
  // Loaded again, twice at once (NVML counts nested inits): each works, and keeps working when
  // the other goes.
  auto a = load_fake_nvml();
  auto b = load_fake_nvml();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->devices().size(), 3U);
  a.reset();
  auto u = b->utilization(0);
  EXPECT_TRUE(u.ok()) << u.error().message();
}

TEST(Nvml, each_emulated_gpu_has_a_uuid_in_nvmls_form_that_stays_the_same) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu(3);
  std::vector<std::string> first;
  for (int load = 0; load < 2; ++load) {
    auto nvml = load_fake_nvml();
    ASSERT_NE(nvml, nullptr);
    std::vector<std::string> ids;
    for (const GpuDevice& d : nvml->devices()) {
      EXPECT_TRUE(std::regex_match(
          d.uuid, std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")))
          << d.uuid;
      ids.push_back(d.uuid);
    }
    ASSERT_EQ(ids.size(), 3U);
    EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 3U);  // distinct
    if (load == 0) {
      first = ids;
    } else {
      EXPECT_EQ(ids, first);
    }
  }
}

TEST(Nvml, a_process_using_a_gpu_is_listed_with_its_utilisation_until_it_dies) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu;
  auto nvml = load_fake_nvml();
  ASSERT_NE(nvml, nullptr);

  GpuChild child(/*device=*/1, /*chunks=*/3, /*chunk_ms=*/100);
  ASSERT_GT(child.pid(), 0);
  ChildReport report;
  ASSERT_TRUE(child.wait_report(report)) << "the child did not report within 10 s";
  ASSERT_EQ(report.rc, 0) << "CUDA call failed at step " << report.step;
  // The sync returned only once all 300 ms of work had run (a lower bound only: a loaded
  // machine may return late).
  EXPECT_GE(report.sync_ns, static_cast<std::int64_t>(300 * kMs));
  const auto pid = static_cast<std::uint32_t>(child.pid());

  // Device utilisation is the busy share of the last second: 300 ms -> about 30 %, less if
  // this process was descheduled for long after the child finished; never more.
  auto util = nvml->utilization(1);
  ASSERT_TRUE(util.ok()) << util.error().message();
  EXPECT_GE(util->gpu_percent, 5U);
  EXPECT_LE(util->gpu_percent, 31U);
  EXPECT_EQ(nvml->utilization(0)->gpu_percent, 0U);

  auto per_process = nvml->process_utilization(1);
  ASSERT_TRUE(per_process.ok()) << per_process.error().message();
  ASSERT_TRUE(per_process->contains(pid));
  EXPECT_GT(per_process->at(pid), 0U);
  EXPECT_LE(per_process->at(pid), 100U);
  EXPECT_TRUE(nvml->process_utilization(0)->empty());
  // Since the last call, the child has done nothing.
  auto again = nvml->process_utilization(1);
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_FALSE(again->contains(pid));

  auto list = nvml->compute_process_list();
  ASSERT_TRUE(list.ok()) << list.error().message();
  ASSERT_TRUE(lists(*list, pid, 1));
  EXPECT_FALSE(lists(*list, pid, 0));
  for (const auto& p : *list) {
    if (p.pid == pid) {
      EXPECT_GT(p.used_memory_bytes.value_or(0), 0U);
    }
  }
  auto map = nvml->compute_processes();
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->at(pid), 1U);

  // Killed without cleaning up: the dead pid is pruned.
  child.stop();
  auto after = nvml->compute_process_list();
  ASSERT_TRUE(after.ok()) << after.error().message();
  EXPECT_FALSE(lists(*after, pid, 1));
}

// The list asks each GPU once, with room for its previous count and a few more: a GPU that
// gained more processes than that between two lists is asked again, and lists them all.
TEST(Nvml, a_gpu_that_gained_many_processes_since_the_last_list_lists_them_all) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu(4);
  auto nvml = load_fake_nvml();
  ASSERT_NE(nvml, nullptr);
  auto before = nvml->compute_process_list();
  ASSERT_TRUE(before.ok()) << before.error().message();
  EXPECT_TRUE(before->empty());

  constexpr std::size_t kChildren = 20;
  std::vector<std::unique_ptr<GpuChild>> children;
  for (std::size_t i = 0; i < kChildren; ++i) {
    children.push_back(std::make_unique<GpuChild>(/*device=*/2, /*chunks=*/1, /*chunk_ms=*/1));
    ASSERT_GT(children.back()->pid(), 0);
  }
  for (auto& c : children) {
    ChildReport report;
    ASSERT_TRUE(c->wait_report(report)) << "a child did not report within 10 s";
    ASSERT_EQ(report.rc, 0) << "CUDA call failed at step " << report.step;
  }
  auto list = nvml->compute_process_list();
  ASSERT_TRUE(list.ok()) << list.error().message();
  EXPECT_EQ(list->size(), kChildren);
  for (auto& c : children) {
    EXPECT_TRUE(lists(*list, static_cast<std::uint32_t>(c->pid()), 2)) << c->pid();
  }

  // Half of them killed without cleaning up: the next list prunes them and keeps the rest.
  for (std::size_t i = 0; i < kChildren / 2; ++i) children[i]->stop();
  auto after = nvml->compute_process_list();
  ASSERT_TRUE(after.ok()) << after.error().message();
  EXPECT_EQ(after->size(), kChildren / 2);
  for (std::size_t i = kChildren / 2; i < kChildren; ++i) {
    EXPECT_TRUE(lists(*after, static_cast<std::uint32_t>(children[i]->pid()), 2));
  }
}

// CPU time this thread has used, in ms.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// 50 ms of work on the current context, then its sync: a spinning sync (`spin`) uses at least
// 10 ms of this thread's CPU, a blocking one under 5 ms. The CPU is counted over the sync alone:
// the launch before it is the same in both. The noise of a loaded machine is one-sided for each:
// a vCPU the host takes away mid-call charges its stolen time to the running thread (a blocking
// sync under ASan once counted 5.12 ms, CI 2026-12-06), and other runnable threads take CPU from
// a spin. So each kind gets three tries, and one clean try decides: the least CPU of a blocking
// sync, the most of a spinning one.
void expect_sync_cpu(const Cuda& cuda, bool spin) {
  double best = spin ? 0.0 : 1e9;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto t0 = Clock::now();
    ASSERT_EQ(cuda.enqueue(nullptr, 50 * kMs), kCudaSuccess);
    const double cpu0 = thread_cpu_ms();
    ASSERT_EQ(cuda.ctx_synchronize(), kCudaSuccess);
    const double cpu = thread_cpu_ms() - cpu0;
    EXPECT_GE(ms_since(t0), 50);
    best = spin ? std::max(best, cpu) : std::min(best, cpu);
    if (spin ? best >= 10.0 : best < 5.0) break;
  }
  if (spin) {
    EXPECT_GE(best, 10.0) << "a spin-wait of 50 ms used at most " << best << " ms of CPU";
  } else {
    EXPECT_LT(best, 5.0) << "a blocking sync of 50 ms used at least " << best << " ms of CPU";
  }
}

// A context made with CU_CTX_SCHED_SPIN (0x01) spins on the CPU in its syncs, as the driver's
// spin-wait does (zernel-workload --sync-spin); with blocking sync (0x04) it sleeps.
TEST(Nvml, a_spin_context_spins_in_its_syncs_a_blocking_one_sleeps) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu;
  Cuda cuda;
  ASSERT_TRUE(cuda.ok()) << dlerror();
  ASSERT_EQ(cuda.init(0), kCudaSuccess);
  for (const unsigned flags : {0x01U, 0x04U}) {
    void* ctx = nullptr;
    ASSERT_EQ(cuda.ctx_create(&ctx, flags, 0), kCudaSuccess);
    expect_sync_cpu(cuda, flags == 0x01U);
    ASSERT_EQ(cuda.ctx_destroy(ctx), kCudaSuccess);
  }
}

// The same through the primary context, as PyTorch uses it: cuDevicePrimaryCtxSetFlags before the
// context is retained (zernel-workload --sync-spin), and again while it is active.
TEST(Nvml, the_primary_context_spins_in_its_syncs_after_set_flags_spin) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu;
  Cuda cuda;
  ASSERT_TRUE(cuda.ok()) << dlerror();
  ASSERT_EQ(cuda.init(0), kCudaSuccess);
  ASSERT_EQ(cuda.primary_set_flags(0, 0x01U), kCudaSuccess);
  void* ctx = nullptr;
  ASSERT_EQ(cuda.primary_retain(&ctx, 0), kCudaSuccess);
  ASSERT_EQ(cuda.ctx_set_current(ctx), kCudaSuccess);
  for (const unsigned flags : {0x01U, 0x04U}) {
    if (flags != 0x01U) {
      ASSERT_EQ(cuda.primary_set_flags(0, flags), kCudaSuccess);
    }
    expect_sync_cpu(cuda, flags == 0x01U);
  }
  EXPECT_EQ(cuda.primary_set_flags(99, 0x01U), kCudaErrorInvalidDevice);
  ASSERT_EQ(cuda.primary_release(0), kCudaSuccess);
}

TEST(Nvml, synchronisation_blocks_until_the_queued_work_is_done) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu;
  Cuda cuda;
  ASSERT_TRUE(cuda.ok()) << dlerror();
  ASSERT_EQ(cuda.init(0), kCudaSuccess);
  void* ctx = nullptr;
  void* stream = nullptr;
  void* event = nullptr;
  ASSERT_EQ(cuda.ctx_create(&ctx, 0, 0), kCudaSuccess);
  ASSERT_EQ(cuda.stream_create(&stream, 0), kCudaSuccess);
  ASSERT_EQ(cuda.event_create(&event, 0), kCudaSuccess);

  // Stream: two 50 ms pieces run back to back.
  auto t0 = Clock::now();
  ASSERT_EQ(cuda.enqueue(stream, 50 * kMs), kCudaSuccess);
  ASSERT_EQ(cuda.enqueue(stream, 50 * kMs), kCudaSuccess);
  EXPECT_LT(ms_since(t0), 50) << "queuing work must not block";
  EXPECT_EQ(cuda.stream_query(stream), kCudaErrorNotReady);
  ASSERT_EQ(cuda.stream_synchronize(stream), kCudaSuccess);
  EXPECT_GE(ms_since(t0), 100);
  EXPECT_EQ(cuda.stream_query(stream), kCudaSuccess);

  // Event: waits for the work recorded before it, not for what follows.
  t0 = Clock::now();
  ASSERT_EQ(cuda.enqueue(stream, 60 * kMs), kCudaSuccess);
  ASSERT_EQ(cuda.event_record(event, stream), kCudaSuccess);
  ASSERT_EQ(cuda.enqueue(nullptr, 60 * kMs), kCudaSuccess);  // default stream, same device
  ASSERT_EQ(cuda.event_synchronize(event), kCudaSuccess);
  EXPECT_GE(ms_since(t0), 60);
  // Context: waits for all of it.
  ASSERT_EQ(cuda.ctx_synchronize(), kCudaSuccess);
  EXPECT_GE(ms_since(t0), 120);

  // The contract's errors: a bad stream, and no current context (a new thread has none).
  int stack_object = 0;
  EXPECT_EQ(cuda.enqueue(&stack_object, kMs), kCudaErrorInvalidHandle);
  int rc_without_ctx = 0;
  std::thread([&] { rc_without_ctx = cuda.enqueue(nullptr, kMs); }).join();
  EXPECT_EQ(rc_without_ctx, kCudaErrorInvalidContext);

  // While the context lives this process is a compute process on GPU 0; not after.
  auto nvml = load_fake_nvml();
  ASSERT_NE(nvml, nullptr);
  const auto self = static_cast<std::uint32_t>(getpid());
  EXPECT_TRUE(lists(nvml->compute_process_list().value(), self, 0));
  ASSERT_EQ(cuda.event_destroy(event), kCudaSuccess);
  ASSERT_EQ(cuda.stream_destroy(stream), kCudaSuccess);
  ASSERT_EQ(cuda.ctx_destroy(ctx), kCudaSuccess);
  EXPECT_FALSE(lists(nvml->compute_process_list().value(), self, 0));
}

TEST(Nvml, threads_sharing_a_context_queue_on_one_device_in_turn) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu;
  Cuda cuda;
  ASSERT_TRUE(cuda.ok()) << dlerror();
  ASSERT_EQ(cuda.init(0), kCudaSuccess);
  void* ctx = nullptr;
  ASSERT_EQ(cuda.primary_retain(&ctx, 1), kCudaSuccess);
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      void* s = nullptr;
      if (cuda.ctx_set_current(ctx) != kCudaSuccess || cuda.stream_create(&s, 0) != kCudaSuccess) {
        ++failures;
        return;
      }
      for (int i = 0; i < 10; ++i) {
        if (cuda.enqueue(s, 2 * kMs) != kCudaSuccess) ++failures;
      }
      if (cuda.stream_synchronize(s) != kCudaSuccess) ++failures;
      if (cuda.stream_destroy(s) != kCudaSuccess) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  // 40 pieces of 2 ms on one device: the last stream to finish waited for all of them.
  EXPECT_GE(ms_since(t0), 80);
  auto nvml = load_fake_nvml();
  ASSERT_NE(nvml, nullptr);
  auto util = nvml->utilization(1);
  ASSERT_TRUE(util.ok());
  EXPECT_GE(util->gpu_percent, 1U);
  EXPECT_EQ(cuda.primary_release(1), kCudaSuccess);
  EXPECT_FALSE(
      lists(nvml->compute_process_list().value(), static_cast<std::uint32_t>(getpid()), 1));
}

TEST(Nvml, clock_and_power_setters_change_the_getters_and_are_restored) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu;
  auto nvml = load_fake_nvml();
  ASSERT_NE(nvml, nullptr);

  auto clocks = nvml->clocks(0);
  ASSERT_TRUE(clocks.ok()) << clocks.error().message();
  EXPECT_EQ(clocks->sm_max, 1980U);
  EXPECT_EQ(clocks->mem_max, 3201U);
  EXPECT_EQ(clocks->sm_application, 1980U);
  EXPECT_EQ(clocks->mem_application, 3201U);
  const std::uint32_t idle_sm = clocks->sm_current;
  EXPECT_LT(idle_sm, 1980U);
  auto power = nvml->power_limits(0);
  ASSERT_TRUE(power.ok()) << power.error().message();
  EXPECT_EQ(power->current_mw, 700'000U);
  EXPECT_EQ(power->default_mw, 700'000U);
  EXPECT_EQ(power->min_mw, 200'000U);
  EXPECT_EQ(power->max_mw, 700'000U);
  EXPECT_FALSE(nvml->original_settings(0).changed());

  ASSERT_TRUE(nvml->set_application_clocks(0, {3201, 1200}).ok());
  ASSERT_TRUE(nvml->set_application_clocks(0, {3201, 990}).ok());
  EXPECT_EQ(nvml->clocks(0)->sm_application, 990U);
  // The value from before the first change is what is kept.
  EXPECT_EQ(nvml->original_settings(0).application_clocks, (ApplicationClocks{3201, 1980}));

  ASSERT_TRUE(nvml->set_locked_clocks(0, 900, 1000).ok());
  EXPECT_EQ(nvml->clocks(0)->sm_current, 900U);  // idle, held at the locked minimum
  EXPECT_TRUE(nvml->original_settings(0).locked_clocks);

  ASSERT_TRUE(nvml->set_power_limit(0, 546'000).ok());
  EXPECT_EQ(nvml->power_limits(0)->current_mw, 546'000U);
  EXPECT_EQ(nvml->original_settings(0).power_limit_mw, 700'000U);

  // Out of range: the driver refuses, the error says which call, which GPU and why.
  auto bad = nvml->set_power_limit(0, 100'000);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), EINVAL);
  EXPECT_EQ(bad.error().message(),
            "nvmlDeviceSetPowerManagementLimit(GPU 0, 100000 mW): Invalid Argument");
  EXPECT_EQ(nvml->set_application_clocks(0, {1000, 1200}).error().code(), EINVAL);
  EXPECT_EQ(nvml->set_locked_clocks(0, 1000, 900).error().code(), EINVAL);
  EXPECT_EQ(nvml->power_limits(0)->current_mw, 546'000U);

  // The other GPU is untouched.
  EXPECT_EQ(nvml->clocks(1)->sm_application, 1980U);
  EXPECT_FALSE(nvml->original_settings(1).changed());

  ASSERT_TRUE(nvml->restore_all().ok());
  EXPECT_EQ(nvml->clocks(0)->sm_application, 1980U);
  EXPECT_EQ(nvml->clocks(0)->sm_current, idle_sm);
  EXPECT_EQ(nvml->power_limits(0)->current_mw, 700'000U);
  EXPECT_FALSE(nvml->original_settings(0).changed());

  // Whatever is still changed when the collector goes is restored by its destructor.
  ASSERT_TRUE(nvml->set_power_limit(1, 300'000).ok());
  ASSERT_TRUE(nvml->set_locked_clocks(1, 600, 600).ok());
  nvml.reset();
  auto fresh = load_fake_nvml();
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(fresh->power_limits(1)->current_mw, 700'000U);
  EXPECT_EQ(fresh->clocks(1)->sm_current, idle_sm);
}

TEST(Nvml, setters_need_root_like_the_real_driver) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu;
  unsetenv("ZERNEL_FAKE_GPU_UNRESTRICTED");
  auto nvml = load_fake_nvml();
  ASSERT_NE(nvml, nullptr);
  // As root, act as nobody for the call (the effective uid is what the driver checks).
  const bool was_root = geteuid() == 0;
  if (was_root) {
    ASSERT_EQ(seteuid(65534), 0) << std::strerror(errno);
  }
  auto r = nvml->set_power_limit(0, 500'000);
  if (was_root) {
    ASSERT_EQ(seteuid(0), 0) << std::strerror(errno);
  }
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), EPERM);
  EXPECT_EQ(r.error().message(),
            "nvmlDeviceSetPowerManagementLimit(GPU 0, 500000 mW): Insufficient Permissions");
  EXPECT_FALSE(nvml->original_settings(0).changed());
  EXPECT_EQ(nvml->power_limits(0)->current_mw, 700'000U);
}

TEST(Nvml, a_lower_clock_makes_the_same_work_take_longer) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu;
  auto nvml = load_fake_nvml();
  ASSERT_NE(nvml, nullptr);
  ASSERT_TRUE(nvml->set_application_clocks(0, {3201, 990}).ok());  // half the top clock

  Cuda cuda;
  ASSERT_TRUE(cuda.ok()) << dlerror();
  ASSERT_EQ(cuda.init(0), kCudaSuccess);
  void* ctx = nullptr;
  ASSERT_EQ(cuda.ctx_create(&ctx, 0, 0), kCudaSuccess);
  const auto t0 = Clock::now();
  ASSERT_EQ(cuda.enqueue(nullptr, 50 * kMs), kCudaSuccess);
  ASSERT_EQ(cuda.ctx_synchronize(), kCudaSuccess);
  EXPECT_GE(ms_since(t0), 100);
  EXPECT_EQ(cuda.ctx_destroy(ctx), kCudaSuccess);
}

TEST(Nvml, the_fake_library_follows_the_nvml_list_protocol) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu;
  Cuda cuda;
  ASSERT_TRUE(cuda.ok()) << dlerror();
  ASSERT_EQ(cuda.init(0), kCudaSuccess);
  void* ctx = nullptr;
  ASSERT_EQ(cuda.ctx_create(&ctx, 0, 0), kCudaSuccess);
  ASSERT_EQ(cuda.enqueue(nullptr, 20 * kMs), kCudaSuccess);
  ASSERT_EQ(cuda.ctx_synchronize(), kCudaSuccess);

  void* lib = dlopen(fake_lib("libnvidia-ml.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto init = reinterpret_cast<decltype(&nvmlInit_v2)>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<decltype(&nvmlShutdown)>(dlsym(lib, "nvmlShutdown"));
  auto handle = reinterpret_cast<decltype(&nvmlDeviceGetHandleByIndex_v2)>(
      dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto procs = reinterpret_cast<decltype(&nvmlDeviceGetComputeRunningProcesses_v3)>(
      dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
  auto samples = reinterpret_cast<decltype(&nvmlDeviceGetProcessUtilization)>(
      dlsym(lib, "nvmlDeviceGetProcessUtilization"));
  ASSERT_TRUE(init && shutdown && handle && procs && samples);
  ASSERT_EQ(init(), NVML_SUCCESS);
  nvmlDevice_t d0 = nullptr;
  nvmlDevice_t d1 = nullptr;
  ASSERT_EQ(handle(0, &d0), NVML_SUCCESS);
  ASSERT_EQ(handle(1, &d1), NVML_SUCCESS);
  EXPECT_EQ(handle(2, &d1), NVML_ERROR_INVALID_ARGUMENT);

  // Compute processes: ask with 0, get the size; then read.
  unsigned int count = 0;
  EXPECT_EQ(procs(d0, &count, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 1U);
  nvmlProcessInfo_t info[2] = {};
  count = 2;
  ASSERT_EQ(procs(d0, &count, info), NVML_SUCCESS);
  ASSERT_EQ(count, 1U);
  EXPECT_EQ(info[0].pid, static_cast<unsigned int>(getpid()));
  EXPECT_EQ(info[0].usedGpuMemory, 512ULL << 20);
  EXPECT_EQ(info[0].gpuInstanceId, 0xFFFFFFFFU);
  count = 0;
  EXPECT_EQ(procs(d1, &count, nullptr), NVML_SUCCESS);  // none there
  EXPECT_EQ(count, 0U);

  // Per-process samples: NULL asks for the count; a sample carries a CLOCK_REALTIME µs stamp.
  count = 0;
  EXPECT_EQ(samples(d0, nullptr, &count, 0), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 1U);
  nvmlProcessUtilizationSample_t s[2] = {};
  count = 2;
  ASSERT_EQ(samples(d0, s, &count, 0), NVML_SUCCESS);
  ASSERT_EQ(count, 1U);
  EXPECT_EQ(s[0].pid, static_cast<unsigned int>(getpid()));
  EXPECT_GT(s[0].smUtil, 0U);
  const auto now_us =
      static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
  EXPECT_LE(s[0].timeStamp, now_us);
  EXPECT_GT(s[0].timeStamp + 5'000'000ULL, now_us);
  count = 2;
  EXPECT_EQ(samples(d0, s, &count, s[0].timeStamp), NVML_ERROR_NOT_FOUND);  // nothing newer
  count = 2;
  EXPECT_EQ(samples(d1, s, &count, 0), NVML_ERROR_NOT_FOUND);

  EXPECT_EQ(shutdown(), NVML_SUCCESS);
  EXPECT_EQ(shutdown(), NVML_ERROR_UNINITIALIZED);
  dlclose(lib);
  EXPECT_EQ(cuda.ctx_destroy(ctx), kCudaSuccess);
}

TEST(Nvml, a_segment_of_another_layout_version_is_a_clear_error) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu;
  // A segment as an incompatible build would leave it: the right magic, another version.
  const int fd = shm_open(gpu.name().c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  const std::uint64_t magic = 0x31555047464e525aULL;  // ZFG_MAGIC
  const std::uint32_t version = 999;
  ASSERT_EQ(pwrite(fd, &version, sizeof(version), 8), static_cast<ssize_t>(sizeof(version)));
  ASSERT_EQ(pwrite(fd, &magic, sizeof(magic), 0), static_cast<ssize_t>(sizeof(magic)));
  close(fd);

  auto r = Nvml::load(fake_lib("libnvidia-ml.so.1"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ENODEV);
  const std::string& msg = r.error().message();
  EXPECT_NE(msg.find("nvmlInit_v2: RM has detected an NVML/RM version mismatch"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("layout version 999"), std::string::npos) << msg;
  EXPECT_NE(msg.find("GPU metrics are off"), std::string::npos) << msg;
}

}  // namespace
}  // namespace zernel::sys
