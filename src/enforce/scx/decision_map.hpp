#pragma once
// policy::Decision -> struct zernel_decision (bpf/intf.h), the value the sched_ext program reads
// for every thread of the process. Pure and header-only: unit tests need no BPF toolchain.
//
// The C++ side clamps to the ranges intf.h documents (the BPF side clamps again, it trusts no
// map value); the preferred node is left to the BPF side, which takes the preferred CPU's node.

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "intf.h"  // the BPF/C++ contract (bpf/, an include directory that needs no toolchain)
#include "policy/decision.hpp"
#include "policy/phase.hpp"
#include "policy/task_state.hpp"
#include "policy/tenant.hpp"
#include "policy/weight.hpp"

namespace zernel::enforce::scx {

// The contract and the policy agree on their shared constants.
static_assert(policy::kMaxTenants <= ZERNEL_MAX_TENANTS);
static_assert(policy::kNoTenant == ZERNEL_NO_TENANT);
static_assert(policy::kNoCpu == ZERNEL_NO_CPU);
static_assert(policy::kDefaultWeight == ZERNEL_WEIGHT_DFL);
static_assert(policy::kDefaultSliceNs == std::uint64_t{ZERNEL_SLICE_DFL_US} * 1000U);
static_assert(policy::kPhaseCount == ZERNEL_PHASE_NR);
static_assert(policy::index_of(policy::Phase::data_loading) == ZERNEL_PHASE_DATA_LOADING);
static_assert(policy::index_of(policy::Phase::gpu_compute) == ZERNEL_PHASE_GPU_COMPUTE);
static_assert(policy::index_of(policy::Phase::nccl_collective) == ZERNEL_PHASE_NCCL_COLLECTIVE);
static_assert(policy::index_of(policy::Phase::optimizer_step) == ZERNEL_PHASE_OPTIMIZER_STEP);
static_assert(policy::index_of(policy::Phase::unknown) == ZERNEL_PHASE_UNKNOWN);

inline constexpr std::uint64_t kSliceMinNs = std::uint64_t{ZERNEL_SLICE_MIN_US} * 1000U;
inline constexpr std::uint64_t kSliceMaxNs = std::uint64_t{ZERNEL_SLICE_MAX_US} * 1000U;
inline constexpr std::uint32_t kWeightMin = ZERNEL_WEIGHT_MIN;
inline constexpr std::uint32_t kWeightMax = ZERNEL_WEIGHT_MAX;
inline constexpr std::uint32_t kTenantWeightMin = ZERNEL_TENANT_WEIGHT_MIN;
inline constexpr std::uint32_t kTenantWeightMax = ZERNEL_TENANT_WEIGHT_MAX;

inline zernel_decision to_map_value(const policy::Decision& d) {
  zernel_decision v{};
  v.slice_ns = d.slice_ns == 0 ? 0 : std::clamp(d.slice_ns, kSliceMinNs, kSliceMaxNs);
  v.weight = std::clamp(d.weight, kWeightMin, kWeightMax);
  v.tenant_weight = std::clamp(d.tenant_weight, kTenantWeightMin, kTenantWeightMax);
  v.latency_target_us = d.latency_target_us;
  v.preferred_cpu = d.preferred_cpu < 0 ? std::int32_t{ZERNEL_NO_CPU} : d.preferred_cpu;
  v.preferred_node = ZERNEL_NO_CPU;
  v.tenant = d.tenant < ZERNEL_MAX_TENANTS ? d.tenant : std::uint16_t{ZERNEL_NO_TENANT};
  v.phase = static_cast<std::uint8_t>(policy::index_of(d.phase));
  v.flags = d.preempt ? std::uint8_t{ZERNEL_DF_PREEMPT} : std::uint8_t{0};
  return v;
}

// Whether two values would make the kernel behave the same (they have no padding, see intf.h).
inline bool same_value(const zernel_decision& a, const zernel_decision& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// The tenant array entry for a tenant of `cgroup_weight` (cpu.weight scale).
inline zernel_tenant tenant_value(std::uint32_t cgroup_weight) {
  zernel_tenant t{};
  t.weight = std::clamp(cgroup_weight, kTenantWeightMin, kTenantWeightMax);
  return t;
}

}  // namespace zernel::enforce::scx
