#pragma once
// /sys/kernel/sched_ext: is sched_ext there, and is it free for us? Header-only, takes the sysfs
// root so that tests can use a fake tree. The backend and `zernel-scheduler info` both ask here.
//
//   state        "disabled", "enabling", "enabled", "disabling" (and on 7.x maybe more)
//   root/ops     the loaded scheduler's name (only while one is loaded)
//   enable_seq   schedulers enabled since boot (6.12 and later)

#include <filesystem>
#include <optional>
#include <string>

#include "common/result.hpp"
#include "sys/file.hpp"

namespace zernel::sys {

struct SchedExtState {
  std::string state;       // as the kernel wrote it, without the newline
  std::string ops;         // empty when none is loaded
  std::string enable_seq;  // how many times a scheduler was enabled; empty when not kept
};

// nullopt when the kernel has no sched_ext (no state file).
inline std::optional<SchedExtState> read_sched_ext_state(const std::filesystem::path& sys_root) {
  const auto dir = sys_root / "kernel" / "sched_ext";
  auto state = read_first_line((dir / "state").string());
  if (!state) return std::nullopt;
  SchedExtState s;
  s.state = *state;
  s.ops = read_first_line((dir / "root" / "ops").string()).value_or("");
  s.enable_seq = read_first_line((dir / "enable_seq").string()).value_or("");
  return s;
}

// Ok when sched_ext exists and no scheduler is loaded; ENOTSUP / EBUSY with a clear message.
inline Result<void> check_sched_ext_free(const std::filesystem::path& sys_root) {
  auto s = read_sched_ext_state(sys_root);
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

}  // namespace zernel::sys
