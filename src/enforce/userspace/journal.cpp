#include "enforce/userspace/journal.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sys/journal_file.hpp"
#include "sys/topology_reader.hpp"

namespace zernel::enforce::userspace {
namespace {

constexpr std::string_view kMagic = "zernel-userspace-journal 2";

std::string cpus_field(const std::vector<std::uint32_t>& cpus) {
  return cpus.empty() ? "-" : format_cpu_list(cpus);
}

// "-" is an empty list; otherwise a non-empty CPU list.
std::optional<std::vector<std::uint32_t>> parse_cpus_field(std::string_view f) {
  if (f == "-") return std::vector<std::uint32_t>{};
  auto cpus = sys::parse_cpu_list(std::string(f));
  if (!cpus || cpus->empty()) return std::nullopt;
  return std::move(*cpus);
}

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
  for (const ProcessOriginal& p : j.processes) {
    out += fmt::format("process {} {} {} {} {}\n", p.pid, p.start, p.nice, cpus_field(p.cpus),
                       cpus_field(p.applied_cpus));
    for (const ThreadOriginal& t : p.threads) {
      out += fmt::format("thread {} {} {} {}\n", t.tid, t.start, t.nice, cpus_field(t.cpus));
    }
  }
  for (const WeightOriginal& w : j.weights) {
    out += fmt::format("weight {} {} {} {} {}\n", sys::hex_encode(w.dir), w.file, w.inode,
                       w.original, fmt::join(w.written, ","));
  }
  out += "end\n";
  return out;
}

Result<Journal> parse_journal(std::string_view text) {
  Journal j;
  bool have_owner = false;
  const auto valid_nice = [](const std::optional<std::int32_t>& n) {
    return n && *n >= -20 && *n <= 19;
  };
  const auto record = [&](const std::vector<std::string_view>& f) -> std::optional<std::string> {
    const std::string_view kind = f[0];
    if (kind == "owner" && !have_owner) {
      if (f.size() != 3) return "expected: owner PID START";
      auto pid = sys::parse_number<std::uint32_t>(f[1]);
      auto start = sys::parse_number<std::uint64_t>(f[2]);
      if (!pid || !start) return "bad owner pid or start time";
      j.owner_pid = *pid;
      j.owner_start = *start;
      have_owner = true;
    } else if (kind == "process" && have_owner) {
      if (f.size() != 6) return "expected: process PID START NICE CPULIST APPLIED";
      ProcessOriginal p;
      auto pid = sys::parse_number<std::uint32_t>(f[1]);
      auto start = sys::parse_number<std::uint64_t>(f[2]);
      auto nice = sys::parse_number<std::int32_t>(f[3]);
      if (!pid || *pid == 0 || !start || !valid_nice(nice)) {
        return "bad process pid, start time or nice";
      }
      auto cpus = parse_cpus_field(f[4]);
      auto applied = parse_cpus_field(f[5]);
      if (!cpus || !applied) return "bad CPU list";
      p.pid = *pid;
      p.start = *start;
      p.nice = *nice;
      p.cpus = std::move(*cpus);
      p.applied_cpus = std::move(*applied);
      j.processes.push_back(std::move(p));
    } else if (kind == "thread" && !j.processes.empty() && j.weights.empty()) {
      if (f.size() != 5) return "expected: thread TID START NICE CPULIST";
      ThreadOriginal t;
      auto tid = sys::parse_number<std::uint32_t>(f[1]);
      auto start = sys::parse_number<std::uint64_t>(f[2]);
      auto nice = sys::parse_number<std::int32_t>(f[3]);
      if (!tid || *tid == 0 || !start || !valid_nice(nice)) {
        return "bad thread id, start time or nice";
      }
      auto cpus = parse_cpus_field(f[4]);
      if (!cpus) return "bad CPU list";
      t.tid = *tid;
      t.start = *start;
      t.nice = *nice;
      t.cpus = std::move(*cpus);
      j.processes.back().threads.push_back(std::move(t));
    } else if (kind == "weight" && have_owner) {
      if (f.size() != 6) return "expected: weight DIR FILE INODE ORIGINAL WRITTEN";
      WeightOriginal w;
      auto dir = sys::hex_decode(f[1]);
      auto inode = sys::parse_number<std::uint64_t>(f[3]);
      auto orig = sys::parse_number<std::uint64_t>(f[4]);
      std::vector<std::uint64_t> written;
      for (std::string_view rest = f[5];;) {
        const std::size_t comma = rest.find(',');
        auto v = sys::parse_number<std::uint64_t>(rest.substr(0, comma));
        if (!v) return "bad written weight";
        written.push_back(*v);
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
      if (!dir || dir->empty() || dir->front() != '/') return "bad cgroup directory";
      if (f[2] != "cpu.weight" && f[2] != "cpu.shares") return "bad weight file";
      if (!inode || !orig || written.size() > 2) return "bad inode or weight";
      w.dir = std::move(*dir);
      w.file = std::string(f[2]);
      w.inode = *inode;
      w.original = *orig;
      w.written = std::move(written);
      j.weights.push_back(std::move(w));
    } else {
      return "unexpected record";
    }
    return std::nullopt;
  };
  auto parsed = sys::parse_journal_text(text, kMagic, "not a zernel userspace journal (version 2)",
                                        record, [&] { return have_owner; });
  if (!parsed) return parsed.error();
  return j;
}

Result<void> write_journal(const std::string& path, const Journal& j) {
  return sys::write_file_atomically(path, format_journal(j));
}

Result<std::optional<Journal>> read_journal(const std::string& path) {
  auto text = sys::read_whole_file(path);
  if (!text) return text.error();
  if (!text->has_value()) return std::optional<Journal>{};
  auto j = parse_journal(**text);
  if (!j) return j.error().context(path);
  return std::optional<Journal>(std::move(*j));
}

}  // namespace zernel::enforce::userspace
