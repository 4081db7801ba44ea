// libFuzzer target: daemon::parse_request on arbitrary bytes must never crash, hang or leak, and
// whatever it accepts must survive a round trip through request_line().
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "daemon/control.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  auto r = zernel::daemon::parse_request(line);
  if (r.ok()) {
    if (size > zernel::daemon::kMaxRequestBytes) std::abort();  // the size limit was not applied
    auto again = zernel::daemon::parse_request(zernel::daemon::request_line(*r));
    if (!again.ok() || !(*again == *r)) std::abort();
  }
  return 0;
}
