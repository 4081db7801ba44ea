#include "enforce/userspace/journal.hpp"

#include <fmt/format.h>

#include "collect/topology_reader.hpp"
#include "common/journal_file.hpp"

namespace zernel::enforce::userspace {
namespace {

constexpr std::string_view kMagic = "zernel-userspace-journal 1";

}  // namespace

std::string format_cpu_list(const std::vector<std::uint32_t>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string format_journal(const Journal& j) {
  std::string out(kMagic);
  out += fmt::format("\nowner {} {}\n", j.owner_pid, j.owner_start);
  if (j.cgroup) {
    out += fmt::format("cgroup {} {} {} {}\n",
                       j.cgroup->layout.version == CgroupVersion::v2 ? "v2" : "v1",
                       hex_encode(j.cgroup->layout.mount_root),
                       hex_encode(j.cgroup->layout.mount_point), hex_encode(j.cgroup->name));
  } else {
    out += "cgroup -\n";
  }
  for (const ProcessOriginal& p : j.processes) {
    out +=
        fmt::format("process {} {} {}\n", p.pid, p.start, p.cgroup ? hex_encode(*p.cgroup) : "-");
    for (const ThreadOriginal& t : p.threads) {
      out += fmt::format("thread {} {} {} {}\n", t.tid, t.start, t.nice,
                         t.cpus.empty() ? "-" : format_cpu_list(t.cpus));
    }
  }
  out += "end\n";
  return out;
}

Result<Journal> parse_journal(std::string_view text) {
  Journal j;
  bool have_owner = false;
  bool have_cgroup = false;
  const auto record = [&](const std::vector<std::string_view>& f) -> std::optional<std::string> {
    const std::string_view kind = f[0];
    if (kind == "owner" && !have_owner) {
      if (f.size() != 3) return "expected: owner PID START";
      auto pid = parse_number<std::uint32_t>(f[1]);
      auto start = parse_number<std::uint64_t>(f[2]);
      if (!pid || !start) return "bad owner pid or start time";
      j.owner_pid = *pid;
      j.owner_start = *start;
      have_owner = true;
    } else if (kind == "cgroup" && have_owner && !have_cgroup) {
      have_cgroup = true;
      if (f.size() == 2 && f[1] == "-") return std::nullopt;
      if (f.size() != 5 || (f[1] != "v1" && f[1] != "v2")) {
        return "expected: cgroup v1|v2 ROOT MOUNT NAME";
      }
      auto root = hex_decode(f[2]);
      auto mount = hex_decode(f[3]);
      auto name = hex_decode(f[4]);
      if (!root || !mount || !name || name->empty() || name->find('/') != std::string::npos) {
        return "bad cgroup fields";
      }
      JournalCgroup c;
      c.layout.version = f[1] == "v2" ? CgroupVersion::v2 : CgroupVersion::v1;
      c.layout.mount_root = *root;
      c.layout.mount_point = *mount;
      c.name = *name;
      j.cgroup = std::move(c);
    } else if (kind == "process" && have_cgroup) {
      if (f.size() != 4) return "expected: process PID START CGROUP";
      ProcessOriginal p;
      auto pid = parse_number<std::uint32_t>(f[1]);
      auto start = parse_number<std::uint64_t>(f[2]);
      if (!pid || *pid == 0 || !start) return "bad process pid or start time";
      p.pid = *pid;
      p.start = *start;
      if (f[3] != "-") {
        auto cg = hex_decode(f[3]);
        if (!cg || cg->empty() || cg->front() != '/') return "bad cgroup path";
        p.cgroup = std::move(*cg);
      }
      j.processes.push_back(std::move(p));
    } else if (kind == "thread" && !j.processes.empty()) {
      if (f.size() != 5) return "expected: thread TID START NICE CPULIST";
      ThreadOriginal t;
      auto tid = parse_number<std::uint32_t>(f[1]);
      auto start = parse_number<std::uint64_t>(f[2]);
      auto nice = parse_number<std::int32_t>(f[3]);
      if (!tid || *tid == 0 || !start || !nice || *nice < -20 || *nice > 19) {
        return "bad thread id, start time or nice";
      }
      t.tid = *tid;
      t.start = *start;
      t.nice = *nice;
      if (f[4] != "-") {
        auto cpus = collect::parse_cpu_list(std::string(f[4]));
        if (!cpus || cpus->empty()) return "bad CPU list";
        t.cpus = std::move(*cpus);
      }
      j.processes.back().threads.push_back(std::move(t));
    } else {
      return "unexpected record";
    }
    return std::nullopt;
  };
  auto parsed = parse_journal_text(text, kMagic, "not a zernel userspace journal (version 1)",
                                   record, [&] { return have_cgroup; });
  if (!parsed) return parsed.error();
  return j;
}

Result<void> write_journal(const std::string& path, const Journal& j) {
  return write_file_atomically(path, format_journal(j));
}

Result<std::optional<Journal>> read_journal(const std::string& path) {
  auto text = read_whole_file(path);
  if (!text) return text.error();
  if (!text->has_value()) return std::optional<Journal>{};
  auto j = parse_journal(**text);
  if (!j) return j.error().context(path);
  return std::optional<Journal>(std::move(*j));
}

}  // namespace zernel::enforce::userspace
