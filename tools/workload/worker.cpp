#include "workload/worker.hpp"

#include <fmt/format.h>

#include "workload/cpu_work.hpp"
#include "workload/options.hpp"
#include "workload/pipe_io.hpp"
#include "workload/stop.hpp"
#include "workload/truth_log.hpp"

namespace zernel::workload {

Result<BatchMsg> load_batch(const Dataset& dataset, std::uint64_t index, std::uint64_t decode_ns,
                            AlignedBuffer& in, AlignedBuffer& out) {
  auto read = read_uncached(dataset.path(index), in.span());
  if (!read) return read.error();
  BatchMsg msg{};
  msg.index = index;
  msg.bytes = read->bytes;
  msg.direct = read->direct ? 1 : 0;
  msg.checksum = decode(in.span().first(read->bytes), out.span(), decode_ns);
  return msg;
}

int run_worker(const WorkerSetup& s) {
  auto opened = TruthLog::open(s.truth_log, "worker");
  if (!opened) {
    fmt::print(stderr, "zernel-workload: rank {} worker {}: {}\n", s.rank, s.index,
               opened.error().message());
    return kExitError;
  }
  TruthLog log = std::move(*opened);
  AlignedBuffer in(s.dataset->file_bytes());
  AlignedBuffer out(s.dataset->file_bytes());

  int code = kExitOk;
  while (!stop_requested()) {
    // Idle while the rank's queue is full: nothing to produce.
    if (!readable_now(s.credit_fd)) log.enter(Phase::unknown);
    std::uint64_t index = 0;
    const IoStatus st = read_exact(s.credit_fd, &index, sizeof index);
    if (st == IoStatus::interrupted) continue;
    if (st != IoStatus::ok) break;  // end of file: the rank is done
    log.enter(Phase::data_loading);

    auto batch = load_batch(*s.dataset, index, s.decode_ns, in, out);
    if (!batch) {
      fmt::print(stderr, "zernel-workload: rank {} worker {}: {}\n", s.rank, s.index,
                 batch.error().message());
      code = kExitError;
      break;
    }
    if (write_exact(s.data_fd, &*batch, sizeof(BatchMsg)) != IoStatus::ok) break;
  }
  log.enter(Phase::unknown);
  return code;
}

}  // namespace zernel::workload
