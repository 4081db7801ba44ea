#include "daemon/backend_supervisor.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <deque>
#include <string>
#include <vector>

namespace zernel::daemon {
namespace {

constexpr std::uint64_t kSecond = 1'000'000'000ULL;

// What the fakes did, shared by every backend one test makes.
struct Journal {
  std::vector<std::string> made;  // kinds, in order
  int shutdowns = 0;
  int applies = 0;
  std::vector<std::uint32_t> forgotten;
};

class FakeBackend final : public enforce::Backend {
 public:
  FakeBackend(Journal& j, std::string name) : j_(j), name_(std::move(name)) {}
  [[nodiscard]] std::string_view name() const override { return name_; }
  Result<void> apply(std::span<const policy::Decision> /*decisions*/) override {
    ++j_.applies;
    if (fail_with != 0) return Error(fail_with, "apply failed");
    return Ok{};
  }
  void forget(std::uint32_t pid) override { j_.forgotten.push_back(pid); }
  Result<void> shutdown() override {
    ++j_.shutdowns;
    return Ok{};
  }
  Retry retry_after_failure() override { return retry; }
  std::string failure_summary() override { return "watchdog stall"; }
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

// Makes fakes named after the kind; each made backend fails as `next_fail_with` says (then
// reset), and the factory itself fails while `refuse` is set.
struct FakeFactory {
  Journal j;
  int next_fail_with = 0;
  enforce::Backend::Retry next_retry = enforce::Backend::Retry::with_backoff;
  bool refuse = false;

  BackendSupervisor::Factory factory() {
    return [this](std::string_view kind) -> Result<std::unique_ptr<enforce::Backend>> {
      j.made.emplace_back(kind);
      if (refuse) return Error(ENODEV, "cannot load " + std::string(kind));
      auto b = std::make_unique<FakeBackend>(j, std::string(kind));
      b->fail_with = next_fail_with;
      b->retry = next_retry;
      return std::unique_ptr<enforce::Backend>(std::move(b));
    };
  }
};

// One supervisor over a FakeFactory, per test.
class BackendSupervisorTest : public ::testing::Test {
 protected:
  // Starts a sched_ext backend that the kernel ejects (ECANCELED) on its first apply, as does
  // every backend made after it until next_fail_with changes.
  void start_ejectable() {
    f.next_fail_with = ECANCELED;
    ASSERT_TRUE(s.start("sched_ext").ok());
  }

  FakeFactory f;
  BackendSupervisor s{f.factory()};
};

TEST_F(BackendSupervisorTest, start_makes_the_named_backend) {
  ASSERT_TRUE(s.start("sched_ext").ok());
  EXPECT_EQ(s.name(), "sched_ext");
  EXPECT_EQ(f.j.made, std::vector<std::string>{"sched_ext"});
  ASSERT_TRUE(s.apply({}, 0).ok());
  EXPECT_EQ(f.j.applies, 1);
}

TEST_F(BackendSupervisorTest, start_fails_with_the_factory_error) {
  f.refuse = true;
  auto r = s.start("sched_ext");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "cannot load sched_ext");
}

TEST_F(BackendSupervisorTest, an_ejection_falls_back_to_observe_and_restarts_after_a_backoff) {
  start_ejectable();
  f.next_fail_with = 0;

  auto r = s.apply({}, 10 * kSecond);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ECANCELED);
  EXPECT_EQ(f.j.shutdowns, 1) << "the ejected backend restores what it changed";
  EXPECT_EQ(s.name(), "observe");
  EXPECT_EQ(s.restart_at_ns(), 11 * kSecond) << "first backoff: 1 s";

  s.maybe_restart(11 * kSecond - 1);
  EXPECT_EQ(f.j.made.size(), 1U) << "not due yet";
  s.maybe_restart(11 * kSecond);
  EXPECT_EQ(f.j.made, (std::vector<std::string>{"sched_ext", "sched_ext"}));
  EXPECT_EQ(s.name(), "sched_ext");
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
    now = s.restart_at_ns();
    s.maybe_restart(now);
    ASSERT_EQ(s.name(), "sched_ext");
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

TEST_F(BackendSupervisorTest, gives_up_and_observes_after_max_restarts) {
  start_ejectable();
  std::uint64_t now = kSecond;
  for (std::uint32_t i = 0; i < BackendSupervisor::kMaxRestarts; ++i) {
    (void)s.apply({}, now);
    now = s.restart_at_ns();
    s.maybe_restart(now);
  }
  ASSERT_EQ(s.restarts(), BackendSupervisor::kMaxRestarts);
  (void)s.apply({}, now);  // the last restart's backend is ejected too
  EXPECT_EQ(s.name(), "observe");
  EXPECT_EQ(s.restart_at_ns(), 0U) << "no restart after kMaxRestarts";
  const std::size_t made = f.j.made.size();
  s.maybe_restart(now + 3600 * kSecond);
  EXPECT_EQ(f.j.made.size(), made);
  EXPECT_TRUE(s.apply({}, now + 3600 * kSecond).ok()) << "observe-only accepts every tick";
}

TEST_F(BackendSupervisorTest, an_exit_that_asks_for_no_retry_observes_at_once) {
  f.next_retry = enforce::Backend::Retry::no;
  start_ejectable();
  (void)s.apply({}, kSecond);
  EXPECT_EQ(s.name(), "observe");
  EXPECT_EQ(s.restart_at_ns(), 0U);
  EXPECT_EQ(s.restarts(), 0U);
}

TEST_F(BackendSupervisorTest, a_failed_restart_is_retried_with_the_next_backoff_then_given_up) {
  start_ejectable();
  (void)s.apply({}, 0);
  f.refuse = true;
  std::uint64_t now = s.restart_at_ns();
  for (std::uint32_t i = 1; i < BackendSupervisor::kMaxRestarts; ++i) {
    s.maybe_restart(now);
    EXPECT_EQ(s.name(), "observe");
    ASSERT_EQ(s.restart_at_ns(), now + (kSecond << i)) << "after failed restart " << i;
    now = s.restart_at_ns();
  }
  s.maybe_restart(now);
  EXPECT_EQ(s.restarts(), BackendSupervisor::kMaxRestarts);
  EXPECT_EQ(s.restart_at_ns(), 0U) << "given up";
  EXPECT_EQ(s.name(), "observe");
}

TEST_F(BackendSupervisorTest, other_apply_errors_keep_the_backend) {
  f.next_fail_with = EIO;
  ASSERT_TRUE(s.start("userspace").ok());
  auto r = s.apply({}, kSecond);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), EIO);
  EXPECT_EQ(s.name(), "userspace");
  EXPECT_EQ(f.j.shutdowns, 0);
  EXPECT_EQ(s.restart_at_ns(), 0U);
}

TEST_F(BackendSupervisorTest, stop_restores_once) {
  ASSERT_TRUE(s.start("userspace").ok());
  s.forget(42);
  EXPECT_EQ(f.j.forgotten, std::vector<std::uint32_t>{42});
  s.stop();
  EXPECT_EQ(f.j.shutdowns, 1);
  s.stop();
  EXPECT_EQ(f.j.shutdowns, 1);
}

TEST(BackendSupervisor, destruction_restores_a_backend_not_stopped) {
  FakeFactory f;
  {
    BackendSupervisor s(f.factory());
    ASSERT_TRUE(s.start("userspace").ok());
  }
  EXPECT_EQ(f.j.shutdowns, 1);
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

  f.next_fail_with = 0;
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
  f.refuse = true;
  s.maybe_restart(kSecond);
  EXPECT_EQ(s.restarts(), 1U);
  EXPECT_EQ(s.failed_restarts(), 1U);
  EXPECT_EQ(s.name(), "observe");
}

}  // namespace
}  // namespace zernel::daemon
