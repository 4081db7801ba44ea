#pragma once
// Flat storage for up to `capacity` tasks.
//
// Tasks live by value in one dense vector (a sweep walks contiguous memory); a pid index maps pids
// to dense positions with open addressing (linear probing, Fibonacci hashing, backward-shift
// deletion, so no tombstones pile up under churn). Erase moves the last task into the hole.
// Memory grows by doubling up to the capacity and is never returned, so a steady state of
// register/unregister/decide allocates nothing. Pointers into the table are valid until the next
// insert or erase.

#include <cstdint>
#include <span>
#include <vector>

#include "policy/task_state.hpp"

namespace zernel::policy {

class TaskTable {
 public:
  explicit TaskTable(std::uint32_t capacity);

  // The task, or nullptr.
  [[nodiscard]] TaskState* find(std::uint32_t pid) {
    const std::size_t i = probe(pid);
    return index_[i] == kEmpty ? nullptr : &tasks_[index_[i]];
  }
  [[nodiscard]] const TaskState* find(std::uint32_t pid) const {
    const std::size_t i = probe(pid);
    return index_[i] == kEmpty ? nullptr : &tasks_[index_[i]];
  }
  // A fresh TaskState for pid (an existing one is reset), or nullptr when the table is full.
  TaskState* insert(std::uint32_t pid);
  // True when the pid was present.
  bool erase(std::uint32_t pid);

  [[nodiscard]] std::size_t size() const { return tasks_.size(); }
  [[nodiscard]] std::uint32_t capacity() const { return capacity_; }
  [[nodiscard]] std::span<TaskState> tasks() { return tasks_; }
  [[nodiscard]] std::span<const TaskState> tasks() const { return tasks_; }

 private:
  static constexpr std::uint32_t kEmpty = 0xFFFFFFFF;
  // Fibonacci hashing: the top bits of pid * 2^32/phi spread consecutive pids evenly.
  [[nodiscard]] std::size_t home(std::uint32_t pid) const {
    return static_cast<std::size_t>((pid * 2654435769U) >> shift_);
  }
  // Index slot holding pid, or the empty slot where it would go.
  [[nodiscard]] std::size_t probe(std::uint32_t pid) const {
    const std::size_t mask = index_.size() - 1;
    std::size_t i = home(pid);
    while (index_[i] != kEmpty && tasks_[index_[i]].pid != pid) i = (i + 1) & mask;
    return i;
  }
  void grow_index();

  std::uint32_t capacity_;
  std::vector<TaskState> tasks_;
  std::vector<std::uint32_t> index_;  // dense positions, kEmpty for free slots; size is a power of 2
  unsigned shift_ = 0;                // 32 - log2(index_.size())
};

}  // namespace zernel::policy
