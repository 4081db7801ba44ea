// libFuzzer target: daemon::parse_runtime_state (the runtime tenants' state file, read as root at
// start-up) on arbitrary bytes must never crash, hang or leak, and whatever it accepts must survive
// a round trip through runtime_state_text().
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "daemon/runtime_state.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = zernel::daemon::parse_runtime_state(text);
  if (r.ok()) {
    auto again = zernel::daemon::parse_runtime_state(zernel::daemon::runtime_state_text(*r));
    if (!again.ok() || again->tenants != r->tenants || again->assigned != r->assigned) std::abort();
  }
  return 0;
}
