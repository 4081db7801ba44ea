#pragma once
// Fixed-size BPF tables that filled: the sched_ext scheduler's and the probes' counters that say
// so (node_map_full, thread_map_full, proc_map_full, phase_unsent_failed). The programs keep
// running, degraded, and /metrics counts every occurrence; the daemon also logs each such
// counter once, when it first reads it above zero, saying what the loss costs, so an operator
// who never looks at those counters still learns that a table was too small.

#include <set>
#include <span>
#include <string>
#include <vector>

#include "telemetry/snapshot.hpp"

namespace zernel::daemon {

class TableFullLog {
 public:
  // The lines to log for the counters in `counters` that are above zero for the first time
  // (other counters are ignored).
  std::vector<std::string> check(std::span<const telemetry::NamedCounter> counters);

 private:
  std::set<std::string, std::less<>> logged_;
};

}  // namespace zernel::daemon
