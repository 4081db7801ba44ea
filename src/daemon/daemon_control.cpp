// Run-time control on the daemon's loop: the control socket it opens (daemon/control.hpp), the
// wake-ups that serve it and SIGHUP's reload between ticks (RuntimeControl, runtime_control.hpp),
// and what runtime control asks of the daemon (ControlHost: a live process, a replaced pid, a pid
// named by `tenant assign`). Requests run on the loop thread, so the engine stays single-threaded.
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "daemon/daemon.hpp"
#include "daemon/signals.hpp"
#include "sys/file.hpp"
#include "sys/procfs.hpp"

namespace zernel::daemon {

void Daemon::start_runtime_control() {
  // pid 2 is kthreadd only in the initial pid namespace (our /proc's pid 1 has ppid 0 there
  // and so does pid 2); in a container's namespace it is an ordinary process.
  const auto kthreadd = sys::read_stat(opts_.proc_root, 2);
  RuntimeControlOptions o;
  o.self_pid = static_cast<std::uint32_t>(::getpid());
  o.host_pid_namespace = kthreadd && kthreadd->is_kernel_thread();
  o.state_path = opts_.config.multi_tenant.runtime_state_file;
  ControlHost& host = *this;  // a private base: converted here, where it is accessible
  runtime_ = std::make_unique<RuntimeControl>(opts_.config, engine_, host, o);
  runtime_->restore_saved_state();
}

Result<void> Daemon::open_control_socket() {
  if (opts_.control_socket.empty()) return Ok{};
  auto control = ControlServer::listen(opts_.control_socket);
  if (control) {
    control_ = std::move(*control);
    spdlog::info("control socket: {} (root only)", control_->path());
  } else if (opts_.control_socket_required) {
    return control.error();
  } else {
    spdlog::error(
        "{}; running without a control socket (tenant/status/top will not reach "
        "this daemon; use --control-socket PATH)",
        control.error().message());
  }
  return Ok{};
}

void Daemon::service_wakeup(int reload_fd) {
  if (StopSignals::drain_reload(reload_fd)) {
    spdlog::info("SIGHUP: reloading {}",
                 opts_.config_path.empty() ? "(no file)" : opts_.config_path);
    if (auto r = runtime_->reload_file(opts_.config_path, opts_.config_missing_ok); !r) {
      spdlog::error("reload failed, keeping the running configuration: {}", r.error().message());
    }
  }
  if (control_) {
    control_->service(
        [this](const ControlRequest& req,
               ControlServer::Ticket who) -> std::optional<nlohmann::json> {
          if (req.op == ControlOp::trace) return start_trace(req, who);
          return runtime_->handle(req);
        },
        monotonic_ns());
  }
}

std::optional<LiveProcess> Daemon::live_process(std::uint32_t pid) {
  auto stat = sys::read_stat(opts_.proc_root, pid);
  if (!stat || stat->is_dead()) return std::nullopt;
  return LiveProcess{stat->ppid, stat->flags, stat->comm, stat->starttime_ticks};
}

void Daemon::drop_if_replaced(std::uint32_t pid, std::uint64_t starttime_ticks) {
  if (auto it = tracked_.find(pid);
      it != tracked_.end() && it->second.start != 0 && it->second.start != starttime_ticks) {
    drop(pid);  // the tracked process with this pid is gone: a new one has it now
  }
}

void Daemon::track_assigned(std::uint32_t pid, std::uint64_t starttime_ticks) {
  if (tracked_.contains(pid)) return;
  // The whole comm (it may hold spaces), as discovery reads it.
  std::string comm =
      sys::read_first_line(opts_.proc_root + "/" + std::to_string(pid) + "/comm").value_or("");
  tracked_[pid] = Tracked{comm, std::nullopt, collect::ProcessRole::matched};
  tracked_[pid].start = starttime_ticks;
}

}  // namespace zernel::daemon
