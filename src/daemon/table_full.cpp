#include "daemon/table_full.hpp"

#include <fmt/format.h>

#include <string_view>

namespace zernel::daemon {

namespace {

struct TableFull {
  std::string_view counter;
  std::string_view what;
};

constexpr TableFull kTablesFull[] = {
    {"node_map_full",
     "cgroups got no node of the sched_ext sharing tree (its map is full): their threads share "
     "as the root cgroup's and their cpu.max is not enforced"},
    {"thread_map_full",
     "GPU sync probes: threads got no entry (zernel_probe_threads is full): their syncs are not "
     "seen"},
    {"proc_map_full",
     "GPU sync probes: updates found no process entry (zernel_probe_procs is full): those "
     "processes' sync figures are incomplete"},
    {"phase_unsent_failed",
     "phase events: changes neither sent nor kept (the ring and zernel_phase_unsent were full): "
     "those threads' phases stay stale in the daemon until their next change"},
};

}  // namespace

std::vector<std::string> TableFullLog::check(std::span<const telemetry::NamedCounter> counters) {
  std::vector<std::string> lines;
  for (const telemetry::NamedCounter& c : counters) {
    if (c.value == 0) continue;
    for (const TableFull& t : kTablesFull) {
      if (c.name != t.counter || !logged_.insert(c.name).second) continue;
      lines.push_back(
          fmt::format("{} {} so far (metric kind {}); the scheduler and the probes keep "
                      "running",
                      c.value, t.what, c.name));
    }
  }
  return lines;
}

}  // namespace zernel::daemon
