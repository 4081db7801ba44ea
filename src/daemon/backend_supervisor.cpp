#include "daemon/backend_supervisor.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>

namespace zernel::daemon {

Result<void> BackendSupervisor::start(std::string_view kind) {
  auto b = factory_(kind);
  if (!b) return b.error();
  backend_ = std::move(*b);
  stopped_ = false;
  return Ok{};
}

Result<void> BackendSupervisor::apply(std::span<const policy::Decision> decisions,
                                      std::uint64_t now_ns) {
  auto r = backend_->apply(decisions);
  if (r) return r;
  if (r.error().code() == ECANCELED) {
    on_ejected(now_ns);
  } else {
    spdlog::error("{} backend: {}", backend_->name(), r.error().message());
  }
  return r;
}

void BackendSupervisor::on_ejected(std::uint64_t now_ns) {
  const std::string name(backend_->name());
  const enforce::Backend::Retry retry = backend_->retry_after_failure();
  spdlog::error("{} backend: the kernel ended the scheduler: {}", name,
                backend_->failure_summary());
  ++ejections_[std::string(backend_->exit_kind())];
  if (auto c = backend_->counters()) {
    for (const enforce::Backend::Counter& e : *c) retired_counters_[std::string(e.name)] += e.value;
  } else {
    spdlog::warn("{} backend: its counters are lost: {}", name, c.error().message());
  }
  if (auto r = backend_->shutdown(); !r) spdlog::error("{}: {}", name, r.error().message());
  backend_ = std::make_unique<enforce::ObserveBackend>();
  ejected_ = name;
  if (retry == enforce::Backend::Retry::no || restarts_ >= kMaxRestarts) {
    spdlog::error("{} backend: not restarting ({}); observing only from now on", name,
                  retry == enforce::Backend::Retry::no ? "the exit does not ask for it"
                                                       : "too many restarts");
    restart_at_ns_ = 0;
    return;
  }
  schedule_restart(now_ns, retry);
}

void BackendSupervisor::schedule_restart(std::uint64_t now_ns, enforce::Backend::Retry retry) {
  const std::uint64_t delay =
      retry == enforce::Backend::Retry::now ? 0 : kFirstBackoffNs << restarts_;
  restart_at_ns_ = std::max<std::uint64_t>(now_ns + delay, 1);
  spdlog::warn("{} backend: observing only; loading it again in {} ms (restart {} of {})", ejected_,
               delay / 1'000'000, restarts_ + 1, kMaxRestarts);
}

void BackendSupervisor::maybe_restart(std::uint64_t now_ns) {
  if (restart_at_ns_ == 0 || now_ns < restart_at_ns_) return;
  restart_at_ns_ = 0;
  ++restarts_;
  auto b = factory_(ejected_);
  if (!b) {
    ++failed_restarts_;
    spdlog::error("{} backend: restart failed: {}", ejected_, b.error().message());
    if (restarts_ < kMaxRestarts) {
      restart_at_ns_ = now_ns + (kFirstBackoffNs << restarts_);
    } else {
      spdlog::error("{} backend: observing only from now on", ejected_);
    }
    return;
  }
  (void)backend_->shutdown();  // the observe-only stand-in: nothing to restore
  backend_ = std::move(*b);
  spdlog::info("{} backend: loaded again (restart {} of {})", backend_->name(), restarts_,
               kMaxRestarts);
}

Result<BackendSupervisor::CountByName> BackendSupervisor::counters() const {
  CountByName out = retired_counters_;
  auto c = backend_->counters();
  if (!c) return c.error();
  for (const enforce::Backend::Counter& e : *c) out[std::string(e.name)] += e.value;
  return out;
}

void BackendSupervisor::stop() {
  if (stopped_ || !backend_) return;
  stopped_ = true;
  if (auto r = backend_->shutdown(); !r) {
    spdlog::error("{} backend shutdown: {}", backend_->name(), r.error().message());
  }
}

}  // namespace zernel::daemon
