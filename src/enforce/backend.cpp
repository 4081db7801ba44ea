#include "enforce/backend.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <string>

#ifdef ZERNEL_HAVE_SCX
#include "enforce/scx/scx_backend.hpp"
#endif

namespace zernel::enforce {
namespace {

std::unique_ptr<Backend> observe() { return std::make_unique<ObserveBackend>(); }

}  // namespace

Result<std::unique_ptr<Backend>> make_backend(std::string_view kind) {
  if (kind == "observe") return observe();
  if (kind == "sched_ext" || kind == "auto") {
#ifdef ZERNEL_HAVE_SCX
    // auto: sched_ext when the kernel has it and our scheduler loads, else observe (the
    // userspace backend is not in this build yet).
    if (kind == "auto" && !std::filesystem::exists("/sys/kernel/sched_ext/state")) {
      spdlog::info("backend auto: this kernel has no sched_ext; observing only");
      return observe();
    }
    auto scx = scx::ScxBackend::create();
    if (scx) return std::unique_ptr<Backend>(std::move(scx.value()));
    if (kind == "sched_ext") return scx.error();
    spdlog::warn("backend auto: {}; observing only", scx.error().message());
    return observe();
#else
    if (kind == "auto") return observe();
    return Error(ENOTSUP,
                 "backend \"sched_ext\" is not in this build (configured with -DZERNEL_BPF=OFF; "
                 "available: observe, auto)");
#endif
  }
  if (kind == "userspace") {
    return Error(ENOTSUP,
                 "backend \"userspace\" is not available in this build (available: "
                 "sched_ext, observe, auto)");
  }
  return Error("unknown backend \"" + std::string(kind) +
               "\" (valid: auto, sched_ext, userspace, observe)");
}

}  // namespace zernel::enforce
