// TOML -> Config. toml++ gives us a syntax tree with source positions; this file walks it section
// by section, reading each known key into its typed field and reporting everything else.
//
// Every problem is collected rather than returned at the first one, so that `check-config` shows
// a user everything to fix at once. A field whose value is rejected keeps its default, which is
// why the checks across fields (gpu_poll_interval_ms against phase_eval_interval_ms, idle against
// active threshold, duplicate tenant ids) run only when the fields involved were read cleanly:
// otherwise they would report nonsense about defaults the user never wrote.

#include <arpa/inet.h>
#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.hpp"
#include "config/config.hpp"
#include "config/format.hpp"

namespace zernel::config {
namespace {

// Stop listing after this many problems: past it the file is probably not a config at all.
constexpr std::size_t kMaxReportedErrors = 25;

constexpr std::string_view kLogLevels = "trace, debug, info, warn, error, critical, off";
// A process's comm is truncated to 15 bytes by the kernel (TASK_COMM_LEN - 1).
constexpr std::size_t kMaxCommLength = 15;

std::string_view type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::none:
      return "nothing";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
  }
  return "an unknown type";
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitution});
    }
  }
  return row[b.size()];
}

// "; did you mean \"x\"?" for a near miss (typo, forgotten unit suffix), else "".
std::string suggestion(std::string_view unknown, std::span<const std::string_view> valid) {
  const std::string key = lower(unknown);
  std::string_view best;
  std::size_t best_distance = std::max<std::size_t>(3, unknown.size() / 4) + 1;
  for (std::string_view v : valid) {
    const std::size_t d = edit_distance(key, v);
    if (d < best_distance) {
      best = v;
      best_distance = d;
    }
  }
  return best.empty() ? std::string() : fmt::format("; did you mean \"{}\"?", best);
}

std::string join(std::span<const std::string_view> items) {
  std::string out;
  for (std::string_view item : items) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out;
}

bool is_ip_literal(const std::string& s) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

// Only for strings is_ip_literal accepted.
bool is_loopback(const std::string& s) {
  in_addr v4{};
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, s.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6) != 0) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) != 0 && v6.s6_addr[12] == 127;
}

bool has_glob_chars(std::string_view pattern) {
  return pattern.find_first_of("*?[") != std::string_view::npos;
}

// The first of `paths` present in the file, for the position of a check across keys.
const toml::node* first_of(const toml::table& root, std::initializer_list<std::string_view> paths) {
  for (std::string_view path : paths) {
    if (const toml::node* node = root.at_path(path).node()) return node;
  }
  return nullptr;
}

struct Diagnostic {
  std::uint32_t line;  // 0: no position (checks across the whole file)
  std::string text;
};

// Collects errors and warnings, each "SOURCE: WHERE: WHAT (line N); HINT".
class Diagnostics {
 public:
  explicit Diagnostics(std::string_view source) : source_(source) {}

  void error(std::string_view where, std::string_view what, const toml::node* at,
             std::string_view hint = {}) {
    errors_.push_back(make(where, what, at, hint));
  }
  void warn(std::string_view where, std::string_view what, const toml::node* at,
            std::string_view hint = {}) {
    warnings_.push_back(make(where, what, at, hint));
  }

  [[nodiscard]] std::size_t error_count() const { return errors_.size(); }

  // All errors, in file order, one per line.
  [[nodiscard]] std::string error_text() const { return join_sorted(errors_, kMaxReportedErrors); }
  [[nodiscard]] std::vector<std::string> warning_lines() const {
    std::vector<std::string> out;
    for (const Diagnostic& d : sorted(warnings_)) out.push_back(d.text);
    return out;
  }

 private:
  Diagnostic make(std::string_view where, std::string_view what, const toml::node* at,
                  std::string_view hint) const {
    const std::uint32_t line = at != nullptr ? at->source().begin.line : 0;
    std::string text = where.empty() ? fmt::format("{}: {}", source_, what)
                                     : fmt::format("{}: {}: {}", source_, where, what);
    if (line > 0) text += fmt::format(" (line {})", line);
    if (!hint.empty()) text += fmt::format("; {}", hint);
    return Diagnostic{line, std::move(text)};
  }

  static std::vector<Diagnostic> sorted(std::vector<Diagnostic> items) {
    // Position-less diagnostics (whole-file checks) go last.
    std::stable_sort(items.begin(), items.end(), [](const Diagnostic& a, const Diagnostic& b) {
      return (a.line == 0 ? UINT32_MAX : a.line) < (b.line == 0 ? UINT32_MAX : b.line);
    });
    return items;
  }

  static std::string join_sorted(const std::vector<Diagnostic>& items, std::size_t limit) {
    std::string out;
    std::size_t shown = 0;
    for (const Diagnostic& d : sorted(items)) {
      if (shown == limit) {
        out += fmt::format("\n... and {} more", items.size() - limit);
        break;
      }
      if (!out.empty()) out += '\n';
      out += d.text;
      ++shown;
    }
    return out;
  }

  std::string source_;
  std::vector<Diagnostic> errors_;
  std::vector<Diagnostic> warnings_;
};

// Typed reads of one value. Each returns false (after reporting) when the value is unusable, and
// leaves `out` untouched then, so the field keeps its default.
class ValueReader {
 public:
  explicit ValueReader(Diagnostics& diag) : diag_(diag) {}

  bool boolean(const toml::node& node, const std::string& where, bool& out) {
    const auto* v = node.as_boolean();
    if (v == nullptr) return wrong_type(node, where, "a boolean (true or false)");
    out = v->get();
    return true;
  }

  bool string(const toml::node& node, const std::string& where, std::string& out) {
    const auto* v = node.as_string();
    if (v == nullptr) return wrong_type(node, where, "a string");
    out = v->get();
    return true;
  }

  // An integer in [min, max]; a float is rejected with a hint (100.0 -> "write 100").
  template <typename T>
  bool integer(const toml::node& node, const std::string& where, T& out, std::int64_t min,
               std::uint64_t max) {
    const auto* v = node.as_integer();
    if (v == nullptr) {
      if (const auto* f = node.as_floating_point()) return float_for_integer(node, where, f->get());
      return wrong_type(node, where, "an integer");
    }
    const std::int64_t value = v->get();
    if (value < 0 && min >= 0) {
      diag_.error(where, fmt::format("must not be negative, got {}", value), &node);
      return false;
    }
    if (value < min) {
      diag_.error(where, fmt::format("must be at least {}, got {}", min, value), &node);
      return false;
    }
    if (value > 0 && static_cast<std::uint64_t>(value) > max) {
      diag_.error(where, fmt::format("must be at most {}, got {}", max, value), &node);
      return false;
    }
    out = static_cast<T>(value);
    return true;
  }

  template <typename T>
  bool integer(const toml::node& node, const std::string& where, T& out, std::int64_t min) {
    return integer(node, where, out, min, std::numeric_limits<T>::max());
  }

  // A percentage 0..100.
  bool percent(const toml::node& node, const std::string& where, std::uint8_t& out) {
    std::int64_t value = 0;
    if (!integer(node, where, value, std::numeric_limits<std::int64_t>::min(),
                 std::numeric_limits<std::int64_t>::max())) {
      return false;
    }
    if (value < 0 || value > 100) {
      diag_.error(where, fmt::format("must be a percentage from 0 to 100, got {}", value), &node);
      return false;
    }
    out = static_cast<std::uint8_t>(value);
    return true;
  }

  // A finite float; an integer is accepted as the same number (io_wait_threshold = 1).
  bool real(const toml::node& node, const std::string& where, float& out) {
    double value = 0;
    if (const auto* f = node.as_floating_point()) {
      value = f->get();
    } else if (const auto* i = node.as_integer()) {
      value = static_cast<double>(i->get());
    } else {
      return wrong_type(node, where, "a number");
    }
    const auto narrowed = static_cast<float>(value);
    if (!std::isfinite(value) || !std::isfinite(narrowed)) {
      diag_.error(where,
                  fmt::format("must be a finite number, got {}", detail::format_double(value)),
                  &node);
      return false;
    }
    out = narrowed;
    return true;
  }

  bool wrong_type(const toml::node& node, const std::string& where, std::string_view expected) {
    diag_.error(where, fmt::format("expected {}, got {}", expected, type_name(node.type())), &node);
    return false;
  }

 private:
  bool float_for_integer(const toml::node& node, const std::string& where, double value) {
    std::string hint;
    if (std::isfinite(value) && value == std::trunc(value) && std::fabs(value) < 1e15) {
      hint = fmt::format("write {} without a decimal point", static_cast<std::int64_t>(value));
    }
    diag_.error(where,
                fmt::format("expected an integer, got a float ({})", detail::format_double(value)),
                &node, hint);
    return false;
  }

  Diagnostics& diag_;
};

// One key of a section: its name and how to read it. `read` returns false when it rejected the
// value, which marks the section as not clean for the checks across fields.
struct KeyReader {
  std::string_view name;
  std::function<bool(const toml::node&, const std::string& where)> read;
};

class Parser {
 public:
  explicit Parser(std::string_view source) : diag_(source), values_(diag_) {}

  Result<LoadedConfig> run(const toml::table& root) {
    check_top_level(root);
    const bool general_ok = section(root, "general", general_keys());
    const bool phase_ok = section(root, "phase_detection", phase_keys());
    section(root, "numa", numa_keys());
    section(root, "multi_tenant", multi_tenant_keys());
    section(root, "telemetry", telemetry_keys());
    const bool power_ok = section(root, "power", power_keys());
    section(root, "sched_ext", sched_ext_keys());
    const bool kubernetes_ok = section(root, "kubernetes", kubernetes_keys());
    tenants(root);
    if (general_ok) check_intervals(root);
    if (phase_ok) check_gpu_thresholds(root);
    check_tenants_enabled(root);
    if (power_ok) check_power(root);
    if (kubernetes_ok) check_kubernetes(root);
    if (diag_.error_count() > 0) return Error(EINVAL, diag_.error_text());
    return LoadedConfig{config_, diag_.warning_lines(), std::nullopt};
  }

 private:
  static constexpr std::string_view kSections[] = {"general",      "phase_detection", "numa",
                                                   "multi_tenant", "telemetry",       "power",
                                                   "sched_ext",    "kubernetes",      "tenants"};

  void check_top_level(const toml::table& root) {
    for (const auto& [key, node] : root) {
      const std::string_view name = key.str();
      if (std::find(std::begin(kSections), std::end(kSections), name) != std::end(kSections)) {
        continue;
      }
      const bool is_section = node.is_table() || node.is_array_of_tables();
      const std::string what =
          is_section ? fmt::format("unknown section [{}]", name)
                     : fmt::format("unknown top-level key \"{}\" (keys belong in a section)", name);
      diag_.error({}, what, &node,
                  "valid sections: [general], [phase_detection], [numa], [multi_tenant], "
                  "[telemetry], [power], [sched_ext], [kubernetes], [[tenants]]" +
                      suggestion(name, kSections));
    }
  }

  // Reads [name] with `keys`; returns true when every value in it was accepted.
  bool section(const toml::table& root, std::string_view name, std::span<const KeyReader> keys) {
    const toml::node* node = root.get(name);
    if (node == nullptr) return true;
    const toml::table* table = node->as_table();
    if (table == nullptr) {
      values_.wrong_type(*node, fmt::format("[{}]", name), "a table");
      return false;
    }
    return read_keys(*table, fmt::format("[{}] ", name), keys);
  }

  // `prefix` starts every "where" ("[general] ", "[[tenants]] #1 (id \"a\"): ").
  bool read_keys(const toml::table& table, const std::string& prefix,
                 std::span<const KeyReader> keys) {
    bool clean = true;
    for (const auto& [key, node] : table) {
      const std::string_view name = key.str();  // clang 16 cannot capture a structured binding
      const std::string where = prefix + std::string(name);
      const auto it = std::find_if(keys.begin(), keys.end(),
                                   [name](const KeyReader& k) { return k.name == name; });
      if (it == keys.end()) {
        unknown_key(where, name, node, keys);
        clean = false;
      } else if (!it->read(node, where)) {
        clean = false;
      }
    }
    return clean;
  }

  void unknown_key(const std::string& where, std::string_view name, const toml::node& node,
                   std::span<const KeyReader> keys) {
    std::vector<std::string_view> names;
    for (const KeyReader& k : keys) names.push_back(k.name);
    diag_.error(where, "unknown key", &node,
                "valid keys: " + join(names) + suggestion(name, names));
  }

  // --- [general] ---------------------------------------------------------------------------

  std::vector<KeyReader> general_keys() {
    return {
        {"phase_eval_interval_ms",
         [this](const toml::node& n, const std::string& w) {
           return values_.integer(n, w, config_.general.phase_eval_interval_ms, 1);
         }},
        {"gpu_poll_interval_ms",
         [this](const toml::node& n, const std::string& w) {
           return values_.integer(n, w, config_.general.gpu_poll_interval_ms, 1);
         }},
        {"max_tracked_tasks",
         [this](const toml::node& n, const std::string& w) {
           return values_.integer(n, w, config_.general.max_tracked_tasks, 1,
                                  policy::kMaxTrackedTasksLimit);
         }},
        {"log_level",
         [this](const toml::node& n, const std::string& w) { return log_level(n, w); }},
    };
  }

  bool log_level(const toml::node& node, const std::string& where) {
    std::string value;
    if (!values_.string(node, where, value)) return false;
    const std::string normalized = lower(value);
    if (!log::parse_level(normalized)) {
      diag_.error(where, fmt::format("unknown log level \"{}\"", value), &node,
                  fmt::format("valid levels: {}", kLogLevels));
      return false;
    }
    config_.general.log_level = normalized;
    return true;
  }

  // The old daemon polled the GPUs every gpu_poll / phase_eval ticks and divided by that tick
  // count: a poll interval shorter than the evaluation interval made it 0 and crashed the daemon.
  void check_intervals(const toml::table& root) {
    const GeneralConfig& g = config_.general;
    if (g.gpu_poll_interval_ms >= g.phase_eval_interval_ms) return;
    diag_.error("[general] gpu_poll_interval_ms",
                fmt::format("must not be shorter than phase_eval_interval_ms ({} ms), got {} ms",
                            g.phase_eval_interval_ms, g.gpu_poll_interval_ms),
                first_of(root, {"general.gpu_poll_interval_ms", "general.phase_eval_interval_ms"}),
                "GPUs are polled on evaluation ticks, so polling more often than the phases "
                "are evaluated is impossible; raise gpu_poll_interval_ms or lower "
                "phase_eval_interval_ms");
  }

  // --- [phase_detection] -------------------------------------------------------------------

  std::vector<KeyReader> phase_keys() {
    return {
        {"mode", [this](const toml::node& n, const std::string& w) { return phase_mode(n, w); }},
        {"event_sync_hysteresis_ns",
         [this](const toml::node& n, const std::string& w) {
           return values_.integer(n, w, config_.phase_detection.event_sync_hysteresis_ns, 0,
                                  kMaxEventHysteresisNs);
         }},
        {"event_idle_hysteresis_ns",
         [this](const toml::node& n, const std::string& w) {
           return values_.integer(n, w, config_.phase_detection.event_idle_hysteresis_ns, 0,
                                  kMaxEventHysteresisNs);
         }},
        {"event_optimizer_max_ns",
         [this](const toml::node& n, const std::string& w) {
           return values_.integer(n, w, config_.phase_detection.event_optimizer_max_ns, 1);
         }},
        {"io_wait_threshold",
         [this](const toml::node& n, const std::string& w) { return fraction(n, w); }},
        {"optimizer_burst_max_ns",
         [this](const toml::node& n, const std::string& w) {
           return values_.integer(n, w, config_.phase_detection.optimizer_burst_max_ns, 1);
         }},
        {"gpu_idle_threshold",
         [this](const toml::node& n, const std::string& w) {
           return values_.percent(n, w, config_.phase_detection.gpu_idle_threshold);
         }},
        {"gpu_active_threshold",
         [this](const toml::node& n, const std::string& w) {
           return values_.percent(n, w, config_.phase_detection.gpu_active_threshold);
         }},
        {"phase_stability_count",
         [this](const toml::node& n, const std::string& w) {
           return values_.integer(n, w, config_.phase_detection.phase_stability_count, 1,
                                  kMaxPhaseStabilityCount);
         }},
        {"nccl_detection_enabled",
         [this](const toml::node& n, const std::string& w) {
           return values_.boolean(n, w, config_.phase_detection.nccl_detection_enabled);
         }},
    };
  }

  bool phase_mode(const toml::node& node, const std::string& where) {
    std::string value;
    if (!values_.string(node, where, value)) return false;
    if (value == "events") {
      config_.phase_detection.mode = policy::PhaseSource::events;
    } else if (value == "periodic") {
      config_.phase_detection.mode = policy::PhaseSource::periodic;
    } else {
      diag_.error(where, fmt::format("unknown mode \"{}\"", value), &node,
                  "valid modes: \"events\" (BPF, as phases change), \"periodic\" (sampled)");
      return false;
    }
    return true;
  }

  bool fraction(const toml::node& node, const std::string& where) {
    float value = 0;
    if (!values_.real(node, where, value)) return false;
    if (value < 0.0F || value > 1.0F) {
      diag_.error(
          where, fmt::format("must be a fraction from 0 to 1, got {}", detail::format_float(value)),
          &node);
      return false;
    }
    config_.phase_detection.io_wait_threshold = value;
    return true;
  }

  // Between the thresholds lies the "prefetch overlap" band; with idle >= active no utilisation
  // is below idle and above active at once, and rule 6 of the detector could never fire.
  void check_gpu_thresholds(const toml::table& root) {
    const policy::PhaseDetectionOptions& p = config_.phase_detection;
    if (p.gpu_idle_threshold < p.gpu_active_threshold) return;
    diag_.error("[phase_detection] gpu_idle_threshold",
                fmt::format("must be below gpu_active_threshold ({}), got {}",
                            p.gpu_active_threshold, p.gpu_idle_threshold),
                first_of(root, {"phase_detection.gpu_idle_threshold",
                                "phase_detection.gpu_active_threshold"}));
  }

  // --- [numa], [multi_tenant], [telemetry] -------------------------------------------------

  std::vector<KeyReader> numa_keys() {
    return {
        {"enabled",
         [this](const toml::node& v, const std::string& w) {
           return values_.boolean(v, w, config_.numa.enabled);
         }},
        {"gpu_affinity",
         [this](const toml::node& v, const std::string& w) {
           return values_.boolean(v, w, config_.numa.gpu_affinity);
         }},
        {"memory_affinity",
         [this](const toml::node& v, const std::string& w) {
           return values_.boolean(v, w, config_.numa.memory_affinity);
         }},
    };
  }

  std::vector<KeyReader> multi_tenant_keys() {
    return {
        {"enabled",
         [this](const toml::node& v, const std::string& w) {
           return values_.boolean(v, w, config_.multi_tenant.enabled);
         }},
        {"default_priority_class",
         [this](const toml::node& v, const std::string& w) {
           return priority_class(v, w, config_.multi_tenant.default_priority_class);
         }},
        {"protected_comms",
         [this](const toml::node& v, const std::string& w) {
           return strings(v, w, config_.multi_tenant.protected_comms,
                          [this](const std::string& s, const std::string& ew,
                                 const toml::node& en) { return comm(s, ew, en); });
         }},
        {"runtime_state_file",
         [this](const toml::node& v, const std::string& w) { return runtime_state_file(v, w); }},
    };
  }

  // An absolute path or "" (runtime tenants not kept across restarts).
  bool runtime_state_file(const toml::node& node, const std::string& where) {
    std::string value;
    if (!values_.string(node, where, value)) return false;
    if (!value.empty() &&
        (value.front() != '/' || value.back() == '/' || value.find('\0') != std::string::npos)) {
      diag_.error(where, fmt::format("\"{}\" is not an absolute file path", value), &node,
                  "write a path such as /var/lib/zernel/runtime-tenants.json, or \"\" to keep "
                  "runtime tenants in memory only");
      return false;
    }
    config_.multi_tenant.runtime_state_file = value;
    return true;
  }

  // "normal" was the earlier implementation's default; it is no class and silently meant
  // training there, so it still means training here, but loudly.
  bool priority_class(const toml::node& node, const std::string& where,
                      policy::PriorityClass& out) {
    std::string value;
    if (!values_.string(node, where, value)) return false;
    if (lower(value) == "normal") {
      diag_.warn(where, "\"normal\" is not a class; treated as \"training\"", &node,
                 "write one of training, inference, interactive, background");
      out = policy::PriorityClass::training;
      return true;
    }
    auto parsed = policy::parse_priority_class(value);
    if (!parsed) {
      diag_.error(where, parsed.error().message(), &node);
      return false;
    }
    out = *parsed;
    return true;
  }

  std::vector<KeyReader> telemetry_keys() {
    return {
        {"metrics_port",
         [this](const toml::node& v, const std::string& w) {
           return values_.integer(v, w, config_.telemetry.metrics_port, 1);
         }},
        {"metrics_address",
         [this](const toml::node& v, const std::string& w) { return metrics_address(v, w); }},
        {"push_interval_ms",
         [this](const toml::node& v, const std::string& w) {
           return values_.integer(v, w, config_.telemetry.push_interval_ms, 1);
         }},
    };
  }

  bool metrics_address(const toml::node& node, const std::string& where) {
    std::string value;
    if (!values_.string(node, where, value)) return false;
    if (!is_ip_literal(value)) {
      diag_.error(where, fmt::format("\"{}\" is not an IP address", value), &node,
                  "write an IPv4 or IPv6 literal such as 127.0.0.1, 0.0.0.0 or ::1 (no host "
                  "names, no brackets)");
      return false;
    }
    if (!is_loopback(value)) {
      diag_.warn(where, fmt::format("\"{}\" is not a loopback address", value), &node,
                 "/metrics and /status (with process names and pids) are reachable from other "
                 "machines");
    }
    config_.telemetry.metrics_address = value;
    return true;
  }

  // --- [power] -----------------------------------------------------------------------------

  std::vector<KeyReader> power_keys() {
    return {
        {"enabled",
         [this](const toml::node& v, const std::string& w) {
           return values_.boolean(v, w, config_.power.enabled);
         }},
        {"dry_run",
         [this](const toml::node& v, const std::string& w) {
           return values_.boolean(v, w, config_.power.dry_run);
         }},
        {"manage_gpu",
         [this](const toml::node& v, const std::string& w) {
           return values_.boolean(v, w, config_.power.manage_gpu);
         }},
        {"manage_cpu",
         [this](const toml::node& v, const std::string& w) {
           return values_.boolean(v, w, config_.power.manage_cpu);
         }},
    };
  }

  // --- [sched_ext] -------------------------------------------------------------------------

  std::vector<KeyReader> sched_ext_keys() {
    return {
        {"allow_unenforced_cpu_max",
         [this](const toml::node& v, const std::string& w) {
           return values_.boolean(v, w, config_.sched_ext.allow_unenforced_cpu_max);
         }},
    };
  }

  // Settings that do nothing deserve a word: power management on with nothing to manage.
  void check_power(const toml::table& root) {
    const PowerConfig& p = config_.power;
    if (!p.enabled || p.manage_gpu || p.manage_cpu) return;
    diag_.warn("[power]", "enabled, but manage_gpu and manage_cpu are both false: nothing is managed",
               first_of(root, {"power.enabled"}));
  }

  // --- [kubernetes] ------------------------------------------------------------------------

  std::vector<KeyReader> kubernetes_keys() {
    KubernetesConfig& k = config_.kubernetes;
    return {
        {"enabled", [this, &k](const toml::node& v,
                               const std::string& w) { return values_.boolean(v, w, k.enabled); }},
        {"pod_resources_socket",
         [this, &k](const toml::node& v, const std::string& w) {
           std::string value;
           if (!values_.string(v, w, value)) return false;
           if (value.empty() || value.front() != '/' || value.back() == '/' || value.size() > 107 ||
               value.find('\0') != std::string::npos) {
             diag_.error(w, fmt::format("\"{}\" is not an absolute socket path", value), &v,
                         "write the kubelet's socket, e.g. " +
                             std::string(kDefaultPodResourcesSocket) +
                             " (at most 107 bytes, a unix socket address's limit)");
             return false;
           }
           k.pod_resources_socket = value;
           return true;
         }},
        {"refresh_ms",
         [this, &k](const toml::node& v, const std::string& w) {
           return values_.integer(v, w, k.refresh_ms, 100);
         }},
        {"timeout_ms",
         [this, &k](const toml::node& v, const std::string& w) {
           return values_.integer(v, w, k.timeout_ms, 1);
         }},
        {"tenant_by",
         [this](const toml::node& v, const std::string& w) { return tenant_by(v, w); }},
        {"namespace_classes",
         [this](const toml::node& v, const std::string& w) { return namespace_classes(v, w); }},
        {"max_pods",
         [this, &k](const toml::node& v, const std::string& w) {
           return values_.integer(v, w, k.max_pods, 1, kMaxPodsLimit);
         }},
        {"max_message_bytes",
         [this, &k](const toml::node& v, const std::string& w) {
           return values_.integer(v, w, k.max_message_bytes, 4096, 64U << 20U);
         }},
    };
  }

  bool tenant_by(const toml::node& node, const std::string& where) {
    std::string value;
    if (!values_.string(node, where, value)) return false;
    if (value == "pod") {
      config_.kubernetes.tenant_by = TenantBy::pod;
    } else if (value == "namespace") {
      config_.kubernetes.tenant_by = TenantBy::namespace_;
    } else {
      diag_.error(where, fmt::format("unknown grouping \"{}\"", value), &node,
                  "write \"pod\" or \"namespace\" (labels are not in the pod-resources API; "
                  "see docs/kubernetes.md)");
      return false;
    }
    return true;
  }

  // An inline table of namespace = class.
  bool namespace_classes(const toml::node& node, const std::string& where) {
    const toml::table* table = node.as_table();
    if (table == nullptr) {
      return values_.wrong_type(node, where, "a table of namespace = \"class\"");
    }
    std::map<std::string, policy::PriorityClass> out;
    bool clean = true;
    for (const auto& [key, value] : *table) {
      const std::string ns(key.str());
      const std::string entry_where = fmt::format("{}.{}", where, ns);
      if (!is_dns_label(ns)) {
        diag_.error(entry_where, fmt::format("\"{}\" is not a namespace name", ns), &value,
                    "namespaces are 1..63 lower-case letters, digits and '-', starting and "
                    "ending with a letter or digit");
        clean = false;
        continue;
      }
      policy::PriorityClass c = policy::PriorityClass::training;
      if (!priority_class(value, entry_where, c)) {
        clean = false;
        continue;
      }
      out.emplace(ns, c);
    }
    if (clean) config_.kubernetes.namespace_classes = std::move(out);
    return clean;
  }

  static bool is_dns_label(std::string_view s) {
    if (s.empty() || s.size() > 63 || s.front() == '-' || s.back() == '-') return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    });
  }

  void check_kubernetes(const toml::table& root) {
    const KubernetesConfig& k = config_.kubernetes;
    if (k.timeout_ms > k.refresh_ms) {
      diag_.error(
          "[kubernetes] timeout_ms",
          fmt::format("must not exceed refresh_ms ({}), got {}", k.refresh_ms, k.timeout_ms),
          first_of(root, {"kubernetes.timeout_ms", "kubernetes.refresh_ms"}));
    }
    if (k.enabled && !config_.multi_tenant.enabled) {
      diag_.warn("[kubernetes] enabled",
                 "tenants from the kubelet are read but not scheduled while [multi_tenant] "
                 "enabled = false",
                 first_of(root, {"kubernetes.enabled"}), "set [multi_tenant] enabled = true");
    }
  }

  // --- [[tenants]] -------------------------------------------------------------------------

  void tenants(const toml::table& root) {
    const toml::node* node = root.get("tenants");
    if (node == nullptr) return;
    const toml::array* array = node->as_array();
    if (array != nullptr && array->empty()) return;  // tenants = [] (toml++: not "of tables")
    if (array == nullptr || !array->is_array_of_tables()) {
      values_.wrong_type(*node, "[[tenants]]", "an array of tables (write [[tenants]])");
      return;
    }
    if (array->size() > policy::kMaxTenants) {
      diag_.error("[[tenants]]",
                  fmt::format("at most {} tenants, got {}", policy::kMaxTenants, array->size()),
                  node);
      return;
    }
    bool clean = true;
    for (std::size_t i = 0; i < array->size(); ++i) {
      clean = tenant(*(*array)[i].as_table(), i + 1) && clean;
    }
    if (clean) check_duplicate_ids(*array);
  }

  // Returns true when the tenant was read and validated cleanly. The key readers write into a
  // local TenantConfig (by pointer: they live no longer than this call), appended when clean.
  bool tenant(const toml::table& table, std::size_t number) {
    TenantConfig t;
    t.spec.priority_class = config_.multi_tenant.default_priority_class;
    const std::string prefix = tenant_label(table, number) + ": ";
    bool clean = read_keys(table, prefix, tenant_keys(&t, prefix));
    for (std::string_view required : {"id", "gpus"}) {
      if (!table.contains(required)) {
        diag_.error(prefix + std::string(required), "missing (required)", &table);
        clean = false;
      }
    }
    if (!clean) return false;
    if (auto valid = policy::validate_tenant(t.spec); !valid) {
      diag_.error(tenant_label(table, number), valid.error().message(), &table);
      return false;
    }
    config_.tenants.push_back(std::move(t));
    return true;
  }

  static std::string tenant_label(const toml::table& table, std::size_t number) {
    std::string label = fmt::format("[[tenants]] #{}", number);
    if (const auto* id = table.get_as<std::string>("id")) {
      label += fmt::format(" (id \"{}\")", id->get());
    }
    return label;
  }

  std::vector<KeyReader> tenant_keys(TenantConfig* t, const std::string& prefix) {
    return {
        {"id", [this, t](const toml::node& v,
                         const std::string& w) { return values_.string(v, w, t->spec.id); }},
        {"gpus",
         [this, t](const toml::node& v, const std::string& w) {
           return values_.integer(v, w, t->spec.gpus, 0);
         }},
        {"class",
         [this, t](const toml::node& v, const std::string& w) {
           return priority_class(v, w, t->spec.priority_class);
         }},
        {"cpu_weight",
         [this, t](const toml::node& v, const std::string& w) {
           float weight = 0;
           if (!values_.real(v, w, weight)) return false;
           t->spec.cpu_weight = weight;
           return true;
         }},
        {"match",
         [this, t, prefix](const toml::node& v, const std::string& w) {
           const toml::table* table = v.as_table();
           if (table == nullptr) return values_.wrong_type(v, w, "a table ([tenants.match])");
           return read_keys(*table, prefix + "match.", match_keys(&t->match));
         }},
    };
  }

  std::vector<KeyReader> match_keys(TenantMatch* m) {
    return {
        {"comm",
         [this, m](const toml::node& v, const std::string& w) {
           return strings(v, w, m->comm,
                          [this](const std::string& s, const std::string& ew,
                                 const toml::node& en) { return comm(s, ew, en); });
         }},
        {"cmdline",
         [this, m](const toml::node& v, const std::string& w) {
           return strings(
               v, w, m->cmdline,
               [](const std::string&, const std::string&, const toml::node&) { return true; });
         }},
        {"cgroup",
         [this, m](const toml::node& v, const std::string& w) {
           return strings(v, w, m->cgroup,
                          [this](const std::string& s, const std::string& ew,
                                 const toml::node& en) { return cgroup(s, ew, en); });
         }},
        {"uid",
         [this, m](const toml::node& v, const std::string& w) { return uids(v, w, m->uid); }},
    };
  }

  using StringCheck =
      std::function<bool(const std::string&, const std::string& where, const toml::node&)>;

  // An array of non-empty strings, each passing `check`.
  bool strings(const toml::node& node, const std::string& where, std::vector<std::string>& out,
               const StringCheck& check) {
    const toml::array* array = node.as_array();
    if (array == nullptr) return values_.wrong_type(node, where, "an array of strings");
    std::vector<std::string> items;
    bool clean = true;
    for (std::size_t i = 0; i < array->size(); ++i) {
      const toml::node& element = (*array)[i];
      const std::string element_where = fmt::format("{}[{}]", where, i);
      std::string value;
      // Each test reports its own diagnostic; the first that fails rejects the element.
      bool ok = values_.string(element, element_where, value);
      if (ok && value.empty()) {
        diag_.error(element_where, "must not be empty", &element);
        ok = false;
      }
      ok = ok && check(value, element_where, element);
      if (ok) {
        items.push_back(std::move(value));
      } else {
        clean = false;
      }
    }
    if (clean) out = std::move(items);
    return clean;
  }

  bool comm(const std::string& pattern, const std::string& where, const toml::node& node) {
    if (!has_glob_chars(pattern) && pattern.size() > kMaxCommLength) {
      diag_.warn(where,
                 fmt::format("\"{}\" is longer than {} bytes and can never match", pattern,
                             kMaxCommLength),
                 &node, "the kernel truncates comm to 15 bytes; match on cmdline instead");
    }
    return true;
  }

  bool cgroup(const std::string& prefix, const std::string& where, const toml::node& node) {
    if (!prefix.starts_with('/')) {
      diag_.error(where, fmt::format("\"{}\" must start with /", prefix), &node,
                  "cgroup paths are as in /proc/PID/cgroup, e.g. \"/kubepods.slice/team-a\"");
      return false;
    }
    // Matching is by whole path components; one spelling per cgroup keeps that simple.
    if (prefix.size() > 1 && prefix.ends_with('/')) {
      diag_.error(where, fmt::format("\"{}\" must not end with /", prefix), &node,
                  "a prefix matches the cgroup and everything below it already");
      return false;
    }
    if (prefix.starts_with("/sys/fs/cgroup")) {
      diag_.warn(where, fmt::format("\"{}\" includes the cgroup mount point", prefix), &node,
                 "paths are relative to the cgroup2 root, as in /proc/PID/cgroup; "
                 "drop the /sys/fs/cgroup part");
    }
    return true;
  }

  bool uids(const toml::node& node, const std::string& where, std::vector<std::uint32_t>& out) {
    const toml::array* array = node.as_array();
    if (array == nullptr) return values_.wrong_type(node, where, "an array of integers");
    std::vector<std::uint32_t> items;
    bool clean = true;
    for (std::size_t i = 0; i < array->size(); ++i) {
      std::uint32_t uid = 0;
      // 4294967295 is (uid_t)-1, "no uid" to the kernel.
      if (values_.integer((*array)[i], fmt::format("{}[{}]", where, i), uid, 0,
                          std::numeric_limits<std::uint32_t>::max() - 1)) {
        items.push_back(uid);
      } else {
        clean = false;
      }
    }
    if (clean) out = std::move(items);
    return clean;
  }

  void check_duplicate_ids(const toml::array& array) {
    for (std::size_t i = 0; i < config_.tenants.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (config_.tenants[i].spec.id != config_.tenants[j].spec.id) continue;
        const toml::table& table = *array[i].as_table();
        diag_.error(tenant_label(table, i + 1) + ": id",
                    fmt::format("duplicate; [[tenants]] #{} has the same id", j + 1),
                    table.get("id"));
        break;
      }
    }
  }

  void check_tenants_enabled(const toml::table& root) {
    if (config_.tenants.empty() || config_.multi_tenant.enabled) return;
    diag_.warn(
        "[multi_tenant] enabled",
        fmt::format("is false, so the {} [[tenants]] declared are ignored", config_.tenants.size()),
        root.at_path("multi_tenant.enabled").node(), "set enabled = true to schedule by tenant");
  }

  Config config_;
  Diagnostics diag_;
  ValueReader values_;
};

}  // namespace

Result<LoadedConfig> parse_config(std::string_view toml_text, std::string_view source_name) {
  toml::table root;
  try {
    root = toml::parse(toml_text, std::string(source_name));
  } catch (const toml::parse_error& e) {
    const toml::source_position& at = e.source().begin;
    return Error(EINVAL, fmt::format("{}: invalid TOML at line {}, column {}: {}", source_name,
                                     at.line, at.column, e.description()));
  }
  return Parser(source_name).run(root);
}

}  // namespace zernel::config
