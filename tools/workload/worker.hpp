#pragma once
// A DataLoader worker: a separate process (as PyTorch's are), forked by its rank before the rank
// touches the GPU, so it holds no GPU context of its own.
//
// The rank hands it work as credits, one batch index each, on the credit pipe; the worker reads the
// batch's file from the dataset, decodes it on the CPU for `decode_ns` of CPU time and sends a
// BatchMsg on the data pipe. The rank gives each worker prefetch_factor credits up front and one
// more each time it takes a batch from it, so at most prefetch_factor batches per worker are queued
// or in the making, as with PyTorch's prefetch_factor.
//
// Truth: DataLoading from the moment a credit is taken until the batch is sent (reading and
// decoding); Unknown while it waits for a credit because the queue is full. When another credit is
// already waiting the worker goes straight on and stays DataLoading.
//
// The worker exits when the credit pipe reaches end of file (the rank is done), when the data pipe
// is closed (EPIPE), or on SIGTERM.

#include <cstdint>
#include <string>

#include "workload/dataset.hpp"

namespace zernel::workload {

// Sent by a worker for each batch; 32 bytes, so one write() is atomic on a pipe.
struct BatchMsg {
  std::uint64_t index;     // batch index
  std::uint64_t checksum;  // of the decoded batch
  std::uint64_t bytes;     // read from the dataset
  std::uint64_t direct;    // 1 when read with O_DIRECT
};
static_assert(sizeof(BatchMsg) == 32);

struct WorkerSetup {
  int rank = 0;
  int index = 0;
  int credit_fd = -1;  // read end: std::uint64_t batch indices from the rank
  int data_fd = -1;    // write end: BatchMsg to the rank
  const Dataset* dataset = nullptr;
  std::uint64_t decode_ns = 0;
  std::string truth_log;
};

// Runs the worker loop in the calling (forked) process; returns its exit code.
int run_worker(const WorkerSetup& setup);

// Loads one batch as a worker does (read + decode); the rank uses it itself when --workers is 0.
Result<BatchMsg> load_batch(const Dataset& dataset, std::uint64_t index, std::uint64_t decode_ns,
                            AlignedBuffer& in, AlignedBuffer& out);

}  // namespace zernel::workload
