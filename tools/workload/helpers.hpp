#pragma once
// The other threads of a training process (--helpers): what a real rank runs beside its main
// thread, each doing real work, none of it a phase of the step. They should be scheduled as their
// process's default; the truth log gives each its role and Unknown for its whole life, except the
// NCCL-like proxy, which works for the step's collective:
//
//   reader      blocked in read() on a pipe, then hashing what it read (FNV-1a): the bytes of
//               each checkpoint, which the checkpoint writer sends it;
//   checkpoint  waits on a condition variable (a futex) for the main thread's signal every
//               kCheckpointEverySteps steps, fills a kCheckpointBytes "state" buffer (CPU),
//               writes it to a file with fsync (block I/O) and into the reader's pipe;
//   logger      sleeps kLoggerSleepNs (nanosleep), formats a line, and every 20 lines passes its
//               buffer through a byte-wise coder (cpu_work's decode, ~1 ms of CPU) into a file;
//   metrics     waits in epoll on an eventfd the main thread signals at every step's end (1 s
//               timeout), then renders the step's figures as Prometheus text into a file;
//   nccl_proxy  idles in futex waits on its rank's words of the NCCL segment (nccl_barrier.hpp);
//               from the moment it sees its rank enter a collective until the rank leaves it, it
//               progresses it: ~0.1 ms CPU bursts between futex waits of up to 1 ms. Truth:
//               NcclCollective while it progresses, Unknown while idle.
//
// The threads block SIGINT and SIGTERM (the main thread handles the stop); stop() (also the
// destructor) wakes and joins them, and removes their files.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.hpp"
#include "workload/nccl_barrier.hpp"

namespace zernel::workload {

inline constexpr int kCheckpointEverySteps = 10;
inline constexpr std::size_t kCheckpointBytes = 8u << 20;
inline constexpr std::uint64_t kLoggerSleepNs = 50'000'000;

struct HelperSetup {
  std::string truth_log;  // empty: no truth lines
  std::string dir;        // a new directory for the helpers' files (removed at stop)
  NcclComm* comm = nullptr;
  int rank = 0;
};

class Helpers {
 public:
  Helpers(const Helpers&) = delete;
  Helpers& operator=(const Helpers&) = delete;
  ~Helpers();

  // Creates the directory, the pipe and the eventfd, and starts the threads.
  static Result<std::unique_ptr<Helpers>> start(const HelperSetup& setup);

  // The main thread's side: a step ended (the metrics scrape, a checkpoint every
  // kCheckpointEverySteps); a collective begins and ends (the proxy's work).
  void step_done(int step);
  void collective_begin() { setup_.comm->post(setup_.rank); }
  void collective_end() { setup_.comm->finish(setup_.rank); }

  // Wakes and joins the threads and removes their files; idempotent.
  void stop();

  // The first error a thread met ("" when none), and what they did.
  [[nodiscard]] std::string error() const;
  [[nodiscard]] nlohmann::json counts() const;

 private:
  explicit Helpers(HelperSetup setup) : setup_(std::move(setup)) {}
  void run(const char* role, void (Helpers::*body)());
  void fail(const std::string& what);
  void reader();
  void checkpoint();
  void logger();
  void metrics();
  void proxy();

  HelperSetup setup_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable checkpoint_cv_;
  bool checkpoint_due_ = false;  // under mu_
  std::string error_;            // under mu_
  int pipe_r_ = -1;
  int pipe_w_ = -1;
  int event_fd_ = -1;
  std::atomic<int> step_{0};
  std::atomic<std::uint64_t> checkpoints_{0};
  std::atomic<std::uint64_t> hashed_bytes_{0};
  std::atomic<std::uint64_t> log_flushes_{0};
  std::atomic<std::uint64_t> scrapes_{0};
  std::atomic<std::uint64_t> collectives_{0};
  bool stopped_ = false;
};

}  // namespace zernel::workload
