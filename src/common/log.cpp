#include "common/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace zernel::log {

std::optional<spdlog::level::level_enum> parse_level(std::string_view name) {
  using spdlog::level::level_enum;
  if (name == "trace") return level_enum::trace;
  if (name == "debug") return level_enum::debug;
  if (name == "info") return level_enum::info;
  if (name == "warn" || name == "warning") return level_enum::warn;
  if (name == "error") return level_enum::err;
  if (name == "critical") return level_enum::critical;
  if (name == "off") return level_enum::off;
  return std::nullopt;
}

void init(spdlog::level::level_enum level) {
  auto logger = spdlog::get("zernel");
  if (!logger) {
    logger = spdlog::stderr_color_mt("zernel");
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    spdlog::set_default_logger(logger);
  }
  logger->set_level(level);
}

}  // namespace zernel::log
