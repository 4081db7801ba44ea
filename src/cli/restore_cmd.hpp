#pragma once
// `zernel-scheduler restore [--journal PATH]`: puts back by hand what a userspace backend that did
// not stop cleanly left changed (enforce/userspace/restore.hpp: the same replay every daemon
// start does), and prints one line per process and cgroup and a summary. Exit 0 when there was
// nothing to restore or everything was put back; 1 when the journal belongs to a running daemon
// (it is that daemon's to restore), cannot be read or was corrupt, or a value could not be
// written back.

#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace zernel::cli {

struct RestoreCmd {
  CLI::App* cmd = nullptr;
  std::optional<std::string> journal;  // default: $ZERNEL_USERSPACE_JOURNAL, else /run/zernel/...
};
void add_restore_command(CLI::App& app, RestoreCmd& r);
int run_restore_command(const RestoreCmd& r);

}  // namespace zernel::cli
