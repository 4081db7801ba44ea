#include "cli/app.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/demo.hpp"
#include "cli/info_cmd.hpp"
#include "cli/restore_cmd.hpp"
#include "common/log.hpp"
#include "common/version.hpp"
#include "config/config.hpp"
#include "daemon/daemon.hpp"
#include "daemon/signals.hpp"
#include "sys/topology_reader.hpp"

namespace zernel::cli {
namespace {

struct Args {
  std::optional<std::string> config_path;
  bool dump_config = false;
  bool demo = false;
  std::string backend = "auto";
  std::string phase_log;
  bool phase_log_threads = false;
  bool emulated_gpu = false;
  std::optional<std::string> check_path;
  std::optional<std::string> control_socket;
};

void print_warnings(const config::LoadedConfig& loaded) {
  for (const std::string& w : loaded.warnings) fmt::print(stderr, "zernel-scheduler: warning: {}\n", w);
}

std::string topology_summary(const sys::TopologyInfo& info) {
  const auto nodes = info.topology.nodes().size();
  return fmt::format("{} NUMA node{}, {} CPUs, {} NVIDIA GPU{}", nodes, nodes == 1 ? "" : "s",
                     info.topology.total_cpus(), info.gpus.size(), info.gpus.size() == 1 ? "" : "s");
}

int check_config(const Args& args) {
  const config::ConfigPath where = config::resolve_config_path(args.check_path);
  // check-config is asked about a file: even the default path must exist to be "valid".
  auto loaded = config::load_config_file(where.path, false);
  if (!loaded) {
    print_error(loaded.error().message());
    return kExitError;
  }
  print_warnings(*loaded);
  fmt::print("{}: OK ({} tenant{}, backend {})\n", where.path, loaded->config.tenants.size(),
             loaded->config.tenants.size() == 1 ? "" : "s", args.backend);
  return kExitOk;
}

int demo(const Args& args, const config::LoadedConfig& loaded) {
  DemoOptions opts;
  opts.config = loaded.config;
  opts.phase_log_path = args.phase_log;
  auto topo = sys::read_topology();
  if (topo) {
    opts.topology = topo->topology;
    opts.topology_summary = topology_summary(*topo);
  } else {
    fmt::print(stderr, "zernel-scheduler: warning: {}; assuming one node with one CPU\n",
               topo.error().message());
    opts.topology = policy::Topology::single_node(1);
    opts.topology_summary = "1 NUMA node, 1 CPU (assumed)";
  }
  auto r = run_demo(opts, stdout);
  if (!r) {
    print_error(r.error().message());
    return kExitError;
  }
  return kExitOk;
}

int run_daemon(const Args& args, const config::LoadedConfig& loaded) {
  daemon::DaemonOptions opts;
  opts.config = loaded.config;
  opts.backend = args.backend;
  opts.phase_log_path = args.phase_log;
  opts.phase_log_threads = args.phase_log_threads;
  if (args.emulated_gpu) opts.nvml_library = emulated_nvml_path();
  const config::ConfigPath where = config::resolve_config_path(args.config_path);
  opts.config_path = where.path;  // re-read on SIGHUP
  opts.config_missing_ok = !where.is_explicit();
  opts.control_socket = daemon::resolve_control_socket(args.control_socket);
  opts.control_socket_required = opts.control_socket != daemon::kDefaultControlSocket;
  auto stop = daemon::StopSignals::install();
  if (!stop) {
    print_error(stop.error().message());
    return kExitError;
  }
  auto d = daemon::Daemon::create(std::move(opts));
  if (!d) {
    print_error(d.error().message());
    return kExitError;
  }
  auto r = (*d)->run(stop->fd(), stop->reload_fd());
  if (!r) {
    print_error(r.error().message());
    return kExitError;
  }
  return kExitOk;
}

// The subcommands and what their options parse into (bound by reference: not to be moved).
struct Subcommands {
  CLI::App* check = nullptr;
  CLI::App* info = nullptr;
  bool info_json = false;
  TenantCmd tenant;
  StatusCmd status;
  TopCmd top;
  RestoreCmd restore;
  TraceCmd trace;
};

// The options of the daemon itself (and of --demo and --dump-config).
void add_daemon_options(CLI::App& app, Args& args) {
  app.add_option("--config,-c", args.config_path,
                 "Configuration file (default: $ZERNEL_SCHEDULER_CONFIG, else "
                 "/etc/zernel/scheduler.toml; a missing default file means defaults)");
  app.add_flag("--dump-config", args.dump_config,
               "Print the complete effective configuration as TOML and exit");
  app.add_flag("--demo", args.demo,
               "Run a simulated training process through the real engine and print each decision");
  app.add_option("--backend", args.backend,
                 "Enforcement backend: sched_ext (the BPF scheduler), userspace (nice, cgroup "
                 "CPU weights and affinity; needs root), observe (change nothing) or auto "
                 "(sched_ext where the kernel has it, else userspace, else observe)")
      ->check(CLI::IsMember({"auto", "sched_ext", "userspace", "observe"}))
      ->capture_default_str();
  app.add_option("--phase-log", args.phase_log,
                 "Append one JSON line per committed phase change of a process (its main "
                 "thread's): {\"t_ns\": CLOCK_MONOTONIC ns, \"pid\": N, \"phase\": "
                 "\"GpuCompute\"}; with phases from events, t_ns is the time of the event");
  app.add_flag("--phase-log-threads", args.phase_log_threads,
               "With --phase-log and phases from events: also one line per change of every "
               "thread, with its \"tid\"");
  app.add_flag("--emulated-gpu", args.emulated_gpu,
               "Use the project's emulated GPU (fake NVML next to this build, or in "
               "$ZERNEL_FAKE_LIB_DIR) instead of the real libnvidia-ml.so.1");
}

void add_subcommands(CLI::App& app, Args& args, Subcommands& sub) {
  sub.check = app.add_subcommand(
      "check-config", "Validate a configuration file without running (exit 1 when invalid)");
  sub.check->add_option("path", args.check_path,
                        "File to check (default: --config, $ZERNEL_SCHEDULER_CONFIG, "
                        "/etc/zernel/scheduler.toml)");
  sub.info = app.add_subcommand(
      "info",
      "Show what this machine offers the scheduler: kernel, sched_ext, BTF, cgroups, "
      "NVML and GPUs, NUMA, delay accounting");
  sub.info->add_flag("--json", sub.info_json, "Print one JSON object");
  sub.info->add_flag("--emulated-gpu", args.emulated_gpu, "Ask the emulated GPU's NVML");
  app.add_option(
      "--control-socket", args.control_socket,
      "Control socket for tenant/status/top/trace (default: $ZERNEL_SCHEDULER_SOCKET, else "
      "/run/zernel/scheduler.sock; an empty value disables it)");
  add_tenant_command(app, sub.tenant);
  add_status_command(app, sub.status);
  add_top_command(app, sub.top);
  add_restore_command(app, sub.restore);
  add_trace_command(app, sub.trace);
  app.require_subcommand(0, 1);
}

// The exit code of the subcommand given, or nullopt when none was (the daemon runs).
std::optional<int> run_given_subcommand(Args& args, const Subcommands& sub) {
  if (sub.info->parsed()) return run_info(args.emulated_gpu, sub.info_json);
  if (sub.check->parsed()) {
    if (!args.check_path) args.check_path = args.config_path;
    return check_config(args);
  }
  if (sub.tenant.cmd->parsed()) return run_tenant_command(sub.tenant);
  if (sub.status.cmd->parsed()) return run_status_command(sub.status);
  if (sub.top.cmd->parsed()) return run_top_command(sub.top);
  if (sub.restore.cmd->parsed()) return run_restore_command(sub.restore);
  if (sub.trace.cmd->parsed()) return run_trace_command(sub.trace);
  return std::nullopt;
}

// Loads the configuration, then dumps it, runs the demo or runs the daemon.
int run_with_config(const Args& args) {
  auto loaded = config::load_config(args.config_path);
  if (!loaded) {
    print_error(loaded.error().message());
    return kExitError;
  }
  if (auto level = log::parse_level(loaded->config.general.log_level)) log::init(*level);
  print_warnings(*loaded);
  if (!loaded->path) {
    spdlog::info("no configuration file at {}; using the defaults",
                 config::resolve_config_path(args.config_path).path);
  }

  if (args.dump_config) {
    fmt::print("{}", config::dump_config(loaded->config));
    return kExitOk;
  }
  if (args.demo) return demo(args, *loaded);

  return run_daemon(args, *loaded);
}

}  // namespace

void print_error(const std::string& msg) { fmt::print(stderr, "zernel-scheduler: {}\n", msg); }

int run(int argc, char** argv) {
  Args args;
  CLI::App app{
      "zernel-scheduler: an ML-aware CPU scheduler for GPU servers.\n"
      "It detects the phase of each ML process's training step and makes the Linux\n"
      "scheduler serve the critical path."};
  app.set_version_flag("--version,-V", fmt::format("zernel-scheduler {}", kVersion));
  add_daemon_options(app, args);
  Subcommands sub;
  add_subcommands(app, args, sub);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  if (auto code = run_given_subcommand(args, sub)) return *code;
  return run_with_config(args);
}

}  // namespace zernel::cli
