#pragma once
// Process events from the kernel's process events connector (cn_proc, a netlink multicast group):
// a process forked, exec'd, exited, renamed itself or changed its uid. Discovery follows them
// instead of listing /proc every poll (collect/discovery.hpp), and the daemon drops a process
// when its exit comes instead of reading its stat every tick.
//
// Why the connector and not a BPF program on sched_process_fork/exec/exit: both cost the rest of
// the node about the same per fork, exec and exit (bench/process_tax measures them; its figures
// are not yet in docs/benchmarks.md), and the connector is the kernel's interface for exactly this,
// with no program of ours running in anybody's fork; it needs CAP_NET_ADMIN and the initial pid
// and user namespaces (the daemon runs there anyway to schedule the node's tasks).
//
// The kernel sends one datagram per event to every listener. The daemon reads them once per tick,
// without waking for each (drain(): recvmmsg, non-blocking); the socket's receive buffer holds the
// events of a tick (8 MiB, a few thousand events; SO_RCVBUFFORCE as root). When it overflows, the
// kernel drops events and says so (ENOBUFS): drain() returns false and the caller lists /proc
// again, which is what it would have done without events.
//
// Only what the daemon uses is passed up: a new process (a fork whose child is a thread group
// leader; a new thread is not a new process), an exec, the exit of a thread group leader (the
// process) and of any other thread (thread_exit, for the per-thread phase record), a change of a
// leader's comm or uid. On kernels with event filtering (6.6 and later) the kernel is asked for
// those kinds only; older kernels send every kind and the others are dropped here.
//
// open() checks that events flow: after subscribing it waits for the kernel's acknowledgement (a
// kernel that refuses says why: EPERM without CAP_NET_ADMIN); a kernel that ignores the request
// (a daemon outside the initial pid or user namespace) sends nothing, which open() reports as an
// error after 1 s, and the daemon then lists /proc as before.
//
// Datagrams are accepted only from the kernel (netlink port 0) and only with the connector's
// process-events id; anything else is ignored and counted.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/result.hpp"
#include "sys/unique_fd.hpp"

namespace zernel::collect {

enum class ProcEventKind : std::uint8_t { fork, exec, exit, thread_exit, comm, uid };

struct ProcEvent {
  ProcEventKind kind = ProcEventKind::fork;
  std::uint32_t pid = 0;   // the process (thread group id); fork: the new child
  std::uint32_t tid = 0;   // thread_exit: the thread; otherwise == pid
  std::uint32_t ppid = 0;  // fork: the parent process (thread group id); 0 otherwise
  std::uint64_t t_ns = 0;  // when, CLOCK_MONOTONIC (the kernel's timestamp)
};

struct ProcEventStats {
  std::uint64_t datagrams = 0;  // received
  std::uint64_t events = 0;     // passed up
  std::uint64_t overflows = 0;  // drains that found events lost (ENOBUFS)
  std::uint64_t ignored = 0;    // not from the kernel, malformed, or of another id
};

// Parses one datagram (nlmsghdr, cn_msg, proc_event) and appends what it says to `out` (nothing
// for kinds the daemon does not use). Returns false when the datagram is malformed. Pure.
bool parse_proc_event(std::span<const std::byte> datagram, std::vector<ProcEvent>& out);

// The processes forked or exec'd within the last `window_ns` that have not exited: while there is
// one, a program started recently may be about to create a GPU context (the daemon reads NVML's
// process list every tick then, collect/discovery.hpp's callers). A short-lived one (a health
// probe's shell, a `cat`) leaves at its exit, so commands now and then hold the window open only
// while they run. Where commands run back to back (a loop's `/bin/true; sleep 0.05`, an agent's
// shell-outs), one of them is alive at most ticks: while at least kChurnExits processes exited
// younger than `min_age_ns` within the last one to two kChurnBucketNs, a process counts only once
// it has lived min_age_ns, which such commands never do; a rank lives for seconds around its GPU
// context creation and counts then (or is found at the next poll tick, whichever comes first).
// Elsewhere a new process counts at once, so a rank whose context comes at once is followed at
// the next tick. A command that lives longer than min_age_ns beside the churn (a loop's `sleep 1`)
// still holds the window while it lives. A kernel thread (a child of kthreadd, pid 2: a
// workqueue's new worker) is never a GPU process and does not count. Holds at most `capacity`
// processes; a spawn beyond that keeps any() true for a whole window. Pure.
class RecentSpawns {
 public:
  static constexpr std::uint64_t kChurnBucketNs = 5'000'000'000;
  static constexpr std::uint32_t kChurnExits = 10;
  static constexpr std::uint32_t kKthreadd = 2;  // the parent of every kernel thread

  RecentSpawns(std::uint64_t window_ns, std::uint64_t min_age_ns, std::size_t capacity = 4096)
      : window_ns_(window_ns), min_age_ns_(min_age_ns), capacity_(capacity) {}

  // A fork (the child) or an exec adds the process as spawned at the event's time (ProcEvent::t_ns,
  // at most now_ns; now_ns where it is 0); an exit removes it, and counts as churn when the
  // process was younger than min_age_ns.
  void apply(std::span<const ProcEvent> events, std::uint64_t now_ns);
  // Forgets the processes spawned more than a window before now_ns; whether one is left that
  // counts (any, or while churning one that has lived min_age_ns), or a spawn overflowed within
  // the window.
  bool any(std::uint64_t now_ns);
  // Whether short-lived processes exit often enough that the minimum age applies.
  [[nodiscard]] bool churning() const { return short_exits_[0] + short_exits_[1] >= kChurnExits; }
  [[nodiscard]] std::size_t size() const { return since_.size(); }

 private:
  void roll(std::uint64_t now_ns);

  std::uint64_t window_ns_;
  std::uint64_t min_age_ns_;
  std::size_t capacity_;
  std::unordered_map<std::uint32_t, std::uint64_t> since_;  // pid -> when spawned
  std::uint64_t overflow_until_ns_ = 0;
  // Exits younger than min_age_ns: [0] in the bucket begun at bucket_start_ns_, [1] the one before.
  std::uint32_t short_exits_[2] = {0, 0};
  std::uint64_t bucket_start_ns_ = 0;
};

class ProcEvents {
 public:
  // Subscribes (needs CAP_NET_ADMIN, the initial pid and user namespaces). Errors name the cause.
  static Result<std::unique_ptr<ProcEvents>> open();

  ~ProcEvents();
  ProcEvents(const ProcEvents&) = delete;
  ProcEvents& operator=(const ProcEvents&) = delete;

  // Appends every event received since the last drain, oldest first. False when events were lost
  // since the last drain (the receive buffer overflowed): the caller must not rely on them.
  bool drain(std::vector<ProcEvent>& out);

  [[nodiscard]] const ProcEventStats& stats() const { return stats_; }
  // Whether the kernel filters the event kinds (6.6+) or sends every kind.
  [[nodiscard]] bool filtered() const { return filtered_; }

 private:
  explicit ProcEvents(sys::UniqueFd fd) : fd_(std::move(fd)) {}
  Result<void> subscribe();

  sys::UniqueFd fd_;
  ProcEventStats stats_;
  bool filtered_ = false;
  std::uint32_t seq_ = 0;
};

}  // namespace zernel::collect
