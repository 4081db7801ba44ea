#include "workload/cli.hpp"

#include <unistd.h>

#include <string>
#include <thread>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "common/version.hpp"
#include "workload/launcher.hpp"
#include "workload/nccl_barrier.hpp"
#include "workload/noise.hpp"
#include "workload/options.hpp"

namespace zernel::workload {
namespace {

// Longest phase accepted: an hour, so that ms -> ns cannot overflow.
constexpr double kMaxPhaseMs = 3'600'000;

void add_ms(CLI::App& app, const char* name, double& value, const char* what) {
  const CLI::Validator ms_range(
      [](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v) || !(v >= 0 && v <= kMaxPhaseMs)) {
          return fmt::format("{} is not a duration from 0 to {} ms", text, kMaxPhaseMs);
        }
        return {};
      },
      "MS in [0, 3600000]");
  app.add_option(name, value, what)->check(ms_range)->capture_default_str();
}

int usage_error(const std::string& msg) {
  fmt::print(stderr, "zernel-workload: {}\nRun with --help for more information.\n", msg);
  return kExitUsage;
}

}  // namespace

int run_cli(int argc, char** argv) {
  JobOptions job;
  NoiseOptions noise;
  const unsigned cpus = std::thread::hardware_concurrency();
  noise.threads = cpus > 0 ? static_cast<int>(cpus) : 1;

  CLI::App app{
      "zernel-workload: a synthetic ML training job for testing zernel-scheduler.\n"
      "Ranks with DataLoader worker processes (real file reads, CPU decode), GPU steps,\n"
      "an NCCL-like all-reduce between ranks in /dev/shm/nccl-*, and an optimizer step.\n"
      "Prints one JSON summary line at exit. See docs/workload.md."};
  app.set_version_flag("--version,-V", fmt::format("zernel-workload {}", kVersion));
  app.add_option("--ranks", job.ranks, "Rank (main) processes, one GPU context each")
      ->check(CLI::Range(1, kMaxRanks))
      ->capture_default_str();
  app.add_option("--workers", job.workers,
                 "DataLoader worker processes per rank (0: the rank loads batches itself)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--steps", job.steps, "Training steps per rank")
      ->check(CLI::Range(1, 100'000'000))
      ->capture_default_str();
  app.add_option("--warmup-steps", job.warmup_steps,
                 "First steps of each rank left out of the statistics (less than --steps)")
      ->check(CLI::Range(0, 100'000'000))
      ->capture_default_str();
  add_ms(app, "--data-ms", job.data_ms, "CPU time a worker spends decoding one batch (ms)");
  add_ms(app, "--gpu-ms", job.gpu_ms, "GPU time of forward + backward per step (ms)");
  add_ms(app, "--launch-cpu-ms", job.launch_cpu_ms,
         "CPU time the rank spends between forward + backward's kernel launches, before their "
         "sync (a framework's host work; ms)");
  app.add_option("--kernels", job.kernels,
                 "Kernels per step that forward + backward's device time is launched as, each "
                 "of --gpu-ms / N (a launch-bound job: thousands of small kernels); 0: one per "
                 "25 ms")
      ->check(CLI::Range(0, 1'000'000))
      ->capture_default_str();
  add_ms(app, "--nccl-ms", job.nccl_ms,
         "All-reduce time once every rank has reached the collective (ms)");
  add_ms(app, "--optimizer-ms", job.optimizer_ms,
         "Optimizer step: ~1 ms rounds of a CPU burst and a tiny GPU kernel + sync (ms)");
  app.add_option("--prefetch-factor", job.prefetch_factor, "Batches queued ahead per worker")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_flag("--sync-spin", job.sync_spin,
               "Each rank's GPU syncs spin on a CPU until the GPU is done (CU_CTX_SCHED_SPIN, the "
               "driver's default while a process's threads do not outnumber the CPUs) instead of "
               "sleeping (CU_CTX_SCHED_BLOCKING_SYNC, the default here)");
  app.add_option("--batch-kib", job.batch_kib, "Bytes read from the dataset per batch (KiB)")
      ->check(CLI::Range(4, 1024 * 1024))
      ->capture_default_str();
  app.add_option("--data-dir", job.data_dir,
                 "Where the temporary dataset is made (default: $TMPDIR, else /var/tmp)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--truth-log", job.truth_log,
                 "Write every process's true phase changes as JSON lines: "
                 "{\"t_ns\": CLOCK_MONOTONIC ns, \"pid\": N, \"phase\": \"GpuCompute\"}");
  app.add_option("--step-log", job.step_log,
                 "At the end, write every rank's steps as JSON lines: "
                 "{\"rank\": 0, \"step\": 3, \"step_ms\": 52.1, \"data_wait_ms\": 2.4, "
                 "\"warmup\": false}");
  app.add_flag("--helpers", job.helpers,
               "Run each rank's helper threads beside its main thread: a reader, a checkpoint "
               "writer, a logger, a metrics exporter and an NCCL-like proxy (docs/workload.md)");
  app.add_flag("--pin-memory", job.pin_memory,
               "Take each rank's batches through a pin-memory thread, as PyTorch's "
               "pin_memory=True does (needs --workers 1 or more)");
  app.add_flag("--emulated-gpu", job.emulated_gpu,
               "Use the project's emulated GPU (<bin>/../lib/fake/libcuda.so.1, or "
               "$ZERNEL_FAKE_LIB_DIR) instead of the system's libcuda.so.1");

  CLI::App* noise_cmd = app.add_subcommand(
      "noise", "Run CPU hogs as a noisy neighbour; prints one JSON summary line at exit");
  noise_cmd->add_option("--threads", noise.threads, "Spinning threads (default: one per CPU)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  noise_cmd->add_option("--seconds", noise.seconds, "Run time; 0 = until SIGINT/SIGTERM")
      ->check(CLI::Range(0.0, 31'536'000.0))
      ->capture_default_str();
  app.require_subcommand(0, 1);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }

  if (noise_cmd->parsed()) {
    // Job options make no sense for the noise mode: refuse them rather than ignore them.
    for (const CLI::Option* opt : app.get_options()) {
      if (opt->count() > 0 && opt->get_name() != "--help") {
        return usage_error(
            fmt::format("{} is an option of the training job, not of noise", opt->get_name()));
      }
    }
    return run_noise(noise);
  }
  if (job.pin_memory && job.workers == 0) {
    return usage_error("--pin-memory needs DataLoader workers (--workers 1 or more)");
  }
  if (job.warmup_steps >= job.steps) {
    return usage_error(fmt::format("--warmup-steps ({}) must be less than --steps ({})",
                                   job.warmup_steps, job.steps));
  }
  return run_job(job);
}

}  // namespace zernel::workload
