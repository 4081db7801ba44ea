#include "enforce/userspace/restore.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "enforce/backend.hpp"
#include "enforce/settings_journal.hpp"
#include "enforce/userspace/journal.hpp"
#include "enforce/userspace/thread_ops.hpp"
#include "sys/cgroup.hpp"
#include "sys/journal_file.hpp"
#include "sys/procfs.hpp"

namespace zernel::enforce::userspace {
namespace {

std::string comm_of(const std::string& proc_root, std::uint32_t pid) {
  std::string comm;
  std::ifstream(proc_root + "/" + std::to_string(pid) + "/comm") >> comm;
  return comm.empty() ? "?" : comm;
}

// What restoring one process's threads came to.
struct ThreadRestoreTally {
  std::uint64_t written = 0;   // threads whose nice or affinity was written back
  std::uint64_t unlisted = 0;  // of those, threads born after the journal was written
  std::uint64_t failed = 0;    // values that could not be written back
};

// The journal's record of `tid` when it is still the same thread, else nullptr.
const ThreadOriginal* journaled_thread(const std::string& proc_root, const ProcessOriginal& p,
                                       std::uint32_t tid) {
  const ThreadOriginal* t = nullptr;
  for (const ThreadOriginal& x : p.threads) {
    if (x.tid == tid) t = &x;
  }
  if (t != nullptr && !same_thread(proc_root, p.pid, tid, t->start)) t = nullptr;
  return t;
}

// Writes back one live thread's original nice and affinity (for a thread born after the journal
// was written: what it inherited, see the header).
void restore_journaled_thread(const std::string& proc_root, const ProcessOriginal& p,
                              std::uint32_t tid, ThreadRestoreTally& tally, ReplayReport& rep) {
  const auto fail = [&](const char* what, int e) {
    ++tally.failed;
    rep.lines.push_back(
        fmt::format("pid {} thread {}: restoring {}: {}", p.pid, tid, what, std::strerror(e)));
  };
  const ThreadOriginal* t = journaled_thread(proc_root, p, tid);
  std::int32_t nice = 0;
  std::vector<std::uint32_t> cpus;
  if (get_nice(tid, nice) != 0 || get_cpus(tid, cpus) != 0) return;  // exited
  bool changed = false;
  std::int32_t want_nice = nice;
  std::vector<std::uint32_t> want_cpus = cpus;
  if (t != nullptr) {
    want_nice = t->nice;
    if (!t->cpus.empty()) want_cpus = t->cpus;
  } else {
    if (nice < p.nice) want_nice = p.nice;
    if (!p.applied_cpus.empty() && cpus == p.applied_cpus && !p.cpus.empty()) want_cpus = p.cpus;
  }
  if (want_nice != nice) {
    if (const int e = set_nice(tid, want_nice); e == 0) {
      changed = true;
    } else if (!thread_gone(e)) {
      fail("nice", e);
    }
  }
  if (want_cpus != cpus) {
    if (const int e = set_cpus(tid, want_cpus); e == 0) {
      changed = true;
    } else if (!thread_gone(e)) {
      fail("affinity", e);
    }
  }
  if (changed) {
    ++tally.written;
    if (t == nullptr) ++tally.unlisted;
  }
}

void restore_journaled_process(const std::string& proc_root, const ProcessOriginal& p,
                               ReplayReport& rep) {
  if (!process_running(proc_root, p.pid, p.start)) {
    ++rep.skipped;
    rep.lines.push_back(fmt::format("pid {}: exited (or the pid was reused): skipped", p.pid));
    return;
  }
  ++rep.processes;
  ThreadRestoreTally tally;
  auto tids = sys::read_thread_ids(proc_root, p.pid);
  for (const std::uint32_t tid : tids ? *tids : std::vector<std::uint32_t>{}) {
    restore_journaled_thread(proc_root, p, tid, tally, rep);
  }
  rep.threads += tally.written;
  rep.unlisted_threads += tally.unlisted;
  rep.errors += tally.failed;
  rep.lines.push_back(fmt::format(
      "pid {} ({}): nice/affinity of {} thread(s) restored ({} born after the last journal "
      "write), original nice {}{}",
      p.pid, comm_of(proc_root, p.pid), tally.written, tally.unlisted, p.nice,
      p.applied_cpus.empty() ? "" : ", affinity " + format_cpu_list(p.cpus)));
}

// Writes back a cgroup's original weight unless the cgroup was made again or someone else has
// changed the value since zernel wrote it.
void restore_journaled_weight(const WeightOriginal& w, ReplayReport& rep) {
  const sys::CgroupVersion v =
      w.file == "cpu.weight" ? sys::CgroupVersion::v2 : sys::CgroupVersion::v1;
  const auto inode = sys::cgroup_inode(w.dir);
  const auto now = sys::read_cgroup_cpu_value(v, w.dir);
  if (!inode || *inode != w.inode) {
    ++rep.cgroups_left;
    rep.lines.push_back(
        fmt::format("cgroup {}: removed or made again since: nothing to restore", w.dir));
  } else if (now && *now == w.original) {
    rep.lines.push_back(fmt::format("cgroup {}: {} is {}, the original", w.dir, w.file, *now));
  } else if (!now || std::find(w.written.begin(), w.written.end(), *now) == w.written.end()) {
    ++rep.cgroups_left;
    rep.lines.push_back(fmt::format(
        "cgroup {}: {} is {}, not a value zernel wrote ({}): changed by someone else since, "
        "left as is",
        w.dir, w.file, now ? std::to_string(*now) : "unreadable", fmt::join(w.written, " or ")));
  } else if (auto r = sys::write_cgroup_cpu_value(v, w.dir, w.original); r) {
    ++rep.cgroups;
    rep.lines.push_back(
        fmt::format("cgroup {}: {} {} -> {} (the original)", w.dir, w.file, *now, w.original));
  } else {
    ++rep.errors;
    rep.lines.push_back(fmt::format("cgroup {}: restoring {} {}: {}", w.dir, w.file, w.original,
                                    r.error().message()));
  }
}

// An unreadable journal is moved aside to <path>.corrupt and nothing is restored.
Result<ReplayReport> set_aside_corrupt_journal(const std::string& path, const Error& error) {
  ReplayReport rep;
  rep.found = true;
  rep.corrupt = true;
  rep.corrupt_error = error.message();
  rep.moved_to = path + ".corrupt";
  if (::rename(path.c_str(), rep.moved_to.c_str()) != 0) {
    return errno_error("moving the unreadable journal " + path + " aside");
  }
  return rep;
}

}  // namespace

std::string userspace_journal_path() {
  if (const char* p = std::getenv(kUserspaceJournalEnv); p != nullptr && *p != '\0') return p;
  return kDefaultJournalPath;
}

std::string ReplayReport::summary() const {
  if (!found) return "no journal: nothing to restore";
  if (corrupt) return fmt::format("unreadable journal moved to {}: NOT restored", moved_to);
  std::string s = fmt::format(
      "restored {} process(es) ({} thread(s), {} born after the last journal write) and {} cgroup "
      "weight(s); skipped {} process(es) (exited or pid reused)",
      processes, threads, unlisted_threads, cgroups, skipped);
  if (cgroups_left > 0) s += fmt::format(", left {} cgroup weight(s) as found", cgroups_left);
  if (errors > 0) s += fmt::format("; {} value(s) could not be written back", errors);
  return s;
}

Result<ReplayReport> replay_journal(const std::string& path, const std::string& proc_root) {
  ReplayReport rep;
  auto read = read_journal(path);
  if (!read && read.error().code() == EINVAL) return set_aside_corrupt_journal(path, read.error());
  if (!read) return read.error().context("reading the userspace journal");
  if (!read->has_value()) return rep;
  const Journal& j = **read;
  rep.found = true;
  rep.owner_pid = j.owner_pid;
  if (process_running(proc_root, j.owner_pid, j.owner_start)) {
    return Error(EBUSY, fmt::format("{} belongs to a running zernel-scheduler (pid {}); stop it "
                                    "first (two daemons would fight over the same values)",
                                    path, j.owner_pid));
  }
  for (const ProcessOriginal& p : j.processes) restore_journaled_process(proc_root, p, rep);
  for (const WeightOriginal& w : j.weights) restore_journaled_weight(w, rep);
  if (auto r = sys::remove_file(path); !r) return r.error();
  return rep;
}

}  // namespace zernel::enforce::userspace
