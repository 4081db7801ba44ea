#pragma once
// /sys/kernel/sched_ext: is sched_ext there, and is it free for us? Header-only, takes the sysfs
// root so that tests can use a fake tree.
//
//   state        "disabled", "enabling", "enabled", "disabling" (and on 7.x maybe more)
//   root/ops     the loaded scheduler's name (only while one is loaded)

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "common/result.hpp"

namespace zernel::enforce::scx {

struct SysfsState {
  std::string state;  // as the kernel wrote it, without the newline
  std::string ops;    // empty when none is loaded
};

inline std::optional<std::string> read_first_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  return line;
}

// nullopt when the kernel has no sched_ext (no state file).
inline std::optional<SysfsState> read_sysfs_state(const std::filesystem::path& sys_root) {
  const auto dir = sys_root / "kernel" / "sched_ext";
  auto state = read_first_line(dir / "state");
  if (!state) return std::nullopt;
  SysfsState s;
  s.state = *state;
  s.ops = read_first_line(dir / "root" / "ops").value_or("");
  return s;
}

// Ok when sched_ext exists and no scheduler is loaded; ENOTSUP / EBUSY with a clear message.
inline Result<void> check_sched_ext_free(const std::filesystem::path& sys_root) {
  auto s = read_sysfs_state(sys_root);
  if (!s) {
    return Error(ENOTSUP, "this kernel has no sched_ext (" +
                              (sys_root / "kernel/sched_ext/state").string() +
                              " is missing; it needs CONFIG_SCHED_CLASS_EXT, Linux 6.12 or later)");
  }
  if (s->state != "disabled") {
    return Error(EBUSY, "sched_ext is in use by another scheduler (state \"" + s->state + "\"" +
                            (s->ops.empty() ? std::string() : ", ops \"" + s->ops + "\"") +
                            "); unload it first");
  }
  return Ok{};
}

}  // namespace zernel::enforce::scx
