// bench_engine: the policy engine on the shared benchmark workload, the one the earlier
// implementation was measured on (docs/benchmarks.md has the definition, the commands and the
// figures).
//
// The workload is deterministic: every tick's inputs come from splitmix64, so any implementation
// sees the same inputs and the phase detector's results can be checked bit for bit (the folds).
//
//   (a) BM_DecisionSweep/tasks:N  one iteration = one tick: untimed, build the N updates and the
//       128 CPU loads; timed as "update", set_cpu_loads + update_task for every task; timed as
//       "schedule", schedule(pid, now) for every task. Three warm-up ticks run before the timed
//       ones. BM_ScheduleAll/tasks:N is the same with the daemon's schedule_all sweep.
//   (b) BM_PhaseDetect/stability:S  PhaseDetector::detect alone on 1,000 task states.
//   (c) BM_SelectCpu/gpu, /none  Topology::select_cpu, 1,000,000 calls each.
//
// Timing is manual (steady_clock around the timed parts only), so building the inputs costs no
// PauseTiming/ResumeTiming. Allocations are counted by replacing the global operator new: the
// count runs only while g_count_allocs is set, around the timed parts.
//
// Modes handled before Google Benchmark sees the arguments:
//   --print-folds   the folds of (b) for N = 1,000, 10,000 and 65,536, the engine's own fold, and
//                   the select_cpu sums of (c); exits 0.
//   --check-folds   the N = 1,000 folds (detector and engine) and the select_cpu sums against the
//                   expected values; exits 1 on a mismatch (CTest runs it).
//   --sweep=N [--ticks=T] [--schedule-all]
//                   runs (a) without the framework and prints the figures and the peak RSS; the
//                   mode for callgrind (instructions per decision) and for memory.

#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/resource.h>

#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policy/decision.hpp"
#include "policy/engine.hpp"
#include "policy/options.hpp"
#include "policy/phase.hpp"
#include "policy/phase_detector.hpp"
#include "policy/task_state.hpp"
#include "policy/tenant.hpp"
#include "policy/topology.hpp"

// ---------------------------------------------------------------------------------------------
// Allocation counting. Every global allocation function is replaced by malloc/free; allocations
// are counted only while g_count_allocs is set. Single-threaded: the benchmarks run on one thread.

namespace {

bool g_count_allocs = false;
std::uint64_t g_allocs = 0;

void* allocate(std::size_t n) noexcept {
  if (g_count_allocs) ++g_allocs;
  return std::malloc(n == 0 ? 1 : n);
}

void* allocate_aligned(std::size_t n, std::align_val_t align) noexcept {
  if (g_count_allocs) ++g_allocs;
  std::size_t a = static_cast<std::size_t>(align);
  if (a < sizeof(void*)) a = sizeof(void*);
  void* p = nullptr;
  if (posix_memalign(&p, a, n == 0 ? 1 : n) != 0) return nullptr;
  return p;
}

void* allocate_or_throw(std::size_t n) {
  void* p = allocate(n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void* allocate_aligned_or_throw(std::size_t n, std::align_val_t align) {
  void* p = allocate_aligned(n, align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t n) { return allocate_or_throw(n); }
void* operator new[](std::size_t n) { return allocate_or_throw(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate_aligned_or_throw(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate_aligned_or_throw(n, a); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_aligned(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_aligned(n, a);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

using zernel::policy::Decision;
using zernel::policy::Engine;
using zernel::policy::EngineOptions;
using zernel::policy::NumaNode;
using zernel::policy::Phase;
using zernel::policy::PhaseDetectionOptions;
using zernel::policy::PhaseDetector;
using zernel::policy::PriorityClass;
using zernel::policy::TaskState;
using zernel::policy::TaskUpdate;
using zernel::policy::TenantSpec;
using zernel::policy::Topology;

// ---------------------------------------------------------------------------------------------
// The workload's inputs.

constexpr std::uint32_t kCpus = 128;
constexpr std::uint32_t kCpusPerNode = 64;
constexpr std::uint32_t kGpus = 8;
constexpr std::uint32_t kGpusPerNode = 4;
constexpr std::uint64_t kNodeMemoryMb = 262'144;
constexpr std::uint32_t kTenants = 8;
constexpr std::array<std::uint32_t, kTenants> kTenantGpus = {1, 1, 2, 2, 4, 4, 8, 8};
constexpr std::uint32_t kPidBase = 1000;
constexpr std::uint64_t kWarmupTicks = 3;

// The runs of the workload: N tasks, T timed ticks.
struct Size {
  std::uint32_t tasks;
  std::uint64_t ticks;
};
constexpr std::array<Size, 3> kSizes = {{{1'000, 500}, {10'000, 60}, {65'536, 10}}};

// Expected results (bench-workload.md (b) and (c)).
constexpr std::uint64_t kExpectedFold3 = 0xe4375dc2fe7a4a09;
constexpr std::uint64_t kExpectedTransitions3 = 124'124;
constexpr std::uint64_t kExpectedFold1 = 0x43e50d2aa3554596;
constexpr std::uint64_t kExpectedTransitions1 = 191'896;
constexpr std::uint64_t kSelectCalls = 1'000'000;
constexpr std::uint64_t kExpectedSelectGpuSum = 53'000'000;
constexpr std::uint64_t kExpectedSelectNoneSum = 2'000'000;

constexpr std::uint64_t splitmix64(std::uint64_t x) {
  std::uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

constexpr std::uint64_t now_ns(std::uint64_t tick) {
  return 1'000'000'000ULL + tick * 100'000'000ULL;
}

constexpr std::uint32_t pid_of(std::uint32_t i) { return kPidBase + i; }
constexpr std::uint32_t gpu_of(std::uint32_t i) { return (i / 8) % kGpus; }

void fill_loads(std::uint64_t tick, std::span<float> loads) {
  for (std::uint32_t c = 0; c < loads.size(); ++c) {
    const std::uint64_t h = splitmix64((tick << 32) ^ 0x80000000ULL ^ c);
    loads[c] = static_cast<float>(h % 1000) / 1000.0F;  // f32
  }
}

struct Metrics {
  std::uint8_t gpu_util;
  float io_wait;
  std::uint64_t cpu_burst_ns;
  std::uint64_t last_gpu_sync_ns;
};

// The metrics of task i at tick t; the cases are checked in this order.
Metrics metrics_for(std::uint64_t tick, std::uint32_t i) {
  const std::uint64_t h = splitmix64((tick << 32) | i);
  const std::uint64_t now = now_ns(tick);
  const std::uint64_t slot = (tick + 7ULL * i) % 10;
  if ((h >> 60) == 0) {  // noise, 1/16: raw Unknown
    return {static_cast<std::uint8_t>(40 + h % 30), 0.0F, 10'000'000 + (h >> 8) % 10'000'000,
            now - 50'000'000};
  }
  if (slot < 3) {  // DataLoading
    return {static_cast<std::uint8_t>(h % 10), 0.35F + static_cast<float>((h >> 8) % 600) / 1000.0F,
            (h >> 24) % 20'000'000, now - 200'000'000};
  }
  if (slot < 7) {  // GpuCompute
    return {static_cast<std::uint8_t>(81 + h % 20), static_cast<float>((h >> 8) % 100) / 1000.0F, 0,
            now - 1'000'000};
  }
  // OptimizerStep
  return {static_cast<std::uint8_t>(h % 50), static_cast<float>((h >> 8) % 100) / 1000.0F,
          100'000 + (h >> 24) % 4'900'000, now - 500'000};
}

TaskUpdate update_for(std::uint64_t tick, std::uint32_t i) {
  const Metrics m = metrics_for(tick, i);
  TaskUpdate u;
  u.gpu_utilization = m.gpu_util;
  u.io_wait_fraction = m.io_wait;
  u.cpu_burst_duration_ns = m.cpu_burst_ns;
  u.last_gpu_sync_ns = m.last_gpu_sync_ns;
  return u;
}

void write_metrics(std::uint64_t tick, std::uint32_t i, TaskState& s) {
  const Metrics m = metrics_for(tick, i);
  s.gpu_utilization = m.gpu_util;
  s.io_wait_fraction = m.io_wait;
  s.cpu_burst_duration_ns = m.cpu_burst_ns;
  s.last_gpu_sync_ns = m.last_gpu_sync_ns;
}

Topology make_topology() {
  Topology topo;
  for (std::uint32_t node = 0; node < kCpus / kCpusPerNode; ++node) {
    NumaNode n;
    n.id = node;
    for (std::uint32_t c = 0; c < kCpusPerNode; ++c) n.cpus.push_back(node * kCpusPerNode + c);
    n.memory_mb = kNodeMemoryMb;
    topo.add_node(std::move(n));
  }
  for (std::uint32_t g = 0; g < kGpus; ++g) topo.map_gpu(g, g / kGpusPerNode);
  return topo;
}

EngineOptions make_options() {
  EngineOptions opts;
  opts.multi_tenant_enabled = true;
  opts.numa.gpu_affinity = true;
  return opts;
}

std::string tenant_id(std::uint32_t t) { return "tenant-" + std::to_string(t); }

[[noreturn]] void die(const char* what, const std::string& why) {
  std::fprintf(stderr, "bench_engine: %s: %s\n", what, why.c_str());
  std::exit(1);
}

// The engine with the workload's tenants and N registered, assigned ML tasks.
std::unique_ptr<Engine> make_engine(std::uint32_t n) {
  auto engine = std::make_unique<Engine>(make_options(), make_topology());
  constexpr std::array<PriorityClass, 4> kClasses = {
      PriorityClass::training, PriorityClass::inference, PriorityClass::interactive,
      PriorityClass::background};
  for (std::uint32_t t = 0; t < kTenants; ++t) {
    TenantSpec spec;
    spec.id = tenant_id(t);
    spec.gpus = kTenantGpus[t];
    spec.priority_class = kClasses[t % 4];
    auto r = engine->upsert_tenant(spec);
    if (!r) die("upsert_tenant", r.error().message());
  }
  std::array<std::string, kTenants> ids;
  for (std::uint32_t t = 0; t < kTenants; ++t) ids[t] = tenant_id(t);
  for (std::uint32_t i = 0; i < n; ++i) {
    auto r = engine->register_task(pid_of(i), true, gpu_of(i));
    if (!r) die("register_task", r.error().message());
    auto a = engine->assign_pid(pid_of(i), ids[i % kTenants]);
    if (!a) die("assign_pid", a.error().message());
  }
  return engine;
}

// FNV-style fold of phases (docs/benchmarks.md, part (b)).
struct Fold {
  std::uint64_t acc = 0xCBF29CE484222325ULL;
  void add(Phase p) { acc = (acc ^ static_cast<std::uint64_t>(p)) * 0x100000001B3ULL; }
};

using Clock = std::chrono::steady_clock;

double elapsed_ns(Clock::time_point a, Clock::time_point b) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// Peak resident set of the process so far.
double max_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// Heap in use (small chunks plus mmapped ones).
double heap_in_use_mib() {
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<double>(mi.uordblks + mi.hblkhd) / (1024.0 * 1024.0);
}

// ---------------------------------------------------------------------------------------------
// (a) The decision path, one tick at a time.

struct TickCost {
  double update_ns = 0;
  double schedule_ns = 0;
  std::uint64_t update_allocs = 0;
  std::uint64_t schedule_allocs = 0;
};

enum class Sweep { per_pid, schedule_all };

class Workload {
 public:
  explicit Workload(std::uint32_t n) : n_(n), engine_(make_engine(n)) {
    rss_after_engine_mib_ = max_rss_mib();
    updates_.resize(n);
    decisions_.reserve(n);
  }

  [[nodiscard]] Engine& engine() { return *engine_; }
  // Peak RSS once the engine was built, before the harness's own buffers.
  [[nodiscard]] double rss_after_engine_mib() const { return rss_after_engine_mib_; }
  [[nodiscard]] std::uint64_t misses() const { return misses_; }

  // One tick: untimed inputs, then the timed update and schedule parts.
  TickCost tick(std::uint64_t t, Sweep sweep) {
    fill_loads(t, loads_);
    for (std::uint32_t i = 0; i < n_; ++i) updates_[i] = update_for(t, i);
    const std::uint64_t now = now_ns(t);
    Engine& e = *engine_;
    TickCost cost;

    g_allocs = 0;
    g_count_allocs = true;
    const auto t0 = Clock::now();
    e.set_cpu_loads(loads_);
    for (std::uint32_t i = 0; i < n_; ++i) {
      if (!e.update_task(pid_of(i), updates_[i])) ++misses_;
    }
    const auto t1 = Clock::now();
    cost.update_allocs = g_allocs;
    g_allocs = 0;
    const auto t2 = Clock::now();
    if (sweep == Sweep::per_pid) {
      for (std::uint32_t i = 0; i < n_; ++i) {
        Decision d = e.schedule(pid_of(i), now);
        benchmark::DoNotOptimize(d);
      }
    } else {
      e.schedule_all(now, decisions_);
      benchmark::DoNotOptimize(decisions_.data());
    }
    const auto t3 = Clock::now();
    g_count_allocs = false;
    cost.schedule_allocs = g_allocs;
    cost.update_ns = elapsed_ns(t0, t1);
    cost.schedule_ns = elapsed_ns(t2, t3);
    return cost;
  }

 private:
  std::uint32_t n_;
  std::unique_ptr<Engine> engine_;
  std::vector<TaskUpdate> updates_;
  std::array<float, kCpus> loads_{};
  std::vector<Decision> decisions_;
  std::uint64_t misses_ = 0;
  double rss_after_engine_mib_ = 0;
};

struct SweepTotals {
  double update_ns = 0;
  double schedule_ns = 0;
  std::uint64_t update_allocs = 0;
  std::uint64_t schedule_allocs = 0;

  void add(const TickCost& c) {
    update_ns += c.update_ns;
    schedule_ns += c.schedule_ns;
    update_allocs += c.update_allocs;
    schedule_allocs += c.schedule_allocs;
  }
};

void set_sweep_counters(benchmark::State& state, const SweepTotals& tot, std::uint32_t n,
                        std::uint64_t ticks) {
  const double ops = static_cast<double>(ticks) * static_cast<double>(n);
  const double ns_per_decision = tot.schedule_ns / ops;
  const double tick_ns = (tot.update_ns + tot.schedule_ns) / static_cast<double>(ticks);
  state.counters["ns_per_decision"] = ns_per_decision;
  state.counters["ns_per_update"] = tot.update_ns / ops;
  state.counters["allocs_per_decision"] = static_cast<double>(tot.schedule_allocs) / ops;
  state.counters["allocs_per_update"] = static_cast<double>(tot.update_allocs) / ops;
  state.counters["decisions_per_s"] = 1e9 / ns_per_decision;
  state.counters["tick_ms"] = tick_ns / 1e6;
  state.counters["ticks_per_s"] = 1e9 / tick_ns;
}

void bm_sweep(benchmark::State& state, std::uint32_t n, Sweep sweep) {
  Workload w(n);
  std::uint64_t t = 0;
  for (; t < kWarmupTicks; ++t) (void)w.tick(t, sweep);
  SweepTotals tot;
  std::uint64_t ticks = 0;
  for (auto _ : state) {
    const TickCost c = w.tick(t++, sweep);
    tot.add(c);
    ++ticks;
    state.SetIterationTime((c.update_ns + c.schedule_ns) / 1e9);
  }
  if (w.misses() != 0) state.SkipWithError("update_task missed a tracked pid");
  set_sweep_counters(state, tot, n, ticks);
}

// ---------------------------------------------------------------------------------------------
// (b) The phase detector alone.

std::vector<TaskState> make_states(std::uint32_t n) {
  std::vector<TaskState> states(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    states[i].pid = pid_of(i);
    states[i].is_ml_process = true;
    states[i].gpu_id = static_cast<std::int32_t>(gpu_of(i));
  }
  return states;
}

PhaseDetectionOptions detection_options(std::uint32_t stability) {
  PhaseDetectionOptions o;  // the defaults: io 0.3, burst 5 ms, idle 10, active 80, NCCL on
                            // (nccl_active is never sent, so the folds are as with it off)
  o.phase_stability_count = stability;
  return o;
}

struct FoldResult {
  std::uint64_t fold;
  std::uint64_t transitions;
};

FoldResult detector_fold(std::uint32_t n, std::uint64_t ticks, std::uint32_t stability) {
  PhaseDetector det(detection_options(stability));
  std::vector<TaskState> states = make_states(n);
  Fold fold;
  for (std::uint64_t t = 0; t < ticks; ++t) {
    for (std::uint32_t i = 0; i < n; ++i) write_metrics(t, i, states[i]);
    for (TaskState& s : states) {
      const Phase p = det.detect(s);
      if (p != s.current_phase) s.current_phase = p;
      fold.add(p);
    }
  }
  return {fold.acc, det.transition_count()};
}

// The same fold over the engine's decisions: the engine runs the same detector, so its phases
// must give the detector's stability-3 fold.
FoldResult engine_fold(std::uint32_t n, std::uint64_t ticks) {
  auto engine = make_engine(n);
  std::array<float, kCpus> loads{};
  Fold fold;
  for (std::uint64_t t = 0; t < ticks; ++t) {
    fill_loads(t, loads);
    engine->set_cpu_loads(loads);
    for (std::uint32_t i = 0; i < n; ++i) (void)engine->update_task(pid_of(i), update_for(t, i));
    for (std::uint32_t i = 0; i < n; ++i) fold.add(engine->schedule(pid_of(i), now_ns(t)).phase);
  }
  return {fold.acc, engine->phase_transition_count()};
}

void bm_phase_detect(benchmark::State& state, std::uint32_t stability) {
  constexpr std::uint32_t kTasks = 1'000;
  PhaseDetector det(detection_options(stability));
  std::vector<TaskState> states = make_states(kTasks);
  Fold fold;
  double ns = 0;
  std::uint64_t detects = 0;
  std::uint64_t t = 0;
  auto run_tick = [&](bool timed) {
    for (std::uint32_t i = 0; i < kTasks; ++i) write_metrics(t, i, states[i]);
    const auto t0 = Clock::now();
    for (TaskState& s : states) {
      const Phase p = det.detect(s);
      if (p != s.current_phase) s.current_phase = p;
      fold.add(p);
    }
    const auto t1 = Clock::now();
    ++t;
    if (!timed) return 0.0;
    detects += kTasks;
    return elapsed_ns(t0, t1);
  };
  for (std::uint64_t w = 0; w < kWarmupTicks; ++w) (void)run_tick(false);
  for (auto _ : state) {
    const double tick_ns = run_tick(true);
    ns += tick_ns;
    state.SetIterationTime(tick_ns / 1e9);
  }
  state.counters["ns_per_detect"] = ns / static_cast<double>(detects);
  char label[96];
  std::snprintf(label, sizeof label, "ticks=%" PRIu64 " fold=%016" PRIx64 " transitions=%" PRIu64,
                t, fold.acc, det.transition_count());
  state.SetLabel(label);
}

// ---------------------------------------------------------------------------------------------
// (c) select_cpu with 128 CPUs, the loads of tick 0.

std::optional<std::uint32_t> gpu_arg(bool with_gpu, std::uint64_t k) {
  if (!with_gpu) return std::nullopt;
  return static_cast<std::uint32_t>(k % kGpus);
}

// The sum of 1,000,000 results; nullopt when a call returned no CPU.
std::optional<std::uint64_t> select_sum(bool with_gpu) {
  const Topology topo = make_topology();
  std::array<float, kCpus> loads{};
  fill_loads(0, loads);
  std::uint64_t sum = 0;
  for (std::uint64_t k = 0; k < kSelectCalls; ++k) {
    const auto cpu = topo.select_cpu(gpu_arg(with_gpu, k), loads);
    if (!cpu) return std::nullopt;
    sum += *cpu;
  }
  return sum;
}

void bm_select_cpu(benchmark::State& state, bool with_gpu) {
  const Topology topo = make_topology();
  std::array<float, kCpus> loads{};
  fill_loads(0, loads);
  std::uint64_t k = 0;
  std::uint64_t sum = 0;
  for (auto _ : state) {
    const auto cpu = topo.select_cpu(gpu_arg(with_gpu, k++), loads);
    sum += cpu.value_or(0);
    benchmark::DoNotOptimize(sum);
  }
  state.SetLabel("calls=" + std::to_string(k) + " sum=" + std::to_string(sum));
}

void register_benchmarks() {
  for (const Size& sz : kSizes) {
    const std::string suffix = "/tasks:" + std::to_string(sz.tasks);
    const auto iters = static_cast<benchmark::IterationCount>(sz.ticks);
    const std::uint32_t n = sz.tasks;
    benchmark::RegisterBenchmark(("BM_DecisionSweep" + suffix).c_str(),
                                 [n](benchmark::State& s) { bm_sweep(s, n, Sweep::per_pid); })
        ->Iterations(iters)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (const Size& sz : kSizes) {
    const std::string suffix = "/tasks:" + std::to_string(sz.tasks);
    const auto iters = static_cast<benchmark::IterationCount>(sz.ticks);
    const std::uint32_t n = sz.tasks;
    benchmark::RegisterBenchmark(("BM_ScheduleAll" + suffix).c_str(),
                                 [n](benchmark::State& s) { bm_sweep(s, n, Sweep::schedule_all); })
        ->Iterations(iters)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (const std::uint32_t stability : {3U, 1U}) {
    benchmark::RegisterBenchmark(
        ("BM_PhaseDetect/stability:" + std::to_string(stability)).c_str(),
        [stability](benchmark::State& s) { bm_phase_detect(s, stability); })
        ->Iterations(500)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  const auto select_iters = static_cast<benchmark::IterationCount>(kSelectCalls);
  benchmark::RegisterBenchmark("BM_SelectCpu/gpu", [](benchmark::State& s) {
    bm_select_cpu(s, true);
  })->Iterations(select_iters);
  benchmark::RegisterBenchmark("BM_SelectCpu/none", [](benchmark::State& s) {
    bm_select_cpu(s, false);
  })->Iterations(select_iters);
}

// ---------------------------------------------------------------------------------------------
// Modes outside the framework.

void print_fold_line(const char* kind, std::uint32_t n, std::uint64_t ticks,
                     std::optional<std::uint32_t> stability, const FoldResult& r) {
  if (stability) {
    std::printf("%s n=%u ticks=%" PRIu64 " stability=%u fold=%016" PRIx64 " transitions=%" PRIu64
                "\n",
                kind, n, ticks, *stability, r.fold, r.transitions);
  } else {
    std::printf("%s n=%u ticks=%" PRIu64 " fold=%016" PRIx64 " transitions=%" PRIu64 "\n", kind, n,
                ticks, r.fold, r.transitions);
  }
}

void print_select_line(const char* which, const std::optional<std::uint64_t>& sum) {
  if (sum) {
    std::printf("select_cpu %s calls=%" PRIu64 " sum=%" PRIu64 "\n", which, kSelectCalls, *sum);
  } else {
    std::printf("select_cpu %s calls=%" PRIu64 " sum=none (a call returned no CPU)\n", which,
                kSelectCalls);
  }
}

int print_folds() {
  for (const Size& sz : kSizes) {
    const std::uint64_t ticks = kWarmupTicks + sz.ticks;
    for (const std::uint32_t stability : {3U, 1U}) {
      print_fold_line("folds", sz.tasks, ticks, stability,
                      detector_fold(sz.tasks, ticks, stability));
    }
  }
  for (const Size& sz : kSizes) {
    const std::uint64_t ticks = kWarmupTicks + sz.ticks;
    print_fold_line("engine-folds", sz.tasks, ticks, std::nullopt, engine_fold(sz.tasks, ticks));
  }
  print_select_line("gpu", select_sum(true));
  print_select_line("none", select_sum(false));
  return 0;
}

bool check(const char* what, std::uint64_t got, std::uint64_t want, bool hex) {
  const bool ok = got == want;
  if (hex) {
    std::printf("%-34s %016" PRIx64 "  expected %016" PRIx64 "  %s\n", what, got, want,
                ok ? "ok" : "MISMATCH");
  } else {
    std::printf("%-34s %16" PRIu64 "  expected %16" PRIu64 "  %s\n", what, got, want,
                ok ? "ok" : "MISMATCH");
  }
  return ok;
}

int check_folds() {
  const Size sz = kSizes[0];
  const std::uint64_t ticks = kWarmupTicks + sz.ticks;
  bool ok = true;
  const FoldResult s3 = detector_fold(sz.tasks, ticks, 3);
  ok &= check("detector stability=3 fold", s3.fold, kExpectedFold3, true);
  ok &= check("detector stability=3 transitions", s3.transitions, kExpectedTransitions3, false);
  const FoldResult s1 = detector_fold(sz.tasks, ticks, 1);
  ok &= check("detector stability=1 fold", s1.fold, kExpectedFold1, true);
  ok &= check("detector stability=1 transitions", s1.transitions, kExpectedTransitions1, false);
  const FoldResult e = engine_fold(sz.tasks, ticks);
  ok &= check("engine fold (stability 3)", e.fold, kExpectedFold3, true);
  ok &= check("engine transitions", e.transitions, kExpectedTransitions3, false);
  const auto gpu = select_sum(true);
  ok &= check("select_cpu(gpu) sum", gpu.value_or(0), kExpectedSelectGpuSum, false);
  const auto none = select_sum(false);
  ok &= check("select_cpu(none) sum", none.value_or(0), kExpectedSelectNoneSum, false);
  std::printf("%s\n", ok ? "folds ok" : "folds MISMATCH");
  return ok ? 0 : 1;
}

int run_sweep(std::uint32_t n, std::optional<std::uint64_t> ticks_arg, Sweep sweep) {
  std::uint64_t ticks = 10;
  for (const Size& sz : kSizes) {
    if (sz.tasks == n) ticks = sz.ticks;
  }
  if (ticks_arg) ticks = *ticks_arg;
  const double rss_before = max_rss_mib();
  const double heap_before = heap_in_use_mib();
  Workload w(n);
  // The engine's heap plus the harness's update buffer (n TaskUpdates) and decision buffer.
  const double heap_engine = heap_in_use_mib() - heap_before -
                             static_cast<double>(n) *
                                 static_cast<double>(sizeof(TaskUpdate) + sizeof(Decision)) /
                                 (1024.0 * 1024.0);
  std::uint64_t t = 0;
  for (; t < kWarmupTicks; ++t) (void)w.tick(t, sweep);
  SweepTotals tot;
  for (std::uint64_t k = 0; k < ticks; ++k) tot.add(w.tick(t++, sweep));
  const double ops = static_cast<double>(ticks) * static_cast<double>(n);
  const double ns_dec = tot.schedule_ns / ops;
  const double tick_ns = (tot.update_ns + tot.schedule_ns) / static_cast<double>(ticks);
  std::printf("sweep=%s n=%u ticks=%" PRIu64 " (+%" PRIu64 " warm-up) schedule_calls=%" PRIu64 "\n",
              sweep == Sweep::per_pid ? "schedule" : "schedule_all", n, ticks, kWarmupTicks,
              (ticks + kWarmupTicks) * n);
  std::printf(
      "ns_per_decision=%.1f ns_per_update=%.1f tick_ms=%.3f ticks_per_s=%.0f "
      "decisions_per_s=%.3g\n",
      ns_dec, tot.update_ns / ops, tick_ns / 1e6, 1e9 / tick_ns, 1e9 / ns_dec);
  std::printf("allocs_per_decision=%.4f allocs_per_update=%.4f update_misses=%" PRIu64 "\n",
              static_cast<double>(tot.schedule_allocs) / ops,
              static_cast<double>(tot.update_allocs) / ops, w.misses());
  std::printf(
      "peak_rss_mib=%.1f rss_before_workload_mib=%.1f rss_after_engine_mib=%.1f "
      "engine_heap_mib=%.2f engine_tasks=%zu transitions=%" PRIu64 "\n",
      max_rss_mib(), rss_before, w.rss_after_engine_mib(), heap_engine, w.engine().task_count(),
      w.engine().phase_transition_count());
  return w.misses() == 0 ? 0 : 1;
}

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  if (s.empty()) return std::nullopt;
  std::uint64_t v = 0;
  for (const char ch : s) {
    if (ch < '0' || ch > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(ch - '0');
  }
  return v;
}

int usage_error(std::string_view arg) {
  std::fprintf(stderr,
               "bench_engine: bad argument '%.*s'\n"
               "usage: bench_engine [--print-folds | --check-folds | --sweep=N [--ticks=T] "
               "[--schedule-all] | <benchmark flags>]\n",
               static_cast<int>(arg.size()), arg.data());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<std::uint64_t> sweep_n;
  std::optional<std::uint64_t> ticks;
  Sweep sweep = Sweep::per_pid;
  std::optional<std::string_view> unknown;  // only an error in --sweep mode
  const std::span<char*> args(argv, static_cast<std::size_t>(argc));
  for (std::size_t k = 1; k < args.size(); ++k) {
    const std::string_view a = args[k];
    if (a == "--print-folds") return print_folds();
    if (a == "--check-folds") return check_folds();
    if (a.starts_with("--sweep=")) {
      sweep_n = parse_u64(a.substr(8));
      if (!sweep_n || *sweep_n == 0 || *sweep_n > 65'536) return usage_error(a);
    } else if (a.starts_with("--ticks=")) {
      ticks = parse_u64(a.substr(8));
      if (!ticks) return usage_error(a);
    } else if (a == "--schedule-all") {
      sweep = Sweep::schedule_all;
    } else if (!unknown) {
      unknown = a;  // may be a Google Benchmark flag
    }
  }
  if (sweep_n && unknown) return usage_error(*unknown);
  if (sweep_n) return run_sweep(static_cast<std::uint32_t>(*sweep_n), ticks, sweep);

  register_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
