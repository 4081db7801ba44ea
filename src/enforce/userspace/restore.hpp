#pragma once
// Putting back what the userspace backend changed, from its journal (journal.hpp), when the
// daemon that wrote it is gone (kill -9, a crash, a power cut of the daemon alone). Every start
// of the daemon does this whatever its backend (observe, sched_ext, userspace, auto), the
// userspace backend does it again at create(), and `zernel-scheduler restore` does it by hand.
//
// For each process of the journal that still runs (same pid and start time):
//   - a thread of the journal that is still the same thread (start time) gets its original nice
//     and affinity back, where they differ;
//   - a thread the journal does not list (born after the daemon last wrote the journal) inherited
//     nice and affinity at clone from the thread that created it; the backend only ever lowers a
//     nice value below the original and only gives the affinity APPLIED, so such a thread whose
//     nice is below the process's original gets the original, and one whose affinity is APPLIED
//     gets the process's original affinity. A thread above its process's nice, or pinned
//     elsewhere, was set so by its owner and is left alone.
// For each cgroup weight of the journal: when the directory is still the same group (inode) and
// its weight file still holds the value the backend wrote, the original is written back; a group
// removed or made again, or a weight someone else changed since, is left alone (and reported).
// A process that exited, or whose pid was reused, is skipped.
//
// The journal is removed afterwards. A journal whose owner still runs is refused (EBUSY): its
// values are that daemon's to restore. An unreadable (corrupt, truncated) journal is moved aside
// to PATH.corrupt, and the report says so.

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace zernel::enforce::userspace {

inline constexpr const char* kDefaultJournalPath = "/run/zernel/userspace.journal";
// $ZERNEL_USERSPACE_JOURNAL when set and not empty, else kDefaultJournalPath.
std::string userspace_journal_path();

struct ReplayReport {
  bool found = false;    // there was a journal
  bool corrupt = false;  // it could not be parsed and was moved aside (`corrupt_error` says why)
  std::string corrupt_error;
  std::string moved_to;
  std::uint32_t owner_pid = 0;
  // One line per process and per cgroup, for the log and for `zernel-scheduler restore`.
  std::vector<std::string> lines;
  std::uint64_t processes = 0;         // still running: restored
  std::uint64_t threads = 0;           // threads whose values were written back
  std::uint64_t unlisted_threads = 0;  // of which born after the journal was written
  std::uint64_t skipped = 0;           // processes exited or pids reused
  std::uint64_t cgroups = 0;           // cgroup weights written back
  std::uint64_t cgroups_left = 0;      // removed/remade groups, weights changed by someone else
  std::uint64_t errors = 0;            // writes that failed (the lines say which)

  // "restored 3 process(es) (7 thread(s), 2 born after the last tick), 1 cgroup weight(s);
  // skipped 1 process(es) (exited or pid reused), ..."
  [[nodiscard]] std::string summary() const;
};

// Replays the journal at `path` (see above). Errors: EBUSY (owner alive), or the journal cannot
// be read (EACCES for an unprivileged caller, ...), or moving a corrupt one aside or removing it
// failed.
Result<ReplayReport> replay_journal(const std::string& path, const std::string& proc_root = "/proc");

}  // namespace zernel::enforce::userspace
