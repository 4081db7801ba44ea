// What the tenants' CPU time costs the daemon per process: a pread of a kept /proc schedstat
// descriptor (what the signal sampler does per process without the task iterator) against one
// read of the BPF task iterator (bpf/task_cpu.bpf.c), which walks every task of the node. The
// ratio of the two, per task walked, is TaskCpuIterator::kWalkPerProcRead's measure
// (docs/benchmarks.md, "The tenants' CPU time"). Root; without the BPF toolchain or without root
// the iterator's benchmark says why and is skipped.
//
//   build/bin/bench_task_cpu [--benchmark_repetitions=3]
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#ifdef ZERNEL_HAVE_PROBES
#include "collect/probes/task_cpu_iter.hpp"
#endif

namespace {

void BM_ProcSchedstatPread(benchmark::State& state) {
  const int fd = ::open("/proc/self/schedstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    state.SkipWithError("cannot open /proc/self/schedstat");
    return;
  }
  char buf[256];
  for (auto _ : state) {
    benchmark::DoNotOptimize(::pread(fd, buf, sizeof buf, 0));
  }
  ::close(fd);
}
BENCHMARK(BM_ProcSchedstatPread);

#ifdef ZERNEL_HAVE_PROBES
// One read answering this process, walking all of the node's tasks, with state.range(0) more
// sleeping threads in this process; the counters give the tasks walked and the time per task.
void BM_TaskIteratorRead(benchmark::State& state) {
  auto it = zernel::collect::TaskCpuIterator::open();
  if (!it) {
    state.SkipWithError(it.error().message().c_str());
    return;
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> sleepers;
  for (std::int64_t i = 0; i < state.range(0); ++i) {
    sleepers.emplace_back([&stop] {
      while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    });
  }
  const std::vector<std::uint32_t> pids = {static_cast<std::uint32_t>(getpid())};
  (*it)->follow(pids);
  std::vector<zernel::collect::TaskCpu> out;
  for (auto _ : state) {
    if (!(*it)->read(out)) {
      state.SkipWithError("the iterator's read failed");
      return;
    }
  }
  stop = true;
  for (auto& t : sleepers) t.join();
  const auto walked = static_cast<double>((*it)->tasks_walked());
  state.counters["tasks_walked"] = walked;
  state.counters["ns_per_task"] =
      benchmark::Counter(walked * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_TaskIteratorRead)->Arg(0)->Arg(1000)->Arg(3000)->Unit(benchmark::kMicrosecond);
#endif

}  // namespace

BENCHMARK_MAIN();
