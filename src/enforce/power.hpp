#pragma once
// Power management (off by default: [power] in the config, docs/configuration.md): every GPU's SM
// clock and power limit through NVML, and the CPUs' maximum frequency through cpufreq sysfs,
// follow the dominant phase of the GPU tasks (policy/power_policy.hpp).
//
// The earlier implementation shelled out to nvidia-smi for GPU 0 only and "restored" hard-coded
// values (3.6 GHz, 1.2 GHz, 115 W). Here:
//   - At creation, PowerManager reads every original: each GPU's application clocks, maximum SM
//     clock and power limits (current, default, min, max), and each cpufreq policy's
//     scaling_max_freq with cpuinfo_min_freq / cpuinfo_max_freq
//     (SYS_ROOT/devices/system/cpu/cpufreq/policy*/).
//   - apply() changes only what differs from what it last set; a power limit is clamped into the
//     device's [min, max]; "full" puts the original back.
//   - restore() puts every original back and is idempotent (what failed stays pending for the
//     next call); the destructor calls it. Restoring a GPU goes through Nvml::restore, which
//     holds the values from before the first change.
//   - dry_run: every change is logged ("power: would set GPU 1 SM clock 1980 -> 660 MHz") and
//     none is made. Real changes are logged the same way without "would".
//   - A failed setting is logged once per GPU or policy and counted (errors()); the others go on.
//   - Crash recovery: given a SettingsJournal, the first real change (never in dry_run) writes the
//     originals of every managed GPU and cpufreq policy to it first (no journal, no change: the
//     error is counted and logged once, the next apply() retries), and a restore() that put
//     everything back removes them. The next start restores what a killed daemon left
//     (recover_settings, enforce/settings_journal.hpp).
//
// Not thread-safe: the daemon's loop owns it. The Nvml must outlive it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "config/config.hpp"
#include "enforce/settings_journal.hpp"
#include "policy/engine.hpp"
#include "policy/power_policy.hpp"
#include "sys/nvml.hpp"

namespace zernel::enforce {

struct PowerOptions {
  bool dry_run = false;
  bool manage_gpu = true;
  bool manage_cpu = true;
  std::string sys_root = "/sys";
};

class PowerManager {
 public:
  // Reads the originals. `nvml` may be null (no GPU to manage), and `journal` (then a killed
  // daemon's changes stay). Never fails: what cannot be read is not managed, with one warning each.
  PowerManager(PowerOptions opts, sys::Nvml* nvml,
               std::shared_ptr<SettingsJournal> journal = nullptr);
  ~PowerManager();
  PowerManager(const PowerManager&) = delete;
  PowerManager& operator=(const PowerManager&) = delete;

  // Moves every managed GPU and the CPUs to the plan's targets (only what changes).
  void apply(const policy::PowerPlan& plan);
  // Puts back every original this object changed. Idempotent.
  Result<void> restore();

  [[nodiscard]] std::size_t gpu_count() const { return gpus_.size(); }  // managed GPUs
  // One past the highest managed GPU index (0 without GPUs): the size of a plan's gpu_phase.
  [[nodiscard]] std::size_t gpu_index_bound() const {
    return gpus_.empty() ? 0 : std::size_t{gpus_.back().index} + 1;
  }
  [[nodiscard]] std::size_t cpu_policy_count() const { return cpus_.size(); }
  [[nodiscard]] std::uint64_t errors() const { return errors_; }
  [[nodiscard]] bool dry_run() const { return opts_.dry_run; }

 private:
  struct Gpu {
    std::uint32_t index = 0;
    std::string bus_id;
    std::uint32_t sm_max = 0;                    // MHz
    sys::ApplicationClocks original_clocks;      // application clocks before
    sys::PowerLimits limits;                     // current = the original limit
    policy::GpuPowerTarget applied;              // what this object last set (full: originals)
    bool warned = false;
  };
  struct CpuPolicy {
    std::string name;  // "policy0"
    std::string dir;
    std::uint32_t original_khz = 0;
    std::uint32_t min_khz = 0;
    std::uint32_t applied_khz = 0;  // what this object last set (== original: untouched)
    bool warned = false;
  };

  void read_gpus();
  void read_cpus();
  void apply_gpu(Gpu& g, const policy::GpuPowerTarget& target);
  void apply_cpus(policy::CpuFreqTarget target);
  Result<void> restore_gpu(Gpu& g);
  // Writes the originals to the journal before the first change; false: make no change.
  bool journal_originals();
  [[nodiscard]] SettingsOriginals originals() const;
  Result<void> set_cpu(CpuPolicy& c, std::uint32_t khz, const char* verb);
  [[nodiscard]] std::uint32_t sm_clock_of(const Gpu& g, const policy::GpuPowerTarget& t) const;
  [[nodiscard]] std::uint32_t power_mw_of(const Gpu& g, const policy::GpuPowerTarget& t) const;

  PowerOptions opts_;
  sys::Nvml* nvml_;
  std::shared_ptr<SettingsJournal> journal_;
  bool journaled_ = false;  // the originals are in journal_
  bool journal_warned_ = false;
  std::vector<Gpu> gpus_;
  std::vector<CpuPolicy> cpus_;
  std::uint64_t errors_ = 0;
};

// The daemon's hooks. make_power_manager: nullptr when [power] enabled = false (logs what it will
// manage otherwise). apply_power: plans from the engine's tasks and applies; nothing when null.
std::unique_ptr<PowerManager> make_power_manager(
    const config::PowerConfig& cfg, sys::Nvml* nvml, const std::string& sys_root,
    std::shared_ptr<SettingsJournal> journal = nullptr);
void apply_power(PowerManager* power, const policy::Engine& engine);

// "250.5" for 250,500 mW: how journals and logs write a power limit.
std::string watts(std::uint32_t mw);

}  // namespace zernel::enforce
