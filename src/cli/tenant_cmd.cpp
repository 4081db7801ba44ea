// `zernel-scheduler tenant add|remove|list|assign`: a client of the daemon's control socket.
// Values are sent as typed and validated by the daemon, so the rules live in one place
// (daemon::parse_request); CLI11 only rejects what cannot be sent (a non-numeric --gpus: exit 2).

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "daemon/control.hpp"

namespace zernel::cli {

int call_daemon(const ClientArgs& args, const std::string& request, nlohmann::json& reply) {
  const std::string path = daemon::resolve_control_socket(args.socket);
  auto r = daemon::control_call(path, request);
  if (!r) {
    fmt::print(stderr, "zernel-scheduler: {}\n", r.error().message());
    return kExitError;
  }
  reply = std::move(*r);
  if (!reply["ok"].get<bool>()) {
    const auto& e = reply["error"];
    fmt::print(stderr, "zernel-scheduler: {}\n",
               e.is_string() ? e.get<std::string>() : std::string("the daemon refused the request"));
    return kExitError;
  }
  return kExitOk;
}

namespace {

void add_socket_option(CLI::App* app, ClientArgs& c) {
  app->add_option("--socket", c.socket,
                  "The daemon's control socket (default: $ZERNEL_SCHEDULER_SOCKET, else "
                  "/run/zernel/scheduler.sock)");
}

std::string weight_str(const nlohmann::json& v) {
  return v.is_number() ? fmt::format("{:.2f}", v.get<double>()) : "-";
}

// A whole count as is, a fraction (a kubelet tenant's MIG slice or replica) with 3 decimals.
std::string gpus_str(const nlohmann::json& v) {
  if (v.is_number_float()) return fmt::format("{:.3f}", v.get<double>());
  return v.is_number() ? std::to_string(v.get<std::uint64_t>()) : "-";
}

void print_tenants(const nlohmann::json& tenants) {
  fmt::print("{:<24} {:>5} {:<12} {:>10} {:>7} {:>6} {}\n", "ID", "GPUS", "CLASS", "CPU_WEIGHT",
             "WEIGHT", "TASKS", "SOURCE");
  for (const auto& t : tenants) {
    fmt::print("{:<24} {:>5} {:<12} {:>10} {:>7} {:>6} {}\n", t.value("id", ""),
               gpus_str(t.value("gpus", nlohmann::json())), t.value("class", ""),
               weight_str(t["cpu_weight"]), weight_str(t["weight"]), t.value("tasks", 0U),
               t.value("source", ""));
  }
}

}  // namespace

void add_tenant_command(CLI::App& app, TenantCmd& t) {
  t.cmd = app.add_subcommand(
      "tenant",
      "Add, remove, list tenants or assign a process to one, in the running daemon (root only); "
      "kept across its restarts in [multi_tenant] runtime_state_file");
  t.cmd->require_subcommand(1, 1);
  t.add = t.cmd->add_subcommand("add", "Add a tenant, or replace the one with the same id");
  t.add->add_option("--id", t.id, "Tenant id (letters, digits, - _ . : @)")->required();
  t.add->add_option("--gpus", t.gpus, "GPUs the tenant owns (0..4096)")->required();
  t.add->add_option("--class", t.priority_class,
                    "Priority class: training, inference, interactive or background")
      ->required();
  t.add->add_option("--cpu-weight", t.cpu_weight,
                    "Explicit CPU weight (0.01..100) instead of the GPU-proportional share");
  t.remove = t.cmd->add_subcommand("remove", "Remove a tenant (its processes become unassigned)");
  t.remove->add_option("--id", t.id, "Tenant id")->required();
  t.list = t.cmd->add_subcommand("list", "List the tenants");
  t.list->add_flag("--json", t.json, "Print the daemon's JSON list");
  t.assign = t.cmd->add_subcommand("assign", "Assign a process to a tenant");
  t.assign->add_option("--pid", t.pid, "Process id")->required();
  t.assign->add_option("--tenant", t.tenant, "Tenant id")->required();
  for (CLI::App* sub : {t.add, t.remove, t.list, t.assign}) add_socket_option(sub, t.client);
}

int run_tenant_command(const TenantCmd& t) {
  nlohmann::json req;
  if (t.add->parsed()) {
    req = {{"op", "tenant_add"}, {"id", t.id}, {"gpus", t.gpus}, {"class", t.priority_class}};
    if (t.cpu_weight) req["cpu_weight"] = *t.cpu_weight;
  } else if (t.remove->parsed()) {
    req = {{"op", "tenant_remove"}, {"id", t.id}};
  } else if (t.list->parsed()) {
    req = {{"op", "tenant_list"}};
  } else {
    req = {{"op", "tenant_assign"}, {"pid", t.pid}, {"tenant", t.tenant}};
  }
  nlohmann::json reply;
  if (int rc = call_daemon(t.client, req.dump(), reply); rc != kExitOk) return rc;
  if (t.add->parsed()) {
    fmt::print("{} tenant {} ({} GPU{}, class {})\n",
               reply.value("replaced", false) ? "replaced" : "added", t.id, t.gpus,
               t.gpus == 1 ? "" : "s", t.priority_class);
  } else if (t.remove->parsed()) {
    fmt::print("removed tenant {}\n", t.id);
  } else if (t.list->parsed()) {
    if (t.json) {
      fmt::print("{}\n", reply["tenants"].dump(2));
    } else {
      print_tenants(reply["tenants"]);
    }
  } else {
    fmt::print("assigned pid {} to tenant {}\n", t.pid, t.tenant);
  }
  return kExitOk;
}

}  // namespace zernel::cli
