// bench_tax: what a process pays per call for what runs in the kernel on its behalf, with or
// without zernel-scheduler beside it (bench/tax.sh drives it; docs/benchmarks.md, "The tax on
// the rest of the node"). Each figure is the best of --rounds rounds (30; a round is a few ms,
// short enough that some rounds run without a preemption on a busy machine), in ns per call:
//
//   getppid      syscall(SYS_getppid): any system call (a syscall tracepoint's slow path)
//   futex_wake   FUTEX_WAKE_PRIVATE on a word nobody waits on
//   pipe_rtt     one byte to a child process and back, both pinned to one CPU (two context
//                switches, two reads, two writes)
//   cuda_sync    cuStreamSynchronize with nothing queued (emulated libcuda)
//   cuda_launch  zfgEnqueueWork of no device time: the emulated driver's kernel launch
//
// The CUDA figures need the emulated GPU (tools/fake_gpu): --libcuda names the library (default
// <dir of this binary>/../lib/fake/libcuda.so.1); the segment is $ZERNEL_FAKE_GPU_SHM's (a
// segment of its own keeps the process out of the daemon's NVML, so it is not followed).
// --wait-go prints "ready PID" once its GPU context exists and measures after a line on
// stdin (the script waits until the daemon follows it). Prints one JSON line.
#include <dlfcn.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>

namespace {

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// The best (lowest) ns per call over `rounds` rounds of `calls` calls.
double best_ns(int rounds, long calls, const std::function<void()>& call) {
  double best = 1e18;
  for (int r = 0; r < rounds; ++r) {
    const std::uint64_t t0 = now_ns();
    for (long i = 0; i < calls; ++i) call();
    best = std::min(best, static_cast<double>(now_ns() - t0) / static_cast<double>(calls));
  }
  return best;
}

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<std::size_t>(cpu), &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

// A round trip of one byte with a child process, both on `cpu`; -1 when it cannot run.
double pipe_round_trip(int rounds, long calls, int cpu) {
  int to_child[2];
  int to_parent[2];
  if (pipe(to_child) != 0 || pipe(to_parent) != 0) return -1;
  cpu_set_t before;
  sched_getaffinity(0, sizeof before, &before);
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    close(to_child[1]);  // else its read never sees the parent's end close
    close(to_parent[0]);
    if (!pin_to(cpu)) _exit(1);
    char c = 0;
    while (read(to_child[0], &c, 1) == 1 && write(to_parent[1], &c, 1) == 1) {
    }
    _exit(0);
  }
  close(to_child[0]);
  close(to_parent[1]);
  double ns = -1;
  if (pin_to(cpu)) {
    ns = best_ns(rounds, calls, [&] {
      char c = 'x';
      if (write(to_child[1], &c, 1) != 1 || read(to_parent[0], &c, 1) != 1) std::abort();
    });
  }
  close(to_child[1]);
  close(to_parent[0]);
  waitpid(child, nullptr, 0);
  sched_setaffinity(0, sizeof before, &before);
  return ns;
}

std::string default_libcuda() {
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : std::string(".");
  dir = dir.substr(0, dir.rfind('/'));
  return dir + "/../lib/fake/libcuda.so.1";
}

int usage(const char* msg) {
  std::fprintf(stderr,
               "bench_tax: %s\nusage: bench_tax [--rounds N] [--scale F] [--cpu N] "
               "[--libcuda PATH] [--no-cuda] [--wait-go]\n",
               msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 30;
  double scale = 1.0;
  int cpu = 0;
  bool cuda = true;
  bool wait_go = false;
  std::string libcuda = default_libcuda();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_tax: %s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rounds") {
      rounds = std::atoi(value("--rounds"));
    } else if (a == "--scale") {
      scale = std::atof(value("--scale"));
    } else if (a == "--cpu") {
      cpu = std::atoi(value("--cpu"));
    } else if (a == "--libcuda") {
      libcuda = value("--libcuda");
    } else if (a == "--no-cuda") {
      cuda = false;
    } else if (a == "--wait-go") {
      wait_go = true;
    } else {
      return usage(("unknown argument " + a).c_str());
    }
  }
  if (rounds < 1 || rounds > 1000) return usage("--rounds must be 1..1000");
  if (!(scale > 0 && scale <= 100)) return usage("--scale must be in (0, 100]");
  if (cpu < 0 || cpu >= CPU_SETSIZE) return usage("--cpu out of range");
  auto calls = [&](long n) {
    return std::max(1L, static_cast<long>(static_cast<double>(n) * scale));
  };

  using Handle = void*;
  int (*stream_sync)(Handle) = nullptr;
  int (*enqueue)(Handle, unsigned long long) = nullptr;
  Handle stream = nullptr;
  if (cuda) {
    void* lib = dlopen(libcuda.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      std::fprintf(stderr, "bench_tax: %s\n", dlerror());
      return 1;
    }
    auto init = reinterpret_cast<int (*)(unsigned)>(dlsym(lib, "cuInit"));
    auto ctx_create =
        reinterpret_cast<int (*)(Handle*, unsigned, int)>(dlsym(lib, "cuCtxCreate_v2"));
    auto stream_create = reinterpret_cast<int (*)(Handle*, unsigned)>(dlsym(lib, "cuStreamCreate"));
    stream_sync = reinterpret_cast<int (*)(Handle)>(dlsym(lib, "cuStreamSynchronize"));
    enqueue = reinterpret_cast<int (*)(Handle, unsigned long long)>(dlsym(lib, "zfgEnqueueWork"));
    Handle ctx = nullptr;
    if (init == nullptr || ctx_create == nullptr || stream_create == nullptr ||
        stream_sync == nullptr || enqueue == nullptr || init(0) != 0 ||
        ctx_create(&ctx, 0, 0) != 0 || stream_create(&stream, 0) != 0) {
      std::fprintf(stderr, "bench_tax: %s: no emulated GPU context (is its segment there?)\n",
                   libcuda.c_str());
      return 1;
    }
  }
  if (wait_go) {
    std::printf("ready %d\n", getpid());
    std::fflush(stdout);
    std::string line;
    if (!std::getline(std::cin, line)) return 1;
  }

  std::uint32_t word = 0;
  const double getppid_ns = best_ns(rounds, calls(20'000), [] { syscall(SYS_getppid); });
  const double wake_ns = best_ns(rounds, calls(20'000), [&] {
    syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  });
  const double rtt_ns = pipe_round_trip(rounds, calls(2'000), cpu);
  double sync_ns = -1;
  double launch_ns = -1;
  if (cuda) {
    sync_ns = best_ns(rounds, calls(10'000), [&] { stream_sync(stream); });
    launch_ns = best_ns(rounds, calls(10'000), [&] { enqueue(stream, 0); });
    stream_sync(stream);
  }
  std::printf(
      "{\"pid\": %d, \"rounds\": %d, \"getppid_ns\": %.1f, \"futex_wake_ns\": %.1f, "
      "\"pipe_rtt_ns\": %.1f, \"cuda_sync_ns\": %.1f, \"cuda_launch_ns\": %.1f}\n",
      getpid(), rounds, getppid_ns, wake_ns, rtt_ns, sync_ns, launch_ns);
  return rtt_ns < 0 ? 1 : 0;
}
