#pragma once
// The enforcement backend as the daemon's loop sees it: made once at start, kept going when the
// kernel ends it, restored at stop.
//
// The kernel may end our scheduler at any time (sched_ext: a watchdog stall, scx_bpf_error,
// sysrq-S, hotplug); the backend's apply() then fails with ECANCELED and the machine is already
// back on the default scheduler. The supervisor logs the exit, shuts the backend down (it restores
// what it changed) and falls back to observe-only at once. When the exit asks for it
// (Backend::retry_after_failure), it makes the backend again: at once for a restart request,
// else after 1, 2, 4, 8 and 16 s; a restart that fails to load is retried on the same schedule.
// After kMaxRestarts restarts it stays in observe mode and says so.
//
// For /metrics it counts ejections by exit kind and restarts by outcome, and keeps the counters
// of the backends it replaced, so that a backend's counters (Backend::counters) only grow over
// the daemon's life: a restarted sched_ext scheduler's counters start from zero, and the sums
// of its predecessors are added to them.
//
// It reads no clock: the loop passes its tick's time, so tests drive it with plain numbers, and
// backends come from a factory, so tests hand it fakes.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/result.hpp"
#include "enforce/backend.hpp"
#include "policy/decision.hpp"

namespace zernel::daemon {

class BackendSupervisor {
 public:
  // Makes the backend for a --backend kind ("sched_ext", "userspace", "observe", "auto").
  using Factory = std::function<Result<std::unique_ptr<enforce::Backend>>(std::string_view kind)>;

  static constexpr std::uint32_t kMaxRestarts = 5;
  static constexpr std::uint64_t kFirstBackoffNs = 1'000'000'000ULL;  // doubled per restart

  explicit BackendSupervisor(Factory factory) : factory_(std::move(factory)) {}
  ~BackendSupervisor() { stop(); }
  BackendSupervisor(const BackendSupervisor&) = delete;
  BackendSupervisor& operator=(const BackendSupervisor&) = delete;

  // Makes the first backend; its error when the factory fails (nothing is running then).
  Result<void> start(std::string_view kind);

  // Hands one tick's decisions to the backend. An ejection (ECANCELED) is handled here (fall
  // back, maybe schedule a restart); other errors are logged. Any error is returned as well, so
  // the loop can count it.
  Result<void> apply(std::span<const policy::Decision> decisions, std::uint64_t now_ns);

  // Makes the ejected backend again when its restart is due (call once per tick).
  void maybe_restart(std::uint64_t now_ns);

  // A task left the table (Backend::forget).
  void forget(std::uint32_t pid) { backend_->forget(pid); }

  // Restores what the backend changed (Backend::shutdown), once; later calls do nothing.
  void stop();

  [[nodiscard]] const enforce::Backend& backend() const { return *backend_; }
  [[nodiscard]] std::string_view name() const { return backend_->name(); }
  // Restarts attempted so far (successful or not).
  [[nodiscard]] std::uint32_t restarts() const { return restarts_; }
  // When the next restart is due; 0 when none is pending.
  [[nodiscard]] std::uint64_t restart_at_ns() const { return restart_at_ns_; }
  // Restarts that failed to load (counted in restarts() too).
  [[nodiscard]] std::uint32_t failed_restarts() const { return failed_restarts_; }
  // Ejections so far, by the backend's exit kind (Backend::exit_kind, "ERROR_STALL").
  using CountByName = std::map<std::string, std::uint64_t, std::less<>>;
  [[nodiscard]] const CountByName& ejections() const { return ejections_; }
  // The running backend's counters plus those of the backends it replaced, by name (an error
  // when the running backend's could not be read).
  Result<CountByName> counters() const;

 private:
  void on_ejected(std::uint64_t now_ns);
  void schedule_restart(std::uint64_t now_ns, enforce::Backend::Retry retry);

  Factory factory_;
  std::unique_ptr<enforce::Backend> backend_;
  std::string ejected_;              // the kind to make again
  std::uint64_t restart_at_ns_ = 0;  // 0: no restart pending
  std::uint32_t restarts_ = 0;
  std::uint32_t failed_restarts_ = 0;
  CountByName ejections_;
  CountByName retired_counters_;  // summed over the backends replaced so far
  bool stopped_ = false;
};

}  // namespace zernel::daemon
