#pragma once
// Helpers for the userspace backend's tests: a private temp dir, and real child processes whose
// threads the backend renices and pins.

#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace zernel::enforce::userspace::testing {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() /
            ("zernel-userspace-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }
  [[nodiscard]] std::string str(const std::string& rel = "") const {
    return rel.empty() ? path_.string() : (path_ / rel).string();
  }

 private:
  fs::path path_;
};

inline void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A child process that waits for commands on a pipe: each byte starts one more thread (which
// sleeps until the process is killed). It starts with `threads` threads in all.
class Child {
 public:
  explicit Child(int threads = 1) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[1]);
      for (int i = 1; i < threads; ++i) spawn();
      char c = 0;
      while (::read(fds[0], &c, 1) == 1) spawn();
      ::_exit(0);
    }
    ::close(fds[0]);
    cmd_ = fds[1];
    wait_threads(threads);
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (cmd_ >= 0) ::close(cmd_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  [[nodiscard]] std::uint32_t pid() const { return static_cast<std::uint32_t>(pid_); }
  [[nodiscard]] bool ok() const { return pid_ > 0; }

  void add_thread() {
    const std::size_t before = tids().size();
    char c = 't';
    (void)!::write(cmd_, &c, 1);
    wait_threads(static_cast<int>(before) + 1);
  }

  [[nodiscard]] std::vector<std::uint32_t> tids() const {
    std::vector<std::uint32_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid_) + "/task", ec)) {
      out.push_back(static_cast<std::uint32_t>(std::stoul(e.path().filename().string())));
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  static void spawn() {
    std::thread([] {
      for (;;) ::pause();
    }).detach();
  }
  void wait_threads(int n) const {
    for (int i = 0; i < 500 && static_cast<int>(tids().size()) < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  pid_t pid_ = -1;
  int cmd_ = -1;
};

inline int nice_of(std::uint32_t tid) {
  errno = 0;
  return ::getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
}

inline std::vector<std::uint32_t> cpus_of(std::uint32_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<std::uint32_t> out;
  if (::sched_getaffinity(static_cast<pid_t>(tid), sizeof set, &set) != 0) return out;
  for (std::uint32_t c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

// Root, or at least CAP_SYS_NICE: lowering a nice value needs it.
inline bool privileged() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      std::uint64_t caps = 0;
      std::istringstream(line.substr(7)) >> std::hex >> caps;
      return ((caps >> 23) & 1U) != 0;
    }
  }
  return false;
}

}  // namespace zernel::enforce::userspace::testing
