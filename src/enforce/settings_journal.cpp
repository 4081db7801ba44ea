#include "enforce/settings_journal.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "enforce/power.hpp"
#include "sys/delayacct.hpp"
#include "sys/delayacct_share.hpp"
#include "sys/file.hpp"
#include "sys/journal_file.hpp"
#include "sys/procfs.hpp"

namespace zernel::enforce {
namespace {

constexpr std::string_view kMagic = "zernel-settings-journal 1";

// A cpufreq policy name is one directory name: nothing that leaves the cpufreq directory.
bool valid_policy(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

std::string cpufreq_file(const std::string& sys_root, const std::string& policy) {
  return sys_root + "/devices/system/cpu/cpufreq/" + policy + "/scaling_max_freq";
}

// Puts one GPU's application clocks and power limit back. Clocks at the driver's defaults are
// reset rather than pinned, as Nvml::restore does. The Nvml forgets the change afterwards: these
// values are the originals, not something this daemon has to undo at its exit.
Result<void> restore_gpu(sys::Nvml& nvml, std::uint32_t device, const GpuOriginal& g) {
  auto clocks_before = nvml.clocks(device);
  auto limits_before = nvml.power_limits(device);
  auto defaults = nvml.default_application_clocks(device);
  Result<void> clocks = defaults && *defaults == g.clocks
                            ? nvml.reset_application_clocks(device)
                            : nvml.set_application_clocks(device, g.clocks);
  Result<void> limit = nvml.set_power_limit(device, g.power_limit_mw);
  nvml.forget_changes(device);
  if (!clocks) return clocks.error();
  if (!limit) return limit.error();
  spdlog::info(
      "settings journal: restored GPU {} ({}) application clocks {} -> {} MHz (memory {} "
      "MHz), power limit {} -> {} W",
      device, g.bus_id, clocks_before ? std::to_string(clocks_before->sm_application) : "?",
      g.clocks.sm_mhz, g.clocks.mem_mhz, limits_before ? watts(limits_before->current_mw) : "?",
      watts(g.power_limit_mw));
  return Ok{};
}

}  // namespace

std::string settings_journal_path() {
  if (const char* p = std::getenv(kSettingsJournalEnv); p != nullptr && *p != '\0') return p;
  return kDefaultSettingsJournal;
}

std::string delayacct_holders_path() {
  if (const char* p = std::getenv(kDelayAcctHoldersEnv); p != nullptr && *p != '\0') return p;
  return kDefaultDelayAcctHolders;
}

void SettingsOriginals::merge(const SettingsOriginals& more) {
  if (!delayacct) delayacct = more.delayacct;
  for (const CpufreqOriginal& c : more.cpufreq) {
    if (std::none_of(cpufreq.begin(), cpufreq.end(),
                     [&](const CpufreqOriginal& x) { return x.policy == c.policy; })) {
      cpufreq.push_back(c);
    }
  }
  for (const GpuOriginal& g : more.gpus) {
    if (std::none_of(gpus.begin(), gpus.end(),
                     [&](const GpuOriginal& x) { return x.bus_id == g.bus_id; })) {
      gpus.push_back(g);
    }
  }
}

void SettingsOriginals::remove(const SettingsOriginals& which) {
  if (which.delayacct) delayacct.reset();
  std::erase_if(cpufreq, [&](const CpufreqOriginal& c) {
    return std::any_of(which.cpufreq.begin(), which.cpufreq.end(),
                       [&](const CpufreqOriginal& x) { return x.policy == c.policy; });
  });
  std::erase_if(gpus, [&](const GpuOriginal& g) {
    return std::any_of(which.gpus.begin(), which.gpus.end(),
                       [&](const GpuOriginal& x) { return x.bus_id == g.bus_id; });
  });
}

std::string format_settings_journal(const SettingsJournalFile& j) {
  std::string out(kMagic);
  out += fmt::format("\nowner {} {}\n", j.owner_pid, j.owner_start);
  const SettingsOriginals& o = j.originals;
  if (o.delayacct) out += fmt::format("delayacct {}\n", *o.delayacct ? 1 : 0);
  for (const CpufreqOriginal& c : o.cpufreq) {
    out += fmt::format("cpufreq {} {}\n", sys::hex_encode(c.policy), c.khz);
  }
  for (const GpuOriginal& g : o.gpus) {
    out += fmt::format("gpu {} {} {} {} {}\n", g.index, sys::hex_encode(g.bus_id), g.clocks.mem_mhz,
                       g.clocks.sm_mhz, g.power_limit_mw);
  }
  out += "end\n";
  return out;
}

Result<SettingsJournalFile> parse_settings_journal(std::string_view text) {
  SettingsJournalFile j;
  SettingsOriginals& o = j.originals;
  bool have_owner = false;
  const auto record = [&](const std::vector<std::string_view>& f) -> std::optional<std::string> {
    const std::string_view kind = f[0];
    if (kind == "owner" && !have_owner) {
      if (f.size() != 3) return "expected: owner PID START";
      auto pid = sys::parse_number<std::uint32_t>(f[1]);
      auto start = sys::parse_number<std::uint64_t>(f[2]);
      if (!pid || *pid == 0 || !start) return "bad owner pid or start time";
      j.owner_pid = *pid;
      j.owner_start = *start;
      have_owner = true;
    } else if (!have_owner && kind != "end") {
      return "expected the owner line first";
    } else if (kind == "delayacct") {
      if (f.size() != 2 || (f[1] != "0" && f[1] != "1")) return "expected: delayacct 0|1";
      if (o.delayacct) return "a second delayacct record";
      o.delayacct = f[1] == "1";
    } else if (kind == "cpufreq") {
      if (f.size() != 3) return "expected: cpufreq POLICY KHZ";
      auto policy = sys::hex_decode(f[1]);
      auto khz = sys::parse_number<std::uint32_t>(f[2]);
      if (!policy || !valid_policy(*policy)) return "bad cpufreq policy name";
      if (!khz || *khz == 0) return "bad frequency";
      if (std::any_of(o.cpufreq.begin(), o.cpufreq.end(),
                      [&](const CpufreqOriginal& c) { return c.policy == *policy; })) {
        return "a second record of this policy";
      }
      o.cpufreq.push_back(CpufreqOriginal{std::move(*policy), *khz});
    } else if (kind == "gpu") {
      if (f.size() != 6) return "expected: gpu INDEX BUS_ID MEM_MHZ SM_MHZ POWER_MW";
      auto index = sys::parse_number<std::uint32_t>(f[1]);
      auto bus = sys::hex_decode(f[2]);
      auto mem = sys::parse_number<std::uint32_t>(f[3]);
      auto sm = sys::parse_number<std::uint32_t>(f[4]);
      auto mw = sys::parse_number<std::uint32_t>(f[5]);
      if (!index) return "bad GPU index";
      if (!bus || !sys::normalize_bus_id(*bus) || *sys::normalize_bus_id(*bus) != *bus) {
        return "bad PCI bus id";
      }
      if (!mem || !sm || !mw || *mem == 0 || *sm == 0 || *mw == 0) {
        return "bad clocks or power limit";
      }
      if (std::any_of(o.gpus.begin(), o.gpus.end(),
                      [&](const GpuOriginal& g) { return g.bus_id == *bus; })) {
        return "a second record of this GPU";
      }
      o.gpus.push_back(GpuOriginal{*index, std::move(*bus), {*mem, *sm}, *mw});
    } else {
      return "unexpected record";
    }
    return std::nullopt;
  };
  auto parsed = sys::parse_journal_text(text, kMagic, "not a zernel settings journal (version 1)",
                                        record, [&] { return have_owner; });
  if (!parsed) return parsed.error();
  return j;
}

Result<void> write_settings_journal(const std::string& path, const SettingsJournalFile& j) {
  return sys::write_file_atomically(path, format_settings_journal(j));
}

Result<std::optional<SettingsJournalFile>> read_settings_journal(const std::string& path) {
  auto text = sys::read_whole_file(path);
  if (!text) return text.error();
  if (!text->has_value()) return std::optional<SettingsJournalFile>{};
  auto j = parse_settings_journal(**text);
  if (!j) return j.error().context(path);
  return std::optional<SettingsJournalFile>(std::move(*j));
}

bool process_running(const std::string& proc_root, std::uint32_t pid, std::uint64_t start) {
  auto st = sys::read_stat(proc_root, pid);
  return st && st->starttime_ticks == start && !st->is_dead();
}

std::uint64_t own_start_time(const std::string& proc_root) {
  auto st = sys::read_stat(proc_root, static_cast<std::uint32_t>(::getpid()));
  return st ? st->starttime_ticks : 0;
}

Result<void> recover_settings(const std::string& journal_path, const std::string& proc_root,
                              const std::string& sys_root, sys::Nvml* nvml) {
  auto read = read_settings_journal(journal_path);
  if (!read && read.error().code() == EINVAL) {
    return Error(EINVAL,
                 fmt::format("corrupt settings journal {} (the originals of kernel.task_delayacct, "
                             "cpufreq and GPU settings a previous run changed); check those "
                             "settings by hand, then remove the file",
                             read.error().message()));
  }
  if (!read) return read.error().context("reading the settings journal");
  if (!read->has_value()) return Ok{};
  const SettingsJournalFile& j = **read;
  if (process_running(proc_root, j.owner_pid, j.owner_start)) {
    return Error(EBUSY, fmt::format("{} belongs to a running zernel-scheduler (pid {}); stop it "
                                    "first (two daemons would take each other's changes of "
                                    "machine-wide settings for the originals)",
                                    journal_path, j.owner_pid));
  }

  std::size_t restored = 0;
  SettingsOriginals kept;
  const SettingsOriginals& o = j.originals;
  auto held = o.delayacct ? sys::delayacct_held_by_others(delayacct_holders_path(), proc_root)
                          : Result<bool>(false);
  if (o.delayacct && held && *held) {
    spdlog::info("settings journal: kernel.task_delayacct left on: another zernel-scheduler "
                 "still uses it (it restores {} when it exits)",
                 *o.delayacct ? 1 : 0);
    ++restored;
  } else if (o.delayacct) {
    if (auto r = sys::write_task_delayacct(proc_root, *o.delayacct); r) {
      spdlog::info("settings journal: restored kernel.task_delayacct to {}", *o.delayacct ? 1 : 0);
      ++restored;
    } else {
      spdlog::warn("settings journal: kernel.task_delayacct not restored to {}: {}",
                   *o.delayacct ? 1 : 0, r.error().message());
    }
  }
  for (const CpufreqOriginal& c : o.cpufreq) {
    const std::string file = cpufreq_file(sys_root, c.policy);
    const auto before = sys::read_u32(file);
    if (auto r = sys::write_file(file, std::to_string(c.khz) + "\n"); r) {
      spdlog::info("settings journal: restored CPU max frequency ({}) {} -> {} kHz", c.policy,
                   before ? std::to_string(*before) : "?", c.khz);
      ++restored;
    } else {
      spdlog::warn("settings journal: CPU max frequency ({}) not restored to {} kHz: {}", c.policy,
                   c.khz, r.error().message());
    }
  }
  if (!o.gpus.empty() && nvml == nullptr) {
    spdlog::warn(
        "settings journal: {} GPU setting(s) not restored: NVML is not available; kept "
        "in {} for a later start",
        o.gpus.size(), journal_path);
    kept.gpus = o.gpus;
  } else {
    for (const GpuOriginal& g : o.gpus) {
      const auto& devs = nvml->devices();
      const auto dev = std::find_if(devs.begin(), devs.end(),
                                    [&](const sys::GpuDevice& d) { return d.bus_id == g.bus_id; });
      if (dev == devs.end()) {
        spdlog::warn("settings journal: GPU {} ({}) not restored: no GPU with that bus id", g.index,
                     g.bus_id);
        continue;
      }
      if (auto r = restore_gpu(*nvml, dev->index, g); r) {
        ++restored;
      } else {
        spdlog::warn("settings journal: GPU {} ({}) not restored: {}", dev->index, g.bus_id,
                     r.error().message());
      }
    }
  }
  spdlog::info("restored {} settings left by daemon {} (not stopped cleanly)", restored,
               j.owner_pid);
  if (kept.empty()) return sys::remove_file(journal_path);
  SettingsJournalFile rest = j;
  rest.originals = std::move(kept);
  return write_settings_journal(journal_path, rest);
}

Result<std::shared_ptr<SettingsJournal>> SettingsJournal::open(std::string path,
                                                               const std::string& proc_root) {
  auto read = read_settings_journal(path);
  if (!read) return read.error().context("settings journal");
  const std::uint64_t start = own_start_time(proc_root);
  std::shared_ptr<SettingsJournal> j(new SettingsJournal(std::move(path), start));
  if (read->has_value()) {
    const SettingsJournalFile& left = **read;
    const bool mine =
        left.owner_pid == static_cast<std::uint32_t>(::getpid()) && left.owner_start == start;
    if (!mine && process_running(proc_root, left.owner_pid, left.owner_start)) {
      return Error(EBUSY, fmt::format("{} belongs to a running zernel-scheduler (pid {})", j->path_,
                                      left.owner_pid));
    }
    j->originals_ = left.originals;
  }
  return j;
}

Result<void> SettingsJournal::record(const SettingsOriginals& originals) {
  SettingsOriginals next = originals_;
  next.merge(originals);
  return replace(std::move(next));
}

Result<void> SettingsJournal::forget(const SettingsOriginals& settings) {
  SettingsOriginals next = originals_;
  next.remove(settings);
  return replace(std::move(next));
}

Result<void> SettingsJournal::replace(SettingsOriginals next) {
  if (next == originals_) return Ok{};
  std::swap(originals_, next);
  if (auto r = write(); !r) {
    std::swap(originals_, next);  // the file keeps the old set: so does this object
    return r;
  }
  return Ok{};
}

Result<void> SettingsJournal::write() {
  if (originals_.empty()) return sys::remove_file(path_);
  SettingsJournalFile f;
  f.owner_pid = static_cast<std::uint32_t>(::getpid());
  f.owner_start = own_start_;
  f.originals = originals_;
  return write_settings_journal(path_, f);
}

}  // namespace zernel::enforce
