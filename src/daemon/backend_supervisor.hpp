#pragma once
// The enforcement backend as the daemon's loop sees it: made once at start, kept going when the
// kernel ends it, restored at stop.
//
// The kernel may end our scheduler at any time (sched_ext: a watchdog stall, scx_bpf_error,
// sysrq-S, hotplug); the backend's apply() then fails with ECANCELED and the machine is already
// back on the default scheduler. The supervisor logs the exit, shuts the backend down (it restores
// what it changed) and observes until it acts again:
//   - an exit nobody asked to undo (an administrator's sysrq-S, our own unload): observe only from
//     then on, as the administrator wanted the scheduler gone;
//   - an exit that asks for a reload (Backend::retry_after_failure): the backend is made again, at
//     once for a restart request, else after 1, 2, 4, 8 and 16 s;
//   - an ejection a reload cannot cure: kMaxEjections ejections within kEjectionWindowNs, a reload
//     that fails to load, or kMaxRestarts reloads over the daemon's life. The supervisor gives up
//     on the ejected backend and continues with the userspace backend (kFallbackKind: nice, cgroup
//     weights, affinity; it restores what it changed on exit, SIGTERM and, through its journal,
//     after kill -9), so that the job stays protected; observe only if that cannot start either.
//     It does not go back by itself: restarting the daemon tries the requested backend again.
// mode() and reason() say which of these holds and why, for /metrics, /status and `status`.
//
// For /metrics it counts ejections by exit kind and restarts by outcome, and keeps the counters
// of the backends it replaced, so that a backend's counters (Backend::counters) only grow over
// the daemon's life: a restarted sched_ext scheduler's counters start from zero, and the sums
// of its predecessors are added to them.
//
// It reads no clock: the loop passes its tick's time, so tests drive it with plain numbers, and
// backends come from a factory, so tests hand it fakes.

#include <cstdint>
#include <deque>
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
  // This many ejections within the window: a reload does not cure what ends the scheduler (with
  // the backoff above, three ejections each soon after its load take about 4 s).
  static constexpr std::uint32_t kMaxEjections = 3;
  static constexpr std::uint64_t kEjectionWindowNs = 600'000'000'000ULL;  // 10 min
  // What stands in for a backend given up on.
  static constexpr std::string_view kFallbackKind = "userspace";

  // Which backend acts, relative to the one asked for.
  enum class Mode : std::uint8_t {
    requested,  // the backend start() made (for "auto": what it chose)
    reloading,  // the kernel ended it; observing until its reload is due
    fallback,   // given up on it after ejections a reload does not cure; kFallbackKind acts
    observing,  // ended and not reloaded, and nothing stands in: observe only
  };
  static std::string_view mode_name(Mode m);

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
  // The backend acting now ("observe" while a reload is pending).
  [[nodiscard]] std::string_view name() const { return backend_->name(); }
  // The kind start() was given ("auto", "sched_ext", ...).
  [[nodiscard]] const std::string& requested() const { return requested_; }
  [[nodiscard]] Mode mode() const { return mode_; }
  // Why the backend acting is not the one requested, in a sentence (the last exit, what was
  // decided); empty in Mode::requested.
  [[nodiscard]] const std::string& reason() const { return reason_; }
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
  // Gives up on the ejected backend: kFallbackKind acts (Mode::fallback), or, when that cannot
  // start, nothing does (Mode::observing). `why` is the sentence for reason().
  void fall_back(const std::string& why);

  Factory factory_;
  std::unique_ptr<enforce::Backend> backend_;
  std::string requested_;
  Mode mode_ = Mode::requested;
  std::string reason_;
  std::string last_exit_;                 // the last ejection, as the backend described it
  std::deque<std::uint64_t> ejected_at_;  // ejections within kEjectionWindowNs, oldest first
  std::string ejected_;                   // the kind to make again
  std::uint64_t restart_at_ns_ = 0;       // 0: no restart pending
  std::uint32_t restarts_ = 0;
  std::uint32_t failed_restarts_ = 0;
  CountByName ejections_;
  CountByName retired_counters_;  // summed over the backends replaced so far
  bool stopped_ = false;
};

}  // namespace zernel::daemon
