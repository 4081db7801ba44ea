#include "config/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <time.h>
#include <unistd.h>

#include "common/clock.hpp"
#include "sys/trusted_file.hpp"

namespace zernel::config {
namespace {

// A config file is a few KiB; anything this large is a mistake (a log, /dev/zero), not a config.
constexpr std::size_t kMaxConfigBytes = std::size_t{4} * 1024 * 1024;

// One consistent version of the file: read_trusted_file refuses a read the file changed under,
// and a file modified less than kSettleNs ago may be an editor's write in progress (truncated,
// half-written, yet parseable), so it is read again once it has been left alone that long. A
// writer that pauses longer than that mid-write cannot be told from a finished one: editors and
// deploy tools that replace the file with rename() are always read whole, at once.
constexpr std::int64_t kSettleNs = 200'000'000;
constexpr int kMaxReads = 6;

std::int64_t realtime_ns() { return static_cast<std::int64_t>(clock_ns(CLOCK_REALTIME)); }

Result<std::string> read_file(const std::string& path) {
  std::int64_t wait_ns = 0;
  for (int attempt = 0; attempt < kMaxReads; ++attempt) {
    if (wait_ns > 0) ::usleep(static_cast<useconds_t>(std::min(wait_ns, kSettleNs) / 1000));
    auto r = sys::read_trusted_file(path, kMaxConfigBytes);
    if (!r && r.error().code() == EAGAIN) {
      wait_ns = kSettleNs;
      continue;
    }
    if (!r) return r.error();
    if (!r->has_value()) return Error(ENOENT, path + ": no such file");
    sys::TrustedText& t = **r;
    const std::int64_t age = realtime_ns() - t.mtime_ns;
    if (age >= kSettleNs || age < 0) return std::move(t.text);  // (< 0: a clock set back)
    wait_ns = kSettleNs - age + 1'000'000;
  }
  return Error(EAGAIN, path + ": still being written after " + std::to_string(kMaxReads) +
                           " reads; not loaded (write the file elsewhere and rename it into "
                           "place for an atomic update)");
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

std::string default_runtime_state_file() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing in the program calls setenv.
  const char* env = std::getenv(std::string(kRuntimeStateEnv).c_str());
  if (env != nullptr && env[0] == '/') return env;
  return "/var/lib/zernel/runtime-tenants.json";
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
