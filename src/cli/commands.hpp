#pragma once
// The client subcommands of zernel-scheduler that talk to a running daemon through its control
// socket (daemon/control.hpp): `tenant add|remove|list|assign` (tenant_cmd.cpp), `status`
// (status_cmd.cpp), `top` (top_cmd.cpp) and `trace` (trace_cmd.cpp). Exit codes as in app.hpp: 0
// ok, 1 the daemon refused or failed the request (its reason is printed) or cannot be reached, 2
// usage.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace CLI {
class App;
}

namespace zernel::cli {

struct ClientArgs {
  std::optional<std::string> socket;  // --socket; default $ZERNEL_SCHEDULER_SOCKET, then
                                      // /run/zernel/scheduler.sock
};

// Prints "zernel-scheduler: MSG" on stderr, as every subcommand reports a failure.
void print_error(const std::string& msg);

// Sends one request line; on success fills `reply` and returns kExitOk, else prints the reason
// ("zernel-scheduler: ...") and returns kExitError.
int call_daemon(const ClientArgs& args, const std::string& request, nlohmann::json& reply);

struct TenantCmd {
  ClientArgs client;
  CLI::App* cmd = nullptr;
  CLI::App* add = nullptr;
  CLI::App* remove = nullptr;
  CLI::App* list = nullptr;
  CLI::App* assign = nullptr;
  std::string id;
  std::uint32_t gpus = 0;
  std::string priority_class;
  std::optional<double> cpu_weight;
  std::uint64_t pid = 0;
  std::string tenant;
  bool json = false;
};
void add_tenant_command(CLI::App& app, TenantCmd& t);
int run_tenant_command(const TenantCmd& t);

struct StatusCmd {
  ClientArgs client;
  CLI::App* cmd = nullptr;
  bool json = false;
};
void add_status_command(CLI::App& app, StatusCmd& s);
int run_status_command(const StatusCmd& s);

struct TopCmd {
  ClientArgs client;
  CLI::App* cmd = nullptr;
  bool once = false;
  bool threads = false;
  double interval_s = 1.0;
};
void add_top_command(CLI::App& app, TopCmd& t);
int run_top_command(const TopCmd& t);

struct TraceCmd {
  ClientArgs client;
  CLI::App* cmd = nullptr;
  std::uint32_t seconds = 5;
  std::string output;  // the Chrome trace-event JSON; empty: none
  std::string svg;     // the SVG picture; empty: none
  std::string clock = "realtime";
};
void add_trace_command(CLI::App& app, TraceCmd& t);
int run_trace_command(const TraceCmd& t);

// Shared by status and top: the table of tracked processes from a status document; with_threads
// adds a row under each process for each of its threads that has phases ("threads").
std::string format_status_table(const nlohmann::json& status, bool with_timeline, bool color,
                                std::size_t max_rows, bool with_threads = false);

}  // namespace zernel::cli
