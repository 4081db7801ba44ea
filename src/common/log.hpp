#pragma once
// Logging for everything outside policy/ (policy does no I/O). A thin layer over spdlog so that
// the level names of the config ("trace".."off") are parsed in one place.

#include <optional>
#include <string_view>

#include <spdlog/spdlog.h>

namespace zernel::log {

// Parses a config level name: trace, debug, info, warn, error, critical, off.
std::optional<spdlog::level::level_enum> parse_level(std::string_view name);

// Sets up the default logger on stderr at `level`. Safe to call more than once.
void init(spdlog::level::level_enum level);

}  // namespace zernel::log
