#pragma once
// The journal of the machine-wide settings the daemon changes besides scheduling, so that a
// daemon killed with SIGKILL (or one that crashed) leaves nothing the next start cannot undo:
// kernel.task_delayacct (sys/delayacct.hpp) and, with [power] enabled, each GPU's application
// clocks and power limit and each cpufreq policy's scaling_max_freq (enforce/power.hpp).
//
// Before the first change of a setting, its original is in the journal on disk (written whole,
// atomically: sys/journal_file.hpp). After a clean exit restored a setting, its entry goes; the
// file goes with the last entry, and stays when a restore failed, so that the next start retries.
// At the next start recover_settings() reads the journal of a daemon that is no longer running
// (the same pid with another start time is another process), puts every original back, logs each
// and removes the file. A journal whose owner still runs is refused: two daemons would each take
// the other's changes for the originals.
//
// One file for the whole daemon, default /run/zernel/settings.journal (next to the userspace
// backend's journal; the systemd unit keeps /run/zernel across restarts of the service), or
// $ZERNEL_SETTINGS_JOURNAL.
//
// Format (text, one record per line; the last line "end" marks a complete file):
//   zernel-settings-journal 1
//   owner PID START                      the daemon that wrote it (START: /proc/PID/stat field 22)
//   delayacct 0|1                        the original kernel.task_delayacct
//   cpufreq POLICY_HEX KHZ               the original scaling_max_freq of cpufreq/POLICY
//   gpu INDEX BUS_ID_HEX MEM_MHZ SM_MHZ POWER_MW   the original application clocks and power limit
//   end
// Strings are hex-encoded so that any name survives. Anything else is a corrupt journal:
// parse_settings_journal says on which line.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "sys/nvml.hpp"

namespace zernel::enforce {

inline constexpr const char* kSettingsJournalEnv = "ZERNEL_SETTINGS_JOURNAL";
inline constexpr const char* kDefaultSettingsJournal = "/run/zernel/settings.journal";

// $ZERNEL_SETTINGS_JOURNAL when set and not empty, else kDefaultSettingsJournal.
std::string settings_journal_path();
// The kernel.task_delayacct holders file (sys/delayacct_share.hpp): one per machine, whatever
// journal a daemon uses; $ZERNEL_DELAYACCT_HOLDERS when set and not empty, else
// kDefaultDelayAcctHolders.
inline constexpr const char* kDelayAcctHoldersEnv = "ZERNEL_DELAYACCT_HOLDERS";
inline constexpr const char* kDefaultDelayAcctHolders = "/run/zernel/delayacct.holders";
std::string delayacct_holders_path();

struct CpufreqOriginal {
  std::string policy;  // "policy0": a directory under SYS/devices/system/cpu/cpufreq
  std::uint32_t khz = 0;
  bool operator==(const CpufreqOriginal&) const = default;
};

struct GpuOriginal {
  std::uint32_t index = 0;  // NVML's index when recorded; the bus id identifies the GPU
  std::string bus_id;       // sysfs form, "0000:1b:00.0"
  sys::ApplicationClocks clocks;
  std::uint32_t power_limit_mw = 0;
  bool operator==(const GpuOriginal&) const = default;
};

// A set of settings with their originals. A setting is named by its kind and key (the policy, the
// bus id): recording one that is there keeps the value already there (the older original).
struct SettingsOriginals {
  std::optional<bool> delayacct;
  std::vector<CpufreqOriginal> cpufreq;
  std::vector<GpuOriginal> gpus;

  [[nodiscard]] bool empty() const { return !delayacct && cpufreq.empty() && gpus.empty(); }
  [[nodiscard]] std::size_t size() const {
    return (delayacct ? 1 : 0) + cpufreq.size() + gpus.size();
  }
  // Adds the settings of `more` that are not here yet.
  void merge(const SettingsOriginals& more);
  // Removes the settings named in `which` (their values do not matter).
  void remove(const SettingsOriginals& which);
  bool operator==(const SettingsOriginals&) const = default;
};

struct SettingsJournalFile {
  std::uint32_t owner_pid = 0;
  std::uint64_t owner_start = 0;
  SettingsOriginals originals;
  bool operator==(const SettingsJournalFile&) const = default;
};

std::string format_settings_journal(const SettingsJournalFile& j);
// An error (EINVAL) names the line of a corrupt or truncated journal.
Result<SettingsJournalFile> parse_settings_journal(std::string_view text);
// Writes atomically, creating the directory (mode 0700) when missing.
Result<void> write_settings_journal(const std::string& path, const SettingsJournalFile& j);
// nullopt when there is no journal; EINVAL (naming the file and line) for a corrupt one, another
// errno when it cannot be read.
Result<std::optional<SettingsJournalFile>> read_settings_journal(const std::string& path);

// True while the process PID that started at START (clock ticks after boot, /proc/PID/stat field
// 22) runs: false when it exited, is a zombie, or the pid now names another process. The owner
// check of both journals.
bool process_running(const std::string& proc_root, std::uint32_t pid, std::uint64_t start);
// This process's start time (0 when /proc cannot tell).
std::uint64_t own_start_time(const std::string& proc_root);

// Crash recovery, at the daemon's start before anything reads its "originals": when the journal
// at `journal_path` exists and its owner is gone, writes every original back (kernel.task_delayacct
// under PROC/sys; scaling_max_freq under SYS/devices/system/cpu/cpufreq; a GPU's application
// clocks and power limit through `nvml`, the GPU found by its bus id), logs one line per setting
// and a summary, and removes the file. kernel.task_delayacct is left on while another live daemon
// holds it (sys/delayacct_share.hpp): that one restores it. A setting that cannot be restored is a
// warning and is dropped, except the GPU entries while `nvml` is null: those stay in the file for a
// later start. Errors: EBUSY when the owner runs, EINVAL for a corrupt journal (the file and line,
// and what to do); then nothing was changed.
Result<void> recover_settings(const std::string& journal_path, const std::string& proc_root,
                              const std::string& sys_root, sys::Nvml* nvml);

// The running daemon's journal, shared by the DelayAcctGuard and the PowerManager that record in
// it. Not thread-safe: the daemon's thread owns it.
class SettingsJournal {
 public:
  // Reads what a previous run left in the file (after recover_settings: the settings it could
  // not restore yet), so that writing this daemon's entries keeps them. EBUSY when the file's
  // owner runs, EINVAL when it is corrupt.
  static Result<std::shared_ptr<SettingsJournal>> open(std::string path,
                                                       const std::string& proc_root = "/proc");

  // Adds the originals not in the journal yet and writes the file before returning: on an error
  // the caller must not change the settings.
  Result<void> record(const SettingsOriginals& originals);
  // Drops these settings once they are restored; removes the file when nothing is left.
  Result<void> forget(const SettingsOriginals& settings);

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] const SettingsOriginals& originals() const { return originals_; }

 private:
  SettingsJournal(std::string path, std::uint64_t own_start)
      : path_(std::move(path)), own_start_(own_start) {}
  // Makes `next` the journal's set and writes the file; on a failed write nothing changes.
  Result<void> replace(SettingsOriginals next);
  Result<void> write();

  std::string path_;
  std::uint64_t own_start_ = 0;
  SettingsOriginals originals_;
};

}  // namespace zernel::enforce
