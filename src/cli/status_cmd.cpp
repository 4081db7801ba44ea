// `zernel-scheduler status [--json]`: the tracked processes of the running daemon, read through
// the control socket's "status" op (root only, like the other control commands; the same
// document is served without authentication, read-only, at http://127.0.0.1:<port>/status).

#include <algorithm>
#include <array>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/app.hpp"
#include "cli/commands.hpp"

namespace zernel::cli {
namespace {

struct PhaseKey {
  const char* name;
  char glyph;
  const char* color;  // ANSI background
};
// Phase names as in status_json (policy::phase_name).
constexpr std::array<PhaseKey, 5> kPhases = {{{"DataLoading", 'D', "\x1b[44m"},
                                              {"GpuCompute", 'G', "\x1b[42m"},
                                              {"NcclCollective", 'N', "\x1b[45m"},
                                              {"OptimizerStep", 'O', "\x1b[43m"},
                                              {"Unknown", '.', "\x1b[100m"}}};
constexpr std::size_t kBarWidth = 24;

std::string str_or_dash(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  return "-";
}

double phase_ms(const nlohmann::json& times, const char* name) {
  if (!times.is_object()) return 0;
  auto it = times.find(name);
  return it != times.end() && it->is_number() ? it->get<double>() : 0;
}

// Splits kBarWidth cells between the phases in proportion to their time (largest remainder).
std::string timeline_bar(const nlohmann::json& times, bool color) {
  std::array<double, kPhases.size()> ms{};
  double total = 0;
  for (std::size_t i = 0; i < kPhases.size(); ++i) {
    ms[i] = phase_ms(times, kPhases[i].name);
    total += ms[i];
  }
  std::string bar;
  if (total <= 0) return std::string(kBarWidth, ' ');
  std::array<std::size_t, kPhases.size()> cells{};
  std::array<double, kPhases.size()> rem{};
  std::size_t used = 0;
  for (std::size_t i = 0; i < kPhases.size(); ++i) {
    const double exact = ms[i] / total * static_cast<double>(kBarWidth);
    cells[i] = static_cast<std::size_t>(exact);
    rem[i] = exact - static_cast<double>(cells[i]);
    used += cells[i];
  }
  while (used < kBarWidth) {
    const auto i = static_cast<std::size_t>(std::max_element(rem.begin(), rem.end()) - rem.begin());
    ++cells[i];
    rem[i] = -1;
    ++used;
  }
  for (std::size_t i = 0; i < kPhases.size(); ++i) {
    if (cells[i] == 0) continue;
    if (color) bar += kPhases[i].color;
    bar.append(cells[i], kPhases[i].glyph);
    if (color) bar += "\x1b[0m";
  }
  return bar;
}

// The seconds in each phase and the bar of a row (a process's or a thread's).
std::string phase_columns(const nlohmann::json& times, bool color) {
  return fmt::format(" {:>7.1f} {:>7.1f} {:>7.1f} {:>7.1f}  {}",
                     phase_ms(times, "DataLoading") / 1e3, phase_ms(times, "GpuCompute") / 1e3,
                     phase_ms(times, "NcclCollective") / 1e3,
                     phase_ms(times, "OptimizerStep") / 1e3, timeline_bar(times, color));
}

}  // namespace

std::string format_status_table(const nlohmann::json& status, bool with_timeline, bool color,
                                std::size_t max_rows, bool with_threads) {
  std::string out = fmt::format(
      "backend {}, {} tracked ({} ML), {} tenant(s), {} decisions, {} phase transitions\n",
      status.value("backend", "?"), status.value("tasks_total", 0ULL),
      status.value("tasks_ml", 0ULL), status.contains("tenants") ? status["tenants"].size() : 0,
      status.value("decisions", 0ULL), status.value("transitions", 0ULL));
  // Why the backend acting is not the one asked for (daemon/backend_supervisor.hpp).
  if (const std::string st = status.value("backend_state", "requested"); st != "requested") {
    const auto text = [&](const char* key, const char* absent) {
      auto it = status.find(key);
      return it != status.end() && it->is_string() ? it->get<std::string>() : std::string(absent);
    };
    out += fmt::format("backend {} ({} asked for): {}\n", st, text("backend_requested", "?"),
                       text("backend_reason", "no reason given"));
  }
  out += fmt::format("{:>7} {:<16} {:<15} {:>4} {:>6} {:<12} {:>3} {:>4}", "PID", "COMM", "PHASE",
                     "PRIO", "WEIGHT", "TENANT", "GPU", "CPU");
  if (with_timeline) {
    out += fmt::format(" {:>7} {:>7} {:>7} {:>7}  {:<{}}", "DATA_S", "GPU_S", "NCCL_S", "OPT_S",
                       "TIMELINE (D G N O .)", kBarWidth);
  }
  out += '\n';
  std::vector<const nlohmann::json*> rows;
  if (status.contains("tasks") && status["tasks"].is_array()) {
    for (const auto& t : status["tasks"]) rows.push_back(&t);
  }
  std::sort(rows.begin(), rows.end(), [](const nlohmann::json* a, const nlohmann::json* b) {
    return a->value("pid", 0U) < b->value("pid", 0U);
  });
  std::size_t shown = 0;
  for (const nlohmann::json* t : rows) {
    if (shown++ >= max_rows) {
      out += fmt::format("... {} more\n", rows.size() - max_rows);
      break;
    }
    std::string comm = t->value("comm", "");
    if (comm.empty()) comm = "-";
    out += fmt::format("{:>7} {:<16.16} {:<15} {:>4} {:>6} {:<12.12} {:>3} {:>4}",
                       t->value("pid", 0U), comm, t->value("phase", "?"), t->value("priority", 0),
                       t->value("weight", 0U), str_or_dash((*t)["tenant"]),
                       str_or_dash((*t)["gpu_id"]), str_or_dash((*t)["preferred_cpu"]));
    if (with_timeline) out += phase_columns((*t)["phase_time_ms"], color);
    out += '\n';
    const auto threads = t->find("threads");
    if (!with_threads || threads == t->end() || !threads->is_array()) continue;
    for (const auto& th : *threads) {
      // The thread's own phase, under its process's columns; an exited thread says so.
      const std::string name = th.value("exited", false) ? "(exited)" : "thread";
      out +=
          fmt::format("{:>7} {:<16.16} {:<15} {:>4} {:>6} {:<12} {:>3} {:>4}", th.value("tid", 0U),
                      "  " + name, th.value("phase", "?"), "", "", "", "", "");
      if (with_timeline) out += phase_columns(th["phase_time_ms"], color);
      out += '\n';
    }
  }
  return out;
}

void add_status_command(CLI::App& app, StatusCmd& s) {
  s.cmd = app.add_subcommand("status", "Show the processes the running daemon tracks (root only)");
  s.cmd->add_flag("--json", s.json, "Print the status document (as GET /status) instead");
  s.cmd->add_option("--socket", s.client.socket,
                    "The daemon's control socket (default: $ZERNEL_SCHEDULER_SOCKET, else "
                    "/run/zernel/scheduler.sock)");
}

int run_status_command(const StatusCmd& s) {
  nlohmann::json reply;
  if (int rc = call_daemon(s.client, R"({"op":"status"})", reply); rc != kExitOk) return rc;
  const nlohmann::json& status = reply["status"];
  if (s.json) {
    fmt::print("{}\n", status.dump(2));
  } else {
    fmt::print("{}", format_status_table(status, false, false, SIZE_MAX));
  }
  return kExitOk;
}

}  // namespace zernel::cli
