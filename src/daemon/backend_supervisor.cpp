#include "daemon/backend_supervisor.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>

namespace zernel::daemon {

std::string_view BackendSupervisor::mode_name(Mode m) {
  switch (m) {
    case Mode::requested:
      return "requested";
    case Mode::reloading:
      return "reloading";
    case Mode::fallback:
      return "fallback";
    case Mode::observing:
      return "observing";
  }
  return "requested";
}

Result<void> BackendSupervisor::start(std::string_view kind) {
  auto b = factory_(kind);
  if (!b) return b.error();
  backend_ = std::move(*b);
  requested_ = kind;
  mode_ = Mode::requested;
  reason_.clear();
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
  last_exit_ = backend_->failure_summary();
  spdlog::error("{} backend: the kernel ended the scheduler: {}", name, last_exit_);
  ++ejections_[std::string(backend_->exit_kind())];
  if (auto c = backend_->counters()) {
    for (const enforce::Backend::Counter& e : *c) retired_counters_[std::string(e.name)] += e.value;
  } else {
    spdlog::warn("{} backend: its counters are lost: {}", name, c.error().message());
  }
  if (auto r = backend_->shutdown(); !r) spdlog::error("{}: {}", name, r.error().message());
  backend_ = std::make_unique<enforce::ObserveBackend>();
  ejected_ = name;
  restart_at_ns_ = 0;
  while (!ejected_at_.empty() && now_ns - ejected_at_.front() >= kEjectionWindowNs) {
    ejected_at_.pop_front();
  }
  ejected_at_.push_back(now_ns);

  if (retry == enforce::Backend::Retry::no) {
    mode_ = Mode::observing;
    reason_ = name + " ended by " + last_exit_ + "; the exit does not ask for a reload";
    spdlog::error(
        "{} backend: not restarting (the exit does not ask for it); observing only from "
        "now on",
        name);
    return;
  }
  if (name == kFallbackKind) {  // the stand-in itself ended: nothing else to turn to
    mode_ = Mode::observing;
    reason_ = name + " ended by " + last_exit_;
    spdlog::error("{} backend: observing only from now on", name);
    return;
  }
  if (ejected_at_.size() >= kMaxEjections) {
    fall_back(fmt::format("{} ended {} times within {} s, last by {}", name, ejected_at_.size(),
                          kEjectionWindowNs / 1'000'000'000ULL, last_exit_));
    return;
  }
  if (restarts_ >= kMaxRestarts) {
    fall_back(fmt::format("{} ended after {} reloads, last by {}", name, restarts_, last_exit_));
    return;
  }
  schedule_restart(now_ns, retry);
}

void BackendSupervisor::schedule_restart(std::uint64_t now_ns, enforce::Backend::Retry retry) {
  const std::uint64_t delay =
      retry == enforce::Backend::Retry::now ? 0 : kFirstBackoffNs << restarts_;
  restart_at_ns_ = std::max<std::uint64_t>(now_ns + delay, 1);
  mode_ = Mode::reloading;
  reason_ = fmt::format("{} ended by {}; reloading it in {} ms (reload {} of {})", ejected_,
                        last_exit_, delay / 1'000'000, restarts_ + 1, kMaxRestarts);
  spdlog::warn("{} backend: observing only; loading it again in {} ms (restart {} of {})", ejected_,
               delay / 1'000'000, restarts_ + 1, kMaxRestarts);
}

void BackendSupervisor::fall_back(const std::string& why) {
  restart_at_ns_ = 0;
  auto b = factory_(kFallbackKind);
  if (!b) {
    mode_ = Mode::observing;
    reason_ = why + "; the " + std::string(kFallbackKind) +
              " backend could not start: " + b.error().message();
    spdlog::error("{} backend: giving up on it: {}; observing only from now on", ejected_, reason_);
    return;
  }
  (void)backend_->shutdown();  // the observe-only stand-in: nothing to restore
  backend_ = std::move(*b);
  mode_ = Mode::fallback;
  reason_ = why + "; the " + std::string(kFallbackKind) + " backend acts instead";
  spdlog::error("{} backend: giving up on it: {}", ejected_, reason_);
}

void BackendSupervisor::maybe_restart(std::uint64_t now_ns) {
  if (restart_at_ns_ == 0 || now_ns < restart_at_ns_) return;
  restart_at_ns_ = 0;
  ++restarts_;
  auto b = factory_(ejected_);
  if (!b) {
    ++failed_restarts_;
    spdlog::error("{} backend: restart failed: {}", ejected_, b.error().message());
    fall_back(fmt::format("{} ended by {} and its reload failed: {}", ejected_, last_exit_,
                          b.error().message()));
    return;
  }
  (void)backend_->shutdown();  // the observe-only stand-in: nothing to restore
  backend_ = std::move(*b);
  mode_ = Mode::requested;
  reason_.clear();
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
