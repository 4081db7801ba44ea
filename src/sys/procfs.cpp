#include "sys/procfs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <limits>

#include "common/parse_number.hpp"

namespace zernel::sys {

namespace {

constexpr std::size_t kMaxSmallBytes = 1 << 20;
constexpr std::size_t kMaxMapsBytes = std::size_t{64} << 20;
constexpr std::size_t kMaxLinkBytes = std::size_t{64} * 1024;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Splits off the next token separated by spaces; empty when none is left.
std::string_view next_token(std::string_view& rest) {
  while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
  std::size_t n = 0;
  while (n < rest.size() && !is_space(rest[n])) ++n;
  std::string_view token = rest.substr(0, n);
  rest.remove_prefix(n);
  return token;
}

std::string_view next_line(std::string_view& rest) {
  const std::size_t nl = rest.find('\n');
  std::string_view line = rest.substr(0, nl);
  rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
  return line;
}

// The kernel ends every line of these files with '\n'. Text that does not was cut short (a
// fabricated file, a read that stopped early); its last line may hold a cut number or path that
// still parses, so it is dropped.
std::string_view complete_lines(std::string_view text) {
  const std::size_t nl = text.rfind('\n');
  return nl == std::string_view::npos ? std::string_view() : text.substr(0, nl + 1);
}

std::string quoted(std::string_view s) {
  constexpr std::size_t kMax = 60;
  std::string out = "\"";
  out.append(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  out += '"';
  return out;
}

std::string pid_path(const std::string& proc_root, std::uint32_t pid) {
  return proc_root + "/" + std::to_string(pid);
}

// Opens PROC/PID as a directory; a missing one is a gone process.
Result<UniqueFd> open_pid_dir(const std::string& path) {
  int err = 0;
  UniqueFd fd = open_dir_at(AT_FDCWD, path.c_str(), err);
  if (!fd.valid()) return proc_read_error("opening " + path, err);
  return fd;
}

// Reads PID_DIR/rel of a process into `out`.
Result<void> read_proc_file(const std::string& pid_dir, const char* rel, std::string& out,
                            std::size_t max_bytes) {
  auto dir = open_pid_dir(pid_dir);
  if (!dir) return dir.error();
  const int err = read_file_at(dir->get(), rel, out, max_bytes);
  if (err != 0) return proc_read_error("reading " + pid_dir + "/" + rel, err);
  return Ok{};
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Error proc_read_error(const std::string& what, int err) {
  if (err == ENOENT || err == ESRCH) return Error(ESRCH, what + ": process is gone");
  return errno_error(what, err);
}

std::optional<std::uint32_t> parse_pid_name(std::string_view name) {
  if (name.empty() || name.size() > 10 || name.front() == '0') return std::nullopt;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  auto v = parse_u32(name);
  if (!v || *v > static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max())) {
    return std::nullopt;
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// stat

Result<ProcStat> parse_stat(std::string_view text) {
  const std::size_t open = text.find('(');
  const std::size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return Error("stat: no \"(comm)\" in " + quoted(text));
  }
  ProcStat st;
  auto pid = parse_u32(trim(text.substr(0, open)));
  if (!pid) return Error("stat: bad pid in " + quoted(text));
  st.pid = *pid;
  st.comm.assign(text.substr(open + 1, close - open - 1));

  // Field 3 onwards: take each token in turn, parsing only the ones we keep. Without the final
  // newline the last token may be a cut number, so it does not count.
  std::string_view rest = text.substr(close + 1);
  if (!rest.empty() && !is_space(rest.back())) {
    while (!rest.empty() && !is_space(rest.back())) rest.remove_suffix(1);
  }
  auto bad = [&](int field, const char* name, std::string_view token) {
    return Error("stat: field " + std::to_string(field) + " (" + name +
                 "): " + (token.empty() ? std::string("missing") : "bad value " + quoted(token)));
  };
  for (int field = 3; field <= 42; ++field) {
    const std::string_view token = next_token(rest);
    if (token.empty()) {
      if (field > 22) break;  // a short line: field 42 stays unknown
      return Error("stat: line ends before field " + std::to_string(field) + " in " + quoted(text));
    }
    switch (field) {
      case 3:
        if (token.size() != 1) return bad(field, "state", token);
        st.state = token.front();
        break;
      case 4: {
        auto v = parse_u32(token);
        if (!v) return bad(field, "ppid", token);
        st.ppid = *v;
        break;
      }
      case 9: {
        auto v = parse_u32(token);
        if (!v) return bad(field, "flags", token);
        st.flags = *v;
        break;
      }
      case 14: {
        auto v = parse_u64(token);
        if (!v) return bad(field, "utime", token);
        st.utime_ticks = *v;
        break;
      }
      case 15: {
        auto v = parse_u64(token);
        if (!v) return bad(field, "stime", token);
        st.stime_ticks = *v;
        break;
      }
      case 20: {
        auto v = parse_u32(token);
        if (!v) return bad(field, "num_threads", token);
        st.num_threads = *v;
        break;
      }
      case 22: {
        auto v = parse_u64(token);
        if (!v) return bad(field, "starttime", token);
        st.starttime_ticks = *v;
        break;
      }
      case 42: {
        auto v = parse_u64(token);
        if (!v) return bad(field, "delayacct_blkio_ticks", token);
        st.delayacct_blkio_ticks = v;
        break;
      }
      default:
        break;
    }
  }
  return st;
}

// ---------------------------------------------------------------------------------------------
// status

Result<ProcStatus> parse_status(std::string_view text) {
  text = complete_lines(text);
  ProcStatus st;
  bool have_uid = false;
  while (!text.empty()) {
    std::string_view line = next_line(text);
    if (line.starts_with("Tgid:")) {
      auto v = parse_u32(trim(line.substr(5)));
      if (!v) return Error("status: bad Tgid line " + quoted(line));
      st.tgid = *v;
    } else if (line.starts_with("Uid:")) {
      std::string_view rest = line.substr(4);
      auto ruid = parse_u32(next_token(rest));
      auto euid = parse_u32(next_token(rest));
      if (!ruid || !euid) return Error("status: bad Uid line " + quoted(line));
      st.ruid = *ruid;
      st.euid = *euid;
      have_uid = true;
    }
  }
  if (!have_uid) return Error("status: no Uid line");
  return st;
}

// ---------------------------------------------------------------------------------------------
// cmdline

std::string cmdline_to_string(std::string_view raw) {
  while (!raw.empty() && raw.back() == '\0') raw.remove_suffix(1);
  std::string out(raw);
  std::replace(out.begin(), out.end(), '\0', ' ');
  return out;
}

// ---------------------------------------------------------------------------------------------
// cgroup

std::optional<std::string_view> CgroupInfo::match_path() const {
  if (v2_path) return std::string_view(*v2_path);
  const CgroupV1Entry* systemd = nullptr;
  for (const CgroupV1Entry& e : v1) {
    std::string_view list = e.controllers;
    while (!list.empty()) {
      const std::size_t comma = list.find(',');
      const std::string_view c = list.substr(0, comma);
      if (c == "cpu") return std::string_view(e.path);
      if (c == "name=systemd" && systemd == nullptr) systemd = &e;
      list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
    }
  }
  if (systemd != nullptr) return std::string_view(systemd->path);
  return std::nullopt;
}

Result<CgroupInfo> parse_cgroup(std::string_view text) {
  text = complete_lines(text);
  CgroupInfo info;
  while (!text.empty()) {
    const std::string_view line = next_line(text);
    if (trim(line).empty()) continue;
    const std::size_t c1 = line.find(':');
    const std::size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) return Error("cgroup: malformed line " + quoted(line));
    auto id = parse_u32(line.substr(0, c1));
    if (!id) return Error("cgroup: bad hierarchy id in " + quoted(line));
    const std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string_view path = line.substr(c2 + 1);
    if (*id == 0 && controllers.empty()) {
      info.v2_path = std::string(path);
    } else {
      info.v1.push_back({*id, std::string(controllers), std::string(path)});
    }
  }
  return info;
}

std::optional<std::string_view> cgroup_match_path(std::string_view text) {
  text = complete_lines(text);
  std::optional<std::string_view> cpu;
  std::optional<std::string_view> systemd;
  while (!text.empty()) {
    const std::string_view line = next_line(text);
    const std::size_t c1 = line.find(':');
    const std::size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const auto id = parse_u32(line.substr(0, c1));
    if (!id) continue;
    std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string_view path = line.substr(c2 + 1);
    if (*id == 0 && controllers.empty()) return path;
    while (!controllers.empty()) {
      const std::size_t comma = controllers.find(',');
      const std::string_view c = controllers.substr(0, comma);
      if (c == "cpu" && !cpu) cpu = path;
      if (c == "name=systemd" && !systemd) systemd = path;
      controllers.remove_prefix(comma == std::string_view::npos ? controllers.size() : comma + 1);
    }
  }
  return cpu ? cpu : systemd;
}

bool cgroup_path_has_prefix(std::string_view path, std::string_view prefix) {
  while (prefix.size() > 1 && prefix.back() == '/') prefix.remove_suffix(1);
  if (prefix == "/") return path.starts_with('/');
  if (!path.starts_with(prefix)) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '/';
}

// ---------------------------------------------------------------------------------------------
// maps

std::optional<std::string_view> maps_line_path(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  std::string_view rest = line;
  const std::string_view range = next_token(rest);
  if (range.find('-') == std::string_view::npos) return std::nullopt;
  for (int i = 0; i < 4; ++i) {  // perms, offset, dev, inode
    if (next_token(rest).empty()) return std::nullopt;
  }
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  if (rest.empty()) return std::nullopt;
  return rest;
}

std::vector<std::string> parse_mapped_paths(std::string_view text) {
  text = complete_lines(text);
  std::vector<std::string> paths;
  while (!text.empty()) {
    auto path = maps_line_path(next_line(text));
    if (!path || !path->starts_with('/')) continue;
    // Consecutive mappings of one file are the common case; a full scan catches the rest.
    if (!paths.empty() && paths.back() == *path) continue;
    if (std::find(paths.begin(), paths.end(), *path) != paths.end()) continue;
    paths.emplace_back(*path);
  }
  return paths;
}

// ---------------------------------------------------------------------------------------------
// fd targets

std::optional<NvidiaDevice> parse_nvidia_device(std::string_view target) {
  constexpr std::string_view kPrefix = "/dev/nvidia";
  constexpr std::string_view kDeleted = " (deleted)";
  if (!target.starts_with(kPrefix)) return std::nullopt;
  if (target.ends_with(kDeleted)) target.remove_suffix(kDeleted.size());
  const std::string_view rest = target.substr(kPrefix.size());
  NvidiaDevice dev;
  const bool digits = !rest.empty() && std::all_of(rest.begin(), rest.end(),
                                                   [](char c) { return c >= '0' && c <= '9'; });
  if (digits) {
    // A number that does not fit is no GPU index: the process still uses the driver.
    if (auto v = parse_u32(rest); v && *v < (1U << 20)) dev.gpu = v;
  }
  return dev;
}

bool is_nccl_shm_path(std::string_view path) { return path.starts_with("/dev/shm/nccl-"); }

bool is_nccl_mapping(std::string_view path) {
  return is_nccl_shm_path(path) || path.find("libnccl") != std::string_view::npos;
}

// ---------------------------------------------------------------------------------------------
// /proc/stat

Result<std::vector<std::optional<CpuTimes>>> parse_proc_stat_cpus(std::string_view text) {
  text = complete_lines(text);
  std::vector<std::optional<CpuTimes>> cpus;
  bool any = false;
  while (!text.empty()) {
    const std::string_view line = next_line(text);
    if (line.size() < 4 || !line.starts_with("cpu") || line[3] < '0' || line[3] > '9') continue;
    std::string_view rest = line;
    const std::string_view name = next_token(rest);
    auto id = parse_u32(name.substr(3));
    if (!id || *id > kMaxCpuId) return Error("/proc/stat: bad CPU line " + quoted(line));
    std::uint64_t values[8] = {};
    int n = 0;
    for (; n < 8; ++n) {
      const std::string_view token = next_token(rest);
      if (token.empty()) break;
      auto v = parse_u64(token);
      if (!v) return Error("/proc/stat: bad value " + quoted(token) + " in " + quoted(line));
      values[n] = *v;
    }
    if (n < 4) return Error("/proc/stat: too few values in " + quoted(line));
    if (cpus.size() <= *id) cpus.resize(std::size_t{*id} + 1);
    if (cpus[*id]) return Error("/proc/stat: CPU " + std::to_string(*id) + " listed twice");
    cpus[*id] = CpuTimes{values[0], values[1], values[2], values[3],
                         values[4], values[5], values[6], values[7]};
    any = true;
  }
  if (!any) return Error("/proc/stat: no per-CPU lines");
  return cpus;
}

// ---------------------------------------------------------------------------------------------
// task_delayacct

Result<bool> parse_task_delayacct(std::string_view text) {
  const std::string_view t = trim(text);
  if (t == "0") return false;
  if (t == "1") return true;
  return Error("task_delayacct: expected 0 or 1, got " + quoted(t));
}

// ---------------------------------------------------------------------------------------------
// Descriptor readers

UniqueFd open_dir_at(int dirfd, const char* rel, int& err) {
  const int fd = ::openat(dirfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  err = fd < 0 ? errno : 0;
  return UniqueFd(fd);
}

DirReader::DirReader(int dirfd, const char* rel) {
  int fd = ::openat(dirfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    error_ = errno;
    return;
  }
  dir_ = ::fdopendir(fd);
  if (dir_ == nullptr) {
    error_ = errno;
    ::close(fd);
  }
}

DirReader::~DirReader() {
  if (dir_ != nullptr) ::closedir(dir_);
}

int DirReader::fd() const { return dir_ == nullptr ? -1 : ::dirfd(dir_); }

const char* DirReader::next() {
  if (dir_ == nullptr) return nullptr;
  for (;;) {
    const dirent* e = ::readdir(dir_);
    if (e == nullptr) return nullptr;
    const char* n = e->d_name;
    if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'))) continue;
    return n;
  }
}

int read_link_at(int dirfd, const char* rel, std::string& out) {
  out.resize(std::max<std::size_t>(out.capacity(), 256));
  for (;;) {
    const ssize_t n = ::readlinkat(dirfd, rel, out.data(), out.size());
    if (n < 0) {
      const int err = errno;
      out.clear();
      return err;
    }
    if (static_cast<std::size_t>(n) < out.size()) {
      out.resize(static_cast<std::size_t>(n));
      return 0;
    }
    if (out.size() >= kMaxLinkBytes) {
      out.clear();
      return ENAMETOOLONG;
    }
    out.resize(out.size() * 2);
  }
}

// ---------------------------------------------------------------------------------------------
// Path readers

Result<ProcStat> read_stat(const std::string& proc_root, std::uint32_t pid) {
  const std::string dir = pid_path(proc_root, pid);
  std::string text;
  if (auto r = read_proc_file(dir, "stat", text, kMaxStatBytes); !r) return r.error();
  auto st = parse_stat(text);
  if (!st) return st.error().context("reading " + dir + "/stat");
  return st;
}

Result<ProcStat> read_thread_stat(const std::string& proc_root, std::uint32_t pid,
                                  std::uint32_t tid) {
  const std::string dir = pid_path(proc_root, pid) + "/task/" + std::to_string(tid);
  std::string text;
  if (auto r = read_proc_file(dir, "stat", text, kMaxStatBytes); !r) return r.error();
  auto st = parse_stat(text);
  if (!st) return st.error().context("reading " + dir + "/stat");
  return st;
}

Result<ProcStatus> read_status(const std::string& proc_root, std::uint32_t pid) {
  const std::string dir = pid_path(proc_root, pid);
  std::string text;
  if (auto r = read_proc_file(dir, "status", text, kMaxSmallBytes); !r) return r.error();
  auto st = parse_status(text);
  if (!st) return st.error().context("reading " + dir + "/status");
  return st;
}

Result<std::string> read_cmdline(const std::string& proc_root, std::uint32_t pid) {
  const std::string dir = pid_path(proc_root, pid);
  std::string text;
  if (auto r = read_proc_file(dir, "cmdline", text, kMaxSmallBytes); !r) return r.error();
  return cmdline_to_string(text);
}

Result<CgroupInfo> read_cgroup(const std::string& proc_root, std::uint32_t pid) {
  const std::string dir = pid_path(proc_root, pid);
  std::string text;
  if (auto r = read_proc_file(dir, "cgroup", text, kMaxSmallBytes); !r) return r.error();
  auto info = parse_cgroup(text);
  if (!info) return info.error().context("reading " + dir + "/cgroup");
  return info;
}

Result<std::vector<std::string>> read_mapped_paths(const std::string& proc_root,
                                                   std::uint32_t pid) {
  const std::string dir = pid_path(proc_root, pid);
  std::string text;
  if (auto r = read_proc_file(dir, "maps", text, kMaxMapsBytes); !r) return r.error();
  return parse_mapped_paths(text);
}

Result<std::vector<std::string>> read_fd_targets(const std::string& proc_root, std::uint32_t pid) {
  const std::string dir = pid_path(proc_root, pid);
  auto piddir = open_pid_dir(dir);
  if (!piddir) return piddir.error();
  DirReader fds(piddir->get(), "fd");
  if (fds.error() != 0) return proc_read_error("listing " + dir + "/fd", fds.error());
  std::vector<std::string> targets;
  std::string target;
  while (const char* name = fds.next()) {
    if (read_link_at(fds.fd(), name, target) == 0) targets.push_back(target);
  }
  return targets;
}

Result<std::vector<std::uint32_t>> read_thread_ids(const std::string& proc_root,
                                                   std::uint32_t pid) {
  const std::string dir = pid_path(proc_root, pid);
  auto piddir = open_pid_dir(dir);
  if (!piddir) return piddir.error();
  DirReader tasks(piddir->get(), "task");
  if (tasks.error() != 0) return proc_read_error("listing " + dir + "/task", tasks.error());
  std::vector<std::uint32_t> tids;
  while (const char* name = tasks.next()) {
    if (auto tid = parse_pid_name(name)) tids.push_back(*tid);
  }
  std::sort(tids.begin(), tids.end());
  return tids;
}

Result<std::vector<std::optional<CpuTimes>>> read_proc_stat_cpus(const std::string& proc_root) {
  const std::string path = proc_root + "/stat";
  std::string text;
  if (const int err = read_file_at(AT_FDCWD, path.c_str(), text, std::size_t{16} << 20); err != 0) {
    return errno_error("reading " + path, err);
  }
  auto cpus = parse_proc_stat_cpus(text);
  if (!cpus) return cpus.error().context("reading " + path);
  return cpus;
}

Result<bool> read_task_delayacct(const std::string& proc_root) {
  const std::string path = proc_root + "/sys/kernel/task_delayacct";
  std::string text;
  if (const int err = read_file_at(AT_FDCWD, path.c_str(), text, 4096); err != 0) {
    return errno_error("reading " + path, err);
  }
  auto on = parse_task_delayacct(text);
  if (!on) return on.error().context("reading " + path);
  return on;
}

}  // namespace zernel::sys
