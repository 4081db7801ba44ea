#pragma once
// kernel.task_delayacct is one switch for the whole machine, and two daemons (a system one and a
// private instance with its own journals) both want it on. Each used to restore "its" original
// at exit, so the first to exit turned it off under the other (whose io wait went blind). The
// switch is now reference-counted in one file per machine, whatever journals a daemon uses
// (/run/zernel/delayacct.holders, or $ZERNEL_DELAYACCT_HOLDERS): the daemons holding it, and the
// value before the first of them turned it on. The last holder to leave restores that value; a
// holder that died (kill -9) is pruned by whoever touches the file next; while any holder lives,
// nobody turns it off, crash recovery included. Changes are made under flock() of the directory.
//
// Format (sys/journal_file.hpp's frame):
//   zernel-delayacct-holders 1
//   original 0|1
//   holder PID START        (START: /proc/PID/stat field 22)
//   end

#include <optional>
#include <string>

#include "common/result.hpp"

namespace zernel::sys {

// Registers this process as a holder. Returns the original value: the file's when it exists
// (another daemon, alive or dead, turned it on), else `current`.
Result<bool> delayacct_join(const std::string& holders_path, const std::string& proc_root,
                            bool current);

// Unregisters this process. Returns the original to write back when no live holder is left (the
// file is removed), nullopt when others still hold the switch.
Result<std::optional<bool>> delayacct_leave(const std::string& holders_path,
                                            const std::string& proc_root);

// Crash recovery: true when a live daemon still holds the switch (leave it alone); otherwise
// the file (if any) is removed and false returned.
Result<bool> delayacct_held_by_others(const std::string& holders_path,
                                      const std::string& proc_root);

}  // namespace zernel::sys
