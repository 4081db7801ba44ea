#include "workload/helpers.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <iterator>
#include <span>

#include <fmt/format.h>

#include "workload/clock.hpp"
#include "workload/cpu_work.hpp"
#include "workload/pipe_io.hpp"
#include "workload/truth_log.hpp"

namespace zernel::workload {
namespace {

constexpr std::size_t kReadChunk = 1u << 20;
constexpr int kLogLinesPerFlush = 20;
constexpr std::uint64_t kLogCoderNs = 1'000'000;
constexpr int kMetricLines = 400;
constexpr std::uint64_t kProxyBurstNs = 100'000;
constexpr std::uint64_t kProxyPollNs = 1'000'000;
constexpr const char* kFiles[] = {"checkpoint.bin", "train.log", "metrics.prom"};

// Writes `data` to a new `path` and fsyncs it (block I/O on a disk-backed filesystem).
Result<void> write_synced(const std::string& path, std::span<const std::byte> data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return errno_error("creating " + path);
  const bool ok = write_exact(fd, data.data(), data.size()) == IoStatus::ok && fsync(fd) == 0;
  const int err = errno;
  close(fd);
  if (!ok) return errno_error("writing " + path, err);
  return Ok{};
}

}  // namespace

Result<std::unique_ptr<Helpers>> Helpers::start(const HelperSetup& setup) {
  if (setup.comm == nullptr || setup.rank < 0 || setup.rank >= kMaxRanks) {
    return Error(EINVAL, "helper threads need the rank's NCCL segment");
  }
  std::unique_ptr<Helpers> h(new Helpers(setup));
  if (mkdir(setup.dir.c_str(), 0700) != 0) return errno_error("creating " + setup.dir);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    const int err = errno;
    rmdir(setup.dir.c_str());
    return errno_error("creating the reader's pipe", err);
  }
  h->pipe_r_ = fds[0];
  h->pipe_w_ = fds[1];
  (void)fcntl(h->pipe_w_, F_SETPIPE_SZ, static_cast<int>(kReadChunk));  // reads of up to 1 MiB
  h->event_fd_ = eventfd(0, EFD_CLOEXEC);
  if (h->event_fd_ < 0) {
    const int err = errno;
    h->stop();
    return errno_error("creating the metrics eventfd", err);
  }
  // The threads leave SIGINT and SIGTERM to the main thread, whose blocking calls they interrupt.
  sigset_t block;
  sigset_t old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  h->threads_.emplace_back(&Helpers::run, h.get(), "reader", &Helpers::reader);
  h->threads_.emplace_back(&Helpers::run, h.get(), "checkpoint", &Helpers::checkpoint);
  h->threads_.emplace_back(&Helpers::run, h.get(), "logger", &Helpers::logger);
  h->threads_.emplace_back(&Helpers::run, h.get(), "metrics", &Helpers::metrics);
  h->threads_.emplace_back(&Helpers::run, h.get(), "nccl_proxy", &Helpers::proxy);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return h;
}

Helpers::~Helpers() { stop(); }

// Each thread: its name in /proc (comm), its truth log, its body, its closing line. The bodies
// reach their log through the thread_local below.
namespace {
thread_local TruthLog* t_log = nullptr;
}

void Helpers::run(const char* role, void (Helpers::*body)()) {
  pthread_setname_np(pthread_self(), fmt::format("zw-{}", role).substr(0, 15).c_str());
  auto opened = TruthLog::open(setup_.truth_log, role);
  if (!opened) {
    fail(fmt::format("{} thread: {}", role, opened.error().message()));
    return;
  }
  TruthLog log = std::move(*opened);
  t_log = &log;
  (this->*body)();
  log.close_line();
  t_log = nullptr;
}

void Helpers::fail(const std::string& what) {
  std::lock_guard lk(mu_);
  if (error_.empty()) error_ = what;
}

void Helpers::reader() {
  std::vector<std::byte> buf(kReadChunk);
  std::uint64_t hash = 0xcbf29ce484222325U;  // FNV-1a
  for (;;) {
    const ssize_t n = ::read(pipe_r_, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of file: the checkpoint writer has stopped
    for (ssize_t i = 0; i < n; ++i) {
      hash = (hash ^ static_cast<std::uint8_t>(buf[static_cast<std::size_t>(i)])) * 0x100000001b3U;
    }
    hashed_bytes_ += static_cast<std::uint64_t>(n);
  }
  if (hash == 0) fail("reader thread: a zero hash");  // keeps the hashing from being optimised away
}

void Helpers::checkpoint() {
  std::vector<std::uint64_t> state(kCheckpointBytes / sizeof(std::uint64_t));
  for (;;) {
    {
      std::unique_lock lk(mu_);
      checkpoint_cv_.wait(lk, [&] { return checkpoint_due_ || stop_.load(); });
      if (stop_) break;
      checkpoint_due_ = false;
    }
    // "Serialising" the model's state: a buffer that depends on the step (splitmix64).
    constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15U;
    const int step = step_.load();
    std::uint64_t x = kGolden * static_cast<unsigned>(step);
    for (std::uint64_t& v : state) {
      x += kGolden;
      std::uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9U;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebU;
      v = z ^ (z >> 31);
    }
    const auto bytes = std::as_bytes(std::span(state));
    if (auto r = write_synced(setup_.dir + "/checkpoint.bin", bytes); !r) {
      fail("checkpoint thread: " + r.error().message());
      break;
    }
    if (write_exact(pipe_w_, bytes.data(), bytes.size()) != IoStatus::ok) {
      fail(fmt::format("checkpoint thread: writing to the reader: {}", std::strerror(errno)));
      break;
    }
    ++checkpoints_;
  }
  close(pipe_w_);  // the reader sees the end
  pipe_w_ = -1;
}

void Helpers::logger() {
  const std::string path = setup_.dir + "/train.log";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    fail(fmt::format("logger thread: creating {}: {}", path, std::strerror(errno)));
    return;
  }
  std::string lines;
  int count = 0;
  std::vector<std::byte> coded;
  while (!stop_) {
    const timespec ts = to_timespec(kLoggerSleepNs);
    nanosleep(&ts, nullptr);
    fmt::format_to(std::back_inserter(lines), "{} rank={} step={} checkpoints={}\n", monotonic_ns(),
                   setup_.rank, step_.load(), checkpoints_.load());
    if (++count < kLogLinesPerFlush) continue;
    coded.resize(lines.size());
    (void)decode(std::as_bytes(std::span(lines)), coded, kLogCoderNs);
    if (write_exact(fd, coded.data(), coded.size()) != IoStatus::ok) {
      fail(fmt::format("logger thread: writing {}: {}", path, std::strerror(errno)));
      break;
    }
    ++log_flushes_;
    lines.clear();
    count = 0;
  }
  close(fd);
}

void Helpers::metrics() {
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, event_fd_, &ev) != 0) {
    fail(fmt::format("metrics thread: epoll: {}", std::strerror(errno)));
    if (ep >= 0) close(ep);
    return;
  }
  std::string text;
  while (!stop_) {
    epoll_event got{};
    if (epoll_wait(ep, &got, 1, 1000) <= 0) continue;
    std::uint64_t n = 0;
    (void)::read(event_fd_, &n, sizeof n);
    if (stop_) break;
    text.clear();
    const int step = step_.load();
    for (int i = 0; i < kMetricLines; ++i) {
      fmt::format_to(std::back_inserter(text),
                     "zernel_workload_metric{{rank=\"{}\",name=\"m{}\"}} {:.6f}\n", setup_.rank, i,
                     0.5 * step * i);
    }
    if (auto r = write_synced(setup_.dir + "/metrics.prom", std::as_bytes(std::span(text))); !r) {
      fail("metrics thread: " + r.error().message());
      break;
    }
    ++scrapes_;
  }
  close(ep);
}

void Helpers::proxy() {
  NcclComm& comm = *setup_.comm;
  std::uint32_t seen = 0;
  while (!stop_) {
    const std::uint32_t posted = comm.wait_posted(setup_.rank, seen, kProxyIdleWaitNs);
    if (stop_) break;
    if (posted == seen) continue;
    t_log->enter(Phase::nccl_collective);
    while (!stop_ && !comm.wait_finished(setup_.rank, posted, kProxyPollNs)) {
      (void)burn_cpu(kProxyBurstNs);
    }
    seen = posted;
    ++collectives_;
    t_log->enter(Phase::unknown);
  }
}

void Helpers::step_done(int step) {
  step_ = step;
  const std::uint64_t one = 1;
  (void)::write(event_fd_, &one, sizeof one);
  if ((step + 1) % kCheckpointEverySteps == 0) {
    {
      std::lock_guard lk(mu_);
      checkpoint_due_ = true;
    }
    checkpoint_cv_.notify_one();
  }
}

void Helpers::stop() {
  if (stopped_) return;
  stopped_ = true;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  checkpoint_cv_.notify_all();
  if (event_fd_ >= 0) {
    const std::uint64_t one = 1;
    (void)::write(event_fd_, &one, sizeof one);
  }
  if (setup_.comm != nullptr) setup_.comm->wake_proxy(setup_.rank);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  for (int* fd : {&pipe_r_, &pipe_w_, &event_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  for (const char* f : kFiles) unlink((setup_.dir + "/" + f).c_str());
  rmdir(setup_.dir.c_str());
}

std::string Helpers::error() const {
  std::lock_guard lk(mu_);
  return error_;
}

nlohmann::json Helpers::counts() const {
  return {{"checkpoints", checkpoints_.load()},
          {"hashed_bytes", hashed_bytes_.load()},
          {"log_flushes", log_flushes_.load()},
          {"scrapes", scrapes_.load()},
          {"collectives", collectives_.load()}};
}

}  // namespace zernel::workload
