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

#include <string>

#include "common/result.hpp"

namespace zernel::collect {

// Writes "1" or "0" to PROC/sys/kernel/task_delayacct.
Result<void> write_task_delayacct(const std::string& proc_root, bool on);

class DelayAcctGuard {
 public:
  // Reads the current value and turns it on when it is off. On failure nothing was changed.
  static Result<DelayAcctGuard> enable(std::string proc_root = "/proc");

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
  DelayAcctGuard(std::string proc_root, bool original, bool changed)
      : proc_root_(std::move(proc_root)), original_(original), changed_(changed) {}

  std::string proc_root_;
  bool original_ = false;
  bool changed_ = false;
};

}  // namespace zernel::collect
