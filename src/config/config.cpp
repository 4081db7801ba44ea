#include "config/config.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace zernel::config {
namespace {

// A config file is a few KiB; anything this large is a mistake (a log, /dev/zero), not a config.
constexpr std::size_t kMaxConfigBytes = 4 * 1024 * 1024;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

Result<std::string> read_file(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    if (errno == ENOENT) return Error(ENOENT, path + ": no such file");
    return errno_error(path);
  }
  std::string text;
  char buf[8192];
  while (true) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, file.get());
    text.append(buf, n);
    if (text.size() > kMaxConfigBytes) {
      return Error(
          EFBIG, fmt::format("{}: larger than {} bytes; not a config file", path, kMaxConfigBytes));
    }
    if (n < sizeof buf) break;
  }
  // A directory opens fine and fails on read (EISDIR).
  if (std::ferror(file.get()) != 0) return errno_error(path);
  return text;
}

}  // namespace

Result<LoadedConfig> load_config_file(const std::string& path, bool missing_ok) {
  if (path.empty()) return Error(EINVAL, "config path is empty");
  auto text = read_file(path);
  if (!text) {
    if (text.error().code() == ENOENT && missing_ok) return LoadedConfig{};
    return text.error();
  }
  auto loaded = parse_config(*text, path);
  if (loaded) loaded->path = path;
  return loaded;
}

ConfigPath resolve_config_path(std::optional<std::string> cli_path) {
  if (cli_path) return ConfigPath{std::move(*cli_path), ConfigPathSource::cli};
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read once at start-up, before any thread exists.
  const char* env = std::getenv(std::string(kConfigPathEnv).c_str());
  if (env != nullptr && *env != '\0') return ConfigPath{env, ConfigPathSource::env};
  return ConfigPath{std::string(kDefaultConfigPath), ConfigPathSource::built_in_default};
}

Result<LoadedConfig> load_config(std::optional<std::string> cli_path) {
  const ConfigPath where = resolve_config_path(std::move(cli_path));
  return load_config_file(where.path, !where.is_explicit());
}

policy::EngineOptions engine_options(const Config& config) {
  policy::EngineOptions options;
  options.phase = config.phase_detection;
  options.numa = config.numa;
  options.multi_tenant_enabled = config.multi_tenant.enabled;
  options.max_tracked_tasks = config.general.max_tracked_tasks;
  return options;
}

}  // namespace zernel::config
