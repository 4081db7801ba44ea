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

namespace zernel::collect {

enum class MainThreadWait : std::uint8_t {
  running,   // on a CPU or runnable
  input,     // blocked in read/readv/pread/poll/ppoll/select/pselect/epoll_wait/recv*
  futex,     // blocked in futex
  other,     // blocked in another system call
  unknown,   // unreadable (gone, not root, odd contents)
};

std::string_view wait_name(MainThreadWait w);

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

}  // namespace zernel::collect
