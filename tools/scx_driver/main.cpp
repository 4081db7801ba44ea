// zernel-scx-driver: loads the zernel sched_ext scheduler through the sched_ext backend, applies
// fixed decisions given on the command line, keeps re-applying them (nothing is rewritten unless
// a process's decision changed), and detaches at the end. The VM tests use it until the daemon
// drives the backend.
//
//   zernel-scx-driver --decision PID:weight=3000,preempt=1,latency_us=50,slice_us=3000,cpu=1,
//                     tenant=0:300,phase=DataLoading [--decision ...] [--run-seconds S]
//                     [--partial] [--starve-ms MS] [--inject-error-ms MS] [--rewrite]
//                     [--stats] [--verbose]
//
// Keys of a decision (all optional): weight (kernel scale, 1024 = priority 0) or priority (policy
// scale, -20..20), preempt (0/1), latency_us, slice_us, cpu (preferred CPU), tenant=SLOT:WEIGHT
// (cgroup cpu.weight scale), phase (DataLoading, GpuCompute, ... or data_loading, ...).
//
// Exit status: 0 after a clean detach; 1 when the scheduler could not be loaded or an argument is
// wrong; 2 when the kernel unloaded the scheduler during the run (the exit info is printed).
// --stats prints one JSON object on stdout at the end: counters, writes, exit info.

#include <signal.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "enforce/scx/scx_backend.hpp"
#include "policy/decision.hpp"
#include "policy/phase.hpp"
#include "policy/weight.hpp"

namespace {

using zernel::Error;
using zernel::Result;
using zernel::policy::Decision;
namespace scx = zernel::enforce::scx;

volatile sig_atomic_t g_stop = 0;
extern "C" void on_signal(int /*sig*/) { g_stop = 1; }

template <typename T>
std::optional<T> parse_num(std::string_view s) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// "PID:key=value,key=value" -> Decision.
Result<Decision> parse_decision(std::string_view spec) {
  auto bad = [&](const std::string& why) {
    return Error("--decision " + std::string(spec) + ": " + why);
  };
  auto colon = spec.find(':');
  auto pid = parse_num<std::uint32_t>(spec.substr(0, colon));
  if (!pid || *pid == 0) return bad("expected PID:key=value,...");
  Decision d;
  d.pid = *pid;
  std::string_view rest = colon == std::string_view::npos ? "" : spec.substr(colon + 1);
  while (!rest.empty()) {
    auto comma = rest.find(',');
    auto kv = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) return bad("'" + std::string(kv) + "' is not key=value");
    auto key = kv.substr(0, eq);
    auto val = kv.substr(eq + 1);
    if (key == "weight") {
      auto v = parse_num<std::uint32_t>(val);
      if (!v || *v == 0) return bad("weight must be a positive integer");
      d.weight = *v;
    } else if (key == "priority") {
      auto v = parse_num<std::int32_t>(val);
      if (!v) return bad("priority must be an integer");
      d.priority = *v;
      d.weight = zernel::policy::weight_for_priority(*v);
    } else if (key == "preempt") {
      if (val != "0" && val != "1") return bad("preempt must be 0 or 1");
      d.preempt = val == "1";
    } else if (key == "latency_us") {
      auto v = parse_num<std::uint32_t>(val);
      if (!v) return bad("latency_us must be an integer");
      d.latency_target_us = *v;
    } else if (key == "slice_us") {
      auto v = parse_num<std::uint64_t>(val);
      if (!v) return bad("slice_us must be an integer");
      d.slice_ns = *v * 1000;
    } else if (key == "cpu") {
      auto v = parse_num<std::int32_t>(val);
      if (!v) return bad("cpu must be an integer");
      d.preferred_cpu = *v;
    } else if (key == "tenant") {
      auto c = val.find(':');
      auto slot = parse_num<std::uint16_t>(val.substr(0, c));
      auto w = c == std::string_view::npos ? std::optional<std::uint32_t>(100)
                                           : parse_num<std::uint32_t>(val.substr(c + 1));
      if (!slot || *slot >= ZERNEL_MAX_TENANTS || !w) {
        return bad("tenant must be SLOT:WEIGHT with SLOT < " + std::to_string(ZERNEL_MAX_TENANTS));
      }
      d.tenant = *slot;
      d.tenant_weight = *w;
    } else if (key == "phase") {
      auto p = zernel::policy::parse_phase(val);
      if (!p) return bad("unknown phase '" + std::string(val) + "'");
      d.phase = *p;
    } else {
      return bad("unknown key '" + std::string(key) + "'");
    }
  }
  return d;
}

nlohmann::json exit_json(const std::optional<scx::ExitInfo>& e) {
  if (!e) return nullptr;
  return {
      {"kind", e->kind},
      {"kind_name", std::string(scx::exit_kind_name(e->kind))},
      {"reason", e->reason},
      {"message", e->message},
      {"exit_code", e->code},
      {"cpu", e->cpu},
      {"restart", std::string(scx::restart_advice_name(scx::restart_advice(e->kind, e->code)))},
  };
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "zernel-scx-driver: loads the zernel sched_ext scheduler and applies fixed "
      "decisions (a test driver for the sched_ext backend)"};
  std::vector<std::string> specs;
  double run_seconds = 0;
  bool partial = false;
  bool print_stats = false;
  bool verbose = false;
  std::uint64_t starve_ms = 0;
  std::uint32_t interval_ms = 100;
  std::uint64_t inject_error_ms = 0;
  bool rewrite = false;
  app.add_option("--decision", specs,
                 "PID:weight=N,priority=P,preempt=0|1,latency_us=N,slice_us=N,cpu=N,"
                 "tenant=SLOT:WEIGHT,phase=NAME (repeatable)");
  app.add_option("--run-seconds", run_seconds, "run this long, then detach (0: until SIGINT/TERM)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--partial", partial,
               "SCX_OPS_SWITCH_PARTIAL: only the decided processes move to sched_ext");
  app.add_option("--starve-ms", starve_ms, "starvation bound in ms (0: the default, 1000)");
  app.add_option("--interval-ms", interval_ms, "re-apply the decisions this often")
      ->check(CLI::Range(1U, 60000U));
  app.add_option("--inject-error-ms", inject_error_ms,
                 "tests: the scheduler calls scx_bpf_error() this long after loading");
  app.add_flag("--rewrite", rewrite,
               "tests: change every decision at each interval (its slice by 1 us, back and "
               "forth), so that each apply writes it and moves its process's generation");
  app.add_flag("--stats", print_stats, "print counters and exit info as JSON at the end");
  app.add_flag("-v,--verbose", verbose, "debug logging (libbpf included)");
  CLI11_PARSE(app, argc, argv);

  spdlog::set_default_logger(spdlog::default_logger());
  spdlog::set_level(verbose ? spdlog::level::trace : spdlog::level::info);
  spdlog::set_pattern("zernel-scx-driver: [%l] %v");

  std::vector<Decision> decisions;
  for (const auto& s : specs) {
    auto d = parse_decision(s);
    if (!d) {
      std::cerr << "zernel-scx-driver: " << d.error().message() << "\n";
      return 1;
    }
    decisions.push_back(d.value());
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  scx::Options opts;
  opts.partial = partial;
  opts.starve_ns = starve_ms * 1'000'000;
  opts.inject_error_after_ns = inject_error_ms * 1'000'000;
  auto created = scx::ScxBackend::create(opts);
  if (!created) {
    std::cerr << "zernel-scx-driver: " << created.error().message() << "\n";
    return 1;
  }
  auto& backend = *created.value();
  auto t0 = std::chrono::steady_clock::now();
  if (auto r = backend.apply(decisions); !r) {
    std::cerr << "zernel-scx-driver: " << r.error().message() << "\n";
    return 1;
  }
  spdlog::info("attached; {} decisions written", backend.write_counters().written);

  bool ejected = false;
  bool rewritten = false;  // --rewrite: the slices are 1 us longer than given
  while (g_stop == 0) {
    auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (run_seconds > 0 && elapsed >= run_seconds) break;
    timespec ts{static_cast<time_t>(interval_ms / 1000),
                static_cast<long>(interval_ms % 1000) * 1'000'000L};
    nanosleep(&ts, nullptr);
    if (!backend.running()) {
      ejected = true;
      break;
    }
    // A process that exited leaves the table, as the daemon's would: its entry is deleted.
    std::erase_if(decisions, [&](const Decision& d) {
      if (kill(static_cast<pid_t>(d.pid), 0) == 0 || errno != ESRCH) return false;
      spdlog::info("pid {} exited: forgetting its decision", d.pid);
      backend.forget(d.pid);
      return true;
    });
    if (rewrite) {
      for (auto& d : decisions) d.slice_ns = rewritten ? d.slice_ns - 1000 : d.slice_ns + 1000;
      rewritten = !rewritten;
    }
    if (auto r = backend.apply(decisions); !r) {
      spdlog::error("{}", r.error().message());
      ejected = !backend.running();
      break;
    }
  }
  auto attached_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto stats = backend.stats();
  // The task storage of each decided process's main thread (still alive), before the maps go.
  nlohmann::json tasks = nlohmann::json::object();
  for (const auto& d : decisions) {
    auto tc = backend.task_ctx(d.pid);
    if (!tc) continue;
    tasks[std::to_string(d.pid)] = {{"vtime", tc->vtime},
                                    {"runtime_ns", tc->runtime_ns},
                                    {"wakeups", tc->wakeups},
                                    {"last_burst_ns", tc->last_burst_ns},
                                    {"avg_burst_ns", tc->avg_burst_ns},
                                    {"tenant", tc->contrib_tenant},
                                    {"tenant_weight_added", tc->contrib_weight}};
  }
  (void)backend.shutdown();
  auto exit = backend.exit_info();
  if (ejected) {
    std::cerr << "zernel-scx-driver: the kernel unloaded the scheduler: "
              << (exit ? std::string(scx::exit_kind_name(exit->kind)) + " " + exit->reason + " " +
                             exit->message
                       : std::string("(no exit info)"))
              << "\n";
    auto dump = backend.exit_dump();
    if (!dump.empty()) std::cerr << dump << "\n";
  }

  if (print_stats) {
    nlohmann::json out;
    out["attached_s"] = attached_s;
    nlohmann::json counters = nlohmann::json::object();
    if (stats) {
      for (std::size_t i = 0; i < stats.value().size(); ++i) {
        counters[std::string(scx::kStatNames[i])] = stats.value()[i];
      }
    }
    out["stats"] = counters;
    out["tasks"] = tasks;
    const auto& w = backend.write_counters();
    out["writes"] = {{"written", w.written},
                     {"unchanged", w.unchanged},
                     {"deleted", w.deleted},
                     {"batches", w.batches},
                     {"tenant_writes", w.tenant_writes}};
    out["exit"] = exit_json(exit);
    std::cout << out.dump() << std::endl;
  }
  if (ejected) return 2;
  if (exit && exit->kind != ZERNEL_EXIT_UNREG) return 2;
  return 0;
}
