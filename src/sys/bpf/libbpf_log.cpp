#include "sys/bpf/libbpf_log.hpp"

#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>

#include <cstdarg>
#include <cstdio>
#include <string>
#include <string_view>

namespace zernel::sys {
namespace {

int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
  // The verifier log comes as one message of any length.
  va_list copy;
  va_copy(copy, args);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string buf(n > 0 ? static_cast<std::size_t>(n) + 1 : 1, '\0');
  std::vsnprintf(buf.data(), buf.size(), fmt, args);
#pragma GCC diagnostic pop
  buf.resize(buf.size() - 1);  // the terminating NUL
  std::string_view msg(buf);
  while (!msg.empty() && msg.back() == '\n') msg.remove_suffix(1);
  if (msg.starts_with("libbpf: ")) msg.remove_prefix(8);
  switch (level) {
    case LIBBPF_WARN:
      spdlog::warn("libbpf: {}", msg);
      break;
    case LIBBPF_INFO:
      spdlog::debug("libbpf: {}", msg);
      break;
    case LIBBPF_DEBUG:
      spdlog::trace("libbpf: {}", msg);
      break;
  }
  return 0;
}

}  // namespace

void route_libbpf_log() {
  static const bool installed = [] {
    libbpf_set_print(libbpf_print);
    return true;
  }();
  (void)installed;
}

}  // namespace zernel::sys
