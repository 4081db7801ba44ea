#include "collect/wait_state.hpp"

#include <fcntl.h>

#include <charconv>

#include "sys/file.hpp"

namespace zernel::collect {

std::string_view wait_name(MainThreadWait w) {
  switch (w) {
    case MainThreadWait::running: return "running";
    case MainThreadWait::input: return "input";
    case MainThreadWait::futex: return "futex";
    case MainThreadWait::other: return "other";
    case MainThreadWait::unknown: break;
  }
  return "unknown";
}

bool main_thread_in_futex_wait(MainThreadWait w, std::uint64_t main_futex_wait_ns,
                               std::uint64_t now_ns) {
  if (w == MainThreadWait::futex) return true;
  if (w != MainThreadWait::running || main_futex_wait_ns == 0) return false;
  return now_ns < main_futex_wait_ns || now_ns - main_futex_wait_ns < kFutexLoopNs;
}

MainThreadWait parse_syscall_file(std::string_view text) {
  if (text.starts_with("running")) return MainThreadWait::running;
  long nr = -2;
  const auto* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, nr);
  if (ec != std::errc() || (p != end && *p != ' ' && *p != '\n')) return MainThreadWait::unknown;
  switch (nr) {
    case 0:    // read
    case 17:   // pread64
    case 19:   // readv
    case 295:  // preadv
    case 7:    // poll
    case 271:  // ppoll
    case 23:   // select
    case 270:  // pselect6
    case 232:  // epoll_wait
    case 281:  // epoll_pwait
    case 441:  // epoll_pwait2
    case 45:   // recvfrom
    case 47:   // recvmsg
      return MainThreadWait::input;
    case 202:  // futex
    case 449:  // futex_wait
      return MainThreadWait::futex;
    case -1:  // blocked, but not in a system call
    default:
      return nr >= -1 ? MainThreadWait::other : MainThreadWait::unknown;
  }
}

std::optional<SchedStat> parse_schedstat(std::string_view text) {
  if (!text.ends_with('\n')) return std::nullopt;  // cut short (the kernel ends the line)
  SchedStat st;
  std::uint64_t* fields[] = {&st.run_ns, &st.wait_ns, &st.timeslices};
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (std::uint64_t* f : fields) {
    while (p < end && *p == ' ') ++p;
    auto [next, ec] = std::from_chars(p, end, *f);
    if (ec != std::errc()) return std::nullopt;
    p = next;
  }
  if (p != end && *p != '\n' && *p != ' ') return std::nullopt;
  return st;
}

std::optional<SchedStat> read_schedstat(const std::string& proc_root, std::uint32_t pid) {
  const std::string path = proc_root + "/" + std::to_string(pid) + "/schedstat";
  char buf[127];
  std::size_t n = 0;
  if (sys::read_file_into(path.c_str(), buf, n) != 0 || n == 0) return std::nullopt;
  return parse_schedstat(std::string_view(buf, n));
}

MainThreadWait read_main_thread_wait(const std::string& proc_root, std::uint32_t pid) {
  const std::string path = proc_root + "/" + std::to_string(pid) + "/syscall";
  char buf[255];
  std::size_t n = 0;
  if (sys::read_file_into(path.c_str(), buf, n) != 0 || n == 0) return MainThreadWait::unknown;
  return parse_syscall_file(std::string_view(buf, n));
}

void parse_children(std::string_view text, std::vector<std::uint32_t>& out) {
  out.clear();
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (;;) {
    while (p < end && (*p == ' ' || *p == '\n')) ++p;
    if (p == end) return;
    std::uint32_t pid = 0;
    auto [next, ec] = std::from_chars(p, end, pid);
    if (ec != std::errc() || pid == 0 || (next != end && *next != ' ' && *next != '\n')) return;
    out.push_back(pid);
    p = next;
  }
}

bool read_main_thread_children(const std::string& proc_root, std::uint32_t pid,
                               std::vector<std::uint32_t>& out) {
  out.clear();
  const std::string id = std::to_string(pid);
  const std::string path = proc_root + "/" + id + "/task/" + id + "/children";
  // A million bytes of pids is enough: a longer list is not read.
  std::string text;
  if (sys::read_file_at(AT_FDCWD, path.c_str(), text, std::size_t{1} << 20) != 0) return false;
  parse_children(text, out);
  return true;
}

}  // namespace zernel::collect
