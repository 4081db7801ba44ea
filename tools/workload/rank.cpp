#include "workload/rank.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "workload/clock.hpp"
#include "workload/cpu_work.hpp"
#include "workload/helpers.hpp"
#include "workload/nccl_barrier.hpp"
#include "workload/pin_memory.hpp"
#include "workload/pipe_io.hpp"
#include "workload/stop.hpp"
#include "workload/truth_log.hpp"
#include "workload/worker.hpp"

namespace zernel::workload {
namespace {

struct WorkerProc {
  pid_t pid = -1;
  int credit_fd = -1;  // rank's write end
  int data_fd = -1;    // rank's read end
};

// Forks the DataLoader workers. Each pipe end a child does not own is closed in it, so that
// end of file propagates: a worker sees EOF on its credits when the rank closes them.
Result<std::vector<WorkerProc>> spawn_workers(const RankSetup& s, TruthLog& rank_log) {
  const JobOptions& o = *s.opts;
  std::vector<WorkerProc> procs;
  const pid_t rank_pid = getpid();
  for (int w = 0; w < o.workers; ++w) {
    int credit[2];
    int data[2];
    if (pipe2(credit, O_CLOEXEC) != 0) return errno_error("pipe");
    if (pipe2(data, O_CLOEXEC) != 0) {
      const int err = errno;
      close(credit[0]);
      close(credit[1]);
      return errno_error("pipe", err);
    }
    const pid_t pid = fork();
    if (pid < 0) {
      const int err = errno;
      for (int fd : {credit[0], credit[1], data[0], data[1]}) close(fd);
      return errno_error("forking a DataLoader worker", err);
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != rank_pid) _exit(kExitError);  // the rank died before prctl
      for (const WorkerProc& p : procs) {
        close(p.credit_fd);
        close(p.data_fd);
      }
      close(credit[1]);
      close(data[0]);
      close(s.result_fd);
      rank_log = TruthLog();  // the worker writes its own lines
      WorkerSetup ws;
      ws.rank = s.rank;
      ws.index = w;
      ws.credit_fd = credit[0];
      ws.data_fd = data[1];
      ws.dataset = s.dataset;
      ws.decode_ns = ms_to_ns(o.data_ms);
      ws.truth_log = o.truth_log;
      const int code = run_worker(ws);
      std::fflush(nullptr);
      _exit(code);
    }
    close(credit[0]);
    close(data[1]);
    procs.push_back(WorkerProc{pid, credit[1], data[0]});
  }
  return procs;
}

void send_result(int fd, const nlohmann::json& j) {
  const std::string text = j.dump() + "\n";
  (void)write_exact(fd, text.data(), text.size());
}

class Rank {
 public:
  Rank(const RankSetup& s, TruthLog& log, Helpers* helpers, PinMemory* pin)
      : s_(s), o_(*s.opts), log_(log), helpers_(helpers), pin_(pin) {}

  // Runs every step; the result object gets the statistics, or an error.
  void run(std::vector<WorkerProc>& workers, Gpu& gpu, NcclComm& comm, nlohmann::json& result);

 private:
  Result<void> next_batch(std::vector<WorkerProc>& workers, int step);
  Result<void> gpu_work(Gpu& gpu, std::uint64_t ns, std::uint64_t host_ns = 0,
                        std::uint64_t kernels = 0);
  Result<void> optimizer_step(Gpu& gpu);
  void send_credit(std::vector<WorkerProc>& workers, std::uint64_t index);

  const RankSetup& s_;
  const JobOptions& o_;
  TruthLog& log_;
  Helpers* helpers_;  // null without --helpers
  PinMemory* pin_;    // null without --pin-memory
  std::uint64_t reads_direct_ = 0;
  std::uint64_t reads_buffered_ = 0;
  std::uint64_t checksum_ = 0;
  std::uint64_t sink_ = 0;
  std::unique_ptr<AlignedBuffer> in_;  // --workers 0: the rank's own batch buffers
  std::unique_ptr<AlignedBuffer> out_;
};

void Rank::send_credit(std::vector<WorkerProc>& workers, std::uint64_t index) {
  const auto w = static_cast<std::size_t>(index % workers.size());
  // A worker that died is noticed when its batch is awaited.
  (void)write_exact(workers[w].credit_fd, &index, sizeof index);
}

Result<void> Rank::next_batch(std::vector<WorkerProc>& workers, int step) {
  const auto index = static_cast<std::uint64_t>(step);
  BatchMsg msg{};
  if (workers.empty()) {
    log_.enter(Phase::data_loading);
    if (!in_) {
      in_ = std::make_unique<AlignedBuffer>(s_.dataset->file_bytes());
      out_ = std::make_unique<AlignedBuffer>(s_.dataset->file_bytes());
    }
    auto batch = load_batch(*s_.dataset, index, ms_to_ns(o_.data_ms), *in_, *out_);
    if (!batch) return batch.error();
    msg = *batch;
  } else if (pin_ != nullptr) {
    auto batch = pin_->take(index, log_);
    if (!batch) return batch.error();
    msg = *batch;
    const std::uint64_t next =
        index + static_cast<std::uint64_t>(o_.prefetch_factor) * workers.size();
    if (next < static_cast<std::uint64_t>(o_.steps)) send_credit(workers, next);
  } else {
    WorkerProc& w = workers[index % workers.size()];
    if (!readable_now(w.data_fd)) log_.enter(Phase::data_loading);
    IoStatus st;
    while ((st = read_exact(w.data_fd, &msg, sizeof msg)) == IoStatus::interrupted) {
      if (stop_requested()) return Error(EINTR, "interrupted");
    }
    if (st != IoStatus::ok) {
      if (stop_requested()) return Error(EINTR, "interrupted");
      return Error(EPIPE, fmt::format("DataLoader worker {} (pid {}) exited",
                                      index % workers.size(), w.pid));
    }
    if (msg.index != index) {
      return Error(EPROTO, fmt::format("expected batch {}, got {}", index, msg.index));
    }
    const std::uint64_t next =
        index + static_cast<std::uint64_t>(o_.prefetch_factor) * workers.size();
    if (next < static_cast<std::uint64_t>(o_.steps)) send_credit(workers, next);
  }
  (msg.direct != 0 ? reads_direct_ : reads_buffered_) += 1;
  checksum_ ^= msg.checksum;
  return Ok{};
}

// Queues ns of device time as `kernels` kernels of equal length (0: as kernels of at most
// kGpuKernelNs), with host_ns of CPU time spread evenly after the launches (a framework's host
// work between them), then synchronizes.
Result<void> Rank::gpu_work(Gpu& gpu, std::uint64_t ns, std::uint64_t host_ns,
                            std::uint64_t kernels) {
  if (kernels == 0) kernels = std::max<std::uint64_t>(1, (ns + kGpuKernelNs - 1) / kGpuKernelNs);
  for (std::uint64_t i = 0; i < kernels; ++i) {
    // Kernel i ends at (i + 1) / kernels of ns: the lengths add up to ns exactly.
    const std::uint64_t k = ns * (i + 1) / kernels - ns * i / kernels;
    if (auto r = gpu.enqueue(k); !r) return r;
    if (host_ns > 0) sink_ ^= burn_cpu(host_ns / kernels);
  }
  return gpu.synchronize();
}

Result<void> Rank::optimizer_step(Gpu& gpu) {
  const std::uint64_t total = ms_to_ns(o_.optimizer_ms);
  const std::uint64_t rounds =
      std::max<std::uint64_t>(1, (total + kOptimizerRoundNs / 2) / kOptimizerRoundNs);
  const std::uint64_t round_ns = total / rounds;
  const std::uint64_t burst_ns = round_ns * 4 / 5;
  for (std::uint64_t i = 0; i < rounds; ++i) {
    sink_ ^= burn_cpu(burst_ns);
    if (auto r = gpu_work(gpu, std::max<std::uint64_t>(1, round_ns - burst_ns)); !r) return r;
    if (stop_requested()) return Error(EINTR, "interrupted");
  }
  return Ok{};
}

void Rank::run(std::vector<WorkerProc>& workers, Gpu& gpu, NcclComm& comm, nlohmann::json& result) {
  std::vector<std::uint64_t> step_ns;
  std::vector<std::uint64_t> data_wait_ns;  // per step: the time part 1 (next batch) took
  std::uint64_t measured_start_ns = 0;
  std::uint64_t end_ns = 0;
  std::string error;

  // The start barrier: every rank has its GPU context; the clock starts together.
  if (comm.all_reduce(0)) {
    if (!workers.empty()) {
      const std::uint64_t ahead =
          std::min<std::uint64_t>(static_cast<std::uint64_t>(o_.prefetch_factor) * workers.size(),
                                  static_cast<std::uint64_t>(o_.steps));
      for (std::uint64_t i = 0; i < ahead; ++i) send_credit(workers, i);
    }
    for (int step = 0; step < o_.steps && !stop_requested(); ++step) {
      const std::uint64_t t0 = monotonic_ns();
      if (step == o_.warmup_steps) measured_start_ns = t0;
      Result<void> r = next_batch(workers, step);
      const std::uint64_t data_wait = monotonic_ns() - t0;
      if (r && o_.gpu_ms > 0) {
        log_.enter(Phase::gpu_compute);
        r = gpu_work(gpu, ms_to_ns(o_.gpu_ms), ms_to_ns(o_.launch_cpu_ms),
                     static_cast<std::uint64_t>(o_.kernels));
      }
      if (r) {
        log_.enter(Phase::nccl_collective);
        if (helpers_ != nullptr) helpers_->collective_begin();
        if (!comm.all_reduce(ms_to_ns(o_.nccl_ms))) r = Error(EINTR, "interrupted");
        if (helpers_ != nullptr) helpers_->collective_end();
      }
      if (r && o_.optimizer_ms > 0) {
        log_.enter(Phase::optimizer_step);
        r = optimizer_step(gpu);
      }
      if (!r) {
        if (!stop_requested()) error = r.error().message();
        break;
      }
      end_ns = monotonic_ns();
      step_ns.push_back(end_ns - t0);
      data_wait_ns.push_back(data_wait);
      if (helpers_ != nullptr) helpers_->step_done(step);
    }
  }
  log_.enter(Phase::unknown);

  result["steps"] = step_ns.size();
  result["step_ns"] = step_ns;
  result["data_wait_ns"] = data_wait_ns;
  result["measured_start_ns"] = measured_start_ns;
  result["end_ns"] = end_ns;
  result["reads_direct"] = reads_direct_;
  result["reads_buffered"] = reads_buffered_;
  result["futex_waits"] = comm.futex_waits();
  result["device"] = gpu.device();
  result["device_count"] = gpu.device_count();
  result["interrupted"] = stop_requested();
  if (!error.empty()) result["error"] = error;
}

// Closes the credit pipes (workers see end of file and exit), waits for the pin-memory thread
// (which reads the workers' pipes until then) and reaps the workers.
void stop_workers(std::vector<WorkerProc>& workers, PinMemory* pin) {
  for (WorkerProc& w : workers) {
    if (w.credit_fd >= 0) close(w.credit_fd);
    w.credit_fd = -1;
  }
  if (pin != nullptr) pin->join();
  for (WorkerProc& w : workers) {
    if (w.data_fd >= 0) close(w.data_fd);  // a worker blocked on a full pipe gets EPIPE
    w.data_fd = -1;
    while (waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace

int run_rank(const RankSetup& s) {
  nlohmann::json result = {{"rank", s.rank}, {"pid", getpid()}};
  auto fail = [&](const Error& e) {
    result["error"] = e.message();
    send_result(s.result_fd, result);
    return kExitError;
  };

  auto opened = TruthLog::open(s.opts->truth_log, "main");
  if (!opened) return fail(opened.error());
  TruthLog log = std::move(*opened);

  // Workers first: CUDA must not be initialised in a process that forks.
  auto spawned = spawn_workers(s, log);
  if (!spawned) return fail(spawned.error());
  std::vector<WorkerProc> workers = std::move(*spawned);

  int code = kExitOk;
  std::unique_ptr<PinMemory> pin;
  if (s.opts->pin_memory && !workers.empty()) {
    std::vector<int> fds;
    for (const WorkerProc& w : workers) fds.push_back(w.data_fd);
    auto started = PinMemory::start(std::move(fds), static_cast<std::uint64_t>(s.opts->steps),
                                    s.dataset->file_bytes(), s.opts->truth_log);
    if (!started) {
      code = fail(started.error());
    } else {
      pin = std::move(*started);
    }
  }
  if (code == kExitOk) {
    auto gpu = Gpu::open(s.gpu, s.rank, s.opts->sync_spin);
    auto comm = NcclComm::attach(s.nccl_name, s.opts->ranks);
    std::unique_ptr<Helpers> helpers;
    if (gpu && comm && s.opts->helpers) {
      HelperSetup hs;
      hs.truth_log = s.opts->truth_log;
      hs.dir = fmt::format("{}/rank-{}-helpers", s.dataset->dir(), s.rank);
      hs.comm = &*comm;
      hs.rank = s.rank;
      auto started = Helpers::start(hs);
      if (!started) {
        code = fail(started.error());
      } else {
        helpers = std::move(*started);
      }
    }
    if (!gpu) {
      code = fail(gpu.error());
    } else if (!comm) {
      code = fail(comm.error());
    } else if (code == kExitOk) {
      Rank rank(s, log, helpers.get(), pin.get());
      rank.run(workers, **gpu, *comm, result);
      if (helpers) {
        helpers->stop();
        result["helpers"] = helpers->counts();
        if (const std::string e = helpers->error(); !e.empty() && !result.contains("error")) {
          result["error"] = e;
        }
      }
      if (pin) result["pinned"] = pin->pinned();
      if (result.contains("error")) code = kExitError;
      send_result(s.result_fd, result);
    }
  }
  log.enter(Phase::unknown);
  stop_workers(workers, pin.get());
  if (getppid() != s.launcher_pid) {
    // The launcher was killed outright (PR_SET_PDEATHSIG brought us here): remove what it would
    // have removed. Every rank tries; unlinking twice is harmless.
    shm_unlink(s.nccl_name.c_str());
    s.dataset->remove_orphaned();
  }
  return code;
}

}  // namespace zernel::workload
