// The machine-wide state the daemon changes or inherits, opened at start-up: what a userspace
// backend that did not stop cleanly left changed (nice, affinity, cgroup weights: its journal,
// enforce/userspace/restore.hpp), the settings journal of this daemon's machine-wide changes
// (enforce/settings_journal.hpp), power management (enforce/power.hpp) and
// kernel.task_delayacct (sys/delayacct.hpp), whose state decides whether io wait is measured.
// shutdown() restores them (daemon.cpp).
#include <spdlog/spdlog.h>

#include "daemon/daemon.hpp"
#include "enforce/userspace/restore.hpp"

namespace zernel::daemon {
namespace {

// kernel.task_delayacct's original in the settings journal (none without a journal).
sys::DelayAcctJournal delayacct_journal(const std::shared_ptr<enforce::SettingsJournal>& journal) {
  sys::DelayAcctJournal j;
  if (!journal) return j;
  j.record = [journal](bool original) {
    enforce::SettingsOriginals o;
    o.delayacct = original;
    return journal->record(o);
  };
  j.forget = [journal] {
    enforce::SettingsOriginals o;
    o.delayacct = false;  // names the setting; the value does not matter
    return journal->forget(o);
  };
  // Shared with any other daemon on this machine (sys/delayacct_share.hpp).
  j.holders_path = enforce::delayacct_holders_path();
  return j;
}

}  // namespace

void Daemon::replay_userspace_journal() {
  const std::string& proc_root = opts_.proc_root;
  const std::string path = enforce::userspace::userspace_journal_path();
  auto rep = enforce::userspace::replay_journal(path, proc_root);
  if (!rep) {
    if (rep.error().code() == EBUSY) {
      spdlog::info("userspace journal: {}", rep.error().message());
    } else if (rep.error().code() == EACCES) {
      // Not root: nothing it could restore anyway; root's next start (or `restore`) does it.
      spdlog::info("userspace journal: {}: left for root", rep.error().message());
    } else {
      spdlog::warn("userspace journal: {}: not restored", rep.error().message());
    }
    return;
  }
  if (rep->corrupt) {
    spdlog::error(
        "userspace journal: cannot use {} ({}); moved it to {}; values it listed are NOT "
        "restored",
        path, rep->corrupt_error, rep->moved_to);
    return;
  }
  if (!rep->found) return;
  for (const std::string& line : rep->lines) spdlog::info("userspace journal: {}", line);
  spdlog::warn("userspace journal: zernel-scheduler pid {} did not stop cleanly; {}",
               rep->owner_pid, rep->summary());
}

// First what a daemon that did not stop cleanly left changed, then this daemon's originals
// (enforce/settings_journal.hpp). An unprivileged daemon (observe mode) may not read root's
// /run/zernel; it cannot change a machine-wide setting either, so it runs without the journal
// instead of refusing to start.
Result<void> Daemon::open_machine_settings() {
  const std::string journal_path = enforce::settings_journal_path();
  std::shared_ptr<enforce::SettingsJournal> journal;
  auto recovered =
      enforce::recover_settings(journal_path, opts_.proc_root, opts_.sys_root, nvml_.get());
  if (!recovered && recovered.error().code() != EACCES) return recovered.error();
  if (recovered) {
    auto opened = enforce::SettingsJournal::open(journal_path, opts_.proc_root);
    if (!opened) return opened.error();
    journal = std::move(*opened);
  } else {
    spdlog::warn("{}: no crash recovery of machine-wide settings for this user",
                 recovered.error().message());
  }
  power_ = enforce::make_power_manager(opts_.config.power, nvml_.get(), opts_.sys_root, journal);
  enable_delay_accounting(journal);
  return Ok{};
}

void Daemon::enable_delay_accounting(const std::shared_ptr<enforce::SettingsJournal>& journal) {
  auto acct = sys::DelayAcctGuard::enable(opts_.proc_root, delayacct_journal(journal));
  collect::TickBuilder::Options tick;
  collect::SignalsOptions& sig = tick.signals;
  sig.proc_root = opts_.proc_root;
  if (acct) {
    if (acct->changed() && !acct->original()) {
      spdlog::info(
          "turned on kernel.task_delayacct, or joined the daemons using it (set back "
          "to 0 when the last zernel-scheduler using it exits)");
    }
    delayacct_.emplace(std::move(*acct));
  } else {
    spdlog::warn("io wait is not measured: {}", acct.error().message());
    sig.measure_io_wait = false;
  }
  tick_builder_ = collect::TickBuilder(std::move(tick));
}

}  // namespace zernel::daemon
