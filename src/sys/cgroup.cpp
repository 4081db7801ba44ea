#include "sys/cgroup.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>

#include "sys/file.hpp"
#include "sys/procfs.hpp"

namespace zernel::sys {
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

}  // namespace

std::vector<CgroupMount> parse_cgroup_mounts(std::string_view mountinfo) {
  std::vector<CgroupMount> mounts;
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
    if (fstype != "cgroup2" && fstype != "cgroup") continue;
    mounts.push_back({fstype == "cgroup2" ? CgroupVersion::v2 : CgroupVersion::v1,
                      unescape_mount_path(f[4]), unescape_mount_path(f[3]),
                      std::string(*(dash + 3))});
  }
  return mounts;
}

Result<CpuCgroupLayout> detect_cpu_cgroup(std::string_view mountinfo,
                                          const std::string& fs_prefix) {
  std::optional<CpuCgroupLayout> v1;
  for (const CgroupMount& m : parse_cgroup_mounts(mountinfo)) {
    CpuCgroupLayout l;
    l.mount_root = m.mount_root;
    l.mount_point = fs_prefix + m.mount_point;
    if (m.version == CgroupVersion::v2) {
      const auto controllers = read_file(l.mount_point + "/cgroup.controllers");
      if (!controllers) continue;
      std::string c = *controllers;
      std::replace(c.begin(), c.end(), '\n', ' ');
      if (!has_token(c, "cpu", ' ')) continue;
      l.version = CgroupVersion::v2;
      return l;  // the unified hierarchy with the cpu controller wins
    }
    if (!v1 && has_token(m.super_options, "cpu", ',')) {
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
  // A host with thousands of mounts (a node full of containers) has a mountinfo of megabytes.
  const auto text = read_file(mountinfo_path, std::size_t{64} << 20);
  if (!text) return text.error();
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
  // A process outside this cgroup namespace shows as "/../.."; such a path must not lead out of
  // the mount (a daemon in a container with a private cgroup namespace sees host processes so).
  for (std::size_t i = 0; i < path.size();) {
    const std::size_t j = std::min(path.find('/', i + 1), path.size());
    if (path.substr(i, j - i) == "/.." || path.substr(i, j - i) == "/.") return std::nullopt;
    i = j;
  }
  if (!sys::cgroup_path_has_prefix(path, layout.mount_root)) return std::nullopt;
  std::string_view rest = path;
  if (layout.mount_root != "/") rest.remove_prefix(layout.mount_root.size());
  while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.empty()) return layout.mount_point;
  return layout.mount_point + "/" + std::string(rest);
}

std::optional<std::string> cpu_cgroup_path(CgroupVersion version, std::string_view proc_cgroup) {
  auto info = sys::parse_cgroup(proc_cgroup);
  if (!info) return std::nullopt;
  if (version == CgroupVersion::v2) return info->v2_path;
  for (const sys::CgroupV1Entry& e : info->v1) {
    if (has_token(e.controllers, "cpu", ',')) return e.path;
  }
  return std::nullopt;
}

Result<void> write_cgroup_file(const std::string& path, std::string_view value) {
  return write_file(path, value, O_TRUNC | O_CREAT);
}

Result<std::vector<std::uint32_t>> read_cgroup_procs(const std::string& dir) {
  // One line per pid, at most about 4 million pids (pid_max).
  auto text = read_file(dir + "/cgroup.procs", std::size_t{32} << 20);
  if (!text) return text.error();
  std::vector<std::uint32_t> pids;
  std::string_view rest = *text;
  while (!rest.empty()) {
    const std::size_t nl = std::min(rest.find('\n'), rest.size());
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(std::min(nl + 1, rest.size()));
    std::uint32_t pid = 0;
    const auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), pid);
    if (ec == std::errc() && pid != 0) pids.push_back(pid);
  }
  return pids;
}

std::optional<std::uint64_t> read_cgroup_cpu_value(CgroupVersion version, const std::string& dir) {
  const auto text = read_file(dir + "/" + cgroup_cpu_file(version));
  if (!text) return std::nullopt;
  std::string_view v = *text;
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
  std::uint64_t out = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size() || v.empty()) return std::nullopt;
  return out;
}

Result<void> write_cgroup_cpu_value(CgroupVersion version, const std::string& dir,
                                    std::uint64_t value) {
  return write_cgroup_file(dir + "/" + cgroup_cpu_file(version), std::to_string(value) + "\n");
}

std::optional<std::uint64_t> cgroup_inode(const std::string& dir) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return std::nullopt;
  return static_cast<std::uint64_t>(st.st_ino);
}

Result<SubtreeProcs> read_subtree_procs(const std::string& dir, std::size_t limit) {
  SubtreeProcs out;
  auto own = read_cgroup_procs(dir);
  if (!own) return own.error();
  out.pids = std::move(*own);
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  if (ec) return out;  // no children to look at
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (!it->is_directory(ec) || it->is_symlink(ec)) continue;
    if (out.pids.size() > limit) {
      out.complete = false;
      break;
    }
    // A group removed during the walk has no cgroup.procs any more: nothing in it.
    if (auto more = read_cgroup_procs(it->path().string())) {
      out.pids.insert(out.pids.end(), more->begin(), more->end());
    }
  }
  if (out.pids.size() > limit) out.complete = false;
  return out;
}

}  // namespace zernel::sys
