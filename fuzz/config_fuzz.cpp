// libFuzzer target: config::parse_config on arbitrary text must never crash; whatever it accepts
// must be reproduced exactly by dump_config (parse(dump(c)) == c, as config.hpp promises).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "config/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = zernel::config::parse_config(text, "<fuzz>");
  if (r.ok()) {
    const std::string dumped = zernel::config::dump_config(r->config);
    auto again = zernel::config::parse_config(dumped, "<dump>");
    if (!again.ok() || !(again->config == r->config)) std::abort();
  }
  return 0;
}
