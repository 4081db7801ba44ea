#include "workload/pin_memory.hpp"

#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstring>

#include <fmt/format.h>

#include "workload/pipe_io.hpp"
#include "workload/stop.hpp"

namespace zernel::workload {
namespace {

// How long the main thread waits on the queue before it looks at the stop flag again.
constexpr auto kTakeSlice = std::chrono::milliseconds(100);

}  // namespace

Result<std::unique_ptr<PinMemory>> PinMemory::start(std::vector<int> data_fds,
                                                    std::uint64_t batches, std::size_t batch_bytes,
                                                    const std::string& truth_log) {
  if (data_fds.empty()) return Error(EINVAL, "the pin-memory thread needs DataLoader workers");
  std::unique_ptr<PinMemory> p(new PinMemory());
  p->data_fds_ = std::move(data_fds);
  p->batches_ = batches;
  p->batch_bytes_ = batch_bytes;
  sigset_t block;
  sigset_t old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old);  // the stop is the main thread's
  p->thread_ = std::thread(&PinMemory::run, p.get(), truth_log);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return p;
}

PinMemory::~PinMemory() { join(); }

void PinMemory::join() {
  if (thread_.joinable()) thread_.join();
}

void PinMemory::run(const std::string& truth_log) {
  pthread_setname_np(pthread_self(), "zw-pin_memory");
  auto opened = TruthLog::open(truth_log, "pin_memory");
  std::string error;
  TruthLog log;
  if (opened) {
    log = std::move(*opened);
  } else {
    error = "pin-memory thread: " + opened.error().message();
  }
  std::vector<std::byte> from(batch_bytes_, std::byte{1});
  std::vector<std::byte> to(batch_bytes_);
  for (std::uint64_t i = 0; i < batches_ && error.empty(); ++i) {
    const int fd = data_fds_[i % data_fds_.size()];
    if (!readable_now(fd)) log.enter(Phase::unknown);
    BatchMsg msg{};
    IoStatus st;
    while ((st = read_exact(fd, &msg, sizeof msg)) == IoStatus::interrupted) {
    }
    if (st != IoStatus::ok) {
      error = fmt::format("DataLoader worker {} exited", i % data_fds_.size());
      break;
    }
    log.enter(Phase::data_loading);
    std::memcpy(to.data(), from.data(), batch_bytes_);  // the pinning copy
    from[i % batch_bytes_] = to[(i + 1) % batch_bytes_];
    {
      std::lock_guard lk(mu_);
      queue_.push_back(msg);
      ++pinned_;
    }
    cv_.notify_one();
  }
  log.enter(Phase::unknown);
  log.close_line();
  {
    std::lock_guard lk(mu_);
    done_ = true;
    error_ = error;
  }
  cv_.notify_one();
}

Result<BatchMsg> PinMemory::take(std::uint64_t index, TruthLog& log) {
  std::unique_lock lk(mu_);
  if (queue_.empty()) log.enter(Phase::data_loading);
  while (queue_.empty() && !done_) {
    if (stop_requested()) return Error(EINTR, "interrupted");
    cv_.wait_for(lk, kTakeSlice);
  }
  if (queue_.empty()) {
    if (stop_requested()) return Error(EINTR, "interrupted");
    return Error(EPIPE, error_.empty() ? std::string("the pin-memory thread stopped") : error_);
  }
  const BatchMsg msg = queue_.front();
  queue_.pop_front();
  if (msg.index != index) {
    return Error(EPROTO, fmt::format("expected batch {}, got {}", index, msg.index));
  }
  return msg;
}

std::uint64_t PinMemory::pinned() const {
  std::lock_guard lk(mu_);
  return pinned_;
}

}  // namespace zernel::workload
