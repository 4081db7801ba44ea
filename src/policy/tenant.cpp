#include "policy/tenant.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

namespace zernel::policy {

std::int32_t base_priority(PriorityClass c) {
  switch (c) {
    case PriorityClass::training: return 5;
    case PriorityClass::inference: return 3;
    case PriorityClass::interactive: return 1;
    case PriorityClass::background: return -5;
  }
  return 0;
}

// 1.25^base_priority: the kernel's weight ratio per nice step, so that a class weighs what its
// priority would weigh for a single thread.
float class_factor(PriorityClass c) {
  switch (c) {
    case PriorityClass::training: return 3.0517578F;   // 1.25^5
    case PriorityClass::inference: return 1.953125F;   // 1.25^3
    case PriorityClass::interactive: return 1.25F;     // 1.25^1
    case PriorityClass::background: return 0.32768F;   // 1.25^-5
  }
  return 1.0F;
}

std::string_view class_name(PriorityClass c) {
  switch (c) {
    case PriorityClass::training: return "training";
    case PriorityClass::inference: return "inference";
    case PriorityClass::interactive: return "interactive";
    case PriorityClass::background: return "background";
  }
  return "training";
}

Result<PriorityClass> parse_priority_class(std::string_view s) {
  std::string lower(s);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  for (PriorityClass c : kAllPriorityClasses) {
    if (lower == class_name(c)) return c;
  }
  return Error("unknown priority class \"" + std::string(s) +
               "\" (valid: training, inference, interactive, background)");
}

Result<void> validate_tenant(const TenantSpec& spec) {
  if (spec.id.empty()) return Error("id: must not be empty");
  if (spec.id.size() > kMaxTenantIdLength) {
    return Error("id: longer than " + std::to_string(kMaxTenantIdLength) + " bytes");
  }
  for (char c : spec.id) {
    const auto ch = static_cast<unsigned char>(c);
    if (!std::isalnum(ch) && ch != '-' && ch != '_' && ch != '.' && ch != ':' && ch != '@') {
      return Error("id \"" + spec.id +
                   "\": may contain only letters, digits and - _ . : @");
    }
  }
  if (spec.gpus > 4096) {
    return Error("gpus: " + std::to_string(spec.gpus) + " is more than 4096");
  }
  if (spec.gpu_fraction) {
    const float f = *spec.gpu_fraction;
    if (!std::isfinite(f) || f < 0.0F || f > 4096.0F) {
      return Error("gpu_fraction: must be between 0 and 4096, got " + std::to_string(f));
    }
  }
  if (spec.cpu_weight) {
    const float w = *spec.cpu_weight;
    if (!std::isfinite(w) || w < kMinExplicitWeight || w > kMaxExplicitWeight) {
      return Error("cpu_weight: must be between 0.01 and 100, got " + std::to_string(w));
    }
  }
  return Ok{};
}

Result<std::uint16_t> TenantRegistry::upsert(const TenantSpec& spec) {
  if (auto v = validate_tenant(spec); !v) return v.error();
  std::size_t slot = entries_.size();
  if (auto existing = find(spec.id)) {
    slot = *existing;
  } else {
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      if (!entries_[i].used) {
        slot = i;
        break;
      }
    }
    if (count_ >= kMaxTenants) {
      return Error(ENOSPC, "tenant \"" + spec.id + "\": at most " + std::to_string(kMaxTenants) +
                               " tenants can be registered");
    }
    if (slot == entries_.size()) entries_.emplace_back();
    ++count_;
  }
  Entry& e = entries_[slot];
  e.spec = spec;
  e.used = true;
  recompute_weights();
  return static_cast<std::uint16_t>(slot);
}

std::optional<std::uint16_t> TenantRegistry::remove(std::string_view id) {
  auto slot = find(id);
  if (!slot) return std::nullopt;
  entries_[*slot] = Entry{};
  --count_;
  recompute_weights();
  return slot;
}

std::optional<std::uint16_t> TenantRegistry::find(std::string_view id) const {
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].used && entries_[i].spec.id == id) return static_cast<std::uint16_t>(i);
  }
  return std::nullopt;
}

const TenantSpec& TenantRegistry::spec(std::uint16_t slot) const { return entries_[slot].spec; }

float TenantRegistry::weight(std::uint16_t slot) const {
  return valid(slot) ? entries_[slot].weight : 1.0F;
}

std::vector<std::uint16_t> TenantRegistry::slots() const {
  std::vector<std::uint16_t> out;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].used) out.push_back(static_cast<std::uint16_t>(i));
  }
  return out;
}

namespace {

// What a tenant's GPUs count in the share formula.
float gpu_share(const TenantSpec& spec) {
  if (spec.gpu_fraction) return *spec.gpu_fraction > 0.0F ? *spec.gpu_fraction : kZeroGpuShare;
  return spec.gpus > 0 ? static_cast<float>(spec.gpus) : kZeroGpuShare;
}

}  // namespace

// Single precision throughout, as the earlier implementation computed it, so the benchmark's
// documented weights (0.26666668 for 1 of 30 GPUs over 8 tenants) come out bit for bit.
void TenantRegistry::recompute_weights() {
  total_gpus_ = 0;
  float share_sum = 0.0F;
  for (const Entry& e : entries_) {
    if (!e.used) continue;
    total_gpus_ += e.spec.gpus;
    share_sum += gpu_share(e.spec);
  }
  const auto n = static_cast<float>(count_);
  for (Entry& e : entries_) {
    if (!e.used) continue;
    if (e.spec.cpu_weight) {
      e.weight = *e.spec.cpu_weight;
    } else {
      // Without 0-GPU tenants share_sum == total_gpus and this is the seed's gpus / total * n.
      e.weight = gpu_share(e.spec) / share_sum * n;
    }
    // An explicit weight is the operator's final word; a GPU share is scaled by the class.
    const float factor = e.spec.cpu_weight ? 1.0F : class_factor(e.spec.priority_class);
    e.cgroup_weight = static_cast<std::uint32_t>(
        std::clamp(std::round(e.weight * factor * 100.0F), 1.0F, 10000.0F));
    e.class_priority = base_priority(e.spec.priority_class);
  }
}

}  // namespace zernel::policy
