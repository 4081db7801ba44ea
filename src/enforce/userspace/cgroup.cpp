#include "enforce/userspace/cgroup.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "collect/procfs.hpp"

namespace zernel::enforce::userspace {
namespace {

namespace fs = std::filesystem;

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_path(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string_view oct = s.substr(i + 1, 3);
      if (oct.size() == 3 &&
          std::all_of(oct.begin(), oct.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out.push_back(static_cast<char>((oct[0] - '0') * 64 + (oct[1] - '0') * 8 + (oct[2] - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

std::vector<std::string_view> split_ws(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

bool has_token(std::string_view list, std::string_view token, char sep) {
  std::size_t i = 0;
  while (i <= list.size()) {
    std::size_t j = list.find(sep, i);
    if (j == std::string_view::npos) j = list.size();
    if (list.substr(i, j - i) == token) return true;
    i = j + 1;
  }
  return false;
}

std::optional<std::string> read_small(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<CpuCgroupLayout> detect_cpu_cgroup(std::string_view mountinfo,
                                          const std::string& fs_prefix) {
  std::optional<CpuCgroupLayout> v1;
  std::size_t pos = 0;
  while (pos < mountinfo.size()) {
    std::size_t end = mountinfo.find('\n', pos);
    if (end == std::string_view::npos) end = mountinfo.size();
    const std::string_view line = mountinfo.substr(pos, end - pos);
    pos = end + 1;
    const auto f = split_ws(line);
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
    const auto dash = std::find(f.begin(), f.end(), std::string_view("-"));
    if (f.size() < 6 || dash == f.end() || f.end() - dash < 3) continue;  // not a mount line
    const std::string_view fstype = *(dash + 1);
    const std::string_view super_opts = *(dash + 3);
    CpuCgroupLayout l;
    l.mount_root = unescape_mount_path(f[3]);
    l.mount_point = fs_prefix + unescape_mount_path(f[4]);
    if (fstype == "cgroup2") {
      const auto controllers = read_small(l.mount_point + "/cgroup.controllers");
      if (!controllers) continue;
      std::string c = *controllers;
      std::replace(c.begin(), c.end(), '\n', ' ');
      if (!has_token(c, "cpu", ' ')) continue;
      l.version = CgroupVersion::v2;
      return l;  // the unified hierarchy with the cpu controller wins
    }
    if (fstype == "cgroup" && !v1 && has_token(super_opts, "cpu", ',')) {
      l.version = CgroupVersion::v1;
      v1 = std::move(l);
    }
  }
  if (v1) return *v1;
  return Error(ENOENT,
               "no cpu cgroup hierarchy is mounted (neither cgroup2 with the cpu controller nor "
               "cgroup v1 with cpu)");
}

Result<CpuCgroupLayout> detect_cpu_cgroup_from(const std::string& mountinfo_path,
                                               const std::string& fs_prefix) {
  const auto text = read_small(mountinfo_path);
  if (!text) return errno_error("reading " + mountinfo_path, errno != 0 ? errno : ENOENT);
  auto l = detect_cpu_cgroup(*text, fs_prefix);
  if (!l) return l.error().context(mountinfo_path);
  return l;
}

std::uint64_t cgroup_cpu_value(CgroupVersion version, std::uint32_t tenant_weight) {
  if (version == CgroupVersion::v2) return std::clamp<std::uint64_t>(tenant_weight, 1, 10000);
  return std::clamp<std::uint64_t>(std::uint64_t{tenant_weight} * 1024 / 100, 2, 262144);
}

const char* cgroup_cpu_file(CgroupVersion version) {
  return version == CgroupVersion::v2 ? "cpu.weight" : "cpu.shares";
}

std::optional<std::string> cgroup_dir(const CpuCgroupLayout& layout, std::string_view path) {
  if (path.empty() || path.front() != '/') return std::nullopt;
  if (!collect::cgroup_path_has_prefix(path, layout.mount_root)) return std::nullopt;
  std::string_view rest = path;
  if (layout.mount_root != "/") rest.remove_prefix(layout.mount_root.size());
  while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.empty()) return layout.mount_point;
  return layout.mount_point + "/" + std::string(rest);
}

std::optional<std::string> cpu_cgroup_path(CgroupVersion version, std::string_view proc_cgroup) {
  auto info = collect::parse_cgroup(proc_cgroup);
  if (!info) return std::nullopt;
  if (version == CgroupVersion::v2) return info->v2_path;
  for (const collect::CgroupV1Entry& e : info->v1) {
    if (has_token(e.controllers, "cpu", ',')) return e.path;
  }
  return std::nullopt;
}

Result<void> write_cgroup_file(const std::string& path, std::string_view value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error("opening " + path);
  const ssize_t n = ::write(fd, value.data(), value.size());
  const int err = errno;
  ::close(fd);
  if (n < 0) return errno_error("writing \"" + std::string(value) + "\" to " + path, err);
  if (static_cast<std::size_t>(n) != value.size()) {
    return Error(EIO, "short write to " + path);
  }
  return Ok{};
}

Result<std::vector<std::uint32_t>> read_cgroup_procs(const std::string& dir) {
  const std::string path = dir + "/cgroup.procs";
  std::ifstream in(path);
  if (!in) return errno_error("reading " + path, errno != 0 ? errno : ENOENT);
  std::vector<std::uint32_t> pids;
  std::string line;
  while (std::getline(in, line)) {
    std::uint32_t pid = 0;
    const auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), pid);
    if (ec == std::errc() && pid != 0) pids.push_back(pid);
  }
  return pids;
}

CgroupTree::CgroupTree(CpuCgroupLayout layout, std::string name)
    : layout_(std::move(layout)), name_(std::move(name)) {}

std::string CgroupTree::subtree_dir() const { return layout_.mount_point + "/" + name_; }

std::string CgroupTree::tenant_dir(std::uint16_t slot) const {
  return subtree_dir() + "/tenant-" + std::to_string(slot);
}

std::string CgroupTree::tenant_path(std::uint16_t slot) const {
  std::string root = layout_.mount_root == "/" ? "" : layout_.mount_root;
  return root + "/" + name_ + "/tenant-" + std::to_string(slot);
}

Result<void> CgroupTree::enable_cpu(const std::string& dir) {
  const std::string path = dir + "/cgroup.subtree_control";
  const auto current = read_small(path);
  if (current) {
    std::string c = *current;
    std::replace(c.begin(), c.end(), '\n', ' ');
    if (has_token(c, "cpu", ' ')) return Ok{};
  }
  return write_cgroup_file(path, "+cpu");
}

Result<void> CgroupTree::ensure_subtree() {
  const std::string dir = subtree_dir();
  if (layout_.version == CgroupVersion::v2) {
    if (auto r = enable_cpu(layout_.mount_point); !r) return r;
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return errno_error("creating " + dir);
  if (layout_.version == CgroupVersion::v2) {
    if (auto r = enable_cpu(dir); !r) return r;
  }
  return Ok{};
}

Result<void> CgroupTree::ensure_tenant(std::uint16_t slot) {
  if (auto r = ensure_subtree(); !r) return r;
  const std::string dir = tenant_dir(slot);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return errno_error("creating " + dir);
  return Ok{};
}

Result<void> CgroupTree::set_tenant_weight(std::uint16_t slot, std::uint32_t tenant_weight) {
  const std::string path = tenant_dir(slot) + "/" + cgroup_cpu_file(layout_.version);
  return write_cgroup_file(path,
                           std::to_string(cgroup_cpu_value(layout_.version, tenant_weight)) + "\n");
}

Result<void> CgroupTree::move(const std::string& dir, std::uint32_t pid) {
  return write_cgroup_file(dir + "/cgroup.procs", std::to_string(pid) + "\n");
}

std::vector<std::uint16_t> CgroupTree::tenant_slots() const {
  std::vector<std::uint16_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(subtree_dir(), ec)) {
    if (!e.is_directory(ec)) continue;
    const std::string n = e.path().filename().string();
    if (n.rfind("tenant-", 0) != 0) continue;
    std::uint16_t slot = 0;
    const char* b = n.data() + 7;
    const char* en = n.data() + n.size();
    const auto [p, err] = std::from_chars(b, en, slot);
    if (err == std::errc() && p == en && b != en) out.push_back(slot);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<void> CgroupTree::remove_tenant(std::uint16_t slot) const {
  const std::string dir = tenant_dir(slot);
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) return errno_error("removing " + dir);
  return Ok{};
}

Result<void> CgroupTree::remove_subtree() const {
  const std::string dir = subtree_dir();
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) return errno_error("removing " + dir);
  return Ok{};
}

}  // namespace zernel::enforce::userspace
