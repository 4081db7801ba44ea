#include "policy/task_table.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>

namespace zernel::policy {

namespace {
constexpr std::size_t kInitialIndex = 1024;
}

TaskTable::TaskTable(std::uint32_t capacity)
    : capacity_(capacity),
      index_(kInitialIndex, kEmpty),
      shift_(32U - static_cast<unsigned>(std::countr_zero(kInitialIndex))) {
  tasks_.reserve(std::min<std::size_t>(capacity, kInitialIndex / 2));
}

TaskState* TaskTable::insert(std::uint32_t pid) {
  std::size_t i = probe(pid);
  if (index_[i] != kEmpty) {
    TaskState& s = tasks_[index_[i]];
    s = TaskState{};
    s.pid = pid;
    return &s;
  }
  if (tasks_.size() >= capacity_) return nullptr;
  // Keep the load factor at or below 1/2 so probes stay short.
  if ((tasks_.size() + 1) * 2 > index_.size()) {
    grow_index();
    i = probe(pid);
  }
  index_[i] = static_cast<std::uint32_t>(tasks_.size());
  TaskState& s = tasks_.emplace_back();
  s.pid = pid;
  return &s;
}

bool TaskTable::erase(std::uint32_t pid) {
  const std::size_t mask = index_.size() - 1;
  std::size_t hole = probe(pid);
  if (index_[hole] == kEmpty) return false;
  const std::uint32_t pos = index_[hole];

  // Backward-shift deletion (the dense array is untouched until the index is consistent again):
  // pull later entries of the probe run into the hole unless their home lies cyclically in
  // (hole, j].
  index_[hole] = kEmpty;
  std::size_t j = hole;
  for (;;) {
    j = (j + 1) & mask;
    if (index_[j] == kEmpty) break;
    const std::size_t h = home(tasks_[index_[j]].pid);
    const bool stays = (hole < j) ? (hole < h && h <= j) : (hole < h || h <= j);
    if (stays) continue;
    index_[hole] = index_[j];
    index_[j] = kEmpty;
    hole = j;
  }

  // Move the last task into the freed dense position and repoint its index slot.
  const auto last = static_cast<std::uint32_t>(tasks_.size() - 1);
  if (pos != last) {
    index_[probe(tasks_[last].pid)] = pos;
    tasks_[pos] = tasks_[last];
  }
  tasks_.pop_back();
  return true;
}

void TaskTable::grow_index() {
  std::vector<std::uint32_t> old;
  old.swap(index_);
  index_.assign(old.size() * 2, kEmpty);
  --shift_;
  const std::size_t mask = index_.size() - 1;
  for (std::uint32_t pos : old) {
    if (pos == kEmpty) continue;
    std::size_t i = home(tasks_[pos].pid);
    while (index_[i] != kEmpty) i = (i + 1) & mask;
    index_[i] = pos;
  }
}

}  // namespace zernel::policy
