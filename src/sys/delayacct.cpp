#include "sys/delayacct.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "common/log.hpp"
#include "sys/delayacct_share.hpp"
#include "sys/file.hpp"
#include "sys/procfs.hpp"

namespace zernel::sys {

namespace {

std::string sysctl_path(const std::string& proc_root) {
  return proc_root + "/sys/kernel/task_delayacct";
}

// Adds the hint that tells the user what to do about a failed read or write.
Error explain(Error e) {
  switch (e.code()) {
    case EACCES:
    case EPERM:
    case EROFS:
      return Error(e.code(), e.message() +
                                 " (needs root or CAP_SYS_ADMIN and a writable /proc/sys; without "
                                 "delay accounting io_wait_fraction is not measured)");
    case ENOENT:
      return Error(e.code(),
                   e.message() +
                       " (no such sysctl: kernels before 5.14 account delays unless "
                       "booted with nodelayacct; otherwise CONFIG_TASK_DELAY_ACCT is off)");
    default:
      return e;
  }
}

}  // namespace

Result<void> write_task_delayacct(const std::string& proc_root, bool on) {
  // No O_TRUNC: a sysctl takes the value in place.
  if (auto r = write_file(sysctl_path(proc_root), on ? "1" : "0", 0); !r) return explain(r.error());
  return Ok{};
}

Result<DelayAcctGuard> DelayAcctGuard::enable(std::string proc_root, DelayAcctJournal journal) {
  auto current = read_task_delayacct(proc_root);
  if (!current) return explain(current.error()).context("enabling delay accounting");
  if (!journal.holders_path.empty()) {
    auto shared = enable_shared(proc_root, journal, *current);
    // A daemon that cannot reach the holders file (an unprivileged one: /run/zernel is root's)
    // cannot write the sysctl either; with the switch already on it just uses it.
    if (shared || !*current) return shared;
    spdlog::debug("delay accounting: {}; using it without registering", shared.error().message());
    journal = {};
  }
  if (*current) return DelayAcctGuard(std::move(proc_root), true, false, {});
  if (journal.record) {
    if (auto r = journal.record(false); !r) {
      return r.error().context("enabling delay accounting: recording the original");
    }
  }
  if (auto w = write_task_delayacct(proc_root, true); !w) {
    // Nothing changed: the journal's entry would only make the next start write the same 0.
    if (journal.forget) (void)journal.forget();
    return w.error().context("enabling delay accounting");
  }
  auto after = read_task_delayacct(proc_root);
  if (!after) return after.error().context("enabling delay accounting");
  if (!*after) {
    return Error(EIO, "enabling delay accounting: " + sysctl_path(proc_root) +
                          " still reads 0 after writing 1");
  }
  return DelayAcctGuard(std::move(proc_root), false, true, std::move(journal));
}

Result<DelayAcctGuard> DelayAcctGuard::enable_shared(std::string proc_root,
                                                     DelayAcctJournal journal, bool current) {
  auto original = delayacct_join(journal.holders_path, proc_root, current);
  if (!original) return original.error().context("enabling delay accounting: holders file");
  // From here this daemon holds the switch: every failure must leave the holders file again.
  auto fail = [&](Error e) -> Result<DelayAcctGuard> {
    (void)delayacct_leave(journal.holders_path, proc_root);
    return e;
  };
  if (journal.record) {
    if (auto r = journal.record(*original); !r) {
      return fail(r.error().context("enabling delay accounting: recording the original"));
    }
  }
  if (!current) {
    if (auto w = write_task_delayacct(proc_root, true); !w) {
      if (journal.forget) (void)journal.forget();
      return fail(w.error().context("enabling delay accounting"));
    }
    auto after = read_task_delayacct(proc_root);
    if (!after || !*after) {
      if (journal.forget) (void)journal.forget();
      return fail(Error(EIO, "enabling delay accounting: " + sysctl_path(proc_root) +
                                 " does not read 1 after writing 1"));
    }
  }
  return DelayAcctGuard(std::move(proc_root), *original, true, std::move(journal));
}

DelayAcctGuard::DelayAcctGuard(DelayAcctGuard&& other) noexcept
    : proc_root_(std::move(other.proc_root_)),
      journal_(std::move(other.journal_)),
      original_(other.original_),
      changed_(std::exchange(other.changed_, false)) {}

DelayAcctGuard& DelayAcctGuard::operator=(DelayAcctGuard&& other) noexcept {
  if (this != &other) {
    if (auto r = restore(); !r) spdlog::warn("{}", r.error().message());
    proc_root_ = std::move(other.proc_root_);
    journal_ = std::move(other.journal_);
    original_ = other.original_;
    changed_ = std::exchange(other.changed_, false);
  }
  return *this;
}

DelayAcctGuard::~DelayAcctGuard() {
  if (auto r = restore(); !r) spdlog::warn("{}", r.error().message());
}

Result<void> DelayAcctGuard::restore() {
  if (!changed_) return Ok{};
  changed_ = false;
  if (!journal_.holders_path.empty()) {
    auto last = delayacct_leave(journal_.holders_path, proc_root_);
    if (!last) return last.error().context("restoring kernel.task_delayacct");
    if (!last->has_value()) {
      // Another daemon still holds it: it stays on, and that daemon restores it.
      spdlog::info("kernel.task_delayacct left on: another zernel-scheduler still uses it");
      if (journal_.forget) return journal_.forget();
      return Ok{};
    }
    original_ = **last;
    if (original_) {  // it was on before any of us: nothing to write back
      if (journal_.forget) return journal_.forget();
      return Ok{};
    }
  }
  if (auto w = write_task_delayacct(proc_root_, original_); !w) {
    // The journal keeps the original: the next start retries.
    return w.error().context("restoring kernel.task_delayacct");
  }
  if (journal_.forget) {
    if (auto r = journal_.forget(); !r) {
      return r.error().context("restored kernel.task_delayacct, but");
    }
  }
  return Ok{};
}

}  // namespace zernel::sys
