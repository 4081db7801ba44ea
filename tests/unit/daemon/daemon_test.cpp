// The orchestration end to end on a fabricated machine: a /proc with no processes (only the files
// the collectors read), no sysfs topology, no NVML, the observe backend, and every journal inside
// the tree. What the loop does with real processes is the integration tests' (tests/integration).

#include "daemon/daemon.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "enforce/settings_journal.hpp"
#include "support/temp_tree.hpp"

namespace zernel::daemon {
namespace {

class FakeMachine : public test_support::TempTree {
 public:
  FakeMachine() : TempTree("zernel-daemon") {
    write("proc/stat", "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 100 0 100 800 0 0 0 0 0 0\n");
    write("proc/sys/kernel/task_delayacct", "1\n");
    write("sys/devices/system/node/.keep", "");
    ::setenv(enforce::kSettingsJournalEnv, path("run/settings.journal").c_str(), 1);
    ::setenv(enforce::kDelayAcctHoldersEnv, path("run/delayacct.holders").c_str(), 1);
    ::setenv(enforce::kUserspaceJournalEnv, path("run/userspace.journal").c_str(), 1);
  }
  ~FakeMachine() {
    ::unsetenv(enforce::kSettingsJournalEnv);
    ::unsetenv(enforce::kDelayAcctHoldersEnv);
    ::unsetenv(enforce::kUserspaceJournalEnv);
  }
  FakeMachine(const FakeMachine&) = delete;
  FakeMachine& operator=(const FakeMachine&) = delete;

  [[nodiscard]] DaemonOptions options() const {
    DaemonOptions o;
    o.config.general.phase_eval_interval_ms = 10;
    o.config.general.gpu_poll_interval_ms = 10;
    o.config.telemetry.push_interval_ms = 10;
    o.config.multi_tenant.runtime_state_file = path("lib/runtime-tenants.json").string();
    o.backend = "observe";
    o.nvml_library = path("no-nvml.so").string();
    o.proc_root = path("proc").string();
    o.sys_root = path("sys").string();
    o.serve_http = false;
    o.config_path = path("scheduler.toml").string();
    return o;
  }
};

// A pipe standing for the stop or reload signal's fd.
class Pipe {
 public:
  // Non-blocking, as StopSignals makes its pipes (drain_reload reads until EAGAIN).
  Pipe() { EXPECT_EQ(::pipe2(fds_, O_NONBLOCK | O_CLOEXEC), 0); }
  ~Pipe() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  [[nodiscard]] int read_fd() const { return fds_[0]; }
  void signal() const { EXPECT_EQ(::write(fds_[1], "x", 1), 1); }

 private:
  int fds_[2] = {-1, -1};
};

// Runs the daemon's loop for `ms`, then signals it to stop; `reload` (optional) is its reload fd.
Result<void> run_for(Daemon& d, int ms, const Pipe* reload = nullptr) {
  Pipe stop;
  std::thread stopper([&stop, ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    stop.signal();
  });
  auto r = d.run(stop.read_fd(), reload != nullptr ? reload->read_fd() : -1);
  stopper.join();
  return r;
}

TEST(Cadence, scans_and_snapshots_every_whole_number_of_ticks) {
  config::Config c;
  c.general.phase_eval_interval_ms = 100;
  c.general.gpu_poll_interval_ms = 550;
  c.telemetry.push_interval_ms = 1000;
  Cadence k = cadence_of(c);
  EXPECT_EQ(k.period_ns, 100'000'000U);
  EXPECT_EQ(k.poll_every, 5U);
  EXPECT_EQ(k.publish_every, 10U);
  c.telemetry.push_interval_ms = 50;  // shorter than a tick: every tick
  EXPECT_EQ(cadence_of(c).publish_every, 1U);
}

TEST(Daemon, ticks_until_the_stop_fd_is_readable) {
  FakeMachine m;
  auto d = Daemon::create(m.options());
  ASSERT_TRUE(d.ok()) << d.error().message();
  auto r = run_for(**d, 150);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_GE((*d)->stats().ticks, 1U);
  EXPECT_GE((*d)->stats().scans, 1U) << "the first scan comes before the first tick";
}

// /proc/stat (a sum over every CPU of every interrupt's count for its reader) is read at the
// poll ticks, and at the ticks before the first interval's loads: not at every tick.
TEST(Daemon, the_cpu_loads_are_read_at_poll_ticks_only) {
  FakeMachine m;
  DaemonOptions o = m.options();
  o.config.general.gpu_poll_interval_ms = 50;  // a poll every 5th tick
  auto d = Daemon::create(o);
  ASSERT_TRUE(d.ok()) << d.error().message();
  auto r = run_for(**d, 400);
  ASSERT_TRUE(r.ok()) << r.error().message();
  const DaemonStats& s = (*d)->stats();
  ASSERT_GE(s.ticks, 10U);
  // The first tick reads (no loads yet), the second the first interval's, then every 5th.
  EXPECT_GE(s.cpu_load_reads, 2U);
  EXPECT_LE(s.cpu_load_reads, 2 + s.ticks / 5) << s.ticks << " ticks";
}

TEST(Daemon, a_reload_wakeup_applies_the_file_between_ticks) {
  FakeMachine m;
  m.write("scheduler.toml", "[[tenants]]\nid = \"from-reload\"\ngpus = 1\n");
  auto d = Daemon::create(m.options());
  ASSERT_TRUE(d.ok()) << d.error().message();
  ASSERT_TRUE((*d)->config().tenants.empty());
  Pipe reload;
  reload.signal();  // served on the loop's first wake-up
  auto r = run_for(**d, 150, &reload);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ((*d)->config().tenants.size(), 1U);
  EXPECT_EQ((*d)->config().tenants[0].spec.id, "from-reload");
}

TEST(Daemon, an_unknown_backend_is_a_start_up_error) {
  FakeMachine m;
  DaemonOptions o = m.options();
  o.backend = "bogus";
  auto d = Daemon::create(std::move(o));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().message().rfind("--backend", 0), 0U) << d.error().message();
}

}  // namespace
}  // namespace zernel::daemon
