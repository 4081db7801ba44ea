#pragma once
// /proc/PID/stat of a live process (a test's child), parsed by the project's own parser:
// nullopt when it cannot be read or parsed (the process is gone).

#include <sys/types.h>

#include <fstream>
#include <optional>
#include <string>

#include "sys/procfs.hpp"

namespace zernel::test_support {

inline std::optional<sys::ProcStat> read_proc_stat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  auto st = sys::parse_stat(line);
  if (!st) return std::nullopt;
  return std::move(*st);
}

}  // namespace zernel::test_support
