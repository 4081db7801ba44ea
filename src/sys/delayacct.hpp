#pragma once
// kernel.task_delayacct: the switch for per-task delay accounting, off by default since Linux
// 5.14. The io_wait_fraction signal (signals.hpp) needs it on. DelayAcctGuard turns it on when it
// is off and puts the original value back: explicitly with restore(), or when the guard is
// destroyed. Turning it on affects the whole machine (a small cost in the scheduler's hot path,
// which is why the kernel made it opt-in), so the daemon restores it on exit.
//
// Errors say what to do: not permitted (needs root / CAP_SYS_ADMIN, and a writable /proc/sys,
// which containers often mount read-only), or not available (no sysctl: a kernel before 5.14,
// where delay accounting is on unless booted with `nodelayacct`, or one built without
// CONFIG_TASK_DELAY_ACCT).
//
// A daemon killed with SIGKILL cannot restore anything: the daemon gives the guard a journal
// (enforce/settings_journal.hpp) that has the original on disk before the sysctl changes, and
// that the next start restores from.

#include <functional>
#include <string>
#include <utility>

#include "common/result.hpp"

namespace zernel::sys {

// Writes "1" or "0" to PROC/sys/kernel/task_delayacct.
Result<void> write_task_delayacct(const std::string& proc_root, bool on);

// Where the guard keeps the original while it has a change to undo (both optional).
struct DelayAcctJournal {
  // Called with the original before the sysctl is turned on; an error: nothing is changed and
  // enable() fails with it.
  std::function<Result<void>(bool original)> record;
  // Called after restore() wrote the original back; an error is restore()'s.
  std::function<Result<void>()> forget;
  // The machine-wide holders file (sys/delayacct_share.hpp); empty: this guard alone decides.
  // With it, the guard registers as a holder, the original is the first holder's, and restore()
  // writes it back only when no other live daemon holds the switch.
  std::string holders_path;
};

class DelayAcctGuard {
 public:
  // Reads the current value and turns it on when it is off. On failure nothing was changed.
  static Result<DelayAcctGuard> enable(std::string proc_root = "/proc",
                                       DelayAcctJournal journal = {});

  DelayAcctGuard(DelayAcctGuard&& other) noexcept;
  DelayAcctGuard& operator=(DelayAcctGuard&& other) noexcept;
  DelayAcctGuard(const DelayAcctGuard&) = delete;
  DelayAcctGuard& operator=(const DelayAcctGuard&) = delete;
  // Restores the original value; a failure is logged.
  ~DelayAcctGuard();

  // Writes the original value back if this guard changed it. Idempotent: after the first call
  // (successful or not) the guard owns nothing.
  Result<void> restore();

  // The value before enable().
  [[nodiscard]] bool original() const { return original_; }
  // True while this guard has a change to undo.
  [[nodiscard]] bool changed() const { return changed_; }

 private:
  DelayAcctGuard(std::string proc_root, bool original, bool changed, DelayAcctJournal journal)
      : proc_root_(std::move(proc_root)),
        journal_(std::move(journal)),
        original_(original),
        changed_(changed) {}
  static Result<DelayAcctGuard> enable_shared(std::string proc_root, DelayAcctJournal journal,
                                              bool current);

  std::string proc_root_;
  DelayAcctJournal journal_;
  bool original_ = false;
  bool changed_ = false;  // with holders_path: registered as a holder
};

}  // namespace zernel::sys
