#include "collect/probes/task_cpu_iter.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <string>

#include "sys/bpf/capabilities.hpp"
#include "sys/bpf/libbpf_log.hpp"
#include "sys/unique_fd.hpp"
#include "task_cpu.h"
#include "task_cpu.skel.h"

namespace zernel::collect {
namespace {

constexpr const char* kNeedRoot = "the task iterator needs root (CAP_BPF, CAP_PERFMON)";

Error libbpf_error(const std::string& what, int err) {
  return sys::libbpf_error(what, err, kNeedRoot);
}

}  // namespace

struct TaskCpuIterator::Impl {
  task_cpu_bpf* skel = nullptr;
  bpf_link* link = nullptr;
  ~Impl() {
    if (link != nullptr) bpf_link__destroy(link);
    if (skel != nullptr) task_cpu_bpf__destroy(skel);
  }
};

TaskCpuIterator::TaskCpuIterator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TaskCpuIterator::~TaskCpuIterator() = default;

Result<std::unique_ptr<TaskCpuIterator>> TaskCpuIterator::open() {
  const std::string what = "loading the task iterator (tenants' CPU time)";
  sys::route_libbpf_log();
  if (!sys::can_use_bpf_tracing()) return Error(EPERM, what + ": " + kNeedRoot);
  auto impl = std::make_unique<Impl>();
  impl->skel = task_cpu_bpf__open_and_load();
  if (impl->skel == nullptr) {
    return libbpf_error(what + " (the kernel rejected task_cpu.bpf.o; libbpf's log has the reason)",
                        errno);
  }
  impl->link = bpf_program__attach_iter(impl->skel->progs.zernel_task_cpu, nullptr);
  if (impl->link == nullptr) return libbpf_error(what + ": creating the iterator's link", errno);
  return std::unique_ptr<TaskCpuIterator>(new TaskCpuIterator(std::move(impl)));
}

void TaskCpuIterator::follow(std::span<const std::uint32_t> pids) {
  if (std::equal(pids.begin(), pids.end(), followed_.begin(), followed_.end())) return;
  followed_.assign(pids.begin(), pids.end());
  const int map_fd = bpf_map__fd(impl_->skel->maps.zernel_task_cpu_procs);
  // Gone since the last change: deleted.
  changed_.clear();
  std::set_difference(in_map_.begin(), in_map_.end(), pids.begin(), pids.end(),
                      std::back_inserter(changed_));
  for (const std::uint32_t pid : changed_) (void)bpf_map_delete_elem(map_fd, &pid);
  // Not in the map: inserted. One the map refuses (full) is left to /proc, read() does not
  // answer it, and it is tried again at the next change of the set.
  changed_.clear();
  std::set_difference(pids.begin(), pids.end(), in_map_.begin(), in_map_.end(),
                      std::back_inserter(changed_));
  std::erase_if(in_map_, [&](std::uint32_t pid) {
    return !std::binary_search(pids.begin(), pids.end(), pid);
  });
  const std::uint8_t one = 1;
  for (const std::uint32_t pid : changed_) {
    if (bpf_map_update_elem(map_fd, &pid, &one, BPF_ANY) == 0) {
      in_map_.push_back(pid);
    } else {
      ++refused_;
    }
  }
  std::sort(in_map_.begin(), in_map_.end());
}

bool TaskCpuIterator::worth_reading(std::size_t wanted) const {
  if (tasks_walked_ == 0) return wanted >= kFirstReadAt;
  return static_cast<std::uint64_t>(wanted) * kWalkPerProcRead >= tasks_walked_;
}

bool TaskCpuIterator::read(std::vector<TaskCpu>& out) {
  out.clear();
  const sys::UniqueFd it(bpf_iter_create(bpf_link__fd(impl_->link)));
  if (!it.valid()) {
    ++failed_reads_;
    return false;
  }
  constexpr std::size_t kChunk = std::size_t{64} * 1024;
  buf_.resize(kChunk);
  std::size_t used = 0;
  for (;;) {
    if (buf_.size() - used < kChunk / 2) buf_.resize(buf_.size() * 2);
    const ssize_t n = ::read(it.get(), buf_.data() + used, buf_.size() - used);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      ++failed_reads_;
      return false;
    }
    used += static_cast<std::size_t>(n);
  }
  // Records in pid order of the tasks (iter/task walks the pid table): a process's threads
  // follow its leader unless pids wrapped, so consecutive records of one tgid are summed here
  // and the rest after sorting.
  for (std::size_t off = 0; off + sizeof(zernel_task_cpu_rec) <= used;
       off += sizeof(zernel_task_cpu_rec)) {
    zernel_task_cpu_rec rec{};
    std::memcpy(&rec, buf_.data() + off, sizeof rec);
    if (rec.tgid == 0) {  // the walk's end: tasks visited by all walks so far
      tasks_walked_ = rec.ns > walked_total_ ? rec.ns - walked_total_ : tasks_walked_;
      walked_total_ = rec.ns;
      continue;
    }
    if (out.empty() || out.back().pid != rec.tgid) out.push_back(TaskCpu{rec.tgid, 0, 0, 0});
    TaskCpu& t = out.back();
    ++t.threads;
    t.cpu_ns += rec.ns;
    t.timeslices += rec.timeslices;
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TaskCpu& a, const TaskCpu& b) { return a.pid < b.pid; });
  std::size_t w = 0;
  for (std::size_t r = 0; r < out.size(); ++r) {
    if (w > 0 && out[w - 1].pid == out[r].pid) {
      out[w - 1].threads += out[r].threads;
      out[w - 1].cpu_ns += out[r].cpu_ns;
      out[w - 1].timeslices += out[r].timeslices;
    } else {
      out[w++] = out[r];
    }
  }
  out.resize(w);
  return true;
}

}  // namespace zernel::collect
