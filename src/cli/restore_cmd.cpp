#include "cli/restore_cmd.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/app.hpp"
#include "enforce/userspace/restore.hpp"

namespace zernel::cli {

void add_restore_command(CLI::App& app, RestoreCmd& r) {
  r.cmd = app.add_subcommand(
      "restore",
      "Put back the nice values, CPU affinity and cgroup CPU weights that a userspace-backend "
      "daemon which did not stop cleanly (kill -9, crash) left changed, from its journal; "
      "every daemon start does the same. Refused while the daemon that wrote it runs");
  r.cmd->add_option("--journal", r.journal,
                    "The journal (default: $ZERNEL_USERSPACE_JOURNAL, else "
                    "/run/zernel/userspace.journal)");
}

int run_restore_command(const RestoreCmd& r) {
  const std::string path = r.journal.value_or(enforce::userspace::userspace_journal_path());
  auto rep = enforce::userspace::replay_journal(path);
  if (!rep) {
    fmt::print(stderr, "zernel-scheduler: restore: {}\n", rep.error().message());
    return kExitError;
  }
  if (!rep->found) {
    fmt::print("{}: no journal: nothing to restore\n", path);
    return kExitOk;
  }
  if (rep->corrupt) {
    fmt::print(stderr,
               "zernel-scheduler: restore: {} is unreadable ({}); moved it to {}; nothing was "
               "restored: check the nice values and cgroup weights of the jobs by hand\n",
               path, rep->corrupt_error, rep->moved_to);
    return kExitError;
  }
  fmt::print("{} (written by zernel-scheduler pid {}, no longer running):\n", path, rep->owner_pid);
  for (const std::string& line : rep->lines) fmt::print("  {}\n", line);
  fmt::print("{}\n", rep->summary());
  return rep->errors == 0 ? kExitOk : kExitError;
}

}  // namespace zernel::cli
