#include "enforce/power.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "sys/file.hpp"

namespace zernel::enforce {
namespace {

namespace fs = std::filesystem;

}  // namespace

std::string watts(std::uint32_t mw) { return fmt::format("{}", mw / 1000.0); }

PowerManager::PowerManager(PowerOptions opts, sys::Nvml* nvml,
                           std::shared_ptr<SettingsJournal> journal)
    : opts_(std::move(opts)), nvml_(nvml), journal_(std::move(journal)) {
  if (opts_.manage_gpu) read_gpus();
  if (opts_.manage_cpu) read_cpus();
}

PowerManager::~PowerManager() {
  if (auto r = restore(); !r) spdlog::error("power: {}", r.error().message());
}

void PowerManager::read_gpus() {
  if (nvml_ == nullptr) {
    spdlog::warn("power: no NVML: GPU clocks and power limits are not managed");
    return;
  }
  for (const sys::GpuDevice& dev : nvml_->devices()) {
    auto clocks = nvml_->clocks(dev.index);
    auto limits = nvml_->power_limits(dev.index);
    if (!clocks || !limits) {
      spdlog::warn("power: GPU {} is not managed: {}", dev.index,
                   (!clocks ? clocks.error() : limits.error()).message());
      continue;
    }
    Gpu g;
    g.index = dev.index;
    g.bus_id = dev.bus_id;
    g.sm_max = clocks->sm_max;
    g.original_clocks = {clocks->mem_application != 0 ? clocks->mem_application : clocks->mem_max,
                         clocks->sm_application != 0 ? clocks->sm_application : clocks->sm_max};
    g.limits = *limits;
    gpus_.push_back(g);
  }
}

void PowerManager::read_cpus() {
  const fs::path root = fs::path(opts_.sys_root) / "devices/system/cpu/cpufreq";
  std::error_code ec;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("policy", 0) == 0 && e.is_directory()) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end(), [](const fs::path& a, const fs::path& b) {
    const std::string x = a.filename().string();
    const std::string y = b.filename().string();
    return x.size() != y.size() ? x.size() < y.size() : x < y;  // policy2 before policy10
  });
  for (const fs::path& dir : dirs) {
    const auto cur = sys::read_u32((dir / "scaling_max_freq").string());
    const auto min = sys::read_u32((dir / "cpuinfo_min_freq").string());
    const auto max = sys::read_u32((dir / "cpuinfo_max_freq").string());
    if (!cur || !min || !max || *min == 0 || *min > *max) {
      spdlog::warn(
          "power: {} is not managed: cannot read scaling_max_freq, cpuinfo_min_freq "
          "and cpuinfo_max_freq",
          dir.string());
      continue;
    }
    cpus_.push_back(CpuPolicy{dir.filename().string(), dir.string(), *cur, *min, *cur, false});
  }
  if (cpus_.empty()) {
    spdlog::warn("power: no cpufreq policies under {}: the CPU frequency is not managed",
                 root.string());
  }
}

SettingsOriginals PowerManager::originals() const {
  SettingsOriginals o;
  for (const Gpu& g : gpus_) {
    o.gpus.push_back(GpuOriginal{g.index, g.bus_id, g.original_clocks, g.limits.current_mw});
  }
  for (const CpuPolicy& c : cpus_) o.cpufreq.push_back(CpufreqOriginal{c.name, c.original_khz});
  return o;
}

bool PowerManager::journal_originals() {
  if (journal_ == nullptr || journaled_) return true;
  if (auto r = journal_->record(originals()); !r) {
    ++errors_;
    if (!journal_warned_) {
      spdlog::warn("power: no change until the originals are journaled: {}", r.error().message());
    }
    journal_warned_ = true;
    return false;
  }
  journaled_ = true;
  journal_warned_ = false;
  return true;
}

std::uint32_t PowerManager::sm_clock_of(const Gpu& g, const policy::GpuPowerTarget& t) const {
  if (t.full()) return g.original_clocks.sm_mhz;
  // A saving target never raises the clock above what the machine had (an operator's cap).
  const auto want = static_cast<std::uint32_t>(std::uint64_t{g.sm_max} * t.clock_num / t.clock_den);
  return std::min(want, g.original_clocks.sm_mhz);
}

std::uint32_t PowerManager::power_mw_of(const Gpu& g, const policy::GpuPowerTarget& t) const {
  if (t.full()) return g.limits.current_mw;
  const std::uint64_t want = std::uint64_t{g.limits.default_mw} * t.power_pct / 100;
  const std::uint64_t lo = g.limits.min_mw;
  // Never above the limit the machine had (an operator's cap), never outside the device's range.
  const std::uint64_t hi =
      std::max<std::uint64_t>(std::min<std::uint64_t>(g.limits.max_mw, g.limits.current_mw), lo);
  return static_cast<std::uint32_t>(std::clamp(want, lo, hi));
}

void PowerManager::apply(const policy::PowerPlan& plan) {
  for (Gpu& g : gpus_) {
    const policy::Phase phase =
        g.index < plan.gpu_phase.size() ? plan.gpu_phase[g.index] : policy::Phase::unknown;
    apply_gpu(g, policy::gpu_power_target(phase));
  }
  if (!cpus_.empty()) apply_cpus(policy::cpu_freq_target(plan.cpu_phase));
}

void PowerManager::apply_gpu(Gpu& g, const policy::GpuPowerTarget& target) {
  if (target == g.applied) return;
  const char* verb = opts_.dry_run ? "would set" : "set";
  const std::uint32_t clk_from = sm_clock_of(g, g.applied);
  const std::uint32_t clk_to = sm_clock_of(g, target);
  const std::uint32_t mw_from = power_mw_of(g, g.applied);
  const std::uint32_t mw_to = power_mw_of(g, target);
  if (target.full()) {
    // Back to the originals: Nvml::restore puts back exactly what was changed.
    if (!opts_.dry_run) {
      if (auto r = restore_gpu(g); !r) return;
    }
    if (clk_from != clk_to) {
      spdlog::info("power: {} GPU {} SM clock {} -> {} MHz", verb, g.index, clk_from, clk_to);
    }
    if (mw_from != mw_to) {
      spdlog::info("power: {} GPU {} power limit {} -> {} W", verb, g.index, watts(mw_from),
                   watts(mw_to));
    }
    g.applied = target;
    return;
  }
  if (!opts_.dry_run && (clk_from != clk_to || mw_from != mw_to) && !journal_originals()) return;
  if (clk_from != clk_to) {
    if (!opts_.dry_run) {
      auto r = nvml_->set_application_clocks(g.index, {g.original_clocks.mem_mhz, clk_to});
      if (!r) {
        ++errors_;
        if (!g.warned) spdlog::warn("power: GPU {}: {}", g.index, r.error().message());
        g.warned = true;
        return;
      }
    }
    spdlog::info("power: {} GPU {} SM clock {} -> {} MHz", verb, g.index, clk_from, clk_to);
  }
  if (mw_from != mw_to) {
    if (!opts_.dry_run) {
      if (auto r = nvml_->set_power_limit(g.index, mw_to); !r) {
        ++errors_;
        if (!g.warned) spdlog::warn("power: GPU {}: {}", g.index, r.error().message());
        g.warned = true;
        // The clock is set: remember it, so that the next apply retries only the limit.
        g.applied = policy::GpuPowerTarget{target.clock_num, target.clock_den, g.applied.power_pct};
        return;
      }
    }
    spdlog::info("power: {} GPU {} power limit {} -> {} W", verb, g.index, watts(mw_from),
                 watts(mw_to));
  }
  g.applied = target;
}

Result<void> PowerManager::restore_gpu(Gpu& g) {
  if (nvml_ == nullptr || !nvml_->original_settings(g.index).changed()) return Ok{};
  if (auto r = nvml_->restore(g.index); !r) {
    ++errors_;
    if (!g.warned) spdlog::warn("power: GPU {}: {}", g.index, r.error().message());
    g.warned = true;
    return r.error();
  }
  return Ok{};
}

Result<void> PowerManager::set_cpu(CpuPolicy& c, std::uint32_t khz, const char* verb) {
  if (!opts_.dry_run) {
    if (khz != c.original_khz && !journal_originals()) {
      return Error(EAGAIN, "power: the originals are not journaled");
    }
    if (auto r = sys::write_file(c.dir + "/scaling_max_freq", std::to_string(khz) + "\n"); !r) {
      ++errors_;
      if (!c.warned) spdlog::warn("power: {}", r.error().message());
      c.warned = true;
      return r.error();
    }
  }
  spdlog::info("power: {} CPU max frequency ({}) {} -> {} kHz", verb, c.name, c.applied_khz, khz);
  c.applied_khz = khz;
  return Ok{};
}

void PowerManager::apply_cpus(policy::CpuFreqTarget target) {
  const char* verb = opts_.dry_run ? "would set" : "set";
  for (CpuPolicy& c : cpus_) {
    const std::uint32_t khz = target == policy::CpuFreqTarget::minimum ? c.min_khz : c.original_khz;
    if (khz != c.applied_khz) (void)set_cpu(c, khz, verb);
  }
}

Result<void> PowerManager::restore() {
  std::vector<std::string> failures;
  int code = 0;
  for (Gpu& g : gpus_) {
    if (g.applied.full() && (nvml_ == nullptr || !nvml_->original_settings(g.index).changed())) {
      continue;
    }
    if (opts_.dry_run) {
      g.applied = {};
      continue;
    }
    const std::uint32_t clk_from = sm_clock_of(g, g.applied);
    const std::uint32_t mw_from = power_mw_of(g, g.applied);
    if (auto r = restore_gpu(g); !r) {
      if (code == 0) code = r.error().code();
      failures.push_back(r.error().message());
      continue;
    }
    spdlog::info("power: restored GPU {} SM clock {} -> {} MHz, power limit {} -> {} W", g.index,
                 clk_from, g.original_clocks.sm_mhz, watts(mw_from), watts(g.limits.current_mw));
    g.applied = {};
  }
  for (CpuPolicy& c : cpus_) {
    if (c.applied_khz == c.original_khz) continue;
    if (opts_.dry_run) {
      c.applied_khz = c.original_khz;
      continue;
    }
    if (auto r = set_cpu(c, c.original_khz, "restored"); !r) {
      if (code == 0) code = r.error().code();
      failures.push_back(r.error().message());
    }
  }
  if (failures.empty()) {
    if (!journaled_) return Ok{};
    // Everything is back: the next start has nothing to restore. (With a failure the journal
    // keeps the originals, and the next start retries.)
    if (auto r = journal_->forget(originals()); !r) {
      return r.error().context("restored every setting, but");
    }
    journaled_ = false;
    return Ok{};
  }
  std::string msg = "could not restore: ";
  for (std::size_t i = 0; i < failures.size(); ++i) msg += (i > 0 ? "; " : "") + failures[i];
  return Error(code, msg);
}

std::unique_ptr<PowerManager> make_power_manager(const config::PowerConfig& cfg, sys::Nvml* nvml,
                                                 const std::string& sys_root,
                                                 std::shared_ptr<SettingsJournal> journal) {
  if (!cfg.enabled) return nullptr;
  PowerOptions opts;
  opts.dry_run = cfg.dry_run;
  opts.manage_gpu = cfg.manage_gpu;
  opts.manage_cpu = cfg.manage_cpu;
  opts.sys_root = sys_root;
  auto pm = std::make_unique<PowerManager>(opts, nvml, std::move(journal));
  spdlog::info("power management{}: {} GPU(s), {} cpufreq polic{} (restored on exit)",
               cfg.dry_run ? " (dry run: logs changes, makes none)" : "", pm->gpu_count(),
               pm->cpu_policy_count(), pm->cpu_policy_count() == 1 ? "y" : "ies");
  return pm;
}

void apply_power(PowerManager* power, const policy::Engine& engine) {
  if (power == nullptr) return;
  power->apply(policy::plan_power(engine.tasks(), power->gpu_index_bound()));
}

}  // namespace zernel::enforce
