#pragma once
// What a process's main thread is doing right now, from /proc/PID/syscall (root only):
// "running", or the number of the system call it is blocked in. The daemon samples it every tick
// for GPU owners, because two phases show only there:
//   * waiting for a batch: a training loop blocked reading its DataLoader workers' queue (read,
//     poll, select, epoll on their pipes) while the GPU idles. Block I/O delay accounting does not
//     see it (a pipe is not block I/O), yet it is the "GPU starves for data" case the scheduler
//     exists for. The daemon reports such a tick as input wait (io_wait_fraction 1.0).
//   * waiting in a collective: NCCL's proxies and barriers block in futex; a futex wait of the
//     main thread is counted as one futex wait for the tick.
// A sample is one instant per tick, so a phase shows as soon as it covers a tick; the detector's
// stability count filters single-tick noise. Weakness: a main thread blocked in read on something
// other than its workers (a config file, a socket) reads as input wait too; only processes with
// DataLoader workers are sampled, which keeps that rare.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zernel::collect {

enum class MainThreadWait : std::uint8_t {
  running,   // on a CPU or runnable
  input,     // blocked in read/readv/pread/poll/ppoll/select/pselect/epoll_wait/recv*
  futex,     // blocked in futex
  other,     // blocked in another system call
  unknown,   // unreadable (gone, not root, odd contents)
};

std::string_view wait_name(MainThreadWait w);

// A collective waits in a loop of short timed futex waits (NCCL's and our workload's barriers
// poll with timeouts of a few ms); between two waits the thread runs for microseconds, but on a
// busy machine it may then sit on a run queue for tens of ms, and /proc/PID/syscall says
// "running" all that time. So the main thread counts as waiting in futex when it is blocked in
// futex now, or when it is running and entered a futex wait less than kFutexLoopNs ago (the
// probes' per-process stamp, 0 = none). Blocked in any other call, it is not.
inline constexpr std::uint64_t kFutexLoopNs = 50'000'000;
bool main_thread_in_futex_wait(MainThreadWait w, std::uint64_t main_futex_wait_ns,
                               std::uint64_t now_ns);

// Parses the contents of /proc/PID/syscall (x86-64 system call numbers).
MainThreadWait parse_syscall_file(std::string_view text);

// Reads <proc_root>/PID/syscall.
MainThreadWait read_main_thread_wait(const std::string& proc_root, std::uint32_t pid);

// /proc/PID/schedstat of the main thread: ns on a CPU, ns runnable waiting for one, timeslices.
struct SchedStat {
  std::uint64_t run_ns = 0;
  std::uint64_t wait_ns = 0;
  std::uint64_t timeslices = 0;
};
std::optional<SchedStat> parse_schedstat(std::string_view text);
std::optional<SchedStat> read_schedstat(const std::string& proc_root, std::uint32_t pid);

// /proc/PID/task/PID/children: the pids of the processes the main thread forked that are still
// its children (space-separated; needs CONFIG_PROC_CHILDREN, in every distribution kernel). The
// daemon reads it for GPU owners every tick, so a DataLoader worker started between two
// discovery scans is found at the next tick, not up to a poll interval later. Parsing stops at
// the first malformed token; out is cleared first. Reading returns false when unreadable.
void parse_children(std::string_view text, std::vector<std::uint32_t>& out);
bool read_main_thread_children(const std::string& proc_root, std::uint32_t pid,
                               std::vector<std::uint32_t>& out);

}  // namespace zernel::collect
