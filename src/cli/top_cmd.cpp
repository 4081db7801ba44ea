// `zernel-scheduler top`: a live view of the running daemon's tracked processes, refreshed every
// second from the control socket's "status" op: phase, seconds in each phase (with phases from
// events, as the events dated the changes), priority, weight, tenant, GPU, CPU and a bar of the
// shares of those seconds; --threads adds a row per thread that has phases. q or Ctrl-C quits;
// --once prints one frame (no escape codes) and exits, for scripts and terminals that are not ttys.

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/app.hpp"
#include "cli/commands.hpp"

namespace zernel::cli {
namespace {

volatile sig_atomic_t g_quit = 0;
void on_quit(int /*sig*/) { g_quit = 1; }

// Raw keyboard input while alive; the terminal is restored on every exit path.
class RawTerminal {
 public:
  RawTerminal() {
    if (::isatty(STDIN_FILENO) == 0 || ::tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
  [[nodiscard]] bool active() const { return active_; }

 private:
  termios saved_{};
  bool active_ = false;
};

std::size_t terminal_rows() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 4) return ws.ws_row - 4U;
  return 40;
}

std::string frame(const nlohmann::json& status, bool tty, bool threads) {
  char when[32] = "";
  const std::time_t now = std::time(nullptr);
  tm local{};
  if (::localtime_r(&now, &local) != nullptr) std::strftime(when, sizeof(when), "%H:%M:%S", &local);
  std::string out = fmt::format("zernel-scheduler top - {}{}\n", when, tty ? "  (q to quit)" : "");
  out += format_status_table(status, true, tty, tty ? terminal_rows() : SIZE_MAX, threads);
  return out;
}

}  // namespace

void add_top_command(CLI::App& app, TopCmd& t) {
  t.cmd = app.add_subcommand("top", "Live view of the running daemon's tracked processes (root only)");
  t.cmd->add_flag("--once", t.once, "Print one frame without escape codes and exit");
  t.cmd->add_flag("--threads", t.threads,
                  "Under each process, a row for each of its threads that has phases (phases "
                  "from events), with its own seconds in each phase");
  t.cmd->add_option("--interval", t.interval_s, "Seconds between refreshes")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  t.cmd->add_option("--socket", t.client.socket,
                    "The daemon's control socket (default: $ZERNEL_SCHEDULER_SOCKET, else "
                    "/run/zernel/scheduler.sock)");
}

int run_top_command(const TopCmd& t) {
  const bool tty = !t.once && ::isatty(STDOUT_FILENO) != 0;
  nlohmann::json reply;
  if (t.once || !tty) {
    // One frame (also when stdout is not a terminal: no escape codes, no loop).
    if (int rc = call_daemon(t.client, R"({"op":"status"})", reply); rc != kExitOk) return rc;
    fmt::print("{}", frame(reply["status"], false, t.threads));
    return kExitOk;
  }
  struct sigaction sa {};
  sa.sa_handler = on_quit;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  RawTerminal term;
  std::fputs("\x1b[?25l", stdout);  // hide the cursor
  int rc = kExitOk;
  while (g_quit == 0) {
    if (rc = call_daemon(t.client, R"({"op":"status"})", reply); rc != kExitOk) break;
    std::string f = "\x1b[H\x1b[2J" + frame(reply["status"], true, t.threads);
    std::fwrite(f.data(), 1, f.size(), stdout);
    std::fflush(stdout);
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int r = ::poll(&p, term.active() ? 1 : 0, static_cast<int>(t.interval_s * 1000.0));
    if (r > 0) {
      char c = 0;
      if (::read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q')) break;
    }
  }
  std::fputs("\x1b[?25h\n", stdout);
  std::fflush(stdout);
  return rc;
}

}  // namespace zernel::cli
