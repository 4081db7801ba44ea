#include "cli/demo.hpp"

#include <time.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "common/clock.hpp"
#include "policy/engine.hpp"
#include "telemetry/phase_log.hpp"
#include "telemetry/prometheus.hpp"
#include "telemetry/snapshot.hpp"

namespace zernel::cli {
namespace {

using policy::Phase;

constexpr std::uint32_t kDemoPid = 4242;

struct Segment {
  Phase intended;
  std::uint32_t ticks;
};

// The signals a process in `phase` shows, as the collectors would report them.
policy::TaskUpdate signals_for(Phase phase, std::uint64_t now_ns) {
  policy::TaskUpdate u;
  switch (phase) {
    case Phase::data_loading:  // waiting on reads, GPU idle, long CPU bursts decoding
      u.gpu_utilization = 4;
      u.io_wait_fraction = 0.55F;
      u.cpu_burst_duration_ns = 12'000'000;
      break;
    case Phase::gpu_compute:  // blocked in a GPU synchronisation, GPU busy
      u.gpu_utilization = 96;
      u.io_wait_fraction = 0.02F;
      u.cpu_burst_duration_ns = 0;
      u.last_gpu_sync_ns = now_ns - 1'000'000;
      break;
    case Phase::optimizer_step:  // short CPU bursts between kernel launches
      u.gpu_utilization = 35;
      u.io_wait_fraction = 0.01F;
      u.cpu_burst_duration_ns = 1'800'000;
      u.last_gpu_sync_ns = now_ns - 400'000;
      break;
    case Phase::nccl_collective:
    case Phase::unknown:
      break;
  }
  return u;
}

}  // namespace

Result<void> run_demo(const DemoOptions& opts, std::FILE* out) {
  const config::Config& cfg = opts.config;
  policy::Engine engine(config::engine_options(cfg), opts.topology);

  telemetry::PhaseLog phase_log;
  if (!opts.phase_log_path.empty()) {
    if (auto r = phase_log.open(opts.phase_log_path); !r) return r.error();
  }

  for (const config::TenantConfig& t : cfg.tenants) {
    if (auto r = engine.upsert_tenant(t.spec); !r) return r.error();
  }
  const std::uint64_t tick_ns = std::uint64_t{cfg.general.phase_eval_interval_ms} * 1'000'000;
  const std::uint64_t start_ns = monotonic_ns();
  if (auto r = engine.register_task(kDemoPid, true, 0U, start_ns); !r) return r.error();
  std::string tenant_note = "no tenant";
  if (!cfg.tenants.empty()) {
    const std::string& id = cfg.tenants.front().spec.id;
    if (auto r = engine.assign_pid(kDemoPid, id); !r) return r.error();
    tenant_note = "tenant \"" + id + "\"";
    if (!cfg.multi_tenant.enabled) tenant_note += " (multi_tenant.enabled = false: not applied)";
  }

  const std::uint32_t s = std::max<std::uint32_t>(cfg.phase_detection.phase_stability_count, 1);
  const std::array<Segment, 4> timeline = {{{Phase::data_loading, s + 2},
                                            {Phase::gpu_compute, s + 3},
                                            {Phase::optimizer_step, s + 2},
                                            {Phase::data_loading, s + 1}}};

  fmt::print(out,
             "zernel-scheduler demo: simulated training process pid {} on GPU 0, {}\n"
             "topology: {}; phase_stability_count {}, one tick = {} ms (simulated)\n\n",
             kDemoPid, tenant_note, opts.topology_summary, cfg.phase_detection.phase_stability_count,
             cfg.general.phase_eval_interval_ms);
  fmt::print(out, "{:>4} {:>6} {:>4} {:>7} {:>8}  {:<14} {:<14} {:>4} {:>6} {:>7} {:>10} {:>8} {:>4}\n",
             "tick", "t_ms", "gpu%", "io_wait", "burst_ms", "signals look", "phase", "prio",
             "weight", "preempt", "latency_us", "slice_ms", "cpu");

  policy::PhaseDetector raw_view(cfg.phase_detection);
  std::uint32_t tick = 0;
  std::uint64_t now = start_ns;
  for (const Segment& seg : timeline) {
    for (std::uint32_t i = 0; i < seg.ticks; ++i, ++tick) {
      now = start_ns + tick_ns * (tick + 1);
      const policy::TaskUpdate u = signals_for(seg.intended, now);
      engine.update_task(kDemoPid, u);
      engine.set_cpu_loads({});
      const Phase raw = raw_view.classify(*engine.task(kDemoPid));
      const policy::Decision d = engine.schedule(kDemoPid, now);
      const policy::TaskState& st = *engine.task(kDemoPid);
      const std::optional<std::uint32_t> latency = d.latency_target();
      const std::optional<std::uint32_t> cpu = d.cpu();
      fmt::print(out,
                 "{:>4} {:>6} {:>4} {:>7.2f} {:>8.1f}  {:<14} {:<14} {:>4} {:>6} {:>7} {:>10} "
                 "{:>8} {:>4}{}\n",
                 tick, (now - start_ns) / 1'000'000, st.gpu_utilization, st.io_wait_fraction,
                 static_cast<double>(st.cpu_burst_duration_ns) / 1e6, policy::phase_name(raw),
                 policy::phase_name(d.phase), d.priority, d.weight, d.preempt ? "yes" : "no",
                 latency ? std::to_string(*latency) : "-", d.slice_ns / 1'000'000,
                 cpu ? std::to_string(*cpu) : "-", d.phase_changed ? "  <- committed" : "");
      if (d.phase_changed) phase_log.write(now, d.pid, d.phase);
    }
  }

  telemetry::Snapshot snap = telemetry::take_snapshot(engine, now, false);
  snap.backend = "demo";
  const auto pct = telemetry::phase_time_pct(snap);
  fmt::print(out, "\n{} decisions, {} committed phase changes. Time per phase:", engine.decisions_made(),
             engine.phase_transition_count());
  for (Phase p : policy::kAllPhases) {
    fmt::print(out, " {} {:.0f}%", policy::phase_name(p), pct[policy::index_of(p)]);
  }
  fmt::print(out, "\n\nPrometheus exposition of the final state:\n{}",
             telemetry::render_prometheus(snap));
  if (phase_log.errors() > 0) {
    return Error(EIO, "writing phase log " + opts.phase_log_path + ": " +
                          std::to_string(phase_log.errors()) + " lines lost");
  }
  return Ok{};
}

}  // namespace zernel::cli
