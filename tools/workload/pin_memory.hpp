#pragma once
// The DataLoader's pin-memory thread (--pin-memory), as PyTorch runs it with pin_memory=True: a
// thread of the rank takes each batch off its worker's pipe in order (blocked in read() while the
// batch is not made yet), "pins" it (copies the batch's bytes into another buffer: the copy into
// page-locked memory that pinning does) and puts it on a queue; the main thread waits for the
// batch on that queue (a condition variable: a futex), not on the workers' pipes.
//
// Truth: the thread's role is pin_memory; it is DataLoading from the moment a batch is readable
// until it is on the queue, Unknown while it waits for a worker. The main thread is DataLoading
// while it waits on the queue, as without the thread.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.hpp"
#include "workload/truth_log.hpp"
#include "workload/worker.hpp"

namespace zernel::workload {

class PinMemory {
 public:
  PinMemory(const PinMemory&) = delete;
  PinMemory& operator=(const PinMemory&) = delete;
  ~PinMemory();

  // Starts the thread: batches 0..batches-1, batch i from data_fds[i % data_fds.size()], each
  // copied as batch_bytes.
  static Result<std::unique_ptr<PinMemory>> start(std::vector<int> data_fds, std::uint64_t batches,
                                                  std::size_t batch_bytes,
                                                  const std::string& truth_log);

  // The main thread: batch `index` (the next in order), waiting for it, DataLoading in `log`
  // while it waits. An error when the thread stopped first (a worker exited) or a stop was
  // requested (EINTR).
  Result<BatchMsg> take(std::uint64_t index, TruthLog& log);

  // Waits for the thread to end: it ends after its last batch, or at end of file on a worker's
  // pipe (close the workers' credit pipes first, so that they exit).
  void join();

  [[nodiscard]] std::uint64_t pinned() const;

 private:
  PinMemory() = default;
  void run(const std::string& truth_log);

  std::vector<int> data_fds_;
  std::uint64_t batches_ = 0;
  std::size_t batch_bytes_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<BatchMsg> queue_;  // under mu_
  bool done_ = false;           // under mu_
  std::string error_;           // under mu_
  std::uint64_t pinned_ = 0;    // under mu_
};

}  // namespace zernel::workload
