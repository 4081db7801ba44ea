#include "collect/tick_builder.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "support/temp_tree.hpp"

namespace zernel::collect {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kTick = 100 * kMs;
constexpr std::uint64_t kStart = 1000;  // every fake process's start time, unless said otherwise

std::string stat_text(std::uint32_t pid, char state, std::uint64_t utime, std::uint64_t starttime,
                      std::uint32_t threads) {
  return std::to_string(pid) + " (py) thr) " + state + " 1 1 1 0 -1 4194560 0 0 0 0 " +
         std::to_string(utime) + " 0 0 0 20 0 " + std::to_string(threads) + " 0 " +
         std::to_string(starttime) + " 1000 10 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0" +
         " 0 0 0 0 0 0 0 0 0 0\n";
}

// A fabricated /proc: each process has stat (single-threaded), task/, maps, fd/, and optionally
// its main thread's syscall and schedstat.
class FakeProc : public test_support::TempTree {
 public:
  FakeProc() : TempTree("zernel-tick") {}
  void process(std::uint32_t pid, char state = 'S', std::uint64_t utime = 0,
               std::uint64_t starttime = kStart) const {
    const std::string d = std::to_string(pid);
    write(d + "/stat", stat_text(pid, state, utime, starttime, 1));
    write(d + "/task/" + d + "/stat", stat_text(pid, state, utime, starttime, 1));
    if (!fs::exists(path(d + "/maps"))) write(d + "/maps", "");
    fs::create_directories(path(d + "/fd"));
  }
  void syscall(std::uint32_t pid, const std::string& text) const {
    write(std::to_string(pid) + "/syscall", text);
  }
  void schedstat(std::uint32_t pid, std::uint64_t run_ns, std::uint64_t wait_ns) const {
    write(std::to_string(pid) + "/schedstat",
          std::to_string(run_ns) + " " + std::to_string(wait_ns) + " 7\n");
  }
  void gone(std::uint32_t pid) const { remove(std::to_string(pid)); }
};

// The probes as a test sets them: a sample per pid, and a hook run on each read.
class FakeProbes final : public ProbeSource {
 public:
  std::map<std::uint32_t, ProbeSample> samples;
  bool futex = true;
  std::function<void(std::uint32_t)> on_read;
  std::vector<std::uint32_t> reads;

  std::optional<ProbeSample> read(std::uint32_t pid, std::uint64_t /*now_ns*/) override {
    reads.push_back(pid);
    if (on_read) on_read(pid);
    auto it = samples.find(pid);
    if (it == samples.end()) return std::nullopt;
    return it->second;
  }
  [[nodiscard]] bool counts_futex_waits() const override { return futex; }
};

struct Fixture {
  FakeProc proc;
  std::uint64_t clock_ns = 10'000 * kMs;  // what the builder reads as "now" for probe stamps
  TickBuilder builder{options()};

  TickBuilder::Options options() {
    TickBuilder::Options o;
    o.signals.proc_root = proc.root();
    o.signals.clock_ticks_per_s = 100;
    o.signals.nccl_check_every = 1;
    o.signals.keep_files_open = false;  // a fabricated tree: see SignalsOptions
    o.clock = [this] { return clock_ns; };
    return o;
  }

  TickResult tick(const std::vector<TrackedProcess>& procs, std::uint64_t now_ns,
                  const GpuUtilization* gpu = nullptr, ProbeSource* probes = nullptr,
                  const std::unordered_map<std::uint32_t, policy::Phase>* phases = nullptr,
                  bool complete = true) {
    TickInputs in;
    in.processes = procs;
    in.complete = complete;
    in.now_ns = now_ns;
    in.tick_ns = kTick;
    in.gpu = gpu;
    in.probes = probes;
    in.event_phases = phases;
    return builder.build(in);
  }
};

TrackedProcess owner(std::uint32_t pid, bool has_workers = false) {
  TrackedProcess t;
  t.pid = pid;
  t.role = ProcessRole::gpu_owner;
  t.gpu = 0;
  t.start = kStart;
  t.has_workers = has_workers;
  return t;
}

TrackedProcess worker(std::uint32_t pid) {
  TrackedProcess t;
  t.pid = pid;
  t.role = ProcessRole::dataloader_worker;
  t.start = kStart;
  return t;
}

TrackedProcess matched(std::uint32_t pid) {
  TrackedProcess t;
  t.pid = pid;
  t.start = kStart;
  return t;
}

const ProcessTick* find(const TickResult& r, std::uint32_t pid) {
  for (const ProcessTick& p : r.updates) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

TEST(TickBuilder, gpu_owner_waiting_on_its_workers_reads_as_input_wait_and_workers_as_busy) {
  Fixture f;
  f.proc.process(100);
  f.proc.syscall(100, "0 0x5 0x7f 0x4 0 0 0 0x7ffc 0x7f12\n");  // read on the workers' pipe
  f.proc.process(101, 'S');
  f.proc.schedstat(101, 10 * kMs, 0);
  f.proc.process(102, 'R');
  f.proc.schedstat(102, 0, 0);
  const std::vector<TrackedProcess> procs = {worker(102), owner(100, true), worker(101)};

  const TickResult r0 = f.tick(procs, 5000 * kMs);
  ASSERT_EQ(r0.updates.size(), 3U);
  EXPECT_TRUE(r0.gone.empty());
  EXPECT_EQ(r0.updates[0].pid, 100U);  // by pid, whatever the order given
  EXPECT_EQ(r0.updates[2].pid, 102U);
  const ProcessTick* o = find(r0, 100);
  EXPECT_EQ(o->update.io_wait_fraction, 1.0F);
  EXPECT_EQ(o->update.futex_wait_count, 0U);
  // A sleeping worker's first schedstat read is only a baseline; a runnable one is busy now.
  EXPECT_FALSE(find(r0, 101)->update.cpu_fraction.has_value());
  EXPECT_EQ(find(r0, 102)->update.cpu_fraction, 1.0F);

  // 100 ms later worker 101 ran 30 ms and waited 20 ms for a CPU: busy half the interval.
  f.proc.schedstat(101, 40 * kMs, 20 * kMs);
  const TickResult r1 = f.tick(procs, 5100 * kMs);
  ASSERT_NE(find(r1, 101), nullptr);
  ASSERT_TRUE(find(r1, 101)->update.cpu_fraction.has_value());
  EXPECT_FLOAT_EQ(*find(r1, 101)->update.cpu_fraction, 0.5F);
}

TEST(TickBuilder, main_thread_input_wait_counts_only_with_workers_and_futex_wait_counts_one) {
  Fixture f;
  f.proc.process(100);
  f.proc.syscall(100, "7 0x1 0x2 0x3 0 0 0 0x7ffc 0x7f12\n");  // poll
  f.proc.process(200);
  f.proc.syscall(200, "202 0x7f 0x80 0 0 0 0 0x7ffc 0x7f12\n");  // futex
  const TickResult r = f.tick({owner(100, false), owner(200, true)}, 5000 * kMs);
  ASSERT_EQ(r.updates.size(), 2U);
  EXPECT_FALSE(find(r, 100)->update.io_wait_fraction.has_value());  // no workers: not input
  EXPECT_EQ(find(r, 100)->update.futex_wait_count, 0U);
  EXPECT_FALSE(find(r, 200)->update.io_wait_fraction.has_value());
  EXPECT_EQ(find(r, 200)->update.futex_wait_count, 1U);
}

TEST(TickBuilder, main_thread_wait_is_read_for_gpu_owners_only) {
  Fixture f;
  f.proc.process(300);
  f.proc.syscall(300, "202 0x7f 0x80 0 0 0 0 0x7ffc 0x7f12\n");
  const TickResult r = f.tick({matched(300)}, 5000 * kMs);
  ASSERT_EQ(r.updates.size(), 1U);
  EXPECT_FALSE(r.updates[0].update.futex_wait_count.has_value());
}

TEST(TickBuilder, probes_in_a_long_sync_give_burst_zero_and_gpu_floor_100) {
  Fixture f;
  f.proc.process(100, 'S');
  f.proc.syscall(100, "running\n");
  FakeProbes probes;
  ProbeSample p;
  p.in_sync = true;
  p.in_sync_since_ns = f.clock_ns - (50 * kMs);  // 50 ms >= kLongSyncNs
  p.last_sync_return_ns = f.clock_ns - (60 * kMs);
  p.futex_waits_delta = 9;
  probes.samples[100] = p;
  TrackedProcess t = owner(100);
  t.probed = true;
  const TickResult r = f.tick({t}, 5000 * kMs, nullptr, &probes);
  ASSERT_EQ(r.updates.size(), 1U);
  const policy::TaskUpdate& u = r.updates[0].update;
  EXPECT_EQ(u.cpu_burst_duration_ns, 0U);
  EXPECT_EQ(u.gpu_utilization, 100);
  EXPECT_EQ(u.gpu_wait_blocks, true);  // its main thread sleeps (S)
  EXPECT_EQ(u.last_gpu_sync_ns, f.clock_ns - (60 * kMs));
  // Running, and no futex wait of the main thread: the main thread's 0 beats the probes' 9.
  EXPECT_EQ(u.futex_wait_count, 0U);
}

TEST(TickBuilder, probes_after_a_short_sync_give_the_burst_since_the_return) {
  Fixture f;
  f.proc.process(100, 'R');
  f.proc.syscall(100, "running\n");
  FakeProbes probes;
  ProbeSample p;
  p.last_sync_return_ns = f.clock_ns - (1 * kMs);
  p.cpu_burst_ns = 800'000;
  p.sync_time_delta_ns = 20 * kMs;  // a fifth of the interval in syncs
  p.interval_ns = kTick;
  p.main_futex_wait_ns = f.clock_ns - (10 * kMs);  // a wait loop's futex wait, 10 ms ago
  probes.samples[100] = p;
  TrackedProcess t = owner(100);
  t.probed = true;
  const TickResult r = f.tick({t}, 5000 * kMs, nullptr, &probes);
  ASSERT_EQ(r.updates.size(), 1U);
  const policy::TaskUpdate& u = r.updates[0].update;
  EXPECT_EQ(u.cpu_burst_duration_ns, 800'000U);
  EXPECT_EQ(u.gpu_utilization, 20);
  EXPECT_FALSE(u.gpu_wait_blocks.has_value());
  EXPECT_EQ(u.last_gpu_sync_ns, f.clock_ns - (1 * kMs));
  EXPECT_EQ(u.futex_wait_count, 1U);  // running within kFutexLoopNs of a futex wait
}

TEST(TickBuilder, probes_are_read_only_for_probed_processes_and_futex_counts_only_when_counted) {
  Fixture f;
  f.proc.process(300);
  f.proc.process(301);
  FakeProbes probes;
  ProbeSample p;
  p.futex_waits_delta = 42;
  probes.samples[300] = p;
  probes.samples[301] = p;
  TrackedProcess probed = matched(300);
  probed.probed = true;
  TickResult r = f.tick({probed, matched(301)}, 5000 * kMs, nullptr, &probes);
  EXPECT_EQ(probes.reads, std::vector<std::uint32_t>{300});
  EXPECT_EQ(find(r, 300)->update.futex_wait_count, 42U);
  EXPECT_FALSE(find(r, 301)->update.futex_wait_count.has_value());
  probes.futex = false;
  r = f.tick({probed, matched(301)}, 5100 * kMs, nullptr, &probes);
  EXPECT_FALSE(find(r, 300)->update.futex_wait_count.has_value());
}

// A rank whose phases come from events: the probes' figures would feed only the periodic rules,
// so they are not read (each read is map lookups and a schedstat in the daemon's loop).
TEST(TickBuilder, probes_are_not_read_for_a_process_whose_phases_come_from_events) {
  Fixture f;
  f.proc.process(100);
  f.proc.process(101);
  FakeProbes probes;
  ProbeSample p;
  p.futex_waits_delta = 7;
  p.last_sync_return_ns = 9'000 * kMs;
  probes.samples[100] = p;
  probes.samples[101] = p;
  TrackedProcess events = owner(100);
  events.probed = true;
  events.event_role = true;
  events.sample = SampleMode::cpu_time;
  TrackedProcess periodic = owner(101);
  periodic.probed = true;
  const std::unordered_map<std::uint32_t, policy::Phase> phases = {
      {100, policy::Phase::gpu_compute}};
  const TickResult r = f.tick({events, periodic}, 5000 * kMs, nullptr, &probes, &phases);
  EXPECT_EQ(probes.reads, std::vector<std::uint32_t>{101});
  EXPECT_EQ(find(r, 100)->update.event_phase, policy::Phase::gpu_compute);
  EXPECT_FALSE(find(r, 100)->update.last_gpu_sync_ns.has_value());
  EXPECT_EQ(find(r, 101)->update.last_gpu_sync_ns, 9'000 * kMs);
}

TEST(TickBuilder, nvml_per_process_figures_win_and_the_device_figure_is_the_fallback) {
  Fixture f;
  f.proc.process(100);
  f.proc.process(101);
  f.proc.process(300);
  TrackedProcess on_gpu = matched(300);  // matched by name, on GPU 0: not the GPU's owner
  on_gpu.gpu = 0;
  const std::vector<TrackedProcess> procs = {owner(100), owner(101), on_gpu};
  GpuUtilization gpu;
  gpu.per_process_ok = true;
  gpu.per_process[100] = 70;
  gpu.per_process[300] = 250;  // clamped
  gpu.device = {90};
  TickResult r = f.tick(procs, 5000 * kMs, &gpu);
  EXPECT_EQ(find(r, 100)->update.gpu_utilization, 70);
  EXPECT_EQ(find(r, 101)->update.gpu_utilization, 0);  // NVML saw none of its work
  EXPECT_EQ(find(r, 300)->update.gpu_utilization, 100);

  // A device did not answer per process: owners get their device's figure, others 0.
  gpu.per_process_ok = false;
  gpu.per_process.clear();
  r = f.tick(procs, 5100 * kMs, &gpu);
  EXPECT_EQ(find(r, 100)->update.gpu_utilization, 90);
  EXPECT_EQ(find(r, 101)->update.gpu_utilization, 90);
  EXPECT_EQ(find(r, 300)->update.gpu_utilization, 0);

  // No NVML at all: 0.
  r = f.tick(procs, 5200 * kMs);
  EXPECT_EQ(find(r, 100)->update.gpu_utilization, 0);
}

TEST(TickBuilder, a_runnable_long_sync_on_an_idle_gpu_is_not_blocked_when_nvml_measures) {
  Fixture f;
  f.proc.process(100, 'R');
  f.proc.syscall(100, "running\n");
  FakeProbes probes;
  ProbeSample p;
  p.in_sync = true;
  p.in_sync_since_ns = f.clock_ns - (50 * kMs);
  p.last_sync_return_ns = f.clock_ns - (60 * kMs);
  p.last_burst_ns = 300'000;
  p.interval_ns = kTick;
  probes.samples[100] = p;
  TrackedProcess t = owner(100);
  t.probed = true;
  GpuUtilization gpu;
  gpu.per_process_ok = true;
  gpu.per_process[100] = 10;  // measured: the GPU work is done
  gpu.device = {95};
  TickResult r = f.tick({t}, 5000 * kMs, &gpu, &probes);
  EXPECT_EQ(r.updates[0].update.cpu_burst_duration_ns, 300'000U);
  EXPECT_EQ(r.updates[0].update.gpu_utilization, 10);
  // The device's figure is not a measurement of this process: the sync still reads as blocked.
  gpu.per_process_ok = false;
  gpu.per_process.clear();
  r = f.tick({t}, 5100 * kMs, &gpu, &probes);
  EXPECT_EQ(r.updates[0].update.cpu_burst_duration_ns, 0U);
  EXPECT_EQ(r.updates[0].update.gpu_utilization, 100);
}

TEST(TickBuilder, cpu_fraction_is_cpu_time_over_the_tick_and_goes_to_the_tenant_account) {
  Fixture f;
  f.proc.process(300, 'S', 10);
  TickResult r = f.tick({matched(300)}, 5000 * kMs);
  EXPECT_FALSE(r.updates[0].update.cpu_fraction.has_value());
  EXPECT_FALSE(r.updates[0].cpu_time_ns.has_value());
  f.proc.process(300, 'S', 15);  // 5 ticks of 10 ms
  r = f.tick({matched(300)}, 5100 * kMs);
  ASSERT_TRUE(r.updates[0].update.cpu_fraction.has_value());
  EXPECT_FLOAT_EQ(*r.updates[0].update.cpu_fraction, 0.5F);
  EXPECT_EQ(r.updates[0].cpu_time_ns, 50 * kMs);
}

TEST(TickBuilder, phases_from_events_go_to_processes_the_rules_follow) {
  Fixture f;
  f.proc.process(100);
  f.proc.process(101);
  f.proc.process(300);
  TrackedProcess a = owner(100);
  a.event_role = true;
  TrackedProcess b = owner(101);
  b.event_role = true;
  const std::unordered_map<std::uint32_t, policy::Phase> phases = {
      {100, policy::Phase::gpu_compute}, {300, policy::Phase::gpu_compute}};
  const TickResult r = f.tick({a, b, matched(300)}, 5000 * kMs, nullptr, nullptr, &phases);
  EXPECT_EQ(find(r, 100)->update.event_phase, policy::Phase::gpu_compute);
  EXPECT_EQ(find(r, 101)->update.event_phase, policy::Phase::unknown);  // none yet
  EXPECT_FALSE(find(r, 300)->update.event_phase.has_value());           // periodic rules
}

TEST(TickBuilder, a_pid_held_by_a_new_process_is_gone_and_its_worker_baseline_starts_afresh) {
  Fixture f;
  f.proc.process(101);
  f.proc.schedstat(101, 10 * kMs, 0);
  TickResult r = f.tick({worker(101)}, 5000 * kMs);
  ASSERT_EQ(r.updates.size(), 1U);

  // Another process has pid 101 now (a later start time than the one registered).
  f.proc.process(101, 'S', 0, kStart + 500);
  f.proc.schedstat(101, 20 * kMs, 0);
  r = f.tick({worker(101)}, 5100 * kMs);
  EXPECT_TRUE(r.updates.empty());
  EXPECT_EQ(r.gone, std::vector<std::uint32_t>{101});

  // Registered again with its own start time: its first schedstat read is a baseline again.
  TrackedProcess again = worker(101);
  again.start = kStart + 500;
  r = f.tick({again}, 5200 * kMs);
  ASSERT_EQ(r.updates.size(), 1U);
  EXPECT_FALSE(r.updates[0].update.cpu_fraction.has_value());
}

TEST(TickBuilder, a_pid_replaced_before_its_first_sample_is_gone) {
  Fixture f;
  f.proc.process(100, 'S', 0, kStart + 7);  // not the process registered with kStart
  f.proc.process(300, 'S', 0, kStart);
  TrackedProcess unknown_start = matched(300);
  unknown_start.start = 0;  // registered without a start time: any process with the pid is it
  const TickResult r = f.tick({owner(100), unknown_start}, 5000 * kMs);
  EXPECT_EQ(r.gone, std::vector<std::uint32_t>{100});
  ASSERT_EQ(r.updates.size(), 1U);
  EXPECT_EQ(r.updates[0].pid, 300U);
}

TEST(TickBuilder, forget_drops_a_worker_baseline) {
  Fixture f;
  f.proc.process(101);
  f.proc.schedstat(101, 10 * kMs, 0);
  (void)f.tick({worker(101)}, 5000 * kMs);
  f.builder.forget(101);
  f.proc.schedstat(101, 60 * kMs, 0);
  const TickResult r = f.tick({worker(101)}, 5100 * kMs);
  EXPECT_FALSE(r.updates[0].update.cpu_fraction.has_value());
}

// A tick that lists only the processes it samples (TickInputs::complete false) keeps what it
// knows of the others: a worker left out of it is measured at its next tick from its last
// one, as if skipped. A complete tick that leaves it out forgets it.
TEST(TickBuilder, a_tick_that_lists_only_what_it_samples_keeps_the_others_baselines) {
  Fixture f;
  f.proc.process(100);
  f.proc.process(101);
  f.proc.schedstat(101, 10 * kMs, 0);
  (void)f.tick({matched(100), worker(101)}, 5000 * kMs);
  const TickResult partial = f.tick({matched(100)}, 5100 * kMs, nullptr, nullptr, nullptr, false);
  ASSERT_EQ(partial.updates.size(), 1U);
  EXPECT_EQ(partial.updates[0].pid, 100U);
  f.proc.schedstat(101, 60 * kMs, 0);
  const TickResult r = f.tick({matched(100), worker(101)}, 5200 * kMs);
  const ProcessTick* w = find(r, 101);
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->update.cpu_fraction.has_value());
  EXPECT_NEAR(*w->update.cpu_fraction, 0.25F, 1e-4F) << "50 ms busy in the 200 ms since 5,000";
  (void)f.tick({matched(100)}, 5300 * kMs);  // complete, without the worker: forgotten
  f.proc.schedstat(101, 70 * kMs, 0);
  const TickResult again = f.tick({matched(100), worker(101)}, 5400 * kMs);
  ASSERT_NE(find(again, 101), nullptr);
  EXPECT_FALSE(find(again, 101)->update.cpu_fraction.has_value());
}

TEST(TickBuilder, a_process_that_exited_is_gone_and_one_that_vanishes_mid_tick_is_not_a_crash) {
  Fixture f;
  f.proc.process(100);
  f.proc.syscall(100, "running\n");
  f.proc.process(300);
  f.proc.process(400);
  TrackedProcess t = owner(100);
  t.probed = true;
  FakeProbes probes;
  ProbeSample p;
  p.futex_waits_delta = 3;
  probes.samples[100] = p;
  // Process 100 exits between its stat read and its main thread's syscall read.
  probes.on_read = [&](std::uint32_t pid) { f.proc.gone(pid); };
  f.proc.gone(400);
  const TickResult r = f.tick({t, matched(300), matched(400)}, 5000 * kMs, nullptr, &probes);
  EXPECT_EQ(r.gone, std::vector<std::uint32_t>{400});
  ASSERT_EQ(r.updates.size(), 2U);
  // Its syscall file went with it: the probes' count stands (the next tick reports it gone).
  EXPECT_EQ(find(r, 100)->update.futex_wait_count, 3U);
  const TickResult next = f.tick({t, matched(300)}, 5100 * kMs, nullptr, &probes);
  EXPECT_EQ(next.gone, std::vector<std::uint32_t>{100});
}

TEST(TickBuilder, a_truncated_stat_leaves_the_process_in_place_with_nothing_from_stat) {
  Fixture f;
  f.proc.process(300, 'S', 10);
  (void)f.tick({matched(300)}, 5000 * kMs);
  f.proc.write("300/stat", "300 (py");
  TickResult r = f.tick({matched(300)}, 5100 * kMs);
  EXPECT_TRUE(r.gone.empty());
  ASSERT_EQ(r.updates.size(), 1U);
  EXPECT_FALSE(r.updates[0].stat_read);
  EXPECT_FALSE(r.updates[0].update.cpu_fraction.has_value());
  EXPECT_FALSE(r.updates[0].update.nccl_active.has_value());
  EXPECT_EQ(r.updates[0].update.gpu_utilization, 0);
  // Readable again: the interval since the last good read.
  f.proc.process(300, 'S', 30);
  r = f.tick({matched(300)}, 5200 * kMs);
  EXPECT_TRUE(r.updates[0].stat_read);
  EXPECT_EQ(r.updates[0].cpu_time_ns, 200 * kMs);
}

TEST(TickBuilder, a_truncated_schedstat_gives_no_busy_fraction_and_keeps_the_baseline) {
  Fixture f;
  f.proc.process(101);
  f.proc.schedstat(101, 10 * kMs, 0);
  (void)f.tick({worker(101)}, 5000 * kMs);
  f.proc.write("101/schedstat", "60000000 0");  // cut short: no end of line
  TickResult r = f.tick({worker(101)}, 5100 * kMs);
  ASSERT_EQ(r.updates.size(), 1U);
  EXPECT_FALSE(r.updates[0].update.cpu_fraction.has_value());
  f.proc.write("101/schedstat", "garbage\n");
  r = f.tick({worker(101)}, 5150 * kMs);
  EXPECT_FALSE(r.updates[0].update.cpu_fraction.has_value());
  // 50 ms busy in the 200 ms since the last good read.
  f.proc.schedstat(101, 60 * kMs, 0);
  r = f.tick({worker(101)}, 5200 * kMs);
  ASSERT_TRUE(r.updates[0].update.cpu_fraction.has_value());
  EXPECT_FLOAT_EQ(*r.updates[0].update.cpu_fraction, 0.25F);
}

TEST(TickBuilder, an_odd_syscall_file_leaves_the_probes_futex_count) {
  Fixture f;
  f.proc.process(100);
  f.proc.syscall(100, "not a number\n");
  FakeProbes probes;
  ProbeSample p;
  p.futex_waits_delta = 5;
  probes.samples[100] = p;
  TrackedProcess t = owner(100, true);
  t.probed = true;
  const TickResult r = f.tick({t}, 5000 * kMs, nullptr, &probes);
  ASSERT_EQ(r.updates.size(), 1U);
  EXPECT_EQ(r.updates[0].update.futex_wait_count, 5U);
  EXPECT_FALSE(r.updates[0].update.io_wait_fraction.has_value());
}

TEST(TickBuilder, runs_on_the_real_proc_for_this_process) {
  TickBuilder b;
  TrackedProcess self = owner(static_cast<std::uint32_t>(::getpid()));
  self.start = 0;  // unknown
  const std::vector<TrackedProcess> procs = {self};
  TickInputs in;
  in.processes = procs;
  in.now_ns = 1;
  in.tick_ns = kTick;
  const TickResult r = b.build(in);
  ASSERT_EQ(r.updates.size(), 1U);
  EXPECT_TRUE(r.gone.empty());
  EXPECT_TRUE(r.updates[0].stat_read);
}

}  // namespace
}  // namespace zernel::collect
