#include "enforce/backend.hpp"

#include <string>

namespace zernel::enforce {

Result<std::unique_ptr<Backend>> make_backend(std::string_view kind) {
  if (kind == "observe" || kind == "auto") {
    // auto: the sched_ext and userspace backends are not in this build, so observing is the
    // only honest choice.
    return std::unique_ptr<Backend>(std::make_unique<ObserveBackend>());
  }
  if (kind == "sched_ext" || kind == "userspace") {
    return Error(ENOTSUP, "backend \"" + std::string(kind) +
                              "\" is not available in this build (available: observe, auto)");
  }
  return Error("unknown backend \"" + std::string(kind) +
               "\" (valid: auto, sched_ext, userspace, observe)");
}

}  // namespace zernel::enforce
