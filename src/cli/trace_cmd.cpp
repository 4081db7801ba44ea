// `zernel-scheduler trace --seconds N --output FILE.json [--svg FILE.svg]`: N seconds of the
// running daemon's per-thread phases and decisions (the control socket's "trace" op, answered
// when the recording ends), written as a Chrome/Perfetto trace and/or an SVG picture
// (telemetry/trace.hpp, docs/trace.md).
//
// The outputs are checked before the daemon is asked (so a bad path fails at once, not after N
// seconds): an existing path must be a regular file (a symbolic link, FIFO or device is refused),
// and a temporary file is created next to it, then renamed over it once written. SIGINT/SIGTERM
// remove the temporary files.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "daemon/control.hpp"
#include "telemetry/trace.hpp"

namespace zernel::cli {
namespace {

// The temporary files, for the signal handler (which may only unlink).
std::array<std::array<char, 4096>, 2> g_temp_paths{};

extern "C" void remove_temps_and_exit(int sig) {
  for (auto& p : g_temp_paths) {
    if (p[0] != '\0') ::unlink(p.data());
  }
  ::_exit(128 + sig);
}

// One output: checked and its temporary file created up front, renamed over the path at the end.
class Output {
 public:
  Output(std::string path, std::size_t slot) : path_(std::move(path)), slot_(slot) {}
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;
  ~Output() {
    if (fd_ >= 0) ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
    g_temp_paths[slot_][0] = '\0';
  }

  Result<void> open() {
    struct stat st{};
    if (::lstat(path_.c_str(), &st) == 0) {
      if (S_ISLNK(st.st_mode)) {
        return Error(ELOOP, path_ + ": is a symbolic link; refusing to write through it");
      }
      if (!S_ISREG(st.st_mode)) {
        return Error(EINVAL, path_ +
                                 ": exists and is not a regular file (a FIFO, device, "
                                 "socket or directory); refusing to replace it");
      }
    } else if (errno != ENOENT) {
      return errno_error(path_);
    }
    const auto slash = path_.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
    const std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
    if (base.empty()) return Error(EISDIR, path_ + ": names a directory, not a file");
    std::string tmpl = (slash == std::string::npos ? std::string() : dir) + "." + base + ".XXXXXX";
    if (tmpl.size() >= g_temp_paths[slot_].size()) return Error(ENAMETOOLONG, path_);
    fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd_ < 0) return errno_error("cannot create a file next to " + path_);
    tmp_ = tmpl;
    std::memcpy(g_temp_paths[slot_].data(), tmp_.c_str(), tmp_.size() + 1);
    return Ok{};
  }

  Result<void> commit(const std::string& text) {
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t w = ::write(fd_, text.data() + done, text.size() - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        return errno_error("writing " + tmp_);
      }
      done += static_cast<std::size_t>(w);
    }
    ::fchmod(fd_, 0644);
    if (::fsync(fd_) != 0) return errno_error("writing " + tmp_);
    ::close(fd_);
    fd_ = -1;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      return errno_error("renaming " + tmp_ + " to " + path_);
    }
    tmp_.clear();
    g_temp_paths[slot_][0] = '\0';
    return Ok{};
  }

 private:
  std::string path_;
  std::size_t slot_;
  std::string tmp_;
  int fd_ = -1;
};

}  // namespace

void add_trace_command(CLI::App& app, TraceCmd& t) {
  t.cmd = app.add_subcommand(
      "trace",
      "Record N seconds of the running daemon's per-thread phases and decisions as a "
      "Chrome/Perfetto trace (--output) and/or an SVG picture (--svg) (root only; docs/trace.md)");
  t.cmd->add_option("--seconds,-s", t.seconds, "How long to record, 1 to 600 seconds")
      ->check(CLI::Range(telemetry::kTraceMinSeconds, telemetry::kTraceMaxSeconds))
      ->capture_default_str();
  t.cmd->add_option("--output,-o", t.output,
                    "Write the trace-event JSON here (opens in ui.perfetto.dev or "
                    "chrome://tracing; replaced atomically; a symlink or FIFO is refused)");
  t.cmd->add_option("--svg", t.svg, "Write the same timeline as an SVG picture here");
  t.cmd
      ->add_option("--clock", t.clock,
                   "Time stamps: realtime (microseconds since the Unix epoch, as a PyTorch "
                   "profiler trace) or monotonic (CLOCK_MONOTONIC, as --phase-log)")
      ->check(CLI::IsMember({"realtime", "monotonic"}))
      ->capture_default_str();
  t.cmd->add_option("--socket", t.client.socket,
                    "The daemon's control socket (default: $ZERNEL_SCHEDULER_SOCKET, else "
                    "/run/zernel/scheduler.sock)");
}

int run_trace_command(const TraceCmd& t) {
  if (t.output.empty() && t.svg.empty()) {
    print_error("trace: nothing to write: give --output FILE.json and/or --svg FILE.svg");
    return kExitUsage;
  }
  if (!t.output.empty() && t.output == t.svg) {
    print_error("trace: --output and --svg name the same file");
    return kExitUsage;
  }
  Output json_out(t.output, 0);
  Output svg_out(t.svg, 1);
  for (auto [out, path] :
       {std::pair<Output*, const std::string*>{&json_out, &t.output}, {&svg_out, &t.svg}}) {
    if (path->empty()) continue;
    if (auto r = out->open(); !r) {
      print_error("trace: " + r.error().message());
      return kExitError;
    }
  }
  struct sigaction sa{};
  sa.sa_handler = remove_temps_and_exit;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);

  const std::string path = daemon::resolve_control_socket(t.client.socket);
  const std::string request = fmt::format(R"({{"op":"trace","seconds":{}}})", t.seconds);
  fmt::print(stderr, "zernel-scheduler: recording {} s from the daemon at {}...\n", t.seconds,
             path);
  // The reply comes when the recording ends: wait for it, and then some.
  const int timeout_ms = static_cast<int>(t.seconds) * 1000 + 30'000;
  auto reply = daemon::control_call(path, request, timeout_ms);
  if (!reply) {
    print_error(reply.error().message());
    return kExitError;
  }
  if (!(*reply)["ok"].get<bool>()) {
    print_error((*reply).value("error", std::string("the daemon refused the request")));
    return kExitError;
  }
  auto it = reply->find("trace");
  if (it == reply->end()) {
    print_error("the daemon's reply has no trace (is it an older zernel-scheduler?)");
    return kExitError;
  }
  auto data = telemetry::trace_from_json(*it);
  if (!data) {
    print_error(data.error().message());
    return kExitError;
  }
  const telemetry::TraceClock clock =
      t.clock == "monotonic" ? telemetry::TraceClock::monotonic : telemetry::TraceClock::realtime;
  if (!t.output.empty()) {
    if (auto r = json_out.commit(telemetry::chrome_trace_json(*data, clock)); !r) {
      print_error("trace: " + r.error().message());
      return kExitError;
    }
  }
  if (!t.svg.empty()) {
    if (auto r = svg_out.commit(telemetry::trace_svg(*data, clock)); !r) {
      print_error("trace: " + r.error().message());
      return kExitError;
    }
  }
  const std::size_t spans = telemetry::phase_spans(*data).size();
  fmt::print(
      "trace: {:.1f} s, {} processes, {} threads, {} phase spans, {} decision changes{}{}{}\n",
      static_cast<double>(data->end_ns - data->start_ns) / 1e9, data->processes.size(),
      data->threads.size(), spans, data->decisions.size(),
      t.output.empty() ? "" : " -> " + t.output, t.svg.empty() ? "" : " -> " + t.svg,
      data->dropped_phases + data->dropped_decisions + data->dropped_threads == 0
          ? ""
          : fmt::format(" ({} phase changes, {} decisions, {} threads dropped: buffer full)",
                        data->dropped_phases, data->dropped_decisions, data->dropped_threads));
  return kExitOk;
}

}  // namespace zernel::cli
