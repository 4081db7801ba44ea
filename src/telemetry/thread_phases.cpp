#include "telemetry/thread_phases.hpp"

#include <algorithm>

namespace zernel::telemetry {

using policy::index_of;

ThreadPhaseTimes::Thread* ThreadPhaseTimes::find(std::uint32_t tgid, std::uint32_t tid) {
  auto it = by_process_.find(tgid);
  if (it == by_process_.end()) return nullptr;
  for (Thread& t : it->second) {
    if (t.tid == tid) return &t;
  }
  return nullptr;
}

ThreadPhaseTimes::Thread& ThreadPhaseTimes::add(std::vector<Thread>& threads, std::uint32_t tid) {
  if (threads.size() < kMaxThreadsPerProcess) {
    threads.push_back(Thread{.tid = tid});
    return threads.back();
  }
  // Full: the exited thread, else the one whose last change is oldest, makes room.
  auto victim =
      std::min_element(threads.begin(), threads.end(), [](const Thread& a, const Thread& b) {
        if (a.exited != b.exited) return a.exited;
        return a.since_ns < b.since_ns;
      });
  ++evicted_;
  *victim = Thread{.tid = tid};
  return *victim;
}

void ThreadPhaseTimes::record(std::uint32_t tgid, std::uint32_t tid, policy::Phase phase,
                              std::uint64_t at_ns) {
  Thread* t = find(tgid, tid);
  if (t == nullptr) {
    t = &add(by_process_[tgid], tid);
    t->phase = phase;
    t->since_ns = at_ns;
    return;
  }
  const std::uint64_t at = std::max(at_ns, t->since_ns);
  if (t->exited) {
    // A reused tid within the process: a new thread, its times added to the old one's.
    t->exited = false;
  } else {
    t->time_ns[index_of(t->phase)] += at - t->since_ns;
  }
  t->phase = phase;
  t->since_ns = at;
}

void ThreadPhaseTimes::exited(std::uint32_t tgid, std::uint32_t tid, std::uint64_t at_ns) {
  Thread* t = find(tgid, tid);
  if (t == nullptr || t->exited) return;
  const std::uint64_t at = std::max(at_ns, t->since_ns);
  t->time_ns[index_of(t->phase)] += at - t->since_ns;
  t->since_ns = at;
  t->exited = true;
}

void ThreadPhaseTimes::forget(std::uint32_t tgid) { by_process_.erase(tgid); }

std::vector<ThreadView> ThreadPhaseTimes::threads(std::uint32_t tgid, std::uint64_t now_ns) const {
  std::vector<ThreadView> out;
  auto it = by_process_.find(tgid);
  if (it == by_process_.end()) return out;
  out.reserve(it->second.size());
  for (const Thread& t : it->second) {
    ThreadView v;
    v.tid = t.tid;
    v.phase = t.phase;
    v.exited = t.exited;
    v.phase_time_ns = t.time_ns;
    if (!t.exited && now_ns > t.since_ns) v.phase_time_ns[index_of(t.phase)] += now_ns - t.since_ns;
    out.push_back(v);
  }
  std::sort(out.begin(), out.end(),
            [](const ThreadView& a, const ThreadView& b) { return a.tid < b.tid; });
  return out;
}

}  // namespace zernel::telemetry
