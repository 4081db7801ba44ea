#include "telemetry/http_request.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <algorithm>
#include <iterator>

#include "telemetry/http_server.hpp"

namespace zernel::telemetry {

namespace http = boost::beast::http;

HttpParse parse_head(std::string_view in, const HttpLimits& lim, HttpRequestHead& req,
                     std::size_t& consumed) {
  // RFC 9112 2.2: empty lines before the request line are ignored (Beast refuses them).
  std::size_t lead = 0;
  while (in.substr(lead, 2) == "\r\n") lead += 2;
  const std::string_view head = in.substr(lead);
  // A CR whose LF has not arrived yet: Beast takes a lone CR for a bad method (the fuzzer's
  // first find: "\r" then "\nGET ..." was answered 400 when it came in two reads).
  if (head == "\r") return HttpParse::incomplete;

  // Beast bounds the head's bytes; the number of its lines is ours to bound, also before the
  // head is complete (a client trickling short header lines is refused early).
  const std::size_t end = head.find("\r\n\r\n");
  const std::string_view lines = head.substr(0, end == std::string_view::npos ? head.size() : end);
  const std::size_t max_ends = lim.max_headers + (end == std::string_view::npos ? 1 : 0);
  if (static_cast<std::size_t>(std::count(lines.begin(), lines.end(), '\n')) > max_ends) {
    return HttpParse::too_large;
  }

  http::request_parser<http::empty_body> parser;
  parser.header_limit(lim.max_head_bytes);
  parser.eager(false);  // the head only: a body is refused below, never read
  boost::beast::error_code ec;
  const std::size_t used = parser.put(boost::asio::buffer(head.data(), head.size()), ec);
  if (ec == http::error::need_more) return HttpParse::incomplete;
  if (ec == http::error::header_limit) return HttpParse::too_large;
  if (ec || !parser.is_header_done()) return HttpParse::bad_request;
  consumed = lead + used;
  if (consumed > lim.max_head_bytes) return HttpParse::too_large;  // the empty lines count too

  const auto& msg = parser.get();
  if (static_cast<std::size_t>(std::distance(msg.begin(), msg.end())) > lim.max_headers) {
    return HttpParse::too_large;
  }
  const std::string_view target(msg.target().data(), msg.target().size());
  if (target.empty() || target.front() != '/') return HttpParse::bad_request;
  if (msg.version() != 10 && msg.version() != 11) return HttpParse::bad_request;
  if (msg.method() != http::verb::get && msg.method() != http::verb::head) {
    return HttpParse::bad_method;
  }
  if (parser.chunked() || parser.content_length().value_or(0) > 0 ||
      msg.count(http::field::transfer_encoding) > 0) {
    return HttpParse::has_body;
  }
  req.head_only = msg.method() == http::verb::head;
  req.keep_alive = parser.keep_alive();
  // The path as a view into `in` (the parser's copy dies with it): the request line is
  // METHOD SP target SP version, single spaces (Beast checked).
  req.path = head.substr(msg.method_string().size() + 1, target.size());
  req.path = req.path.substr(0, req.path.find('?'));
  return HttpParse::complete;
}

}  // namespace zernel::telemetry
