#pragma once
// The request head of the HTTP front (telemetry/http_server.hpp), parsed by Boost.Beast's HTTP/1
// parser (its request-line and field grammar, its header byte limit, Content-Length and
// Transfer-Encoding rules), with what is ours on top: the cap on header lines (checked also
// while the head is incomplete), empty lines before the request line ignored (RFC 9112 2.2), and
// what we serve: GET and HEAD of a path, HTTP/1.0 and 1.1, no body. Lines end in CRLF. Pure
// (bytes in, a verdict out), so fuzzed on its own (fuzz/http_request_fuzz.cpp).

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace zernel::telemetry {

struct HttpLimits;

// One parsed request head.
struct HttpRequestHead {
  bool head_only = false;  // HEAD
  std::string_view path;
  bool keep_alive = true;
};

enum class HttpParse : std::uint8_t {
  incomplete,
  complete,
  bad_request,
  bad_method,
  too_large,
  has_body
};

// Parses the head at the start of `in`; `consumed` is its length when the head was read whole
// (complete, bad_method, has_body). `path` points into `in`.
HttpParse parse_head(std::string_view in, const HttpLimits& lim, HttpRequestHead& req,
                     std::size_t& consumed);

}  // namespace zernel::telemetry
