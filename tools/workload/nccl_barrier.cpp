#include "workload/nccl_barrier.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <new>
#include <utility>

#include "workload/clock.hpp"
#include "workload/stop.hpp"

namespace zernel::workload {

// Plain integers in shared memory, accessed only through std::atomic_ref.
struct NcclProxyWords {
  std::uint32_t posted;    // collectives the rank has entered; a futex word
  std::uint32_t finished;  // collectives the rank has left; a futex word
};

struct NcclShared {
  std::uint32_t magic;       // kMagic once initialised
  std::uint32_t ranks;       // ranks in the job
  std::uint32_t arrived;     // ranks that have arrived at the current collective
  std::uint32_t generation;  // bumped when the last rank arrives; the futex word
  std::uint64_t release_ns;  // CLOCK_MONOTONIC ns at which the current collective finishes
  NcclProxyWords proxy[kMaxRanks];
};

namespace {

constexpr std::uint32_t kMagic = 0x4e43434cU;  // "NCCL"

int futex_wait(std::uint32_t* addr, std::uint32_t expected, std::uint64_t timeout_ns) {
  const timespec ts = to_timespec(timeout_ns);
  return static_cast<int>(syscall(SYS_futex, addr, FUTEX_WAIT, expected, &ts, nullptr, 0));
}

void futex_wake_all(std::uint32_t* addr) {
  syscall(SYS_futex, addr, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

NcclSegment::NcclSegment(NcclSegment&& other) noexcept
    : name_(std::move(other.name_)), linked_(std::exchange(other.linked_, false)) {}

NcclSegment::~NcclSegment() { unlink(); }

void NcclSegment::unlink() {
  if (linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

Result<NcclSegment> NcclSegment::create(const std::string& name, int ranks) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno_error("creating shared memory /dev/shm" + name);
  NcclSegment seg(name);
  seg.linked_ = true;
  if (ftruncate(fd, sizeof(NcclShared)) != 0) {
    const int err = errno;
    close(fd);
    return errno_error("sizing /dev/shm" + name, err);
  }
  void* p = mmap(nullptr, sizeof(NcclShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) return errno_error("mapping /dev/shm" + name, err);
  auto* shared = new (p) NcclShared{};
  shared->ranks = static_cast<std::uint32_t>(ranks);
  std::atomic_ref<std::uint32_t>(shared->magic).store(kMagic, std::memory_order_release);
  munmap(p, sizeof(NcclShared));
  return seg;
}

NcclComm::NcclComm(NcclComm&& other) noexcept
    : shared_(std::exchange(other.shared_, nullptr)),
      ranks_(other.ranks_),
      futex_waits_(other.futex_waits_) {}

NcclComm::~NcclComm() {
  if (shared_ != nullptr) munmap(shared_, sizeof(NcclShared));
}

Result<NcclComm> NcclComm::attach(const std::string& name, int ranks) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return errno_error("opening shared memory /dev/shm" + name);
  void* p = mmap(nullptr, sizeof(NcclShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) return errno_error("mapping /dev/shm" + name, err);
  auto* shared = static_cast<NcclShared*>(p);
  if (std::atomic_ref<std::uint32_t>(shared->magic).load(std::memory_order_acquire) != kMagic ||
      shared->ranks != static_cast<std::uint32_t>(ranks)) {
    munmap(p, sizeof(NcclShared));
    return Error(EINVAL, "/dev/shm" + name + " is not this job's NCCL segment");
  }
  return NcclComm(shared, ranks);
}

void NcclComm::wait_slice(std::uint32_t expected, std::uint64_t max_ns) {
  ++futex_waits_;
  // EAGAIN (the word changed), ETIMEDOUT and EINTR all just send the caller round its loop.
  (void)futex_wait(&shared_->generation, expected, std::min(max_ns, kWaitSliceNs));
}

bool NcclComm::all_reduce(std::uint64_t duration_ns) {
  std::atomic_ref<std::uint32_t> generation(shared_->generation);
  std::atomic_ref<std::uint32_t> arrived(shared_->arrived);
  std::atomic_ref<std::uint64_t> release(shared_->release_ns);

  const std::uint32_t gen = generation.load(std::memory_order_acquire);
  if (arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<std::uint32_t>(ranks_)) {
    // Last to arrive. No rank can arrive at the next collective before it sees the new
    // generation, so resetting the count first is safe.
    arrived.store(0, std::memory_order_relaxed);
    release.store(monotonic_ns() + duration_ns, std::memory_order_relaxed);
    generation.store(gen + 1, std::memory_order_release);
    futex_wake_all(&shared_->generation);
  } else {
    while (generation.load(std::memory_order_acquire) == gen) {
      if (stop_requested()) return false;
      wait_slice(gen, kWaitSliceNs);
    }
  }
  // The reduction itself: nobody wakes this word until the next collective, which cannot start
  // before this rank arrives, so each wait runs to its timeout.
  const std::uint64_t until = release.load(std::memory_order_relaxed);
  const std::uint32_t now_gen = gen + 1;
  for (std::uint64_t now = monotonic_ns(); now < until; now = monotonic_ns()) {
    if (stop_requested()) return false;
    wait_slice(now_gen, until - now);
  }
  return true;
}

void NcclComm::post(int rank) {
  std::uint32_t* word = &shared_->proxy[rank].posted;
  std::atomic_ref<std::uint32_t>(*word).fetch_add(1, std::memory_order_release);
  futex_wake_all(word);
}

void NcclComm::finish(int rank) {
  const std::uint32_t posted =
      std::atomic_ref<std::uint32_t>(shared_->proxy[rank].posted).load(std::memory_order_relaxed);
  std::uint32_t* word = &shared_->proxy[rank].finished;
  std::atomic_ref<std::uint32_t>(*word).store(posted, std::memory_order_release);
  futex_wake_all(word);
}

void NcclComm::wake_proxy(int rank) { futex_wake_all(&shared_->proxy[rank].posted); }

std::uint32_t NcclComm::wait_posted(int rank, std::uint32_t seen, std::uint64_t timeout_ns) {
  std::uint32_t* word = &shared_->proxy[rank].posted;
  const std::uint32_t now = std::atomic_ref<std::uint32_t>(*word).load(std::memory_order_acquire);
  if (now != seen) return now;
  (void)futex_wait(word, seen, timeout_ns);
  return std::atomic_ref<std::uint32_t>(*word).load(std::memory_order_acquire);
}

bool NcclComm::wait_finished(int rank, std::uint32_t posted, std::uint64_t timeout_ns) {
  std::uint32_t* word = &shared_->proxy[rank].finished;
  const std::uint32_t now = std::atomic_ref<std::uint32_t>(*word).load(std::memory_order_acquire);
  if (now == posted) return true;
  (void)futex_wait(word, now, timeout_ns);
  return std::atomic_ref<std::uint32_t>(*word).load(std::memory_order_acquire) == posted;
}

}  // namespace zernel::workload
