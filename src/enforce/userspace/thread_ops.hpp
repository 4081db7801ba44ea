#pragma once
// The per-thread syscalls of the userspace backend and of journal replay: nice (getpriority /
// setpriority on a tid) and CPU affinity (sched_getaffinity / sched_setaffinity), returning 0 or
// an errno value; and the test for "this thread or process has exited" among those values.

#include <cstdint>
#include <string>
#include <vector>

namespace zernel::enforce::userspace {

// A thread or process that exited: ESRCH from the syscalls, ENOENT from /proc.
bool thread_gone(int err);

int get_nice(std::uint32_t tid, std::int32_t& out);
int set_nice(std::uint32_t tid, std::int32_t nice);
// Ascending CPU numbers.
int get_cpus(std::uint32_t tid, std::vector<std::uint32_t>& out);
int set_cpus(std::uint32_t tid, const std::vector<std::uint32_t>& cpus);

// Same thread as when its original was read: guards against tid reuse.
bool same_thread(const std::string& proc_root, std::uint32_t pid, std::uint32_t tid,
                 std::uint64_t start);

}  // namespace zernel::enforce::userspace
