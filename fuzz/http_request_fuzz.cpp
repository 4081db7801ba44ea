// libFuzzer target: telemetry::parse_head, the HTTP front's request-head parser, on arbitrary
// bytes. The first byte picks small limits (so the header-count and size limits are reached);
// the rest is the input. Besides never crashing, hanging or leaking:
//   - a head read whole (complete, a refused method, a body) lies within the input and the size
//     limit, and a complete one's path starts with '/' and lies within it;
//   - the verdict does not depend on how the bytes arrived: the head alone gives the same
//     verdict and length, and every shorter prefix of it is incomplete or too large (never
//     complete nor malformed), as the server re-parses each time more bytes come in.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "telemetry/http_request.hpp"
#include "telemetry/http_server.hpp"

using zernel::telemetry::HttpLimits;
using zernel::telemetry::HttpParse;
using zernel::telemetry::HttpRequestHead;
using zernel::telemetry::parse_head;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  HttpLimits lim;
  if ((data[0] & 1) != 0) {
    lim.max_head_bytes = 256 + (data[0] >> 1);
    lim.max_headers = data[0] & 7;
  }
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  HttpRequestHead req;
  std::size_t consumed = 0;
  const HttpParse verdict = parse_head(in, lim, req, consumed);
  if (verdict != HttpParse::complete && verdict != HttpParse::bad_method &&
      verdict != HttpParse::has_body) {
    return 0;
  }
  if (consumed == 0 || consumed > in.size() || consumed > lim.max_head_bytes) std::abort();
  if (verdict == HttpParse::complete) {
    if (req.path.empty() || req.path.front() != '/') std::abort();
    if (req.path.data() < in.data() || req.path.data() + req.path.size() > in.data() + consumed) {
      std::abort();
    }
  }
  HttpRequestHead again;
  std::size_t consumed_again = 0;
  if (parse_head(in.substr(0, consumed), lim, again, consumed_again) != verdict ||
      consumed_again != consumed) {
    std::abort();
  }
  // Prefixes: all of them for short heads, a sample of 64 for long ones.
  const std::size_t step = consumed > 64 ? consumed / 64 : 1;
  for (std::size_t n = 0; n < consumed; n += step) {
    HttpRequestHead part;
    std::size_t c = 0;
    const HttpParse p = parse_head(in.substr(0, n), lim, part, c);
    if (p != HttpParse::incomplete && p != HttpParse::too_large) std::abort();
  }
  return 0;
}
