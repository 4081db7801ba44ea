#include "policy/engine.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace zernel::policy {

Engine::Engine(const EngineOptions& opts, Topology topo)
    : opts_(opts), topo_(std::move(topo)), detector_(opts.phase), table_(opts.max_tracked_tasks) {
  placer_.reset(topo_, opts_.numa.enabled, {});
}

Result<void> Engine::register_task(std::uint32_t pid, bool is_ml,
                                   std::optional<std::uint32_t> gpu_id, std::uint64_t now_ns) {
  std::uint16_t tenant = kNoTenant;
  if (const TaskState* old = table_.find(pid)) tenant = old->tenant;
  TaskState* s = table_.insert(pid);
  if (s == nullptr) {
    return Error(ENOSPC, "pid " + std::to_string(pid) + ": max_tracked_tasks (" +
                             std::to_string(opts_.max_tracked_tasks) + ") reached");
  }
  s->is_ml_process = is_ml;
  s->gpu_id = gpu_id ? static_cast<std::int32_t>(std::min<std::uint32_t>(*gpu_id, INT32_MAX)) : kNoGpu;
  s->tenant = tenant;  // re-registering keeps the tenant (and its count) as it was
  s->phase_start_ns = now_ns;
  return Ok{};
}

bool Engine::unregister_task(std::uint32_t pid) {
  const TaskState* s = table_.find(pid);
  if (s == nullptr) return false;
  if (s->tenant != kNoTenant) --tenant_tasks_[s->tenant];
  return table_.erase(pid);
}

bool Engine::update_task(std::uint32_t pid, const TaskUpdate& u) {
  TaskState* s = table_.find(pid);
  if (s == nullptr) return false;
  if (u.gpu_utilization) s->gpu_utilization = std::min<std::uint8_t>(*u.gpu_utilization, 100);
  if (u.io_wait_fraction) {
    const float f = *u.io_wait_fraction;
    s->io_wait_fraction = std::isnan(f) ? 0.0F : std::clamp(f, 0.0F, 1.0F);
  }
  if (u.cpu_burst_duration_ns) s->cpu_burst_duration_ns = *u.cpu_burst_duration_ns;
  if (u.last_gpu_sync_ns) s->last_gpu_sync_ns = *u.last_gpu_sync_ns;
  if (u.nccl_active) s->nccl_active = *u.nccl_active;
  if (u.futex_wait_count) s->futex_wait_count = *u.futex_wait_count;
  if (u.cpu_fraction) {
    const float f = *u.cpu_fraction;
    s->cpu_fraction = std::isnan(f) ? 0.0F : std::clamp(f, 0.0F, 1024.0F);
  }
  if (u.dataloader_worker) s->dataloader_worker = *u.dataloader_worker;
  if (u.gpu_wait_blocks) s->gpu_wait_blocks = *u.gpu_wait_blocks;
  if (u.event_phase) s->event_phase = u.event_phase;
  if (u.gpu_id) {
    s->gpu_id = static_cast<std::int32_t>(std::min<std::uint32_t>(*u.gpu_id, INT32_MAX));
  }
  return true;
}

bool Engine::record_event_phase(std::uint32_t pid, Phase phase, std::uint64_t at_ns) {
  TaskState* s = table_.find(pid);
  if (s == nullptr) return false;
  s->event_phase = phase;
  if (phase == s->current_phase) return true;
  s->transition_phase(phase, std::max(at_ns, s->phase_start_ns));
  ++event_transitions_;
  return true;
}

void Engine::set_cpu_loads(std::span<const float> loads) { placer_.set_loads(loads); }

Decision Engine::schedule(std::uint32_t pid, std::uint64_t now_ns) {
  TaskState* s = table_.find(pid);
  if (s == nullptr) {
    Decision d;
    d.pid = pid;
    return d;
  }
  return decide(*s, now_ns);
}

void Engine::schedule_all(std::uint64_t now_ns, std::vector<Decision>& out) {
  auto tasks = table_.tasks();
  out.resize(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) out[i] = decide(tasks[i], now_ns);
}

Decision Engine::decide(TaskState& s, std::uint64_t now_ns) {
  Decision d;
  d.pid = s.pid;
  d.gpu_id = s.gpu_id;
  const Phase phase = detector_.detect(s);
  if (phase != s.current_phase) {
    s.transition_phase(phase, now_ns);
    d.phase_changed = true;
  }
  d.phase = phase;
  const PhasePolicy pol = policy_for_phase(phase);
  d.preempt = pol.preempt;
  d.latency_target_us = pol.latency_target_us;
  d.slice_ns = pol.slice_ns;
  d.priority = pol.priority;
  if (phase == Phase::gpu_compute && s.gpu_wait_blocks) d.priority = kBlockedGpuWaitPriority;
  if (opts_.multi_tenant_enabled && s.tenant != kNoTenant) {
    d.tenant = s.tenant;
    d.tenant_weight = tenants_.cgroup_weight(s.tenant);
  }
  d.weight = weight_for_priority(d.priority);
  if (opts_.numa.gpu_affinity) {
    if (auto cpu = placer_.place(s.gpu())) d.preferred_cpu = static_cast<std::int32_t>(*cpu);
  }
  s.last_priority = d.priority;
  s.last_weight = d.weight;
  s.last_preferred_cpu = d.preferred_cpu;
  ++decisions_;
  return d;
}

Result<std::uint16_t> Engine::upsert_tenant(const TenantSpec& spec) {
  auto slot = tenants_.upsert(spec);
  if (!slot) return slot.error().context("tenant \"" + spec.id + "\"");
  if (tenant_tasks_.size() <= *slot) tenant_tasks_.resize(*slot + 1U, 0);
  return slot;
}

bool Engine::remove_tenant(std::string_view id) {
  auto slot = tenants_.remove(id);
  if (!slot) return false;
  for (TaskState& s : table_.tasks()) {
    if (s.tenant == *slot) s.tenant = kNoTenant;
  }
  tenant_tasks_[*slot] = 0;
  return true;
}

Result<void> Engine::assign_pid(std::uint32_t pid, std::string_view tenant_id) {
  auto slot = tenants_.find(tenant_id);
  if (!slot) {
    return Error(ENOENT, "tenant \"" + std::string(tenant_id) + "\" is not registered");
  }
  TaskState* s = table_.find(pid);
  if (s == nullptr) {
    if (auto r = register_task(pid, false, std::nullopt); !r) return r.error();
    s = table_.find(pid);
  }
  if (s->tenant != kNoTenant) --tenant_tasks_[s->tenant];
  s->tenant = *slot;
  ++tenant_tasks_[*slot];
  return Ok{};
}

const TenantSpec* Engine::tenant_of(std::uint32_t pid) const {
  const TaskState* s = table_.find(pid);
  if (s == nullptr || !tenants_.valid(s->tenant)) return nullptr;
  return &tenants_.spec(s->tenant);
}

float Engine::cpu_weight_for_pid(std::uint32_t pid) const {
  if (!opts_.multi_tenant_enabled) return 1.0F;
  const TaskState* s = table_.find(pid);
  if (s == nullptr || !tenants_.valid(s->tenant)) return 1.0F;
  return tenants_.weight(s->tenant);
}

std::size_t Engine::tenant_task_count(std::uint16_t slot) const {
  return slot < tenant_tasks_.size() && tenants_.valid(slot) ? tenant_tasks_[slot] : 0;
}

}  // namespace zernel::policy
