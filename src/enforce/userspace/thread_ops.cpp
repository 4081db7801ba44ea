#include "enforce/userspace/thread_ops.hpp"

#include <sched.h>
#include <sys/resource.h>

#include <cerrno>

#include "sys/procfs.hpp"

namespace zernel::enforce::userspace {
namespace {

constexpr std::size_t kMaxCpus = 8192;

// RAII for a dynamically sized cpu_set_t.
class CpuSet {
 public:
  CpuSet() : set_(CPU_ALLOC(kMaxCpus)), size_(CPU_ALLOC_SIZE(kMaxCpus)) { CPU_ZERO_S(size_, set_); }
  ~CpuSet() { CPU_FREE(set_); }
  CpuSet(const CpuSet&) = delete;
  CpuSet& operator=(const CpuSet&) = delete;
  cpu_set_t* get() { return set_; }
  [[nodiscard]] std::size_t size() const { return size_; }

 private:
  cpu_set_t* set_;
  std::size_t size_;
};

}  // namespace

bool thread_gone(int err) { return err == ESRCH || err == ENOENT; }

int get_nice(std::uint32_t tid, std::int32_t& out) {
  errno = 0;
  const int v = ::getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
  if (v == -1 && errno != 0) return errno;
  out = v;
  return 0;
}

int set_nice(std::uint32_t tid, std::int32_t nice) {
  return ::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), nice) == 0 ? 0 : errno;
}

int get_cpus(std::uint32_t tid, std::vector<std::uint32_t>& out) {
  CpuSet s;
  if (::sched_getaffinity(static_cast<pid_t>(tid), s.size(), s.get()) != 0) return errno;
  out.clear();
  for (std::size_t c = 0; c < kMaxCpus; ++c) {
    if (CPU_ISSET_S(c, s.size(), s.get())) out.push_back(static_cast<std::uint32_t>(c));
  }
  return 0;
}

int set_cpus(std::uint32_t tid, const std::vector<std::uint32_t>& cpus) {
  CpuSet s;
  for (const std::uint32_t c : cpus) {
    if (c < kMaxCpus) CPU_SET_S(c, s.size(), s.get());
  }
  return ::sched_setaffinity(static_cast<pid_t>(tid), s.size(), s.get()) == 0 ? 0 : errno;
}

bool same_thread(const std::string& proc_root, std::uint32_t pid, std::uint32_t tid,
                 std::uint64_t start) {
  auto st = sys::read_thread_stat(proc_root, pid, tid);
  return st && st->starttime_ticks == start;
}

}  // namespace zernel::enforce::userspace
