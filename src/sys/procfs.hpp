#pragma once
// Parsers for the /proc files the collectors and the backends read, and small readers under a proc
// root so tests can run them on fabricated trees.
//
// Parsers are pure functions on text. They never trust the text: a truncated, empty or garbled
// file, a number that does not fit, a comm full of parentheses, all give an error (or nullopt),
// never a crash or a silently wrong value. The kernel ends every line with '\n', so text that
// does not end with one was cut short: its last line (for stat, its last field) may hold a cut
// number or path that still parses, and it is ignored.
//
// Readers take the proc root ("/proc" in production) and a pid. A process that exits while it is
// being read is not a failure: the kernel answers ENOENT or ESRCH, and the reader returns an
// Error with code ESRCH that is_gone() recognises. Callers drop such a process quietly; any other
// error (EACCES, a garbled file) is worth counting.
//
// The hot paths (discovery over every pid, signals every tick) use the *_at functions on an open
// directory descriptor with caller-owned buffers, so a scan allocates nothing once its buffers
// have grown. Opening /proc/PID once and reading its files relative to that descriptor also pins
// the process instance: if the pid is reused meanwhile, the reads fail with ESRCH instead of
// returning the new process's data.

#include <dirent.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "sys/file.hpp"
#include "sys/unique_fd.hpp"

namespace zernel::sys {

// True for the error a reader returns when the process (or thread) no longer exists.
[[nodiscard]] inline bool is_gone(const Error& e) { return e.code() == ESRCH; }

// ---------------------------------------------------------------------------------------------
// /proc/PID/stat and /proc/PID/task/TID/stat

// PF_KTHREAD in the flags field: the task is a kernel thread.
inline constexpr std::uint32_t kPfKthread = 0x00200000;

struct ProcStat {
  std::uint32_t pid = 0;          // field 1
  std::string comm;               // field 2, without the parentheses (at most 15 bytes on Linux)
  char state = '?';               // field 3: R, S, D, Z, X, T, t, I, ...
  std::uint32_t ppid = 0;         // field 4
  std::uint32_t flags = 0;        // field 9 (PF_*)
  std::uint64_t utime_ticks = 0;  // field 14, clock ticks (sysconf(_SC_CLK_TCK))
  std::uint64_t stime_ticks = 0;  // field 15, clock ticks
  std::uint32_t num_threads = 0;  // field 20
  std::uint64_t starttime_ticks =
      0;  // field 22, clock ticks after boot: (pid, starttime) is unique
  // Field 42: aggregated block I/O delay in clock ticks (delay accounting). nullopt when the line
  // ends before it (a truncated file).
  std::optional<std::uint64_t> delayacct_blkio_ticks;

  // By the kernel's own mark, PF_KTHREAD, not by "pid 2 or ppid 2": inside a pid namespace
  // (a container running the daemon) pid 2 is an ordinary process and kthreadd is not visible.
  [[nodiscard]] bool is_kernel_thread() const { return (flags & kPfKthread) != 0; }
  // A zombie whose threads have all exited. A thread-group leader that called pthread_exit shows
  // state Z while its other threads run (num_threads > 1): that process is alive.
  [[nodiscard]] bool is_dead() const {
    return state == 'X' || state == 'x' || (state == 'Z' && num_threads <= 1);
  }
};

// Parses one stat line. comm may hold spaces and parentheses ("a) (b"), so the fields after it
// are taken from the LAST ')'. Fields 1..22 are required; field 42 is optional.
Result<ProcStat> parse_stat(std::string_view text);

// ---------------------------------------------------------------------------------------------
// /proc/PID/status

struct ProcStatus {
  std::uint32_t tgid = 0;
  std::uint32_t ruid = 0;  // real uid (first value of the Uid: line)
  std::uint32_t euid = 0;  // effective uid (second value)
};

// Needs the Tgid: and Uid: lines; everything else is ignored.
Result<ProcStatus> parse_status(std::string_view text);

// ---------------------------------------------------------------------------------------------
// /proc/PID/cmdline

// The argument vector with NULs as spaces, trailing NULs dropped: "python\0train.py\0" ->
// "python train.py". Empty for kernel threads and zombies.
std::string cmdline_to_string(std::string_view raw);

// ---------------------------------------------------------------------------------------------
// /proc/PID/cgroup

struct CgroupV1Entry {
  std::uint32_t hierarchy = 0;
  std::string controllers;  // "cpu,cpuacct", "name=systemd"
  std::string path;
};

struct CgroupInfo {
  std::optional<std::string> v2_path;  // the "0::/path" line
  std::vector<CgroupV1Entry> v1;

  // The path tenant matching uses: the v2 path; on a v1-only host the path of the hierarchy with
  // the cpu controller, else name=systemd's; nullopt when none.
  [[nodiscard]] std::optional<std::string_view> match_path() const;
};

// Lines "hierarchy-ID:controller-list:path"; the path may contain ':'. A malformed line is an
// error naming it.
Result<CgroupInfo> parse_cgroup(std::string_view text);

// The same path as CgroupInfo::match_path, straight from the file's text (no allocation); the
// view points into `text`. Malformed lines are skipped.
std::optional<std::string_view> cgroup_match_path(std::string_view text);

// True when `path` is `prefix` or lies below it, comparing whole components: "/a/b" matches
// "/a/b" and "/a/b/c", not "/a/bc". "/" matches every path. A trailing '/' on the prefix is
// ignored.
bool cgroup_path_has_prefix(std::string_view path, std::string_view prefix);

// ---------------------------------------------------------------------------------------------
// /proc/PID/maps

// The path column of one maps line ("start-end perms offset dev inode   path"), including a
// " (deleted)" suffix; nullopt for anonymous mappings and malformed lines. Pseudo paths such as
// "[heap]" are returned as they are.
std::optional<std::string_view> maps_line_path(std::string_view line);

// The distinct file paths (those starting with '/') mapped, in order of first appearance.
std::vector<std::string> parse_mapped_paths(std::string_view text);

// ---------------------------------------------------------------------------------------------
// /proc/PID/fd/* link targets

struct NvidiaDevice {
  // N for /dev/nvidiaN; nullopt for the driver's other nodes (/dev/nvidiactl, /dev/nvidia-uvm,
  // /dev/nvidia-uvm-tools, /dev/nvidia-modeset, /dev/nvidia-caps/...), which mark a process as
  // using the GPU driver without telling which GPU.
  std::optional<std::uint32_t> gpu;
};

// Classifies an fd link target; nullopt when it is not an NVIDIA device node.
std::optional<NvidiaDevice> parse_nvidia_device(std::string_view link_target);

// True for NCCL's shared-memory segments: "/dev/shm/nccl-*" (also when deleted).
bool is_nccl_shm_path(std::string_view path);
// True for a mapped NCCL library (the path contains "libnccl") or an NCCL shm segment.
bool is_nccl_mapping(std::string_view path);

// ---------------------------------------------------------------------------------------------
// /proc/stat

struct CpuTimes {
  std::uint64_t user = 0;
  std::uint64_t nice = 0;
  std::uint64_t system = 0;
  std::uint64_t idle = 0;
  std::uint64_t iowait = 0;
  std::uint64_t irq = 0;
  std::uint64_t softirq = 0;
  std::uint64_t steal = 0;

  // guest and guest_nice are already inside user and nice, so they are not added again.
  [[nodiscard]] std::uint64_t total() const {
    return user + nice + system + idle + iowait + irq + softirq + steal;
  }
  [[nodiscard]] std::uint64_t idle_total() const { return idle + iowait; }
};

// Largest CPU id accepted from /proc/stat; a larger one is a malformed line.
inline constexpr std::uint32_t kMaxCpuId = 65535;

// The most we read of /proc/PID/stat (a comm of 16 bytes and 52 numbers fit in 1 KiB; the cap
// only bounds a forged or future file).
inline constexpr std::size_t kMaxStatBytes = std::size_t{64} * 1024;

// The per-CPU lines ("cpuN user nice system idle [iowait irq softirq steal ...]"), indexed by CPU
// id; ids missing from the file (offline CPUs) are nullopt. The aggregate "cpu" line and other
// lines are ignored. At least the first four values are required.
Result<std::vector<std::optional<CpuTimes>>> parse_proc_stat_cpus(std::string_view text);

// ---------------------------------------------------------------------------------------------
// /proc/sys/kernel/task_delayacct

// "0" or "1" (surrounding white space allowed).
Result<bool> parse_task_delayacct(std::string_view text);

// ---------------------------------------------------------------------------------------------
// Readers on descriptors (hot paths).

// Opens a directory relative to `dirfd` (O_DIRECTORY | O_CLOEXEC). On failure returns an invalid
// UniqueFd and sets `err` to the errno value.
UniqueFd open_dir_at(int dirfd, const char* rel, int& err);

// A directory stream opened relative to a directory descriptor; next() yields entry names
// without "." and "..". Used for /proc, /proc/PID/task and /proc/PID/fd.
class DirReader {
 public:
  DirReader(int dirfd, const char* rel);
  ~DirReader();
  DirReader(const DirReader&) = delete;
  DirReader& operator=(const DirReader&) = delete;

  // 0, or the errno value of the open (ENOENT/ESRCH: the process is gone).
  [[nodiscard]] int error() const { return error_; }
  // The stream's own descriptor, for *at() calls on its entries; -1 when not open.
  [[nodiscard]] int fd() const;
  // The next entry's name, nullptr at the end (or when the open failed).
  const char* next();

 private:
  DIR* dir_ = nullptr;
  int error_ = 0;
};

// Reads the target of the symbolic link `rel` under `dirfd` into `out`. Returns 0 or an errno
// value.
int read_link_at(int dirfd, const char* rel, std::string& out);

// Maps errno values of a per-process read to an Error: ENOENT and ESRCH become "gone" (ESRCH).
Error proc_read_error(const std::string& what, int err);

// ---------------------------------------------------------------------------------------------
// Readers by path (convenience; each opens the files it needs).

Result<ProcStat> read_stat(const std::string& proc_root, std::uint32_t pid);
Result<ProcStat> read_thread_stat(const std::string& proc_root, std::uint32_t pid,
                                  std::uint32_t tid);
Result<ProcStatus> read_status(const std::string& proc_root, std::uint32_t pid);
Result<std::string> read_cmdline(const std::string& proc_root, std::uint32_t pid);
Result<CgroupInfo> read_cgroup(const std::string& proc_root, std::uint32_t pid);
Result<std::vector<std::string>> read_mapped_paths(const std::string& proc_root, std::uint32_t pid);
// Link targets of /proc/PID/fd/*, in directory order.
Result<std::vector<std::string>> read_fd_targets(const std::string& proc_root, std::uint32_t pid);
// Thread ids under /proc/PID/task, ascending.
Result<std::vector<std::uint32_t>> read_thread_ids(const std::string& proc_root, std::uint32_t pid);
Result<std::vector<std::optional<CpuTimes>>> read_proc_stat_cpus(const std::string& proc_root);
Result<bool> read_task_delayacct(const std::string& proc_root);

// Parses a decimal pid directory name ("123"); nullopt for anything else (including 0 and
// values above INT32_MAX).
std::optional<std::uint32_t> parse_pid_name(std::string_view name);

}  // namespace zernel::sys
