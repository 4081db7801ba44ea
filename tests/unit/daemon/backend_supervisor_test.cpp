#include "daemon/backend_supervisor.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace zernel::daemon {
namespace {

constexpr std::uint64_t kSecond = 1'000'000'000ULL;
using Mode = BackendSupervisor::Mode;

// What the fakes did, shared by every backend one test makes.
struct Journal {
  std::vector<std::string> made;       // kinds, in order
  std::vector<std::string> shut_down;  // kinds, in order
  std::map<std::string, int> applies;  // by kind
  std::vector<std::uint32_t> forgotten;
};

class FakeBackend final : public enforce::Backend {
 public:
  FakeBackend(Journal& j, std::string name) : j_(j), name_(std::move(name)) {}
  [[nodiscard]] std::string_view name() const override { return name_; }
  Result<void> apply(std::span<const policy::Decision> /*decisions*/) override {
    ++j_.applies[name_];
    if (fail_with != 0) return Error(fail_with, "apply failed");
    return Ok{};
  }
  void forget(std::uint32_t pid) override { j_.forgotten.push_back(pid); }
  Result<void> shutdown() override {
    j_.shut_down.push_back(name_);
    return Ok{};
  }
  Retry retry_after_failure() override { return retry; }
  std::string failure_summary() override { return "ERROR_STALL (watchdog stall)"; }
  [[nodiscard]] Result<std::vector<Counter>> counters() const override {
    return std::vector<Counter>{{"local", 7}, {"run_ns_gpu_compute", 1000}};
  }
  std::string_view exit_kind() override { return "ERROR_STALL"; }

  int fail_with = 0;  // errno apply() fails with; 0: succeeds
  Retry retry = Retry::with_backoff;

 private:
  Journal& j_;
  std::string name_;
};

// Makes fakes named after the kind. A backend of a kind in `fail_with` fails every apply() with
// that errno (ECANCELED: the kernel ejected it); the factory refuses the kinds in `refuse`.
struct FakeFactory {
  Journal j;
  std::map<std::string, int> fail_with;
  enforce::Backend::Retry next_retry = enforce::Backend::Retry::with_backoff;
  std::set<std::string> refuse;

  BackendSupervisor::Factory factory() {
    return [this](std::string_view kind) -> Result<std::unique_ptr<enforce::Backend>> {
      j.made.emplace_back(kind);
      if (refuse.contains(std::string(kind)))
        return Error(ENODEV, "cannot load " + std::string(kind));
      auto b = std::make_unique<FakeBackend>(j, std::string(kind));
      if (auto it = fail_with.find(std::string(kind)); it != fail_with.end())
        b->fail_with = it->second;
      b->retry = next_retry;
      return std::unique_ptr<enforce::Backend>(std::move(b));
    };
  }
};

// One supervisor over a FakeFactory, per test.
class BackendSupervisorTest : public ::testing::Test {
 protected:
  // Starts a sched_ext backend that the kernel ejects (ECANCELED) on its first apply, as it does
  // every sched_ext backend made after it until fail_with changes.
  void start_ejectable() {
    f.fail_with["sched_ext"] = ECANCELED;
    ASSERT_TRUE(s.start("sched_ext").ok());
  }
  // Ejects the running backend at `now` and reloads it when due; returns the reload's time.
  std::uint64_t eject_and_reload(std::uint64_t now) {
    EXPECT_FALSE(s.apply({}, now).ok());
    const std::uint64_t at = s.restart_at_ns();
    s.maybe_restart(at);
    return at;
  }

  FakeFactory f;
  BackendSupervisor s{f.factory()};
};

TEST_F(BackendSupervisorTest, start_makes_the_named_backend) {
  ASSERT_TRUE(s.start("sched_ext").ok());
  EXPECT_EQ(s.name(), "sched_ext");
  EXPECT_EQ(s.requested(), "sched_ext");
  EXPECT_EQ(s.mode(), Mode::requested);
  EXPECT_EQ(s.reason(), "");
  EXPECT_EQ(f.j.made, std::vector<std::string>{"sched_ext"});
  ASSERT_TRUE(s.apply({}, 0).ok());
  EXPECT_EQ(f.j.applies["sched_ext"], 1);
}

TEST_F(BackendSupervisorTest, start_fails_with_the_factory_error) {
  f.refuse = {"sched_ext"};
  auto r = s.start("sched_ext");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "cannot load sched_ext");
  EXPECT_EQ(f.j.made, std::vector<std::string>{"sched_ext"}) << "no fallback at start";
}

TEST_F(BackendSupervisorTest, an_ejection_observes_and_reloads_after_a_backoff) {
  start_ejectable();
  f.fail_with.clear();

  auto r = s.apply({}, 10 * kSecond);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ECANCELED);
  EXPECT_EQ(f.j.shut_down, std::vector<std::string>{"sched_ext"})
      << "the ejected backend restores what it changed";
  EXPECT_EQ(s.name(), "observe");
  EXPECT_EQ(s.mode(), Mode::reloading);
  EXPECT_EQ(s.reason(),
            "sched_ext ended by ERROR_STALL (watchdog stall); reloading it in 1000 ms (reload 1 "
            "of 5)");
  EXPECT_EQ(s.restart_at_ns(), 11 * kSecond) << "first backoff: 1 s";

  s.maybe_restart(11 * kSecond - 1);
  EXPECT_EQ(f.j.made.size(), 1U) << "not due yet";
  s.maybe_restart(11 * kSecond);
  EXPECT_EQ(f.j.made, (std::vector<std::string>{"sched_ext", "sched_ext"}));
  EXPECT_EQ(s.name(), "sched_ext");
  EXPECT_EQ(s.mode(), Mode::requested);
  EXPECT_EQ(s.reason(), "");
  EXPECT_EQ(s.restarts(), 1U);
  EXPECT_EQ(s.restart_at_ns(), 0U);
  EXPECT_TRUE(s.apply({}, 12 * kSecond).ok());
}

TEST_F(BackendSupervisorTest, backoff_doubles_with_each_restart) {
  start_ejectable();
  std::uint64_t now = 100 * kSecond;
  for (std::uint32_t i = 0; i < BackendSupervisor::kMaxRestarts; ++i) {
    (void)s.apply({}, now);
    ASSERT_EQ(s.restart_at_ns(), now + (kSecond << i)) << "restart " << i + 1;
    s.maybe_restart(s.restart_at_ns());
    ASSERT_EQ(s.name(), "sched_ext");
    now += BackendSupervisor::kEjectionWindowNs;  // ejections far apart: each is reloaded
  }
}

TEST_F(BackendSupervisorTest, a_restart_request_reloads_at_once) {
  f.next_retry = enforce::Backend::Retry::now;
  start_ejectable();
  (void)s.apply({}, 5 * kSecond);
  EXPECT_EQ(s.restart_at_ns(), 5 * kSecond);
  s.maybe_restart(5 * kSecond);
  EXPECT_EQ(s.restarts(), 1U);
}

TEST_F(BackendSupervisorTest, repeated_ejections_within_the_window_fall_back_to_userspace) {
  start_ejectable();
  std::uint64_t now = 50 * kSecond;
  for (std::uint32_t i = 1; i < BackendSupervisor::kMaxEjections; ++i) {
    now = eject_and_reload(now) + kSecond;  // each reload ejected a second after it loaded
    ASSERT_EQ(s.name(), "sched_ext") << "ejection " << i << " is reloaded";
  }
  EXPECT_FALSE(s.apply({}, now).ok());
  EXPECT_EQ(s.name(), "userspace");
  EXPECT_EQ(s.mode(), Mode::fallback);
  EXPECT_EQ(s.reason(),
            "sched_ext ended 3 times within 600 s, last by ERROR_STALL (watchdog stall); the "
            "userspace backend acts instead");
  EXPECT_EQ(s.restart_at_ns(), 0U) << "no reload of the backend given up on";
  EXPECT_EQ(s.requested(), "sched_ext");
  EXPECT_EQ(f.j.made.back(), "userspace");

  // The stand-in gets every tick's decisions, for good, and is restored at stop.
  const std::size_t made = f.j.made.size();
  s.maybe_restart(now + 3600 * kSecond);
  EXPECT_EQ(f.j.made.size(), made);
  EXPECT_TRUE(s.apply({}, now + 3600 * kSecond).ok());
  EXPECT_EQ(f.j.applies["userspace"], 1);
  s.forget(7);
  EXPECT_EQ(f.j.forgotten, std::vector<std::uint32_t>{7});
  s.stop();
  EXPECT_EQ(f.j.shut_down.back(), "userspace");
}

TEST_F(BackendSupervisorTest, ejections_further_apart_than_the_window_keep_reloading) {
  start_ejectable();
  std::uint64_t now = kSecond;
  for (std::uint32_t i = 1; i < BackendSupervisor::kMaxEjections; ++i) {
    now = eject_and_reload(now) + kSecond;
  }
  // The first ejection has left the window by the time of the third.
  now = kSecond + BackendSupervisor::kEjectionWindowNs;
  (void)s.apply({}, now);
  EXPECT_EQ(s.mode(), Mode::reloading);
  EXPECT_NE(s.restart_at_ns(), 0U);
}

TEST_F(BackendSupervisorTest, after_max_restarts_the_next_ejection_falls_back_to_userspace) {
  start_ejectable();
  std::uint64_t now = kSecond;
  for (std::uint32_t i = 0; i < BackendSupervisor::kMaxRestarts; ++i) {
    eject_and_reload(now);
    now += BackendSupervisor::kEjectionWindowNs;
  }
  ASSERT_EQ(s.restarts(), BackendSupervisor::kMaxRestarts);
  ASSERT_EQ(s.name(), "sched_ext");
  (void)s.apply({}, now);  // the last reload's backend is ejected too
  EXPECT_EQ(s.name(), "userspace");
  EXPECT_EQ(s.mode(), Mode::fallback);
  EXPECT_EQ(s.reason(),
            "sched_ext ended after 5 reloads, last by ERROR_STALL (watchdog stall); the userspace "
            "backend acts instead");
}

TEST_F(BackendSupervisorTest, a_reload_that_fails_to_load_falls_back_to_userspace) {
  start_ejectable();
  (void)s.apply({}, 0);
  f.refuse = {"sched_ext"};
  s.maybe_restart(s.restart_at_ns());
  EXPECT_EQ(s.restarts(), 1U);
  EXPECT_EQ(s.failed_restarts(), 1U);
  EXPECT_EQ(s.name(), "userspace");
  EXPECT_EQ(s.mode(), Mode::fallback);
  EXPECT_EQ(s.reason(),
            "sched_ext ended by ERROR_STALL (watchdog stall) and its reload failed: cannot load "
            "sched_ext; the userspace backend acts instead");
  EXPECT_EQ(s.restart_at_ns(), 0U);
}

TEST_F(BackendSupervisorTest, observes_with_the_reason_when_the_fallback_cannot_start) {
  start_ejectable();
  (void)s.apply({}, 0);
  f.refuse = {"sched_ext", "userspace"};
  s.maybe_restart(s.restart_at_ns());
  EXPECT_EQ(s.name(), "observe");
  EXPECT_EQ(s.mode(), Mode::observing);
  EXPECT_EQ(s.reason(),
            "sched_ext ended by ERROR_STALL (watchdog stall) and its reload failed: cannot load "
            "sched_ext; the userspace backend could not start: cannot load userspace");
  EXPECT_EQ(s.restart_at_ns(), 0U);
  EXPECT_TRUE(s.apply({}, kSecond).ok()) << "observe-only accepts every tick";
}

TEST_F(BackendSupervisorTest, an_exit_that_asks_for_no_retry_observes_at_once) {
  f.next_retry = enforce::Backend::Retry::no;
  start_ejectable();
  (void)s.apply({}, kSecond);
  EXPECT_EQ(s.name(), "observe");
  EXPECT_EQ(s.mode(), Mode::observing) << "an administrator's sysrq-S is not undone";
  EXPECT_EQ(s.reason(),
            "sched_ext ended by ERROR_STALL (watchdog stall); the exit does not ask for a reload");
  EXPECT_EQ(s.restart_at_ns(), 0U);
  EXPECT_EQ(s.restarts(), 0U);
  EXPECT_EQ(f.j.made, std::vector<std::string>{"sched_ext"}) << "no userspace backend";
}

TEST_F(BackendSupervisorTest, the_fallback_ending_leaves_observe_only) {
  f.fail_with["userspace"] = ECANCELED;
  ASSERT_TRUE(s.start("userspace").ok());
  (void)s.apply({}, kSecond);
  EXPECT_EQ(s.name(), "observe");
  EXPECT_EQ(s.mode(), Mode::observing);
  EXPECT_EQ(f.j.made, std::vector<std::string>{"userspace"}) << "not made again";
}

TEST_F(BackendSupervisorTest, other_apply_errors_keep_the_backend) {
  f.fail_with["userspace"] = EIO;
  ASSERT_TRUE(s.start("userspace").ok());
  auto r = s.apply({}, kSecond);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), EIO);
  EXPECT_EQ(s.name(), "userspace");
  EXPECT_EQ(s.mode(), Mode::requested);
  EXPECT_TRUE(f.j.shut_down.empty());
  EXPECT_EQ(s.restart_at_ns(), 0U);
}

TEST_F(BackendSupervisorTest, stop_restores_once) {
  ASSERT_TRUE(s.start("userspace").ok());
  s.forget(42);
  EXPECT_EQ(f.j.forgotten, std::vector<std::uint32_t>{42});
  s.stop();
  EXPECT_EQ(f.j.shut_down.size(), 1U);
  s.stop();
  EXPECT_EQ(f.j.shut_down.size(), 1U);
}

TEST(BackendSupervisor, destruction_restores_a_backend_not_stopped) {
  FakeFactory f;
  {
    BackendSupervisor s(f.factory());
    ASSERT_TRUE(s.start("userspace").ok());
  }
  EXPECT_EQ(f.j.shut_down, std::vector<std::string>{"userspace"});
}

TEST(BackendSupervisor, names_every_mode) {
  EXPECT_EQ(BackendSupervisor::mode_name(Mode::requested), "requested");
  EXPECT_EQ(BackendSupervisor::mode_name(Mode::reloading), "reloading");
  EXPECT_EQ(BackendSupervisor::mode_name(Mode::fallback), "fallback");
  EXPECT_EQ(BackendSupervisor::mode_name(Mode::observing), "observing");
}

TEST_F(BackendSupervisorTest,
       counts_ejections_by_exit_kind_and_keeps_the_ejected_backends_counters) {
  start_ejectable();
  EXPECT_TRUE(s.ejections().empty());
  EXPECT_FALSE(s.apply({}, 0).ok());  // ejected: observe stands in, its counters are none
  EXPECT_EQ(s.ejections(), (BackendSupervisor::CountByName{{"ERROR_STALL", 1}}));
  auto c = s.counters();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (BackendSupervisor::CountByName{{"local", 7}, {"run_ns_gpu_compute", 1000}}));

  f.fail_with.clear();
  s.maybe_restart(kSecond);  // the fresh backend's counters add to the ejected one's
  ASSERT_EQ(s.name(), "sched_ext");
  c = s.counters();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (BackendSupervisor::CountByName{{"local", 14}, {"run_ns_gpu_compute", 2000}}));
  EXPECT_EQ(s.restarts(), 1U);
  EXPECT_EQ(s.failed_restarts(), 0U);
}

TEST_F(BackendSupervisorTest, counts_restarts_that_fail_to_load) {
  start_ejectable();
  EXPECT_FALSE(s.apply({}, 0).ok());
  f.refuse = {"sched_ext"};
  s.maybe_restart(kSecond);
  EXPECT_EQ(s.restarts(), 1U);
  EXPECT_EQ(s.failed_restarts(), 1U);
}

}  // namespace
}  // namespace zernel::daemon
