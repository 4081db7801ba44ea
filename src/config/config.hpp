#pragma once
// The daemon's configuration: TOML text -> a validated Config, and a Config -> TOML text.
//
// Where it comes from (resolve_config_path): `--config PATH`, else the environment variable
// ZERNEL_SCHEDULER_CONFIG (an empty value counts as unset), else /etc/zernel/scheduler.toml.
// A path the user named (flag or environment) must exist; the built-in default path may be
// missing, which means "all defaults", so a fresh install runs without a file.
//
// Validation is strict because a typo in a scheduler's config is otherwise silent for weeks: an
// unknown section or key, a wrong type, a value that does not fit or is out of range is an error
// that names the key ("scheduler.toml: [general] phase_eval_interval_ms: must be at least 1, got
// 0 (line 3)"). All errors of a file are reported at once, one per line, so check-config shows
// everything to fix in one go. Legacy spellings that are still understood ("normal" as a priority
// class) are warnings, not errors.
//
// dump_config writes every key, so `--dump-config` shows the effective configuration, and
// parse_config(dump_config(c)) == c exactly (floats are printed in their shortest exact form).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "policy/options.hpp"
#include "policy/tenant.hpp"

namespace zernel::config {

inline constexpr std::string_view kDefaultConfigPath = "/etc/zernel/scheduler.toml";
inline constexpr std::string_view kConfigPathEnv = "ZERNEL_SCHEDULER_CONFIG";
// Longest event hysteresis: beyond a second it would hide whole phases.
inline constexpr std::uint64_t kMaxEventHysteresisNs = 1'000'000'000;
// Largest phase_stability_count: beyond it a phase would need minutes to commit.
inline constexpr std::uint32_t kMaxPhaseStabilityCount = 1000;

struct GeneralConfig {
  std::uint32_t phase_eval_interval_ms = 100;  // >= 1
  std::uint32_t gpu_poll_interval_ms = 500;    // >= phase_eval_interval_ms
  std::uint32_t max_tracked_tasks = 65'536;    // 1..policy::kMaxTrackedTasksLimit
  std::string log_level = "info";  // trace, debug, info, warn, error, critical, off (lower case)

  bool operator==(const GeneralConfig&) const = default;
};

inline constexpr std::string_view kRuntimeStateEnv = "ZERNEL_RUNTIME_STATE";
// The default of [multi_tenant] runtime_state_file: $ZERNEL_RUNTIME_STATE when it holds an
// absolute path (the tests give every daemon their own, tests/integration/lib.sh), else
// /var/lib/zernel/runtime-tenants.json.
std::string default_runtime_state_file();

struct MultiTenantConfig {
  bool enabled = false;
  // The class of a [[tenants]] entry that names none.
  policy::PriorityClass default_priority_class = policy::PriorityClass::training;
  // `tenant assign` refuses processes whose comm matches one of these globs (system daemons a
  // tenant must never renice or pin); pid 1, kernel threads and the daemon itself are refused
  // whatever this says. Applied on SIGHUP.
  std::vector<std::string> protected_comms = {"systemd*", "init",        "sshd",
                                              "kubelet",  "containerd*", "dockerd",
                                              "dbus-daemon", "zernel-schedul*"};
  // Where the tenants added and the processes assigned over the control socket are kept across
  // restarts (daemon/runtime_state.hpp); "" keeps them in memory only. Read at start-up; a
  // change takes effect after a restart.
  std::string runtime_state_file = default_runtime_state_file();

  bool operator==(const MultiTenantConfig&) const = default;
};

struct TelemetryConfig {
  std::uint16_t metrics_port = 9093;          // 1..65535
  std::string metrics_address = "127.0.0.1";  // an IPv4 or IPv6 literal
  std::uint32_t push_interval_ms = 1000;      // >= 1

  bool operator==(const TelemetryConfig&) const = default;
};

// Optional power management (enforce/power.hpp): GPU clocks and power limits and the CPUs'
// maximum frequency follow the dominant phase of the GPU tasks, and are restored on exit.
struct PowerConfig {
  bool enabled = false;     // off: nothing is read or changed
  bool dry_run = false;     // log each change ("power: would set ...") without making it
  bool manage_gpu = true;   // SM clock and power limit of every GPU, through NVML
  bool manage_cpu = true;   // scaling_max_freq of every cpufreq policy

  bool operator==(const PowerConfig&) const = default;
};

// Which processes belong to a tenant. A process matches when, for every non-empty list, it
// matches at least one entry of that list (AND across lists, OR within one), so comm = ["python*"]
// with uid = [1001] means "python processes of uid 1001". When several tenants match, the first
// in file order wins. A tenant with every list empty gets processes only by explicit assignment
// (`tenant assign`).
struct TenantMatch {
  std::vector<std::string> comm;     // fnmatch(3) globs (flags 0) on /proc/PID/comm
  std::vector<std::string> cmdline;  // fnmatch(3) globs on /proc/PID/cmdline, NULs as spaces
  // cgroup v2 paths as in /proc/PID/cgroup, matched by whole components: "/a/b" matches "/a/b"
  // and "/a/b/c", not "/a/bc".
  std::vector<std::string> cgroup;
  std::vector<std::uint32_t> uid;  // real uids

  bool operator==(const TenantMatch&) const = default;
};

struct TenantConfig {
  policy::TenantSpec spec;
  TenantMatch match;

  bool operator==(const TenantConfig&) const = default;
};

// The sched_ext backend (enforce/scx/scx_backend.hpp).
struct SchedExtConfig {
  // Start a full switch even where the kernel cannot hand cpu.max limits to the scheduler
  // (before Linux 6.17, or without CONFIG_EXT_GROUP_SCHED) while some cgroup has a quota; the
  // quotas then do not apply. Off: such a start is refused with the cgroup named.
  bool allow_unenforced_cpu_max = false;

  bool operator==(const SchedExtConfig&) const = default;
};

// Tenants from the kubelet's pod-resources API (collect/pod_resources.hpp, config/pod_tenants.hpp,
// docs/kubernetes.md).
enum class TenantBy : std::uint8_t { pod = 0, namespace_ = 1 };

inline constexpr std::string_view kDefaultPodResourcesSocket =
    "/var/lib/kubelet/pod-resources/kubelet.sock";
// Most pods one List answer may hold; a larger answer is refused (a node runs at most a few
// hundred: the kubelet's default max-pods is 110).
inline constexpr std::uint32_t kMaxPodsLimit = 10'000;

struct KubernetesConfig {
  bool enabled = false;
  std::string pod_resources_socket = std::string(kDefaultPodResourcesSocket);  // absolute path
  std::uint32_t refresh_ms = 5000;  // between List calls, >= 100
  std::uint32_t timeout_ms = 2000;  // deadline of each call, 1 .. refresh_ms
  TenantBy tenant_by = TenantBy::pod;
  // Namespace -> class; namespaces not listed get [multi_tenant] default_priority_class.
  std::map<std::string, policy::PriorityClass> namespace_classes;
  std::uint32_t max_pods = 1000;                // 1 .. kMaxPodsLimit
  std::uint32_t max_message_bytes = 4U << 20U;  // largest answer, 4096 .. 64 MiB

  bool operator==(const KubernetesConfig&) const = default;
};

struct Config {
  GeneralConfig general;
  policy::PhaseDetectionOptions phase_detection;
  policy::NumaOptions numa;
  MultiTenantConfig multi_tenant;
  TelemetryConfig telemetry;
  PowerConfig power;
  SchedExtConfig sched_ext;
  KubernetesConfig kubernetes;
  std::vector<TenantConfig> tenants;  // in file order, ids unique, at most policy::kMaxTenants

  bool operator==(const Config&) const = default;
};

struct LoadedConfig {
  Config config;
  // Accepted but worth telling the user (legacy spellings, settings that have no effect). Each
  // is a full sentence prefixed with the source name, ready to log.
  std::vector<std::string> warnings;
  // The file that was read; nullopt when it was missing and defaults were used (missing_ok).
  std::optional<std::string> path;
};

// Parses and validates TOML text. `source_name` (a path, or e.g. "<stdin>") prefixes every error
// and warning. On failure the error holds every problem found, one per line.
Result<LoadedConfig> parse_config(std::string_view toml_text, std::string_view source_name);

// Reads and parses a file. A missing file gives the defaults when missing_ok (path = nullopt),
// else the error "PATH: no such file" (code ENOENT).
Result<LoadedConfig> load_config_file(const std::string& path, bool missing_ok);

enum class ConfigPathSource : std::uint8_t { cli, env, built_in_default };

struct ConfigPath {
  std::string path;
  ConfigPathSource source = ConfigPathSource::built_in_default;

  // True when the user named the path; such a file must exist.
  [[nodiscard]] bool is_explicit() const { return source != ConfigPathSource::built_in_default; }
  bool operator==(const ConfigPath&) const = default;
};

// `cli_path` (from --config or check-config's argument), else $ZERNEL_SCHEDULER_CONFIG when set
// and non-empty, else kDefaultConfigPath.
ConfigPath resolve_config_path(std::optional<std::string> cli_path);

// resolve_config_path + load_config_file: an explicit path must exist, the default may be absent.
Result<LoadedConfig> load_config(std::optional<std::string> cli_path);

// The complete configuration as TOML, every key included, with a comment header.
std::string dump_config(const Config& config);

// The policy engine's part of the configuration.
policy::EngineOptions engine_options(const Config& config);

}  // namespace zernel::config
