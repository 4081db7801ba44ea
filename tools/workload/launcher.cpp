#include "workload/launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "workload/clock.hpp"
#include "workload/dataset.hpp"
#include "workload/gpu.hpp"
#include "workload/nccl_barrier.hpp"
#include "workload/rank.hpp"
#include "workload/stop.hpp"
#include "workload/summary.hpp"
#include "workload/truth_log.hpp"

namespace zernel::workload {
namespace {

void print_error(const std::string& msg) { fmt::print(stderr, "zernel-workload: {}\n", msg); }

struct RankProc {
  pid_t pid = -1;
  int fd = -1;  // read end of the result pipe; -1 once at end of file
  std::string report;
  bool reaped = false;
  int status = 0;
};

std::string data_parent(const JobOptions& o) {
  if (!o.data_dir.empty()) return o.data_dir;
  const char* tmp = std::getenv("TMPDIR");
  // /var/tmp rather than /tmp: /tmp is often tmpfs, where no read reaches a disk.
  return tmp != nullptr && *tmp != '\0' ? std::string(tmp) : std::string("/var/tmp");
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  return "stopped";
}

class Supervisor {
 public:
  Supervisor(std::vector<RankProc>& ranks, pid_t pgid) : ranks_(ranks), pgid_(pgid) {}

  // Waits for every rank, stopping the job on a signal or on the first failure.
  // Returns the first failure's description, empty when none.
  std::string run() {
    for (;;) {
      reap();
      if (done()) break;
      if (stop_requested() && !stopping_) begin_stop();
      if (stopping_ && !killed_ && monotonic_ns() >= kill_at_ns_) {
        kill(-pgid_, SIGKILL);
        killed_ = true;
      }
      drain(100);
    }
    return failure_;
  }

  [[nodiscard]] bool stopping() const { return stopping_; }

 private:
  void begin_stop() {
    stopping_ = true;
    kill(-pgid_, SIGTERM);
    kill_at_ns_ = monotonic_ns() + ms_to_ns(kStopGraceMs);
  }

  void reap() {
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      RankProc& p = ranks_[r];
      if (p.reaped) continue;
      const pid_t got = waitpid(p.pid, &p.status, WNOHANG);
      if (got != p.pid) continue;
      p.reaped = true;
      const bool clean = WIFEXITED(p.status) && WEXITSTATUS(p.status) == 0;
      if (!clean && !stopping_ && !stop_requested()) {
        failure_ = fmt::format("rank {} (pid {}) {}", r, p.pid, describe_exit(p.status));
        begin_stop();
      }
    }
  }

  [[nodiscard]] bool done() const {
    for (const RankProc& p : ranks_) {
      if (!p.reaped || p.fd >= 0) return false;
    }
    return true;
  }

  // Reads whatever the ranks have written, waiting up to `timeout_ms`.
  void drain(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> which;
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      if (ranks_[r].fd < 0) continue;
      fds.push_back(pollfd{ranks_[r].fd, POLLIN, 0});
      which.push_back(r);
    }
    if (fds.empty()) {
      // Only reaping is left: sleep (a signal cuts it short).
      const timespec ts = to_timespec(ms_to_ns(timeout_ms));
      nanosleep(&ts, nullptr);
      return;
    }
    if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      RankProc& p = ranks_[which[i]];
      char buf[4096];
      const ssize_t n = read(p.fd, buf, sizeof buf);
      if (n > 0) {
        p.report.append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(p.fd);
        p.fd = -1;
      }
    }
  }

  std::vector<RankProc>& ranks_;
  pid_t pgid_;
  bool stopping_ = false;
  bool killed_ = false;
  std::uint64_t kill_at_ns_ = 0;
  std::string failure_;
};

}  // namespace

int run_job(const JobOptions& o) {
  install_stop_handlers();

  auto lib = resolve_gpu_library(o.emulated_gpu);
  if (!lib) {
    print_error(lib.error().message());
    return kExitError;
  }
  if (!o.truth_log.empty()) {
    if (auto r = TruthLog::create(o.truth_log); !r) {
      print_error(r.error().message());
      return kExitError;
    }
  }
  // Opened (and truncated) now, so that a bad path fails before any work; written at the end.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> step_log(nullptr, &std::fclose);
  if (!o.step_log.empty()) {
    step_log.reset(std::fopen(o.step_log.c_str(), "we"));
    if (!step_log) {
      print_error(fmt::format("opening the step log {}: {}", o.step_log, std::strerror(errno)));
      return kExitError;
    }
  }
  auto dataset = Dataset::create(data_parent(o), kDatasetFiles, o.batch_kib * 1024);
  if (!dataset) {
    print_error(dataset.error().message());
    return kExitError;
  }
  auto segment = NcclSegment::create(fmt::format("/nccl-zernel-workload-{}", getpid()), o.ranks);
  if (!segment) {
    print_error(segment.error().message());
    return kExitError;
  }

  std::fflush(nullptr);  // nothing buffered may be written twice by the children
  const pid_t launcher = getpid();
  std::vector<RankProc> ranks;
  pid_t pgid = 0;
  std::string failure;
  for (int r = 0; r < o.ranks && !stop_requested(); ++r) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      failure = fmt::format("creating a pipe: {}", std::strerror(errno));
      break;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      failure = fmt::format("forking rank {}: {}", r, std::strerror(errno));
      close(fds[0]);
      close(fds[1]);
      break;
    }
    if (pid == 0) {
      setpgid(0, pgid);
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != launcher) _exit(kExitError);  // the launcher died before prctl
      for (const RankProc& p : ranks) close(p.fd);
      close(fds[0]);
      RankSetup setup;
      setup.opts = &o;
      setup.rank = r;
      setup.gpu = *lib;
      setup.nccl_name = segment->name();
      setup.dataset = &*dataset;
      setup.result_fd = fds[1];
      setup.launcher_pid = launcher;
      const int code = run_rank(setup);
      std::fflush(nullptr);
      _exit(code);
    }
    if (pgid == 0) pgid = pid;
    setpgid(pid, pgid);  // also done by the child; whichever runs first wins the race
    close(fds[1]);
    ranks.push_back(RankProc{pid, fds[0], {}, false, 0});
  }
  if (!failure.empty() && pgid != 0) kill(-pgid, SIGTERM);

  Supervisor supervisor(ranks, pgid);
  if (!ranks.empty()) {
    const std::string f = supervisor.run();
    if (failure.empty()) failure = f;
  }
  segment->unlink();
  dataset->remove();

  // Reports: errors first, named by rank.
  std::vector<RankReport> reports;
  bool rank_error = false;
  std::vector<std::string> printed;  // every rank may fail the same way: say it once
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].report.empty()) continue;
    auto rep = parse_rank_report(ranks[r].report);
    if (!rep) {
      print_error(fmt::format("rank {}: {}", r, rep.error().message()));
      rank_error = true;
      continue;
    }
    if (rep->error) {
      if (std::find(printed.begin(), printed.end(), *rep->error) == printed.end()) {
        print_error(fmt::format("rank {}: {}", r, *rep->error));
        printed.push_back(*rep->error);
      }
      rank_error = true;
    }
    reports.push_back(std::move(*rep));
  }
  if (!failure.empty() || rank_error) {
    if (!failure.empty() && !rank_error) print_error(failure);
    return kExitError;
  }
  const bool interrupted = stop_requested() || reports.size() != ranks.size();
  if (step_log) {
    const std::string lines = step_log_lines(o, reports);
    const bool written = std::fputs(lines.c_str(), step_log.get()) >= 0;
    if (std::fclose(step_log.release()) != 0 || !written) {
      print_error(fmt::format("writing the step log {}: {}", o.step_log, std::strerror(errno)));
      return kExitError;
    }
  }
  fmt::print("{}\n", job_summary(o, reports, interrupted).dump());
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace zernel::workload
