// The GPU sync and futex probes (bpf/probes.bpf.c, src/collect/probes/) on the host's real
// kernel, driven by forked children: one that uses the emulated GPU's libcuda (tools/fake_gpu)
// like a training step, one that makes futex calls. Needs root and BPF tracing; each test skips
// with the reason otherwise. Built only with the BPF toolchain (ZERNEL_HAVE_PROBES).
#ifdef ZERNEL_HAVE_PROBES

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <linux/futex.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collect/probes/cuda_library.hpp"
#include "collect/probes/gpu_sync_probes.hpp"
#include "collect/wait_state.hpp"
#include "common/clock.hpp"
#include "support/emulated_gpu.hpp"
#include "support/proc_stat.hpp"

#ifndef ZERNEL_FAKE_LIB_DIR
#define ZERNEL_FAKE_LIB_DIR ""
#endif

namespace zernel::collect {
namespace {

using test_support::EmulatedGpu;

using namespace std::chrono_literals;
constexpr std::uint64_t kMs = 1'000'000;

std::string fake_libcuda() { return std::string(ZERNEL_FAKE_LIB_DIR) + "/libcuda.so.1"; }

std::uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

void burn_cpu(std::uint64_t ns) {
  const std::uint64_t end = thread_cpu_ns() + ns;
  volatile std::uint64_t x = 0;
  while (thread_cpu_ns() < end) {
    for (int i = 0; i < 10000; ++i) x = x + static_cast<std::uint64_t>(i);
  }
}

long futex(std::uint32_t* uaddr, int op, std::uint32_t val, const timespec* timeout = nullptr) {
  return syscall(SYS_futex, uaddr, op, val, timeout, nullptr, FUTEX_BITSET_MATCH_ANY);
}

// A forked child that runs `body` with a command pipe and a reply pipe: one byte each way. The
// child never returns into the test framework; the destructor kills and reaps it.
class Child {
 public:
  using Body = std::function<int(int cmd_fd, int reply_fd)>;
  explicit Child(const Body& body) {
    int cmd[2];
    int reply[2];
    if (pipe2(cmd, O_CLOEXEC) != 0 || pipe2(reply, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(cmd[1]);
      close(reply[0]);
      _exit(body(cmd[0], reply[1]));
    }
    close(cmd[0]);
    close(reply[1]);
    cmd_ = cmd[1];
    reply_ = reply[0];
  }
  ~Child() {
    kill_and_reap();
    if (cmd_ >= 0) close(cmd_);
    if (reply_ >= 0) close(reply_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] std::uint32_t upid() const { return static_cast<std::uint32_t>(pid_); }

  bool send(char c) const { return write(cmd_, &c, 1) == 1; }
  // The next reply byte, or '\0' after `timeout_ms` (or when the child died).
  [[nodiscard]] char expect(int timeout_ms = 10'000) const {
    pollfd p{reply_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1) return '\0';
    char c = '\0';
    return read(reply_, &c, 1) == 1 ? c : '\0';
  }
  // True when a reply is waiting (without consuming it).
  [[nodiscard]] bool reply_ready() const {
    pollfd p{reply_, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
  }
  // Waits for the child to exit by itself; its wait status, or -1.
  int wait_exit() {
    int status = -1;
    if (pid_ > 0 && waitpid(pid_, &status, 0) == pid_) pid_ = -1;
    return status;
  }
  void kill_and_reap() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // In the child: blocks for the next command byte ('\0' on EOF).
  static char next(int fd) {
    char c = '\0';
    return read(fd, &c, 1) == 1 ? c : '\0';
  }
  static void reply(int fd, char c) { (void)!write(fd, &c, 1); }

 private:
  pid_t pid_ = -1;
  int cmd_ = -1;
  int reply_ = -1;
};

// The child playing a training step on the emulated GPU:
//   'L' after loading libcuda and creating a context and a stream (then waits for 'G');
//   'S' just before cuStreamSynchronize on `work_ns` of queued work, 'R' after it returned;
//   'B' after burning `burn_ns` of CPU; then waits for any command and exits.
// A failure replies 'F' and exits 1.
// The emulated driver as a child process uses it: libcuda loaded, a context and a stream on
// device 0. ok() is false when any step failed.
struct FakeCudaStream {
  using Handle = void*;
  int (*stream_sync)(Handle) = nullptr;
  int (*enqueue)(Handle, unsigned long long) = nullptr;
  Handle stream = nullptr;

  FakeCudaStream() {
    void* lib = dlopen(fake_libcuda().c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    auto init = reinterpret_cast<int (*)(unsigned)>(dlsym(lib, "cuInit"));
    auto device_get = reinterpret_cast<int (*)(int*, int)>(dlsym(lib, "cuDeviceGet"));
    auto ctx_create =
        reinterpret_cast<int (*)(Handle*, unsigned, int)>(dlsym(lib, "cuCtxCreate_v2"));
    auto stream_create = reinterpret_cast<int (*)(Handle*, unsigned)>(dlsym(lib, "cuStreamCreate"));
    stream_sync = reinterpret_cast<int (*)(Handle)>(dlsym(lib, "cuStreamSynchronize"));
    enqueue = reinterpret_cast<int (*)(Handle, unsigned long long)>(dlsym(lib, "zfgEnqueueWork"));
    int dev = 0;
    Handle ctx = nullptr;
    if (!init || !device_get || !ctx_create || !stream_create || !stream_sync || !enqueue ||
        init(0) != 0 || device_get(&dev, 0) != 0 || ctx_create(&ctx, 0, dev) != 0 ||
        stream_create(&stream, 0) != 0) {
      stream = nullptr;
    }
  }
  [[nodiscard]] bool ok() const { return stream != nullptr; }
  // Queues ns of device time and waits for it (one launch, one blocking sync).
  [[nodiscard]] bool work(std::uint64_t ns) const {
    return enqueue(stream, ns) == 0 && stream_sync(stream) == 0;
  }
};

int gpu_step_child(int cmd, int rep, std::uint64_t work_ns, std::uint64_t burn_ns) {
  const FakeCudaStream gpu;
  if (!gpu.ok()) return Child::reply(rep, 'F'), 1;
  Child::reply(rep, 'L');
  if (Child::next(cmd) != 'G') return 1;
  if (gpu.enqueue(gpu.stream, work_ns) != 0) return Child::reply(rep, 'F'), 1;
  Child::reply(rep, 'S');
  if (gpu.stream_sync(gpu.stream) != 0) return Child::reply(rep, 'F'), 1;
  Child::reply(rep, 'R');
  burn_cpu(burn_ns);
  Child::reply(rep, 'B');
  Child::next(cmd);
  return 0;
}

// The child making futex calls on command:
//   'W': 200 FUTEX_WAITs that sleep until their 50 us timeout (the word holds the expected value),
//        half of them private, plus 50 FUTEX_WAIT_BITSET with FUTEX_CLOCK_REALTIME and an
//        absolute deadline 50 us ahead; reply 'w'.
//   'E': 200 FUTEX_WAITs that return at once (the word differs from the expected value: EAGAIN,
//        no sleep); reply 'e'.
//   'K': 200 FUTEX_WAKEs (not waits); reply 'k'.
//   'C': 20 pthread_cond_timedwait of 1 ms that time out (glibc's own futex waits); reply 'c'.
//   anything else: exit.
int futex_child(int cmd, int rep) {
  std::uint32_t word = 1;
  for (;;) {
    const char c = Child::next(cmd);
    if (c == 'W') {
      const timespec fifty_us{0, 50'000};
      for (int i = 0; i < 200; ++i) {
        futex(&word, (i % 2 != 0) ? FUTEX_WAIT_PRIVATE : FUTEX_WAIT, 1, &fifty_us);
      }
      for (int i = 0; i < 50; ++i) {
        timespec deadline{};
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_nsec += 50'000;
        if (deadline.tv_nsec >= 1'000'000'000) {
          deadline.tv_sec += 1;
          deadline.tv_nsec -= 1'000'000'000;
        }
        futex(&word, FUTEX_WAIT_BITSET | FUTEX_CLOCK_REALTIME | FUTEX_PRIVATE_FLAG, 1, &deadline);
      }
      Child::reply(rep, 'w');
    } else if (c == 'E') {
      for (int i = 0; i < 200; ++i) futex(&word, FUTEX_WAIT_PRIVATE, 0);
      Child::reply(rep, 'e');
    } else if (c == 'K') {
      for (int i = 0; i < 200; ++i) futex(&word, FUTEX_WAKE_PRIVATE, 1);
      Child::reply(rep, 'k');
    } else if (c == 'C') {
      pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
      pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
      pthread_mutex_lock(&m);
      for (int i = 0; i < 20; ++i) {
        timespec deadline{};
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_nsec += 1'000'000;
        if (deadline.tv_nsec >= 1'000'000'000) {
          deadline.tv_sec += 1;
          deadline.tv_nsec -= 1'000'000'000;
        }
        pthread_cond_timedwait(&cv, &m, &deadline);
      }
      pthread_mutex_unlock(&m);
      Child::reply(rep, 'c');
    } else {
      return 0;
    }
  }
}

// A child that loads the emulated libcuda and waits: 'L' once loaded, exits on any command.
int libcuda_child(int cmd, int rep) {
  if (dlopen(fake_libcuda().c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) return 1;
  Child::reply(rep, 'L');
  Child::next(cmd);
  return 0;
}

// A child on the emulated GPU: 'L' once it has a stream; each 'G': 1,000 syncs with nothing
// queued and 1,000 launches of no device time, then 'd'.
constexpr std::uint64_t kLoopCalls = 1000;
int sync_loop_child(int cmd, int rep) {
  const FakeCudaStream gpu;
  if (!gpu.ok()) return Child::reply(rep, 'F'), 1;
  Child::reply(rep, 'L');
  while (Child::next(cmd) == 'G') {
    for (std::uint64_t i = 0; i < kLoopCalls; ++i) {
      if (gpu.stream_sync(gpu.stream) != 0 || gpu.enqueue(gpu.stream, 0) != 0) {
        return Child::reply(rep, 'F'), 1;
      }
    }
    Child::reply(rep, 'd');
  }
  return 0;
}

// Each command 'G': 2 ms of CPU, then the reply 'd'; between commands it sleeps in read().
int burn_step_child(int cmd, int rep) {
  Child::reply(rep, 'L');
  while (Child::next(cmd) == 'G') {
    burn_cpu(2 * kMs);
    Child::reply(rep, 'd');
  }
  return 0;
}

class Probes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(ZERNEL_FAKE_LIB_DIR).empty()) {
      GTEST_SKIP() << "the build does not define ZERNEL_FAKE_LIB_DIR (tests/CMakeLists.txt)";
    }
    // Not root, no BPF, no BTF: open() says which, and that is the reason to skip.
    auto r = GpuSyncProbes::open();
    if (!r) GTEST_SKIP() << r.error().message();
    probes_ = std::move(r.value());
  }

  ProbeSample read(std::uint32_t pid) {
    auto s = probes_->read(pid, monotonic_ns());
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message());
    return s.ok() ? s.value() : ProbeSample{};
  }

  std::unique_ptr<GpuSyncProbes> probes_;
};

// ---------------------------------------------------------------------------------------------
// Parsers (no BPF needed, but they only exist in a probes build).

TEST(CudaLibrary, recognises_the_driver_library_by_file_name) {
  EXPECT_TRUE(probes::is_libcuda_path("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
  EXPECT_TRUE(probes::is_libcuda_path("/usr/lib64/libcuda.so.560.35.03"));
  EXPECT_TRUE(probes::is_libcuda_path("/opt/x/libcuda.so"));
  EXPECT_FALSE(probes::is_libcuda_path("/usr/lib/libcudart.so.12"));
  EXPECT_FALSE(probes::is_libcuda_path("/usr/lib/libcuda.so.1 (deleted)"));
  EXPECT_FALSE(probes::is_libcuda_path("/opt/libcuda.so.d/libfoo.so"));
  EXPECT_FALSE(probes::is_libcuda_path("libcuda.so.1"));
  EXPECT_FALSE(probes::is_libcuda_path("[heap]"));
}

TEST(CudaLibrary, lists_each_mapped_driver_file_once) {
  const std::string maps =
      "7f0000000000-7f0000001000 r--p 00000000 fd:01 1234    /usr/lib/libcuda.so.560\n"
      "7f0000001000-7f0000002000 r-xp 00001000 fd:01 1234    /usr/lib/libcuda.so.560\n"
      "7f0000003000-7f0000004000 r--p 00000000 103:0a 99     /other/libcuda.so.1\n"
      "7f0000005000-7f0000006000 r--p 00000000 fd:01 77      /usr/lib/libcudart.so.12\n"
      "7f0000007000-7f0000008000 rw-p 00000000 00:00 0 \n"
      "7f0000009000-7f000000a000 r--p 00000000 fd:01 55      /gone/libcuda.so.1 (deleted)\n"
      "7f000000b000-7f000000c000 r--p 00000000 fd:01 56      /cut/libcuda.so.1";  // no '\n'
  const auto libs = probes::parse_libcuda_mappings(maps);
  ASSERT_EQ(libs.size(), 2U);
  EXPECT_EQ(libs[0].path, "/usr/lib/libcuda.so.560");
  EXPECT_EQ(libs[0].dev_major, 0xfdU);
  EXPECT_EQ(libs[0].dev_minor, 1U);
  EXPECT_EQ(libs[0].inode, 1234U);
  EXPECT_EQ(libs[1].path, "/other/libcuda.so.1");
  EXPECT_EQ(libs[1].dev_major, 0x103U);
  EXPECT_EQ(libs[1].dev_minor, 0xaU);
}

TEST(CudaLibrary, parses_the_runtime_field_of_schedstat) {
  EXPECT_EQ(probes::parse_schedstat_runtime("123456789 2000 15\n"), 123456789U);
  EXPECT_EQ(probes::parse_schedstat_runtime("0 0 0\n"), 0U);
  EXPECT_FALSE(probes::parse_schedstat_runtime("123456789 2000 15").has_value());  // cut short
  EXPECT_FALSE(probes::parse_schedstat_runtime("\n").has_value());
  EXPECT_FALSE(probes::parse_schedstat_runtime("x1 2 3\n").has_value());
  EXPECT_FALSE(probes::parse_schedstat_runtime("99999999999999999999999 1 1\n").has_value());
}

TEST(CudaLibrary, finds_the_sync_symbols_of_the_emulated_driver) {
  if (std::string(ZERNEL_FAKE_LIB_DIR).empty()) GTEST_SKIP() << "no ZERNEL_FAKE_LIB_DIR";
  auto found = probes::elf_defined_functions(
      fake_libcuda(), {"cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
                       "cuStreamSynchronize_ptsz", "no_such_function"});
  ASSERT_TRUE(found.ok()) << found.error().message();
  EXPECT_EQ(found->size(), 3U);
  auto not_elf = probes::elf_defined_functions("/proc/self/status", {"x"});
  EXPECT_FALSE(not_elf.ok());
}

// ---------------------------------------------------------------------------------------------
// Loading and attaching.

TEST_F(Probes, loads_and_attaches_to_the_emulated_libcuda_once_per_process) {
  EXPECT_FALSE(probes_->attached());  // nothing until a process is followed
  Child a(libcuda_child);
  Child b(libcuda_child);
  ASSERT_EQ(a.expect(), 'L');
  ASSERT_EQ(b.expect(), 'L');
  auto r = probes_->attach_library(a.upid(), fake_libcuda());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(*r);
  EXPECT_TRUE(probes_->attached());
  EXPECT_EQ(probes_->followed(), 1U);
  ASSERT_EQ(probes_->libraries().size(), 1U);
  EXPECT_EQ(probes_->libraries()[0].symbols.size(), 3U);  // the syncs; launches are not probed
  // The same file in the same process again, by the same path and by another one: attached.
  auto again = probes_->attach_library(a.upid(), fake_libcuda());
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_FALSE(*again);
  auto via_root = probes_->attach_library(a.upid(), "/proc/self/root" + fake_libcuda());
  ASSERT_TRUE(via_root.ok()) << via_root.error().message();
  EXPECT_FALSE(*via_root);
  // In another process: its own probes, the file resolved once.
  auto other = probes_->attach_library(b.upid(), fake_libcuda());
  ASSERT_TRUE(other.ok()) << other.error().message();
  EXPECT_TRUE(*other);
  EXPECT_EQ(probes_->libraries().size(), 1U);
  EXPECT_EQ(probes_->followed(), 2U);
  probes_->forget(a.upid());
  EXPECT_TRUE(probes_->attached());
  probes_->forget(b.upid());
  EXPECT_EQ(probes_->followed(), 0U);
  EXPECT_FALSE(probes_->attached());
}

TEST_F(Probes, refuses_a_library_without_the_sync_calls_fail) {
  const auto self = static_cast<std::uint32_t>(getpid());
  auto r = probes_->attach_library(self, std::string(ZERNEL_FAKE_LIB_DIR) + "/libnvidia-ml.so.1");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("has no cuCtxSynchronize"), std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find("not a CUDA driver library"), std::string::npos);
  EXPECT_FALSE(probes_->attach_library(self, "/proc/self/status").ok());
  EXPECT_FALSE(probes_->attach_library(self, "/no/such/libcuda.so.1").ok());
  EXPECT_TRUE(probes_->libraries().empty());
  EXPECT_EQ(probes_->followed(), 0U);
  EXPECT_FALSE(probes_->attached());
}

TEST_F(Probes, refuses_a_process_that_is_gone_fail) {
  Child child(libcuda_child);
  ASSERT_EQ(child.expect(), 'L');
  const std::uint32_t pid = child.upid();
  child.kill_and_reap();
  auto r = probes_->attach_library(pid, fake_libcuda());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ESRCH) << r.error().message();
  EXPECT_EQ(probes_->followed(), 0U);
}

TEST_F(Probes, open_without_privileges_says_what_is_needed_fail) {
  // A child that gives up root (and with it every capability) tries to load the probes.
  Child child([](int, int rep) {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) return 2;
    auto r = GpuSyncProbes::open();
    if (r.ok()) return 3;
    const bool worded = r.error().message() ==
                        "loading the GPU sync probes: BPF probes need root (CAP_BPF, CAP_PERFMON)";
    Child::reply(rep, worded ? 'y' : 'n');
    return 0;
  });
  EXPECT_EQ(child.expect(), 'y');
}

// Nothing of the probes needs tracefs: the futex waits come from the context switch (a BTF
// tracepoint, attached by name), not from the syscall tracepoints.
TEST_F(Probes, work_without_tracefs) {
  // A child in its own mount namespace unmounts tracefs there (the host keeps it).
  Child child([](int, int rep) {
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return Child::reply(rep, 's'), 0;
    }
    umount2("/sys/kernel/tracing", MNT_DETACH);
    umount2("/sys/kernel/debug/tracing", MNT_DETACH);
    umount2("/sys/kernel/debug", MNT_DETACH);
    if (access("/sys/kernel/tracing/events", F_OK) == 0) return Child::reply(rep, 's'), 0;
    auto r = GpuSyncProbes::open();
    if (!r.ok()) return Child::reply(rep, 'o'), 0;
    auto& p = *r.value();
    const auto self = static_cast<std::uint32_t>(getpid());
    const bool tracked = p.track(self).ok() && p.has_futex() && p.attached();
    auto attached = p.attach_library(self, fake_libcuda());
    Child::reply(rep, !tracked ? 't' : !(attached.ok() && *attached) ? 'a' : 'y');
    return 0;
  });
  const char c = child.expect(30'000);
  if (c == 's') GTEST_SKIP() << "cannot unmount tracefs in a private mount namespace";
  EXPECT_EQ(c, 'y') << "o: open failed, t: futex counting off, a: attach_library failed";
}

TEST_F(Probes, an_unknown_process_reads_as_zeros) {
  const auto s = read(static_cast<std::uint32_t>(getpid()));
  EXPECT_FALSE(s.in_sync);
  EXPECT_EQ(s.last_sync_return_ns, 0U);
  EXPECT_EQ(s.cpu_burst_ns, 0U);
  EXPECT_EQ(s.sync_count_delta, 0U);
  EXPECT_EQ(s.futex_waits_delta, 0U);
}

// ---------------------------------------------------------------------------------------------
// GPU synchronisation.

TEST_F(Probes, sees_a_training_step_block_in_a_sync_then_burn_cpu) {
  EmulatedGpu gpu;
  constexpr std::uint64_t kWork = 200 * kMs;
  constexpr std::uint64_t kBurn = 50 * kMs;
  Child child([&](int cmd, int rep) { return gpu_step_child(cmd, rep, kWork, kBurn); });
  ASSERT_GT(child.pid(), 0);
  ASSERT_EQ(child.expect(), 'L') << "the child could not set up the emulated GPU";

  // The daemon's way: find the library in the process's maps.
  auto attached = probes_->attach_process_libraries(child.upid());
  ASSERT_TRUE(attached.ok()) << attached.error().message();
  EXPECT_EQ(*attached, 1U);
  ASSERT_EQ(probes_->libraries().size(), 1U);
  EXPECT_EQ(probes_->libraries()[0].path,
            "/proc/" + std::to_string(child.pid()) + "/root" + fake_libcuda());
  auto again = probes_->attach_process_libraries(child.upid());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0U);

  const auto first = read(child.upid());
  EXPECT_FALSE(first.in_sync);
  EXPECT_EQ(first.last_sync_return_ns, 0U);
  EXPECT_EQ(first.interval_ns, 0U);

  const std::uint64_t t_go = monotonic_ns();
  ASSERT_TRUE(child.send('G'));
  ASSERT_EQ(child.expect(), 'S');

  // While the child is blocked in cuStreamSynchronize.
  bool saw_in_sync = false;
  ProbeSample during{};
  while (!child.reply_ready()) {
    during = read(child.upid());
    if (during.in_sync) {
      saw_in_sync = true;
      break;
    }
    std::this_thread::sleep_for(2ms);
  }
  ASSERT_TRUE(saw_in_sync) << "the sync returned before a read saw it (the probe missed it?)";
  EXPECT_EQ(during.cpu_burst_ns, 0U);
  EXPECT_GE(during.in_sync_since_ns, t_go);
  EXPECT_LE(during.in_sync_since_ns, monotonic_ns());
  EXPECT_EQ(during.sync_count_delta, 0U);

  ASSERT_EQ(child.expect(), 'R');
  const std::uint64_t t_returned = monotonic_ns();
  const auto after = read(child.upid());
  EXPECT_FALSE(after.in_sync);
  EXPECT_GE(after.last_sync_return_ns, t_go + 150 * kMs);
  EXPECT_LE(after.last_sync_return_ns, t_returned);
  EXPECT_EQ(after.sync_count_delta, 1U);
  EXPECT_GE(after.sync_time_delta_ns, 150 * kMs);  // ~200 ms; lower bound only
  EXPECT_GT(after.interval_ns, 0U);

  ASSERT_EQ(child.expect(), 'B');
  const auto burst = read(child.upid());
  EXPECT_FALSE(burst.in_sync);
  EXPECT_EQ(burst.last_sync_return_ns, after.last_sync_return_ns);
  EXPECT_EQ(burst.sync_count_delta, 0U);
  EXPECT_EQ(burst.sync_time_delta_ns, 0U);
  EXPECT_GE(burst.cpu_burst_ns, 30 * kMs);

  const auto st = probes_->stats();
  EXPECT_GE(st.sync_enter, 1U);
  EXPECT_GE(st.sync_return, 1U);

  // The process exits: the BPF side drops its entries, so a reused pid would start clean.
  const std::uint32_t pid = child.upid();
  ASSERT_TRUE(child.send('X'));
  const int status = child.wait_exit();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const auto gone = read(pid);
  EXPECT_EQ(gone.last_sync_return_ns, 0U);
  EXPECT_FALSE(gone.in_sync);
}

// Attached while a thread syncs in a tight loop, as the daemon attaches to a running job: no call
// may be left counted as entered without its return (the thread would read as inside a sync for
// good and every later sync as nested). The return probes go on before the entry probes.
TEST_F(Probes, attaching_while_a_thread_syncs_in_a_loop_leaves_no_sync_open) {
  EmulatedGpu gpu;
  Child child([](int cmd, int rep) {
    const FakeCudaStream gpu_stream;
    if (!gpu_stream.ok()) return Child::reply(rep, 'F'), 1;
    Child::reply(rep, 'L');
    // Empty syncs until a command comes; then one sync of 20 ms of work.
    for (pollfd p{cmd, POLLIN, 0}; poll(&p, 1, 0) == 0;) {
      for (int i = 0; i < 100; ++i) {
        if (gpu_stream.stream_sync(gpu_stream.stream) != 0) return Child::reply(rep, 'F'), 1;
      }
    }
    (void)Child::next(cmd);
    if (!gpu_stream.work(20 * kMs)) return Child::reply(rep, 'F'), 1;
    Child::reply(rep, 'R');
    Child::next(cmd);
    return 0;
  });
  ASSERT_EQ(child.expect(), 'L') << "the child could not set up the emulated GPU";
  auto attached = probes_->attach_process_libraries(child.upid());
  ASSERT_TRUE(attached.ok()) << attached.error().message();
  ASSERT_EQ(*attached, 1U);
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(child.send('G'));
  ASSERT_EQ(child.expect(), 'R');
  const auto s = read(child.upid());
  EXPECT_FALSE(s.in_sync) << "a sync entered during the attach was never seen to return";
  EXPECT_GT(s.sync_count_delta, 1U);  // the loop's syncs and the last one, each seen whole
  EXPECT_GE(s.sync_time_delta_ns, 15 * kMs);
  EXPECT_EQ(probes_->stats().depth_overflow, 0U);
}

TEST_F(Probes, drops_a_process_that_exits_and_one_killed_inside_a_sync) {
  EmulatedGpu gpu;
  const auto before = probes_->stats();

  // 5 s of work: the child is still blocked when it is killed.
  auto child = std::make_unique<Child>(
      [](int cmd, int rep) { return gpu_step_child(cmd, rep, 5000 * kMs, 0); });
  const std::uint32_t pid = child->upid();
  ASSERT_EQ(child->expect(), 'L');
  auto r = probes_->attach_process_libraries(pid);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(child->send('G'));
  ASSERT_EQ(child->expect(), 'S');
  bool saw_in_sync = false;
  for (int i = 0; i < 500 && !saw_in_sync; ++i) {
    saw_in_sync = read(pid).in_sync;
    if (!saw_in_sync) std::this_thread::sleep_for(2ms);
  }
  ASSERT_TRUE(saw_in_sync);
  child.reset();  // SIGKILL, reaped

  const auto after = read(pid);
  EXPECT_FALSE(after.in_sync);
  EXPECT_EQ(after.last_sync_return_ns, 0U);
  EXPECT_GE(probes_->stats().exit_in_sync, before.exit_in_sync + 1);
}

TEST_F(Probes, forget_drops_the_state_of_a_process) {
  EmulatedGpu gpu;
  Child child([](int cmd, int rep) { return gpu_step_child(cmd, rep, 10 * kMs, 0); });
  ASSERT_EQ(child.expect(), 'L');
  auto r = probes_->attach_process_libraries(child.upid());
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(child.send('G'));
  ASSERT_EQ(child.expect(), 'S');
  ASSERT_EQ(child.expect(), 'R');
  ASSERT_EQ(child.expect(), 'B');
  EXPECT_NE(read(child.upid()).last_sync_return_ns, 0U);
  probes_->forget(child.upid());
  const auto s = read(child.upid());
  EXPECT_EQ(s.last_sync_return_ns, 0U);
  EXPECT_EQ(s.sync_count_delta, 0U);
  EXPECT_EQ(s.interval_ns, 0U);  // a first read again
  EXPECT_EQ(probes_->followed(), 0U);
  EXPECT_FALSE(probes_->attached());
}

// ---------------------------------------------------------------------------------------------
// Futex waits.

TEST_F(Probes, counts_futex_waits_of_tracked_processes_only) {
  if (!probes_->has_futex()) GTEST_SKIP() << probes_->futex_error()->message();
  Child child(futex_child);
  ASSERT_GT(child.pid(), 0);
  const std::uint32_t pid = child.upid();

  // Not tracked: nothing counted.
  ASSERT_TRUE(child.send('W'));
  ASSERT_EQ(child.expect(), 'w');
  EXPECT_EQ(read(pid).futex_waits_delta, 0U);

  // Tracked: every wait, private or not, with or without FUTEX_CLOCK_REALTIME.
  ASSERT_TRUE(probes_->track(pid).ok());
  ASSERT_TRUE(probes_->track(pid).ok());  // idempotent
  EXPECT_EQ(read(pid).futex_waits_delta, 0U);
  ASSERT_TRUE(child.send('W'));
  ASSERT_EQ(child.expect(), 'w');
  // 250 waits that sleep, but a 50 us timer can fire before the thread has left its CPU (then it
  // never slept: nothing to count): on a loaded machine a few of them (248 of 250 once, beside
  // another test) are not seen.
  const auto waits = read(pid).futex_waits_delta;
  EXPECT_GE(waits, 240U);
  EXPECT_LE(waits, 260U);  // a few of the child's own, at most

  // Wakes are not waits, and a wait that does not sleep (EAGAIN) waits for nothing.
  ASSERT_TRUE(child.send('K'));
  ASSERT_EQ(child.expect(), 'k');
  ASSERT_TRUE(child.send('E'));
  ASSERT_EQ(child.expect(), 'e');
  EXPECT_LE(read(pid).futex_waits_delta, 5U);

  // glibc's condition variable waits: 20 of 1 ms, each counted when it sleeps. A wait whose
  // thread was preempted past its deadline before it reached the futex never sleeps (19 of 20
  // once, on a quiet host).
  ASSERT_TRUE(child.send('C'));
  ASSERT_EQ(child.expect(), 'c');
  EXPECT_GE(read(pid).futex_waits_delta, 18U);

  // Untracked again: nothing.
  ASSERT_TRUE(probes_->untrack(pid).ok());
  ASSERT_TRUE(child.send('W'));
  ASSERT_EQ(child.expect(), 'w');
  EXPECT_EQ(read(pid).futex_waits_delta, 0U);
  EXPECT_FALSE(probes_->attached());  // it was the only process followed

  // And tracked once more: counting starts from zero.
  ASSERT_TRUE(probes_->track(pid).ok());
  ASSERT_TRUE(child.send('W'));
  ASSERT_EQ(child.expect(), 'w');
  EXPECT_GE(read(pid).futex_waits_delta, 240U);
}

// ---------------------------------------------------------------------------------------------
// Who pays (docs/probes.md, "What is attached when"): nothing is attached while no process is
// followed, uprobes trap only in followed processes, and the programs that run for every task
// give no storage to tasks of processes nobody follows. Checked against the kernel's own view
// (its BPF links, a task's storage looked up by pidfd), with the loader's API of before this
// change only, so the same tests fail on the old loader (docs/benchmarks.md, "The tax").

// The kernel ids of the BPF programs this process holds (its bpf-prog descriptors' fdinfo).
std::vector<std::uint32_t> own_program_ids() {
  std::vector<std::uint32_t> ids;
  for (int fd = 0; fd < 4096; ++fd) {
    char target[64] = {};
    const std::string link = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    if (n <= 0 || std::string_view(target, static_cast<std::size_t>(n)) != "anon_inode:bpf-prog") {
      continue;
    }
    FILE* info = std::fopen(("/proc/self/fdinfo/" + std::to_string(fd)).c_str(), "r");
    if (info == nullptr) continue;
    char line[256];
    while (std::fgets(line, sizeof line, info) != nullptr) {
      unsigned id = 0;
      if (std::sscanf(line, "prog_id: %u", &id) == 1) ids.push_back(id);
    }
    std::fclose(info);
  }
  return ids;
}

long bpf_syscall(int cmd, bpf_attr& attr) { return syscall(SYS_bpf, cmd, &attr, sizeof attr); }

// The BPF links of the whole kernel that run one of `progs`.
std::size_t links_running(const std::vector<std::uint32_t>& progs) {
  std::size_t n = 0;
  bpf_attr next{};
  while (true) {
    if (bpf_syscall(BPF_LINK_GET_NEXT_ID, next) != 0) break;
    const std::uint32_t id = next.next_id;
    next.start_id = id;
    bpf_attr get{};
    get.link_id = id;
    const int fd = static_cast<int>(bpf_syscall(BPF_LINK_GET_FD_BY_ID, get));
    if (fd < 0) continue;  // gone meanwhile
    bpf_link_info info{};
    bpf_attr query{};
    query.info.bpf_fd = static_cast<std::uint32_t>(fd);
    query.info.info_len = sizeof info;
    query.info.info = reinterpret_cast<std::uint64_t>(&info);
    if (bpf_syscall(BPF_OBJ_GET_INFO_BY_FD, query) == 0 &&
        std::find(progs.begin(), progs.end(), info.prog_id) != progs.end()) {
      ++n;
    }
    close(fd);
  }
  return n;
}

// Polls `done` every 10 ms for up to `ms`; its last answer.
bool eventually(const std::function<bool()>& done, int ms = 10'000) {
  for (int waited = 0; waited < ms; waited += 10) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

TEST(ProbesWhoPays, attach_nothing_while_no_process_is_followed) {
  if (std::string(ZERNEL_FAKE_LIB_DIR).empty()) GTEST_SKIP() << "no ZERNEL_FAKE_LIB_DIR";
  GpuSyncProbes::Options o;
  o.phase_events = true;  // every program loaded
  auto r = GpuSyncProbes::open(o);
  if (!r) GTEST_SKIP() << r.error().message();
  auto& probes = *r.value();
  const std::vector<std::uint32_t> progs = own_program_ids();
  ASSERT_GE(progs.size(), 4U) << "the probes' programs are not among this process's descriptors";
  EXPECT_EQ(links_running(progs), 0U) << "programs of ours attached with no process followed";

  Child child(libcuda_child);
  ASSERT_EQ(child.expect(), 'L');
  auto attached = probes.attach_process_libraries(child.upid());
  ASSERT_TRUE(attached.ok()) << attached.error().message();
  if (probes.has_futex()) {
    ASSERT_TRUE(probes.track(child.upid()).ok());
  }
  ASSERT_TRUE(probes.set_phase_role(child.upid(), PhaseRole::rank).ok());
  EXPECT_GE(links_running(progs), 3U) << "exit, context switch and the child's uprobes";

  probes.forget(child.upid());
  (void)probes.untrack(child.upid());
  EXPECT_TRUE(eventually([&] { return links_running(progs) == 0; }))
      << links_running(progs) << " links left after the last followed process was forgotten";
}

// The sync kicks (bpf/probes/rules.bpf.h, SYNC KICKS) need phases from events and a kernel that
// lets a uprobe use a bpf_timer; $ZERNEL_TEST_NO_SYNC_KICKS=1 turns them off for tests. Whichever
// pair of sync programs is loaded, the GPU probes attach and count a sync.
TEST(ProbesSyncKicks, only_with_phases_from_events_and_off_under_the_test_switch) {
  if (std::string(ZERNEL_FAKE_LIB_DIR).empty()) GTEST_SKIP() << "no ZERNEL_FAKE_LIB_DIR";
  GpuSyncProbes::Options plain;
  auto r = GpuSyncProbes::open(plain);
  if (!r) GTEST_SKIP() << r.error().message();
  EXPECT_FALSE(r.value()->sync_kicks()) << "sync kicks without phases from events";

  ASSERT_EQ(::setenv("ZERNEL_TEST_NO_SYNC_KICKS", "1", 1), 0);
  GpuSyncProbes::Options events;
  events.phase_events = true;
  auto off = GpuSyncProbes::open(events);
  ::unsetenv("ZERNEL_TEST_NO_SYNC_KICKS");
  ASSERT_TRUE(off.ok()) << off.error().message();
  EXPECT_FALSE(off.value()->sync_kicks()) << "$ZERNEL_TEST_NO_SYNC_KICKS=1 ignored";
  EXPECT_TRUE(off.value()->has_phase_events());

  auto on = GpuSyncProbes::open(events);
  ASSERT_TRUE(on.ok()) << on.error().message();
  utsname u{};
  ASSERT_EQ(::uname(&u), 0);
  if (std::atoi(u.release) >= 7) {
    EXPECT_TRUE(on.value()->sync_kicks()) << "Linux " << u.release << " allows them";
  }
  EmulatedGpu gpu;
  for (GpuSyncProbes* probes : {off.value().get(), on.value().get()}) {
    Child child(sync_loop_child);
    ASSERT_EQ(child.expect(), 'L');
    auto attached = probes->attach_process_libraries(child.upid());
    ASSERT_TRUE(attached.ok()) << attached.error().message();
    ASSERT_TRUE(probes->set_phase_role(child.upid(), PhaseRole::rank).ok());
    const ProbeStats before = probes->stats();
    ASSERT_TRUE(child.send('G'));
    ASSERT_EQ(child.expect(), 'd');
    const ProbeStats after = probes->stats();
    EXPECT_EQ(after.sync_enter - before.sync_enter, kLoopCalls) << probes->sync_kicks();
    EXPECT_EQ(after.sync_return - before.sync_return, kLoopCalls) << probes->sync_kicks();
    // No scheduler follows the thread here (no sched_ext): nothing is kicked.
    EXPECT_EQ(after.sync_kicks, 0U);
    probes->forget(child.upid());
  }
}

// `perf_uprobes`: with one perf link per function (kernels before 6.6) instead of multi-uprobe
// links.
void expect_no_uprobe_hit_outside_the_followed_process(bool perf_uprobes) {
  if (std::string(ZERNEL_FAKE_LIB_DIR).empty()) GTEST_SKIP() << "no ZERNEL_FAKE_LIB_DIR";
  GpuSyncProbes::Options o;
  o.phase_events = true;
  o.perf_uprobes = perf_uprobes;
  auto r = GpuSyncProbes::open(o);
  if (!r) GTEST_SKIP() << r.error().message();
  auto& probes = *r.value();
  EmulatedGpu gpu;
  Child followed(sync_loop_child);
  Child other(sync_loop_child);
  ASSERT_EQ(followed.expect(), 'L');
  ASSERT_EQ(other.expect(), 'L');
  auto attached = probes.attach_process_libraries(followed.upid());
  ASSERT_TRUE(attached.ok()) << attached.error().message();
  ASSERT_EQ(*attached, 1U);
  (void)probes.read(followed.upid(), monotonic_ns());
  (void)probes.read(other.upid(), monotonic_ns());
  const ProbeStats before = probes.stats();
  ASSERT_TRUE(other.send('G'));
  ASSERT_EQ(other.expect(), 'd');
  ASSERT_TRUE(followed.send('G'));
  ASSERT_EQ(followed.expect(), 'd');
  const ProbeStats after = probes.stats();
  // Every sync of the followed process, none of the other's (which maps the same file).
  EXPECT_EQ(after.sync_enter - before.sync_enter, kLoopCalls);
  EXPECT_EQ(after.sync_return - before.sync_return, kLoopCalls);
  auto mine = probes.read(followed.upid(), monotonic_ns());
  auto its = probes.read(other.upid(), monotonic_ns());
  ASSERT_TRUE(mine.ok() && its.ok());
  EXPECT_EQ(mine->sync_count_delta, kLoopCalls);
  EXPECT_EQ(its->sync_count_delta, 0U);
  EXPECT_EQ(its->last_sync_return_ns, 0U);
}

TEST(ProbesWhoPays, an_unfollowed_cuda_process_takes_no_uprobe_hit) {
  expect_no_uprobe_hit_outside_the_followed_process(false);
}

TEST(ProbesWhoPays, an_unfollowed_cuda_process_takes_no_uprobe_hit_with_perf_links) {
  expect_no_uprobe_hit_outside_the_followed_process(true);
}

TEST(ProbesWhoPays, gives_no_task_storage_to_threads_of_processes_nobody_follows) {
  if (std::string(ZERNEL_FAKE_LIB_DIR).empty()) GTEST_SKIP() << "no ZERNEL_FAKE_LIB_DIR";
  GpuSyncProbes::Options o;
  o.phase_events = true;
  auto r = GpuSyncProbes::open(o);
  if (!r) GTEST_SKIP() << r.error().message();
  auto& probes = *r.value();
  if (!probes.has_phase_events()) GTEST_SKIP() << probes.phase_events_error()->message();
  Child followed(burn_step_child);
  Child other(futex_child);
  ASSERT_EQ(followed.expect(), 'L');
  ASSERT_TRUE(probes.set_phase_role(followed.upid(), PhaseRole::rank).ok());
  if (probes.has_futex()) {
    ASSERT_TRUE(probes.track(followed.upid()).ok());
  }
  // The other process: futex waits that return at once and timed ones that sleep, and a
  // context switch at every command it waits for; the followed one sleeps and runs too.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(other.send('W'));
    ASSERT_EQ(other.expect(), 'w');
    ASSERT_TRUE(other.send('C'));
    ASSERT_EQ(other.expect(), 'c');
    ASSERT_TRUE(followed.send('G'));
    ASSERT_EQ(followed.expect(), 'd');
  }
  // Task storage looked up by pidfd (the main thread of each).
  auto has_storage = [&](pid_t pid) {
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (pidfd < 0) return -errno;
    std::uint8_t value[256] = {};
    bpf_attr attr{};
    attr.map_fd = static_cast<std::uint32_t>(probes.phase_map_fd());
    attr.key = reinterpret_cast<std::uint64_t>(&pidfd);
    attr.value = reinterpret_cast<std::uint64_t>(value);
    const long rc = bpf_syscall(BPF_MAP_LOOKUP_ELEM, attr);
    const int err = rc == 0 ? 0 : errno;
    close(pidfd);
    return rc == 0 ? 1 : err == ENOENT ? 0 : -err;
  };
  EXPECT_EQ(has_storage(followed.pid()), 1) << "the followed rank's main thread has state";
  EXPECT_EQ(has_storage(other.pid()), 0) << "a thread of a process nobody follows got storage";
}

// ---------------------------------------------------------------------------------------------
// Cost (docs/probes.md). Not a check, a measurement: run it by hand with
//   zernel_unit_tests --gtest_also_run_disabled_tests --gtest_filter='Probes.DISABLED_*'
// Each figure is the best of 7 rounds (the machine is shared), in ns per call.

double best_ns_per_call(int calls, const std::function<void()>& call) {
  double best = 1e18;
  for (int round = 0; round < 7; ++round) {
    const std::uint64_t t0 = monotonic_ns();
    for (int i = 0; i < calls; ++i) call();
    const std::uint64_t t1 = monotonic_ns();
    best = std::min(best, static_cast<double>(t1 - t0) / calls);
  }
  return best;
}

TEST_F(Probes, DISABLED_measure_costs) {
  EmulatedGpu gpu;
  std::uint32_t word = 1;
  const int kFutexCalls = 200'000;
  auto futex_wait = [&] { futex(&word, FUTEX_WAIT_PRIVATE, 0); };  // EAGAIN at once
  auto futex_wake = [&] { futex(&word, FUTEX_WAKE_PRIVATE, 1); };
  auto other_syscall = [] { syscall(SYS_getppid); };  // any syscall: the tracepoint's side cost

  void* lib = dlopen(fake_libcuda().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr);
  using Handle = void*;
  auto init = reinterpret_cast<int (*)(unsigned)>(dlsym(lib, "cuInit"));
  auto ctx_create = reinterpret_cast<int (*)(Handle*, unsigned, int)>(dlsym(lib, "cuCtxCreate_v2"));
  auto ctx_destroy = reinterpret_cast<int (*)(Handle)>(dlsym(lib, "cuCtxDestroy_v2"));
  auto stream_create = reinterpret_cast<int (*)(Handle*, unsigned)>(dlsym(lib, "cuStreamCreate"));
  auto stream_sync = reinterpret_cast<int (*)(Handle)>(dlsym(lib, "cuStreamSynchronize"));
  Handle ctx = nullptr;
  Handle stream = nullptr;
  ASSERT_EQ(init(0), 0);
  ASSERT_EQ(ctx_create(&ctx, 0, 0), 0);
  ASSERT_EQ(stream_create(&stream, 0), 0);
  const int kSyncCalls = 100'000;
  auto sync = [&] { stream_sync(stream); };  // nothing queued: returns at once

  const auto self = static_cast<std::uint32_t>(getpid());
  const bool multi = probes_->uprobe_multi();
  // Loaded, nothing followed; then this process followed (uprobes in it, futex waits counted).
  const double sync_loaded = best_ns_per_call(kSyncCalls, sync);
  std::uint64_t t0 = monotonic_ns();
  auto attached = probes_->attach_library(self, fake_libcuda());
  const std::uint64_t attach_ns = monotonic_ns() - t0;
  ASSERT_TRUE(attached.ok()) << attached.error().message();
  ASSERT_TRUE(probes_->track(self).ok());
  const double sync_probed = best_ns_per_call(kSyncCalls, sync);
  const double wait_followed = best_ns_per_call(kFutexCalls, futex_wait);
  t0 = monotonic_ns();
  auto s = probes_->read(self, t0);
  for (int i = 0; i < 999; ++i) s = probes_->read(self, t0);
  const double read_ns = static_cast<double>(monotonic_ns() - t0) / 1000;
  ASSERT_TRUE(s.ok());
  t0 = monotonic_ns();
  probes_->forget(self);  // hands the detaches to the background thread
  const std::uint64_t forget_ns = monotonic_ns() - t0;
  probes_->settle();
  const std::uint64_t detach_ns = monotonic_ns() - t0;

  t0 = monotonic_ns();
  probes_.reset();
  const std::uint64_t close_ns = monotonic_ns() - t0;
  const double wait_none = best_ns_per_call(kFutexCalls, futex_wait);
  const double wake_none = best_ns_per_call(kFutexCalls, futex_wake);
  const double other_none = best_ns_per_call(kFutexCalls, other_syscall);
  const double sync_none = best_ns_per_call(kSyncCalls, sync);
  t0 = monotonic_ns();
  auto reopened = GpuSyncProbes::open();
  const std::uint64_t open_ns = monotonic_ns() - t0;
  ASSERT_TRUE(reopened.ok());
  reopened.value().reset();

  std::printf("futex(FUTEX_WAIT, EAGAIN): %.0f ns no probes, %.0f followed and tracked\n",
              wait_none, wait_followed);
  std::printf("futex(FUTEX_WAKE, none): %.0f ns; getppid(): %.0f ns (no probes)\n", wake_none,
              other_none);
  std::printf("cuStreamSynchronize (idle): %.0f ns no probes, %.0f loaded, %.0f followed\n",
              sync_none, sync_loaded, sync_probed);
  std::printf(
      "read(pid): %.0f ns; open: %.1f ms; attach_library in one process (%s): %.1f ms; "
      "forget: %.2f ms, its detach done after %.1f ms; close: %.1f ms\n",
      read_ns, static_cast<double>(open_ns) / 1e6,
      multi ? "multi-uprobe links" : "a perf link per function",
      static_cast<double>(attach_ns) / 1e6, static_cast<double>(forget_ns) / 1e6,
      static_cast<double>(detach_ns) / 1e6, static_cast<double>(close_ns) / 1e6);
  ctx_destroy(ctx);
  dlclose(lib);
}

// ---------------------------------------------------------------------------------------------
// Phases from events (probes/rules.bpf.h, "PHASES FROM EVENTS"): the rules on real threads.

// PhaseEvent::phase values (policy::Phase) and a cause as the event carries it.
constexpr std::uint8_t kData = 0;
constexpr std::uint8_t kGpu = 1;
constexpr std::uint8_t kNccl = 2;
constexpr std::uint8_t kOpt = 3;
constexpr std::uint8_t kUnknown = 4;
constexpr std::uint8_t cause(PhaseCause c) { return static_cast<std::uint8_t>(c); }

// Waits (1 s at most) until the process's state is S: a child that replied is then asleep in
// its read() for the next command, so that command ends a data wait (sent earlier, under load,
// it is read without sleeping, and the step makes no change).
bool wait_asleep(pid_t pid) {
  for (int i = 0; i < 10'000; ++i) {
    const auto st = test_support::read_proc_stat(pid);
    if (!st) return false;
    if (st->state == 'S') return true;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return false;
}

class PhaseEvents : public ::testing::Test {
 protected:
  static constexpr std::uint64_t kIdleHyst = 10 * kMs;
  void SetUp() override {
    if (std::string(ZERNEL_FAKE_LIB_DIR).empty()) GTEST_SKIP() << "no ZERNEL_FAKE_LIB_DIR";
    GpuSyncProbes::Options o;
    o.phase_events = true;
    o.sync_hysteresis_ns = 10 * kMs;  // the default; a 0.5 ms sync can take ms when busy
    o.idle_hysteresis_ns = kIdleHyst;  // a 0.3 ms nap can take milliseconds on a busy machine
    o.optimizer_max_ns = 50 * kMs;
    auto r = GpuSyncProbes::open(o);
    if (!r) GTEST_SKIP() << r.error().message();
    probes_ = std::move(r.value());
    if (!probes_->has_phase_events()) GTEST_SKIP() << probes_->phase_events_error()->message();
  }

  // The GPU probes in a child that has loaded the emulated libcuda.
  void attach(const Child& child) {
    auto a = probes_->attach_process_libraries(child.upid());
    ASSERT_TRUE(a.ok()) << a.error().message();
    ASSERT_EQ(*a, 1U);
  }

  // The changes of pid's main thread drained so far.
  std::vector<PhaseEvent> main_thread_events(std::uint32_t pid) {
    probes_->drain_phase_events(all_);
    std::vector<PhaseEvent> out;
    for (const PhaseEvent& e : all_) {
      if (e.tgid == pid && e.tid == pid) out.push_back(e);
    }
    return out;
  }

  // A rank's step child ('L' once loaded, 'G' runs the step, 'D' (or 'E', a variant the child
  // chose, returned in *done) before it blocks in read()): named a rank while it is asleep in
  // read() for 'G', one step, and its main thread's changes from its first GpuCompute on until
  // the data wait shows. That wait for 'G' is seen from the naming (FIRST SIGHT in
  // probes/rules.bpf.h): DataLoading, then GpuCompute (data_arrived) when 'G' wakes it, which is
  // where seq begins. Callers wrap it in ASSERT_NO_FATAL_FAILURE.
  void run_rank_step(Child& child, std::vector<PhaseEvent>& seq, char* done = nullptr) {
    ASSERT_EQ(child.expect(), 'L');
    ASSERT_NO_FATAL_FAILURE(attach(child));
    ASSERT_TRUE(wait_asleep(child.pid()));
    ASSERT_TRUE(probes_->set_phase_role(child.upid(), PhaseRole::rank).ok());
    ASSERT_TRUE(child.send('G'));
    const char reply = child.expect(20'000);
    ASSERT_TRUE(reply == 'D' || (done != nullptr && reply == 'E')) << reply;
    if (done != nullptr) *done = reply;
    std::vector<PhaseEvent> ev;
    for (int i = 0; i < 200; ++i) {  // until the data wait shows (the child blocks after 'D')
      ev = main_thread_events(child.upid());
      if (!ev.empty() && ev.back().phase == kData) break;
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_GE(ev.size(), 2U) << describe(ev);
    EXPECT_EQ(ev[0].phase, kData) << describe(ev);
    EXPECT_EQ(ev[0].cause, cause(PhaseCause::data_wait)) << describe(ev);
    seq.assign(ev.begin() + 1, ev.end());
  }

  // seq is want, (phase, cause) by (phase, cause), and its times never go back.
  static void expect_sequence(const std::vector<PhaseEvent>& seq,
                              const std::vector<std::pair<std::uint8_t, std::uint8_t>>& want) {
    ASSERT_EQ(seq.size(), want.size()) << describe(seq);
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(seq[i].phase, want[i].first) << i << ": " << describe(seq);
      EXPECT_EQ(seq[i].cause, want[i].second) << i << ": " << describe(seq);
    }
    for (std::size_t i = 1; i < seq.size(); ++i) EXPECT_GE(seq[i].t_ns, seq[i - 1].t_ns) << i;
  }

  // Three steps of `child` (burn_step_child, a process no role names: its thread sleeps and
  // wakes) give no event; named a rank, its next step's wait for the command (a read()) is a
  // data wait. Callers wrap it in ASSERT_NO_FATAL_FAILURE.
  void expect_followed_once_named(Child& child) {
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(child.send('G'));
      ASSERT_EQ(child.expect(), 'd');
    }
    EXPECT_TRUE(main_thread_events(child.upid()).empty());
    ASSERT_TRUE(probes_->set_phase_role(child.upid(), PhaseRole::rank).ok());
    ASSERT_TRUE(child.send('G'));
    ASSERT_EQ(child.expect(), 'd');
    std::this_thread::sleep_for(20ms);
    EXPECT_FALSE(main_thread_events(child.upid()).empty());
  }

  // Three steps of `child` (burn_step_child) after what came before is dropped: no change of its
  // main thread. Callers wrap it in ASSERT_NO_FATAL_FAILURE.
  void expect_quiet_steps(Child& child) {
    (void)main_thread_events(child.upid());
    all_.clear();
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(child.send('G'));
      ASSERT_EQ(child.expect(), 'd');
    }
    std::this_thread::sleep_for(20ms);
    EXPECT_TRUE(main_thread_events(child.upid()).empty())
        << describe(main_thread_events(child.upid()));
  }

  static std::string describe(const std::vector<PhaseEvent>& events) {
    std::string s;
    for (const PhaseEvent& e : events) {
      s += std::to_string(e.phase) + "/" + std::to_string(e.cause) + " ";
    }
    return s;
  }

  std::unique_ptr<GpuSyncProbes> probes_;
  std::vector<PhaseEvent> all_;
};

// A rank's step: GPU work (its sync starts GpuCompute), a collective on an nccl-* segment, an
// optimizer with a short and a long sync, too long a CPU burst, then a wait for the next command
// (a pipe read: a data wait).
int rank_step_child(int cmd, int rep) {
  const FakeCudaStream gpu;
  if (!gpu.ok()) return Child::reply(rep, 'F'), 1;
  const std::string shm = "/nccl-zernel-test-" + std::to_string(getpid());
  const int fd = shm_open(shm.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, 4096) != 0) return Child::reply(rep, 'F'), 1;
  void* seg = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  shm_unlink(shm.c_str());
  if (seg == MAP_FAILED) return Child::reply(rep, 'F'), 1;
  auto* word = static_cast<std::uint32_t*>(seg);
  Child::reply(rep, 'L');
  if (Child::next(cmd) != 'G') return 1;
  if (!gpu.work(30 * kMs)) return Child::reply(rep, 'F'), 1;  // GpuCompute, then OptimizerStep
  burn_cpu(3 * kMs);
  for (int i = 0; i < 2; ++i) {  // two timed waits of a collective: NcclCollective, back
    const timespec ten_ms{0, 10'000'000};
    futex(word, FUTEX_WAIT, 0, &ten_ms);
  }
  burn_cpu(3 * kMs);
  const std::uint64_t t0 = monotonic_ns();
  if (!gpu.work(kMs / 2)) return Child::reply(rep, 'F'), 1;  // short: stays OptimizerStep
  const bool slow = monotonic_ns() - t0 >= 9 * kMs;          // a loaded machine made it a long one
  burn_cpu(3 * kMs);
  if (!gpu.work(40 * kMs)) return Child::reply(rep, 'F'), 1;  // long: GpuCompute from its entry
  burn_cpu(60 * kMs);                                         // beyond the 50 ms bound
  Child::reply(rep, slow ? 'E' : 'D');
  Child::next(cmd);  // blocks in read(): a data wait
  return 0;
}

TEST_F(PhaseEvents, follows_a_rank_through_gpu_work_a_collective_and_the_optimizer) {
  Child child(rank_step_child);
  std::vector<PhaseEvent> seq;
  char done = 0;
  ASSERT_NO_FATAL_FAILURE(run_rank_step(child, seq, &done));
  std::vector<std::pair<std::uint8_t, std::uint8_t>> want = {
      {kGpu, cause(PhaseCause::data_arrived)},        {kOpt, cause(PhaseCause::sync_return)},
      {kNccl, cause(PhaseCause::nccl_wait)},          {kOpt, cause(PhaseCause::nccl_done)},
      {kNccl, cause(PhaseCause::nccl_wait)},          {kOpt, cause(PhaseCause::nccl_done)},
      {kGpu, cause(PhaseCause::long_sync)},           {kOpt, cause(PhaseCause::sync_return)},
      {kUnknown, cause(PhaseCause::optimizer_bound)}, {kData, cause(PhaseCause::data_wait)}};
  // The 0.5 ms sync lasted 9 ms or more (a loaded machine, the child's 'E'): if the rules saw
  // the 10 ms hysteresis pass, it was a long one too.
  std::size_t long_one = 6;
  if (done == 'E' && seq.size() == want.size() + 2) {
    want.insert(want.begin() + 6,
                {{kGpu, cause(PhaseCause::long_sync)}, {kOpt, cause(PhaseCause::sync_return)}});
    long_one = 8;
  }
  ASSERT_NO_FATAL_FAILURE(expect_sequence(seq, want));
  // Times are the events' own: the first sync lasted its 30 ms of GPU work, the long one its 40,
  // dated from its entry although it was committed at its return.
  EXPECT_GE(seq[1].t_ns - seq[0].t_ns, 29 * kMs);
  EXPECT_GE(seq[long_one + 1].t_ns - seq[long_one].t_ns, 39 * kMs);
}

// A step, then an optimizer step of `optimizer_ns` of CPU, then a 30 ms wait for the next batch
// in a futex on `word` (the pin-memory thread's queue), that batch's forward pass (2 ms) and its
// sync: GpuCompute, OptimizerStep, DataLoading, GpuCompute, OptimizerStep. False when a sync
// failed.
bool step_after_a_batch_wait(const FakeCudaStream& gpu, std::uint32_t* word,
                             std::uint64_t optimizer_ns) {
  if (!gpu.work(5 * kMs)) return false;  // GpuCompute, then OptimizerStep
  burn_cpu(optimizer_ns);
  const timespec batch{0, 30'000'000};  // the wait for the batch: 30 ms
  futex(word, FUTEX_WAIT_PRIVATE, 0, &batch);
  burn_cpu(2 * kMs);         // forward: GpuCompute
  return gpu.work(5 * kMs);  // then OptimizerStep
}

// pin_memory=True: after its optimizer step the driver waits for its batch in a futex (the
// pin-memory thread's queue), which says nothing of what it waits for. A wait of 10 ms or more is
// a batch's: DataLoading from when it fell asleep, then GpuCompute, both known when it wakes; a
// shorter one (the GIL's, a lock's) changes nothing.
int pinned_batch_child(int cmd, int rep) {
  const FakeCudaStream gpu;
  if (!gpu.ok()) return Child::reply(rep, 'F'), 1;
  std::uint32_t word = 0;
  Child::reply(rep, 'L');
  if (Child::next(cmd) != 'G') return 1;
  if (!step_after_a_batch_wait(gpu, &word, 2 * kMs)) return Child::reply(rep, 'F'), 1;
  const timespec gil{0, 1'000'000};                          // a short wait: nothing
  const std::uint64_t t0 = monotonic_ns();
  futex(&word, FUTEX_WAIT_PRIVATE, 0, &gil);
  const bool slow = monotonic_ns() - t0 >= 9 * kMs;  // a loaded machine made it a long one
  burn_cpu(2 * kMs);
  Child::reply(rep, slow ? 'E' : 'D');
  Child::next(cmd);  // blocks in read(): a data wait
  return 0;
}

TEST_F(PhaseEvents, a_long_futex_wait_after_the_optimizer_step_is_a_wait_for_a_batch) {
  Child child(pinned_batch_child);
  std::vector<PhaseEvent> seq;
  char done = 0;
  ASSERT_NO_FATAL_FAILURE(run_rank_step(child, seq, &done));
  std::vector<std::pair<std::uint8_t, std::uint8_t>> want = {
      {kGpu, cause(PhaseCause::data_arrived)}, {kOpt, cause(PhaseCause::sync_return)},
      {kData, cause(PhaseCause::batch_wait)},  {kGpu, cause(PhaseCause::data_arrived)},
      {kOpt, cause(PhaseCause::sync_return)},  {kData, cause(PhaseCause::data_wait)}};
  // The 1 ms wait lasted 9 ms or more (a loaded machine, the child's 'E'): if the rules saw 10
  // ms or more, it was a batch's too.
  if (done == 'E' && seq.size() == want.size() + 2) {
    want.insert(want.end() - 1,
                {{kData, cause(PhaseCause::batch_wait)}, {kGpu, cause(PhaseCause::data_arrived)}});
  }
  ASSERT_NO_FATAL_FAILURE(expect_sequence(seq, want));
  // DataLoading is dated from when it fell asleep: the 30 ms wait lies between the two.
  EXPECT_GE(seq[3].t_ns - seq[2].t_ns, 29 * kMs) << describe(seq);
}

// A driver whose batch is ready when it asks for it goes from its optimizer step into the next
// step's forward pass without an event the probes see. Once a wait for data has shown how long
// its optimizer step lasts (3 ms here), a sync entered long past that length ends the step where
// the length says: GpuCompute from then (optimizer_end), not OptimizerStep until the sync.
int ready_batch_child(int cmd, int rep) {
  const FakeCudaStream gpu;
  if (!gpu.ok()) return Child::reply(rep, 'F'), 1;
  std::uint32_t word = 0;
  Child::reply(rep, 'L');
  if (Child::next(cmd) != 'G') return 1;
  // The wait that ends the first optimizer step is where its length is learned.
  if (!step_after_a_batch_wait(gpu, &word, 3 * kMs)) return Child::reply(rep, 'F'), 1;
  burn_cpu(3 * kMs);                                         // the optimizer step
  burn_cpu(30 * kMs);  // the next batch was ready: no wait, its forward pass
  if (!gpu.work(5 * kMs)) return Child::reply(rep, 'F'), 1;  // GpuCompute from 3 ms in
  Child::reply(rep, 'D');
  Child::next(cmd);  // blocks in read(): a data wait
  return 0;
}

TEST_F(PhaseEvents, a_sync_long_after_the_learned_optimizer_length_ends_the_step_there) {
  Child child(ready_batch_child);
  std::vector<PhaseEvent> seq;
  ASSERT_NO_FATAL_FAILURE(run_rank_step(child, seq));
  ASSERT_NO_FATAL_FAILURE(expect_sequence(seq, {{kGpu, cause(PhaseCause::data_arrived)},
                                                {kOpt, cause(PhaseCause::sync_return)},
                                                {kData, cause(PhaseCause::batch_wait)},
                                                {kGpu, cause(PhaseCause::data_arrived)},
                                                {kOpt, cause(PhaseCause::sync_return)},
                                                {kGpu, cause(PhaseCause::optimizer_end)},
                                                {kOpt, cause(PhaseCause::sync_return)},
                                                {kData, cause(PhaseCause::data_wait)}}));
  // The length learned is the first optimizer step's (from the sync's return to the futex
  // wait: 3 ms of CPU, and the wall time that took), kept in microseconds; the second step is
  // taken to end that long after it began. GpuCompute then spans the 30 ms forward pass and the
  // sync.
  const std::uint64_t opt_ns = seq[2].t_ns - seq[1].t_ns;
  EXPECT_EQ(seq[5].t_ns - seq[4].t_ns, opt_ns / 1000 * 1000) << describe(seq);
  EXPECT_GE(seq[6].t_ns - seq[5].t_ns, 30 * kMs) << describe(seq);
}

// A driver whose DataLoader keeps up: its batch is ready when it asks, and taking it sends an
// idle worker (a process it forked, asleep on its index pipe) the next index, which wakes it.
// That wake, while the driver is in OptimizerStep, is where the forward pass begins: GpuCompute
// (batch_taken), not OptimizerStep until the sync. A worker woken while the driver is in
// GpuCompute (its forward pass) changes nothing of the driver's.
int batch_taken_child(int cmd, int rep) {
  const FakeCudaStream gpu;
  if (!gpu.ok()) return Child::reply(rep, 'F'), 1;
  int index[2];
  if (pipe(index) != 0) return Child::reply(rep, 'F'), 1;
  const pid_t worker = fork();
  if (worker < 0) return Child::reply(rep, 'F'), 1;
  if (worker == 0) {  // the worker: idle in read() on its index pipe; 2 ms of work an index
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(cmd);
    close(rep);
    close(index[1]);
    char c = 0;
    while (read(index[0], &c, 1) == 1) burn_cpu(2 * kMs);
    _exit(0);
  }
  close(index[0]);
  Child::reply(rep, 'L');
  if (Child::next(cmd) != 'G') return 1;
  if (!gpu.work(5 * kMs)) return Child::reply(rep, 'F'), 1;  // GpuCompute, then OptimizerStep
  burn_cpu(3 * kMs);                                         // the optimizer step
  const bool sent = write(index[1], "i", 1) == 1;   // next(): the batch was ready; the next index
  burn_cpu(15 * kMs);                               // the forward pass, GpuCompute
  const bool again = write(index[1], "i", 1) == 1;  // a worker woken in GpuCompute: nothing
  burn_cpu(15 * kMs);
  if (!sent || !again || !gpu.work(5 * kMs)) return Child::reply(rep, 'F'), 1;
  Child::reply(rep, 'D');
  Child::next(cmd);  // blocks in read(): a data wait
  return 0;
}

TEST_F(PhaseEvents, an_idle_worker_woken_in_the_optimizer_step_starts_the_forward_pass) {
  Child child(batch_taken_child);
  for (int i = 0; i < 1000 && !child.reply_ready(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(child.reply_ready());  // 'L', left for run_rank_step: the worker is forked
  // The worker, named as such while it idles: its first wake is seen as the end of an idle sleep
  // begun at the naming (FIRST SIGHT), 20 ms and more before the rank writes its index.
  std::vector<std::uint32_t> children;
  for (int i = 0; i < 100 && children.empty(); ++i) {
    if (!read_main_thread_children("/proc", child.upid(), children) || children.empty())
      std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(children.size(), 1U);
  const std::uint32_t worker = children[0];
  ASSERT_TRUE(wait_asleep(static_cast<pid_t>(worker)));
  ASSERT_TRUE(probes_->set_phase_role(worker, PhaseRole::worker).ok());
  std::this_thread::sleep_for(20ms);
  std::vector<PhaseEvent> seq;
  ASSERT_NO_FATAL_FAILURE(run_rank_step(child, seq));
  ASSERT_NO_FATAL_FAILURE(expect_sequence(seq, {{kGpu, cause(PhaseCause::data_arrived)},
                                                {kOpt, cause(PhaseCause::sync_return)},
                                                {kGpu, cause(PhaseCause::batch_taken)},
                                                {kOpt, cause(PhaseCause::sync_return)},
                                                {kData, cause(PhaseCause::data_wait)}}));
  // GpuCompute from the worker's wake: the 30 ms forward pass and the 5 ms sync after it.
  EXPECT_GE(seq[3].t_ns - seq[2].t_ns, 30 * kMs) << describe(seq);
  // The worker woke from its idle sleep (Unknown, then DataLoading), and in a quiet run from a
  // second one during the forward pass (a busy machine may hold its 2 ms of work off its CPU
  // until the second index is there, and then it never idled): no change of the driver's.
  std::size_t wakes = 0;
  for (const PhaseEvent& e : all_) {
    if (e.tgid == worker && e.phase == kData && e.cause == cause(PhaseCause::worker_run)) ++wakes;
  }
  EXPECT_GE(wakes, 1U) << describe(all_);
  EXPECT_LE(wakes, 2U) << describe(all_);
}

// A DataLoader worker: producing while it runs, idle (from when it fell asleep) once a sleep
// outlasts the hysteresis; a short sleep changes nothing.
TEST_F(PhaseEvents, marks_a_worker_idle_only_after_a_sleep_longer_than_the_hysteresis) {
  Child child([](int cmd, int rep) {
    Child::reply(rep, 'L');
    for (char c = Child::next(cmd); c == 'G'; c = Child::next(cmd)) {
      burn_cpu(5 * kMs);
      const timespec short_nap{0, 300'000};  // 0.3 ms: well within the 10 ms hysteresis
      nanosleep(&short_nap, nullptr);
      burn_cpu(5 * kMs);
      Child::reply(rep, 'd');
    }
    return 0;
  });
  ASSERT_EQ(child.expect(), 'L');
  ASSERT_TRUE(probes_->set_phase_role(child.upid(), PhaseRole::worker).ok());
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(child.send('G'));
    ASSERT_EQ(child.expect(), 'd');
    std::this_thread::sleep_for(30ms);  // the worker idles in read()
  }
  ASSERT_TRUE(child.send('G'));
  ASSERT_EQ(child.expect(), 'd');
  std::this_thread::sleep_for(20ms);
  const std::vector<PhaseEvent> ev = main_thread_events(child.upid());
  // Each 30 ms idle period: Unknown from its start, DataLoading from the wake-up (the first
  // period may precede the role); nothing for the 0.3 ms naps. The idle span is at least the
  // hysteresis (stamped at the wake-up it would be ~0), not the parent's 30 ms: the child may
  // be held off its CPU between its reply and its read() on a busy machine (14 ms once, in a
  // -j2 run beside a VM).
  std::size_t idle = 0;
  for (std::size_t i = 0; i < ev.size(); ++i) {
    if (ev[i].phase != kUnknown) continue;
    EXPECT_EQ(ev[i].cause, cause(PhaseCause::worker_idle)) << describe(ev);
    ASSERT_LT(i + 1, ev.size()) << describe(ev);
    EXPECT_EQ(ev[i + 1].phase, kData) << describe(ev);
    EXPECT_GE(ev[i + 1].t_ns - ev[i].t_ns, kIdleHyst) << describe(ev);
    ++idle;
  }
  EXPECT_GE(idle, 3U) << describe(ev);
  EXPECT_LE(ev.size(), 2 * idle + 1) << describe(ev);
}

TEST_F(PhaseEvents, ignores_processes_without_a_role_and_stops_after_forget) {
  Child child(burn_step_child);
  ASSERT_EQ(child.expect(), 'L');
  ASSERT_NO_FATAL_FAILURE(expect_followed_once_named(child));
  probes_->forget(child.upid());
  // Forgotten: its bit in zernel_follow is clear (no other followed process shares it here), so
  // its thread's state stays but no program looks at it: its next steps make no change.
  ASSERT_NO_FATAL_FAILURE(expect_quiet_steps(child));
  // Named again, it is followed again from its next step.
  ASSERT_TRUE(probes_->set_phase_role(child.upid(), PhaseRole::rank).ok());
  ASSERT_TRUE(child.send('G'));
  ASSERT_EQ(child.expect(), 'd');
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(main_thread_events(child.upid()).empty());
}

// While the sched_ext scheduler carries the context-switch rules (set_switch_carried(true):
// bpf/probes.bpf.c, WHERE THE SWITCH RULES RUN) the probes' sched_switch program is detached, also
// when the first process is followed anew: a named rank's waits make no change here (this host
// runs no such scheduler), while the thread-exit program stays. Given back, the tracepoint is
// attached again and the next step's wait is a change again. shared_maps() names every map the
// scheduler takes, the rules' data sections among them.
TEST_F(PhaseEvents, leaves_the_context_switch_to_a_scheduler_that_carries_the_rules) {
  std::set<std::string> names;
  for (const auto& m : probes_->shared_maps()) {
    EXPECT_GE(m.fd, 0) << m.name;
    names.insert(m.name);
  }
  for (const char* want : {"zernel_phase_threads", "zernel_phase_procs", "zernel_phase_events",
                           "zernel_probe_futex", ".data.zprobe", ".rodata.zprobe"}) {
    EXPECT_TRUE(names.contains(want)) << want;
  }
  Child child(burn_step_child);
  ASSERT_EQ(child.expect(), 'L');
  ASSERT_NO_FATAL_FAILURE(expect_followed_once_named(child));
  probes_->set_switch_carried(true);
  probes_->settle();
  EXPECT_TRUE(probes_->switch_carried());
  EXPECT_TRUE(probes_->attached());  // thread exit stays attached
  ASSERT_NO_FATAL_FAILURE(expect_quiet_steps(child));
  // Forgotten and named again (the every-task programs detached and attached anew): still quiet.
  probes_->forget(child.upid());
  probes_->settle();
  EXPECT_FALSE(probes_->attached());
  ASSERT_TRUE(probes_->set_phase_role(child.upid(), PhaseRole::rank).ok());
  ASSERT_NO_FATAL_FAILURE(expect_quiet_steps(child));
  // Given back: the tracepoint runs the rules again from the next step.
  probes_->set_switch_carried(false);
  EXPECT_FALSE(probes_->switch_carried());
  ASSERT_TRUE(child.send('G'));
  ASSERT_EQ(child.expect(), 'd');
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(main_thread_events(child.upid()).empty());
}

// With some process named, a thread of another process keeps "no role" in its storage; naming
// its process later (the generation moves) must still make its next event count.
TEST_F(PhaseEvents, follows_a_process_named_after_its_threads_were_seen_untracked) {
  Child named(burn_step_child);
  ASSERT_EQ(named.expect(), 'L');
  ASSERT_TRUE(probes_->set_phase_role(named.upid(), PhaseRole::rank).ok());
  Child child(burn_step_child);
  ASSERT_EQ(child.expect(), 'L');
  // Its first steps cache "no role" in its thread's storage; naming it must still count.
  ASSERT_NO_FATAL_FAILURE(expect_followed_once_named(child));
}

// A rank named while its main thread is already asleep (no switch-out of it was seen with the
// role): its first switch-in after the naming reads the call it slept in, and the sleep counts
// from the naming. Each case's child puts its thread to sleep before the naming and wakes about
// 100 ms later (a read() that the parent's command ends, or a futex wait that times out); the
// thread then works 2 ms and blocks in read() again (a data wait).
int asleep_in_futex_child(int cmd, int rep) {
  std::uint32_t word = 0;
  Child::reply(rep, 'L');
  const timespec batch{0, 100'000'000};  // a wait for a batch: 100 ms, ended by its timeout
  futex(&word, FUTEX_WAIT_PRIVATE, 0, &batch);
  burn_cpu(2 * kMs);
  Child::reply(rep, 'd');
  Child::next(cmd);  // blocks in read(): a data wait
  return 0;
}

TEST_F(PhaseEvents, a_thread_asleep_when_its_process_is_named_is_seen_from_the_naming) {
  struct Case {
    const char* what;
    Child::Body body;
    std::uint8_t first_cause;
    bool parent_wakes;  // the sleep is a read() that the parent's 'G' ends
  };
  const Case cases[] = {
      {"a data wait", burn_step_child, cause(PhaseCause::data_wait), true},
      {"a batch's futex wait", asleep_in_futex_child, cause(PhaseCause::batch_wait), false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    all_.clear();
    Child child(c.body);
    ASSERT_EQ(child.expect(), 'L');
    ASSERT_TRUE(wait_asleep(child.pid()));
    const std::uint64_t before = monotonic_ns();
    ASSERT_TRUE(probes_->set_phase_role(child.upid(), PhaseRole::rank).ok());
    const std::uint64_t after = monotonic_ns();
    if (c.parent_wakes) {
      std::this_thread::sleep_for(100ms);
      ASSERT_TRUE(child.send('G'));
    }
    ASSERT_EQ(child.expect(), 'd');
    std::vector<PhaseEvent> ev;
    for (int i = 0; i < 200; ++i) {  // until the data wait after the work shows
      ev = main_thread_events(child.upid());
      if (ev.size() >= 3) break;
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_NO_FATAL_FAILURE(expect_sequence(ev, {{kData, c.first_cause},
                                                 {kGpu, cause(PhaseCause::data_arrived)},
                                                 {kData, cause(PhaseCause::data_wait)}}));
    // DataLoading from the naming (read between `before` and `after`), GpuCompute at the wake.
    EXPECT_GE(ev[0].t_ns, before) << describe(ev);
    EXPECT_LE(ev[0].t_ns, after) << describe(ev);
    EXPECT_GE(ev[1].t_ns - ev[0].t_ns, 50 * kMs) << describe(ev);
    if (c.parent_wakes) {
      ASSERT_TRUE(child.send('Q'));
    }
  }
}

// A rank's futex waits on a word of an nccl-* segment: private ones ('P') are never checked for
// the segment (a private futex cannot be NCCL's shared one: no VMA walk, no NcclCollective);
// shared ones ('S') are, each a check and an NcclCollective wait. 20 timed waits of 2 ms each.
int nccl_futex_child(int cmd, int rep) {
  const std::string shm = "/nccl-zernel-filter-" + std::to_string(getpid());
  const int fd = shm_open(shm.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, 4096) != 0) return Child::reply(rep, 'F'), 1;
  void* seg = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  shm_unlink(shm.c_str());
  if (seg == MAP_FAILED) return Child::reply(rep, 'F'), 1;
  auto* word = static_cast<std::uint32_t*>(seg);
  Child::reply(rep, 'L');
  for (char c = Child::next(cmd); c == 'P' || c == 'S'; c = Child::next(cmd)) {
    for (int i = 0; i < 20; ++i) {
      const timespec two_ms{0, 2'000'000};
      futex(word, c == 'P' ? FUTEX_WAIT_PRIVATE : FUTEX_WAIT, 0, &two_ms);
    }
    Child::reply(rep, 'd');
  }
  return 0;
}

TEST_F(PhaseEvents, checks_only_shared_futex_waits_for_nccl_and_counts_the_checks) {
  Child child(nccl_futex_child);
  ASSERT_EQ(child.expect(), 'L');
  ASSERT_TRUE(probes_->set_phase_role(child.upid(), PhaseRole::rank).ok());
  auto nccl_waits = [&] {
    std::size_t n = 0;
    for (const PhaseEvent& e : main_thread_events(child.upid())) {
      n += e.phase == kNccl ? 1U : 0U;
    }
    all_.clear();
    return n;
  };
  const ProbeStats before = probes_->stats();
  ASSERT_TRUE(child.send('P'));
  ASSERT_EQ(child.expect(), 'd');
  std::this_thread::sleep_for(10ms);
  const ProbeStats priv = probes_->stats();
  EXPECT_EQ(priv.nccl_checks, before.nccl_checks);
  EXPECT_EQ(nccl_waits(), 0U);
  ASSERT_TRUE(child.send('S'));
  ASSERT_EQ(child.expect(), 'd');
  ProbeStats shared{};
  std::size_t waits = 0;
  for (int i = 0; i < 100; ++i) {  // until the last wait's change is drained (2 s at most)
    std::this_thread::sleep_for(20ms);
    shared = probes_->stats();
    waits += nccl_waits();
    if (waits + (shared.nccl_missed - priv.nccl_missed) >= 20) break;
  }
  // Each timed wait sleeps (the word stays 0): 20 checks, each an NCCL wait unless the check
  // could not be done (mmap_lock contended), which is counted instead.
  const std::uint64_t checks = shared.nccl_checks - priv.nccl_checks;
  const std::uint64_t missed = shared.nccl_missed - priv.nccl_missed;
  EXPECT_GE(checks, 20U);
  EXPECT_LE(missed, checks);
  // A wake the kernel ran without a switch-in the program saw is taken at the next switch-out
  // (wake_unseen): each wait still shows.
  EXPECT_GE(waits + missed, 20U) << (shared.wake_unseen - priv.wake_unseen) << " wakes unseen";
}

// A rank's main thread asleep in a page fault is not in a syscall: a write to a write-protected
// page (userfaultfd's write-protect mode, as a copy-on-write fault after fork) leaves the fault's
// error code, 7, in orig_ax, which reads as poll(2). Its sleep must not be a data wait: the only
// DataLoading is its read() of the next command. A helper thread of the child lifts the
// protection after 30 ms.
int page_fault_child(int cmd, int rep) {
  const int uffd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC));
  uffdio_api api{};
  api.api = UFFD_API;
  if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) != 0 ||
      (api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP) == 0) {
    return Child::reply(rep, 'U'), 1;
  }
  const long page = sysconf(_SC_PAGESIZE);
  void* mem = mmap(nullptr, static_cast<std::size_t>(page), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return Child::reply(rep, 'U'), 1;
  auto* bytes = static_cast<volatile char*>(mem);
  bytes[0] = 1;  // present: the protected write faults with PROT | WRITE | USER = 7
  uffdio_register reg{};
  reg.range = {reinterpret_cast<std::uint64_t>(mem), static_cast<std::uint64_t>(page)};
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  uffdio_writeprotect wp{};
  wp.range = reg.range;
  wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
  if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0 || ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) != 0) {
    return Child::reply(rep, 'U'), 1;
  }
  Child::reply(rep, 'L');
  if (Child::next(cmd) != 'G') return 1;
  std::thread lift([&] {
    std::this_thread::sleep_for(30ms);
    uffdio_writeprotect off{};
    off.range = reg.range;
    off.mode = 0;  // lift the protection and wake the faulting thread
    (void)ioctl(uffd, UFFDIO_WRITEPROTECT, &off);
  });
  const std::uint64_t t0 = monotonic_ns();
  bytes[0] = 2;  // sleeps in the fault until the helper lifts the protection
  const std::uint64_t slept = monotonic_ns() - t0;
  lift.join();
  Child::reply(rep, slept >= 25 * kMs ? 'd' : 'S');
  Child::next(cmd);  // blocks in read(): a data wait
  return 0;
}

TEST_F(PhaseEvents, a_sleep_in_a_page_fault_is_no_data_wait) {
  Child child(page_fault_child);
  const char ready = child.expect();
  if (ready == 'U') GTEST_SKIP() << "no userfaultfd write-protect on this kernel";
  ASSERT_EQ(ready, 'L');
  ASSERT_TRUE(wait_asleep(child.pid()));
  ASSERT_TRUE(probes_->set_phase_role(child.upid(), PhaseRole::rank).ok());
  ASSERT_TRUE(child.send('G'));
  const char done = child.expect();
  if (done == 'S') GTEST_SKIP() << "the protected write did not sleep in the fault";
  ASSERT_EQ(done, 'd');
  std::vector<PhaseEvent> ev;
  for (int i = 0; i < 100; ++i) {  // until the read() of the next command shows
    const std::vector<PhaseEvent> more = main_thread_events(child.upid());
    ev.insert(ev.end(), more.begin(), more.end());
    all_.clear();
    if (!ev.empty() && ev.back().phase == kData) break;
    std::this_thread::sleep_for(10ms);
  }
  // Named while it slept in read() for 'G' (seen from the naming: DataLoading, GpuCompute when
  // 'G' wakes it), then the fault (no change: not a data wait), then read() again.
  ASSERT_NO_FATAL_FAILURE(expect_sequence(ev, {{kData, cause(PhaseCause::data_wait)},
                                               {kGpu, cause(PhaseCause::data_arrived)},
                                               {kData, cause(PhaseCause::data_wait)}}));
}

// A rank's threads other than its driver (issue 22): a helper thread that blocks in read() on a
// pipe and then hashes what it read (a checkpoint reader) beside a main thread that waits for
// its batch in read() and syncs. Only the main thread has phases; the helper never gets one.
int rank_with_reader_child(int cmd, int rep) {
  const FakeCudaStream gpu;
  int p[2];
  if (!gpu.ok() || pipe(p) != 0) return Child::reply(rep, 'F'), 1;
  std::thread reader([&] {
    char c = 0;
    while (read(p[0], &c, 1) == 1 && c == 'x') burn_cpu(3 * kMs);  // "hashing" what it read
  });
  Child::reply(rep, 'L');
  for (char c = Child::next(cmd); c == 'G'; c = Child::next(cmd)) {
    for (int i = 0; i < 3; ++i) {
      (void)!write(p[1], "x", 1);
      const timespec five_ms{0, 5'000'000};
      nanosleep(&five_ms, nullptr);
    }
    if (!gpu.work(5 * kMs)) return Child::reply(rep, 'F'), 1;
    Child::reply(rep, 'd');
  }
  (void)!write(p[1], "q", 1);
  reader.join();
  return 0;
}

TEST_F(PhaseEvents, gives_no_phase_to_a_rank_thread_that_is_not_its_driver) {
  Child child(rank_with_reader_child);
  ASSERT_EQ(child.expect(), 'L');
  ASSERT_NO_FATAL_FAILURE(attach(child));
  ASSERT_TRUE(probes_->set_phase_role(child.upid(), PhaseRole::rank).ok());
  for (int step = 0; step < 3; ++step) {
    // Each command once the main thread sleeps in its read(): sent earlier (beside another test
    // in parallel), it was read without a sleep, that step began in OptimizerStep, its 5 ms sync
    // changed nothing, and only the last step's changes were seen.
    ASSERT_TRUE(wait_asleep(child.pid()));
    ASSERT_TRUE(child.send('G'));
    ASSERT_EQ(child.expect(), 'd');
  }
  // The main thread: its data waits, the batches, its syncs' returns (a sync entered in
  // GpuCompute changes nothing), drained until two of each are in (2 s at most).
  std::vector<PhaseEvent> main;
  std::size_t data_waits = 0;
  std::size_t returns = 0;
  for (int i = 0; i < 100 && (data_waits < 2 || returns < 2); ++i) {
    std::this_thread::sleep_for(20ms);
    main = main_thread_events(child.upid());
    data_waits = 0;
    returns = 0;
    for (const PhaseEvent& e : main) {
      data_waits += e.cause == cause(PhaseCause::data_wait) ? 1U : 0U;
      returns += e.cause == cause(PhaseCause::sync_return) ? 1U : 0U;
    }
  }
  std::vector<PhaseEvent> others;
  for (const PhaseEvent& e : all_) {
    if (e.tgid == child.upid() && e.tid != child.upid()) others.push_back(e);
  }
  EXPECT_GE(data_waits, 2U) << describe(main);
  EXPECT_GE(returns, 2U) << describe(main);
  EXPECT_EQ(main.back().phase, kData) << describe(main);
  // The reader slept in read() 9 times and ran between: no event.
  EXPECT_TRUE(others.empty()) << describe(others);
}

// The main thread is its rank's driver until another thread syncs first: then it has no phase
// (Unknown at its next switch) and its data waits change nothing; the syncing thread has phases.
int sync_elsewhere_child(int cmd, int rep) {
  if (!FakeCudaStream().ok()) return Child::reply(rep, 'F'), 1;  // libcuda mapped, to attach
  Child::reply(rep, 'L');
  if (Child::next(cmd) != 'A') return 1;
  Child::reply(rep, 'a');
  if (Child::next(cmd) != 'B') return 1;  // a data wait of the main thread: DataLoading
  bool ok = false;
  std::thread driver([&] {
    const FakeCudaStream own;  // its own context, current in this thread
    ok = own.ok() && own.work(5 * kMs);
  });
  driver.join();
  Child::reply(rep, ok ? 'b' : 'F');
  Child::next(cmd);  // a read() again: no longer the driver, no data wait
  return 0;
}

TEST_F(PhaseEvents, the_main_thread_is_a_driver_only_until_another_thread_syncs) {
  Child child(sync_elsewhere_child);
  ASSERT_EQ(child.expect(), 'L');
  ASSERT_NO_FATAL_FAILURE(attach(child));
  ASSERT_TRUE(probes_->set_phase_role(child.upid(), PhaseRole::rank).ok());
  ASSERT_TRUE(child.send('A'));
  ASSERT_EQ(child.expect(), 'a');
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(child.send('B'));
  ASSERT_EQ(child.expect(), 'b');
  std::this_thread::sleep_for(20ms);
  // The main thread's join of the other thread (a futex wait after its batch came) can last
  // 10 ms or more on a loaded machine: the rules read that as a wait for another batch (DataLoading
  // from its start, then GpuCompute at its end: batch_wait, data_arrived). That pair is left out.
  const std::vector<PhaseEvent> seen = main_thread_events(child.upid());
  std::vector<PhaseEvent> main;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    if (seen[i].cause == cause(PhaseCause::batch_wait) && i + 1 < seen.size() &&
        seen[i + 1].cause == cause(PhaseCause::data_arrived)) {
      ++i;
      continue;
    }
    main.push_back(seen[i]);
  }
  std::vector<PhaseEvent> others;
  for (const PhaseEvent& e : all_) {
    if (e.tgid == child.upid() && e.tid != child.upid()) others.push_back(e);
  }
  // DataLoading in the read() for 'B', GpuCompute when the batch came, Unknown once the other
  // thread synced (at the main thread's join), and nothing for its last read().
  ASSERT_GE(main.size(), 3U) << describe(main);
  const std::size_t n = main.size();
  EXPECT_EQ(main[n - 3].cause, cause(PhaseCause::data_wait)) << describe(main);
  EXPECT_EQ(main[n - 2].cause, cause(PhaseCause::data_arrived)) << describe(main);
  EXPECT_EQ(main[n - 1].phase, kUnknown) << describe(main);
  EXPECT_EQ(main[n - 1].cause, cause(PhaseCause::not_driver)) << describe(main);
  ASSERT_EQ(others.size(), 2U) << describe(others);
  EXPECT_EQ(others[0].cause, cause(PhaseCause::sync_enter)) << describe(others);
  EXPECT_EQ(others[1].cause, cause(PhaseCause::sync_return)) << describe(others);
}

TEST_F(PhaseEvents, counts_its_events) {
  Child child(rank_step_child);
  ASSERT_EQ(child.expect(), 'L');
  ASSERT_NO_FATAL_FAILURE(attach(child));
  const ProbeStats before = probes_->stats();
  ASSERT_TRUE(probes_->set_phase_role(child.upid(), PhaseRole::rank).ok());
  ASSERT_TRUE(child.send('G'));
  ASSERT_EQ(child.expect(20'000), 'D');
  // The step's ten changes (follows_a_rank_through_gpu_work_a_collective_and_the_optimizer), the
  // last once the child sleeps in its read() (2 s at most); an NCCL check that could not be done
  // (mmap_lock busy: counted in nccl_missed) costs its wait's two.
  ProbeStats after{};
  std::uint64_t seen = 0;
  for (int i = 0; i < 100 && seen < 10; ++i) {
    std::this_thread::sleep_for(20ms);
    after = probes_->stats();
    seen = after.phase_events - before.phase_events + 2 * (after.nccl_missed - before.nccl_missed);
  }
  EXPECT_GE(seen, 10U);
  EXPECT_EQ(after.phase_events_lost, before.phase_events_lost);
}

// A ring buffer of one page (128 records) and 150 steps of a rank that are not drained: each
// step is a data wait and the batch's arrival, two changes, so most of them find the ring full.
// The drain must still end with the thread's real last change (DataLoading: it waits for the
// next command), taken from zernel_phase_unsent with its time, and no change after the overflow
// may be older than the one before it.
TEST(PhaseEventsOverflow, recovers_the_last_change_of_a_thread_after_the_ring_overflowed) {
  if (std::string(ZERNEL_FAKE_LIB_DIR).empty()) GTEST_SKIP() << "no ZERNEL_FAKE_LIB_DIR";
  GpuSyncProbes::Options o;
  o.phase_events = true;
  o.phase_ring_bytes = static_cast<std::uint32_t>(sysconf(_SC_PAGESIZE));
  auto r = GpuSyncProbes::open(o);
  if (!r) GTEST_SKIP() << r.error().message();
  GpuSyncProbes& probes = *r.value();
  if (!probes.has_phase_events()) GTEST_SKIP() << probes.phase_events_error()->message();

  Child child(burn_step_child);
  ASSERT_EQ(child.expect(), 'L');
  ASSERT_TRUE(probes.set_phase_role(child.upid(), PhaseRole::rank).ok());
  const ProbeStats before = probes.stats();
  std::uint64_t last_step_ns = 0;
  for (int i = 0; i < 150; ++i) {
    ASSERT_TRUE(wait_asleep(child.pid()));
    last_step_ns = monotonic_ns();
    ASSERT_TRUE(child.send('G'));
    ASSERT_EQ(child.expect(), 'd');
  }
  std::this_thread::sleep_for(20ms);  // it is back in its read(): DataLoading
  std::vector<PhaseEvent> events;
  probes.drain_phase_events(events);
  const ProbeStats after = probes.stats();
  ASSERT_GT(after.phase_events_lost, before.phase_events_lost)
      << "the ring did not overflow: " << after.phase_events - before.phase_events
      << " changes sent, " << events.size() << " drained, no storage "
      << after.phase_no_storage - before.phase_no_storage;
  EXPECT_EQ(after.unsent_failed, before.unsent_failed);
  EXPECT_EQ(after.phase_recovered - before.phase_recovered, 1U);

  std::vector<PhaseEvent> mine;
  for (const PhaseEvent& e : events) {
    if (e.tid == child.upid()) mine.push_back(e);
  }
  ASSERT_FALSE(mine.empty());
  EXPECT_LE(mine.size(), 129U);  // the ring's 128 records and the kept one
  const PhaseEvent& last = mine.back();
  EXPECT_EQ(last.phase, 0U) << "DataLoading";
  EXPECT_EQ(last.cause, static_cast<std::uint8_t>(PhaseCause::data_wait));
  EXPECT_GE(last.t_ns, last_step_ns) << "the last change drained is one of the first steps'";
  for (std::size_t i = 1; i < mine.size(); ++i) EXPECT_GE(mine[i].t_ns, mine[i - 1].t_ns) << i;

  // Drained: the next changes go through the ring again, and nothing stale comes back.
  events.clear();
  ASSERT_TRUE(wait_asleep(child.pid()));
  ASSERT_TRUE(child.send('G'));
  ASSERT_EQ(child.expect(), 'd');
  std::this_thread::sleep_for(20ms);
  probes.drain_phase_events(events);
  std::erase_if(events, [&](const PhaseEvent& e) { return e.tid != child.upid(); });
  ASSERT_EQ(events.size(), 2U);
  EXPECT_EQ(events[0].cause, static_cast<std::uint8_t>(PhaseCause::data_arrived));
  EXPECT_EQ(events[1].cause, static_cast<std::uint8_t>(PhaseCause::data_wait));
  EXPECT_EQ(probes.stats().phase_recovered, after.phase_recovered);
}

// The cost of the context-switch program where it runs on every context switch of the machine:
// a pipe ping-pong between two threads pinned to one CPU (two switches per round trip), without
// any probes, with the probes loaded and nothing followed (nothing attached), with another
// process followed (this one not), and with this one a rank (its threads followed).
// Prints ns per round trip; run by hand:
//   zernel_unit_tests --gtest_also_run_disabled_tests --gtest_filter='PhaseEventsCost.*'
TEST(PhaseEventsCost, DISABLED_measure_context_switch_cost) {
  constexpr int kRounds = 50'000;
  auto ping_pong = [] {
    int ab[2];
    int ba[2];
    if (pipe(ab) != 0 || pipe(ba) != 0) return -1.0;
    cpu_set_t before;
    sched_getaffinity(0, sizeof before, &before);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    std::thread echo([&] {
      sched_setaffinity(0, sizeof one, &one);
      char c = 0;
      for (int i = 0; i < 7 * kRounds; ++i) {
        if (read(ab[0], &c, 1) != 1 || write(ba[1], &c, 1) != 1) break;
      }
    });
    sched_setaffinity(0, sizeof one, &one);
    const double ns = best_ns_per_call(kRounds, [&] {
      char c = 'x';
      (void)!write(ab[1], &c, 1);
      (void)!read(ba[0], &c, 1);
    });
    echo.join();
    for (int fd : {ab[0], ab[1], ba[0], ba[1]}) close(fd);
    sched_setaffinity(0, sizeof before, &before);
    return ns;
  };
  // The switch program's own time per run, from the kernel's run-time statistics (on only
  // while this test holds the descriptor): free of the host's noise that the round trip has.
  bpf_attr attr{};
  attr.enable_stats.type = BPF_STATS_RUN_TIME;
  const int stats_fd = static_cast<int>(syscall(SYS_bpf, BPF_ENABLE_STATS, &attr, sizeof attr));
  // ping_pong() with the switch program's ns per run and runs per round trip over it.
  auto measured = [&](const GpuSyncProbes& p, double& prog_ns, double& runs) {
    const auto a = p.switch_runs();
    const double rt = ping_pong();
    const auto b = p.switch_runs();
    prog_ns = b.count > a.count
                  ? static_cast<double>(b.ns - a.ns) / static_cast<double>(b.count - a.count)
                  : 0;
    runs = static_cast<double>(b.count - a.count) / (7.0 * kRounds);
    return rt;
  };
  const double none = ping_pong();
  GpuSyncProbes::Options o;
  o.phase_events = true;
  auto r = GpuSyncProbes::open(o);
  if (!r) GTEST_SKIP() << r.error().message();
  auto& probes = *r.value();
  double prog_ns[2] = {};
  double runs = 0;
  // Loaded, nothing followed: nothing attached, nothing runs.
  const double loaded = ping_pong();
  // Another process followed (a child that only waits): the switch program runs for this one's
  // threads too and leaves at their bit.
  const pid_t other = fork();
  ASSERT_GE(other, 0);
  if (other == 0) {
    pause();
    _exit(0);
  }
  ASSERT_TRUE(probes.set_phase_role(static_cast<std::uint32_t>(other), PhaseRole::rank).ok());
  const double unfollowed = measured(probes, prog_ns[0], runs);
  ASSERT_TRUE(probes.set_phase_role(static_cast<std::uint32_t>(getpid()), PhaseRole::rank).ok());
  const double followed = measured(probes, prog_ns[1], runs);
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
  std::vector<PhaseEvent> events;
  probes.drain_phase_events(events);
  if (stats_fd >= 0) close(stats_fd);
  std::printf(
      "pipe round trip (2 context switches): %.0f ns without probes, %.0f loaded with nothing "
      "followed, %.0f with another process followed, %.0f followed as a rank (%zu phase changes "
      "sent)\n",
      none, loaded, unfollowed, followed, events.size());
  std::printf(
      "the sched_switch program itself (%.1f runs per round trip): %.0f ns per run for a "
      "process nobody follows, %.0f followed%s\n",
      runs, prog_ns[0], prog_ns[1],
      stats_fd < 0 ? " (no run-time statistics: bpf_enable_stats failed)" : "");
}

TEST(PhaseEventsOff, are_off_unless_asked_for_and_say_so) {
  auto r = GpuSyncProbes::open();
  if (!r) GTEST_SKIP() << r.error().message();
  EXPECT_FALSE(r.value()->has_phase_events());
  EXPECT_FALSE(r.value()->set_phase_role(1, PhaseRole::rank).ok());
  std::vector<PhaseEvent> out;
  EXPECT_EQ(r.value()->drain_phase_events(out), 0U);
}

}  // namespace
}  // namespace zernel::collect

#endif  // ZERNEL_HAVE_PROBES
