#pragma once
// Tenants: the jobs or users that share a GPU server, each with a number of GPUs and a priority
// class. A tenant's CPU share is proportional to its GPUs, as the tenant's share as a whole (like
// a cgroup's cpu.weight), never per process, so a tenant that starts more processes gets no more.
//
// The GPU-proportional weight of tenant i is  g_i / sum(g) * n  over the n registered tenants, so
// the average weight is 1.0. Worked example: tenants with 2 and 6 GPUs get 0.5 and 1.5 (3x).
// A tenant with 0 GPUs counts as kZeroGpuShare GPUs in that formula, so it keeps a small non-zero
// share instead of being starved (the earlier implementation gave it 0). An explicit cpu_weight
// replaces the formula for that tenant (its GPUs still count in the others' shares). A tenant
// with a fractional GPU count (TenantSpec::gpu_fraction: a pod holding a MIG slice or a time-
// sliced replica) enters the formula with that fraction: 1/7 of a GPU next to a 1-GPU tenant
// gets 1/7 of its share.
//
// The class decides how much the tenant's share weighs: the scheduled weight (cgroup_weight(), on
// the cpu.weight scale) is the GPU-proportional weight times the class factor
//
//   class        base priority   factor (1.25^base)   1-of-1-GPU tenant's cgroup_weight
//   training          +5             3.05                 305
//   inference         +3             1.95                 195
//   interactive       +1             1.25                 125
//   background        -5             0.33                  33
//
// so a training tenant next to a background tenant of equal GPUs gets 9.3x its CPU, and a 1-GPU
// training tenant outweighs an untenanted cgroup of cpu.weight 100 about 3:1. An explicit
// cpu_weight is final (no factor). The class no longer shifts the tasks' priorities (the seed
// added it to every task's phase priority; inside a tenant that is the same for every thread and
// cancels out, and where a backend carries the tenant weight as nice it would count twice).
// Neither the share nor the class is ever multiplied into the priority, so neither can flip or
// amplify the sign of a phase priority.
//
// Registering an id that exists replaces that tenant (its GPUs are not counted twice) and keeps its
// processes. Slots are stable small integers so tasks can refer to their tenant without strings.

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace zernel::policy {

enum class PriorityClass : std::uint8_t { training = 0, inference = 1, interactive = 2, background = 3 };

inline constexpr std::array<PriorityClass, 4> kAllPriorityClasses = {
    PriorityClass::training, PriorityClass::inference, PriorityClass::interactive,
    PriorityClass::background};

std::int32_t base_priority(PriorityClass c);
// The factor a GPU-proportional tenant weight is multiplied by: 1.25^base_priority(c).
float class_factor(PriorityClass c);
// "training", "inference", "interactive", "background".
std::string_view class_name(PriorityClass c);
// Case-insensitive; an unknown name is an error listing the valid ones.
Result<PriorityClass> parse_priority_class(std::string_view s);

// A 0-GPU tenant counts as this many GPUs in the share formula.
inline constexpr float kZeroGpuShare = 0.25F;
// Explicit cpu_weight range.
inline constexpr float kMinExplicitWeight = 0.01F;
inline constexpr float kMaxExplicitWeight = 100.0F;
// Most tenants one registry holds.
inline constexpr std::size_t kMaxTenants = 1024;
// Longest tenant id (bytes).
inline constexpr std::size_t kMaxTenantIdLength = 128;

struct TenantSpec {
  std::string id;
  std::uint32_t gpus = 0;
  PriorityClass priority_class = PriorityClass::training;
  std::optional<float> cpu_weight;  // explicit weight, replaces the GPU share
  // Kubernetes origin (tenants from kubelet's pod-resources; empty otherwise), for labels.
  std::string k8s_namespace;
  std::string k8s_pod;
  // GPUs as a fraction, for tenants from the kubelet (MIG slices, time-sliced replicas:
  // config/pod_tenants.hpp). When set it replaces `gpus` in the share formula; `gpus` is then
  // this rounded up, for the totals. 0 counts as kZeroGpuShare like gpus = 0.
  std::optional<float> gpu_fraction = std::nullopt;  // set only for kubelet tenants

  bool operator==(const TenantSpec&) const = default;
};

// Checks id (non-empty, printable, at most kMaxTenantIdLength), GPU count (at most 4096, also
// for gpu_fraction, which must be finite and not negative) and the explicit weight range. The
// message names the field.
Result<void> validate_tenant(const TenantSpec& spec);

class TenantRegistry {
 public:
  // Adds a tenant or replaces the one with the same id; returns its slot. Fails on an invalid
  // spec or when kMaxTenants are registered; nothing changes then.
  Result<std::uint16_t> upsert(const TenantSpec& spec);
  // Removes a tenant; returns the slot it had, or nullopt when the id is unknown.
  std::optional<std::uint16_t> remove(std::string_view id);

  [[nodiscard]] std::optional<std::uint16_t> find(std::string_view id) const;
  [[nodiscard]] bool valid(std::uint16_t slot) const {
    return slot < entries_.size() && entries_[slot].used;
  }
  // Only for valid slots.
  [[nodiscard]] const TenantSpec& spec(std::uint16_t slot) const;
  // The tenant's CPU weight (average 1.0 over the tenants without an explicit weight).
  [[nodiscard]] float weight(std::uint16_t slot) const;
  // weight() times the class factor (none for an explicit weight) on the cgroup cpu.weight
  // scale: 100 = 1.0, clamped to 1..10000. What the backends schedule the tenant with.
  [[nodiscard]] std::uint32_t cgroup_weight(std::uint16_t slot) const {
    return valid(slot) ? entries_[slot].cgroup_weight : 100;
  }
  [[nodiscard]] std::int32_t class_priority(std::uint16_t slot) const {
    return valid(slot) ? entries_[slot].class_priority : 0;
  }

  [[nodiscard]] std::size_t count() const { return count_; }
  [[nodiscard]] std::uint32_t total_gpus() const { return total_gpus_; }
  // Valid slots in ascending order (allocates; not for the decision path).
  [[nodiscard]] std::vector<std::uint16_t> slots() const;

 private:
  struct Entry {
    TenantSpec spec;
    float weight = 1.0F;
    std::uint32_t cgroup_weight = 100;  // cached: read on every decision
    std::int32_t class_priority = 0;    // cached likewise
    bool used = false;
  };
  void recompute_weights();

  std::vector<Entry> entries_;
  std::size_t count_ = 0;
  std::uint32_t total_gpus_ = 0;
};

}  // namespace zernel::policy
