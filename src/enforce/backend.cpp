#include "enforce/backend.hpp"

#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "enforce/userspace/userspace_backend.hpp"

#ifdef ZERNEL_HAVE_SCX
#include "enforce/scx/scx_backend.hpp"
#endif

namespace zernel::enforce {
namespace {

std::unique_ptr<Backend> observe() { return std::make_unique<ObserveBackend>(); }

Result<std::unique_ptr<Backend>> userspace_backend() {
  userspace::UserspaceOptions opts;
  opts.journal_path = userspace::userspace_journal_path();
  auto b = userspace::UserspaceBackend::create(std::move(opts));
  if (!b) return b.error();
  return std::unique_ptr<Backend>(std::move(b.value()));
}

// auto without sched_ext: the userspace backend, else (no privileges, journal of a running
// daemon) observe, saying why.
std::unique_ptr<Backend> userspace_or_observe() {
  auto u = userspace_backend();
  if (u) return std::move(u.value());
  spdlog::warn("backend auto: {}; observing only", u.error().message());
  return observe();
}

#ifdef ZERNEL_HAVE_SCX
// $ZERNEL_TEST_SCX_INJECT_ERROR_MS in ns; 0 when unset or empty.
Result<std::uint64_t> injected_error_ns() {
  const char* v = std::getenv(kScxInjectErrorEnv);
  if (v == nullptr || *v == '\0') return std::uint64_t{0};
  std::uint64_t ms = 0;
  const std::string_view s(v);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), ms);
  if (ec != std::errc{} || end != s.data() + s.size() || ms == 0 || ms > 86'400'000) {
    return Error(EINVAL, "$" + std::string(kScxInjectErrorEnv) + " = \"" + std::string(s) +
                             "\": not a number of milliseconds (1 .. 86400000)");
  }
  spdlog::warn("${} = {}: the sched_ext scheduler will end itself {} ms after each load (tests)",
               kScxInjectErrorEnv, ms, ms);
  return ms * 1'000'000;
}
#endif

}  // namespace

Result<std::unique_ptr<Backend>> make_backend(std::string_view kind,
                                              [[maybe_unused]] const BackendSettings& settings) {
  if (kind == "observe") return observe();
  if (kind == "userspace") return userspace_backend();
  if (kind == "sched_ext" || kind == "auto") {
#ifdef ZERNEL_HAVE_SCX
    // auto: sched_ext when the kernel has it and our scheduler loads, else the userspace backend.
    if (kind == "auto" && !std::filesystem::exists("/sys/kernel/sched_ext/state")) {
      spdlog::info("backend auto: this kernel has no sched_ext; using the userspace backend");
      return userspace_or_observe();
    }
    scx::Options scx_opts;
    scx_opts.max_tasks = settings.max_tasks;
    scx_opts.allow_unenforced_cpu_max = settings.allow_unenforced_cpu_max;
    scx_opts.phase_map_fd = settings.phase_map_fd;
    scx_opts.phase_sync_kicks = settings.phase_sync_kicks;
    scx_opts.shared_maps = settings.shared_maps;
    scx_opts.switch_rules = settings.switch_rules;
    auto inject = injected_error_ns();
    if (!inject) return inject.error();
    scx_opts.inject_error_after_ns = *inject;
    auto scx = scx::ScxBackend::create(scx_opts);
    if (scx) return std::unique_ptr<Backend>(std::move(scx.value()));
    if (kind == "sched_ext") return scx.error();
    spdlog::warn("backend auto: {}; using the userspace backend", scx.error().message());
    return userspace_or_observe();
#else
    if (kind == "auto") {
      spdlog::info("backend auto: sched_ext is not in this build; using the userspace backend");
      return userspace_or_observe();
    }
    return Error(ENOTSUP,
                 "backend \"sched_ext\" is not in this build (configured with -DZERNEL_BPF=OFF; "
                 "available: userspace, observe, auto)");
#endif
  }
  return Error("unknown backend \"" + std::string(kind) +
               "\" (valid: auto, sched_ext, userspace, observe)");
}

}  // namespace zernel::enforce
