// PowerManager against the emulated GPU (the fake libnvidia-ml.so.1, a private shared-memory
// segment per test) and a fake cpufreq tree in a temporary directory.

#include "enforce/power.hpp"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/emulated_gpu.hpp"
#include "support/log_capture.hpp"
#include "support/temp_tree.hpp"

#ifndef ZERNEL_FAKE_LIB_DIR
#define ZERNEL_FAKE_LIB_DIR ""
#endif

namespace zernel::enforce {
namespace {

using test_support::contains;
using test_support::EmulatedGpu;
using test_support::LogCapture;

namespace fs = std::filesystem;
using policy::Phase;
using policy::PowerPlan;

// SYS/devices/system/cpu/cpufreq/policy{0,1}: 1.2 .. 3.6 GHz, policy1 capped at 3 GHz by the admin.
class FakeSys : public test_support::TempTree {
 public:
  FakeSys() : TempTree("zernel-power-sys") {
    make("policy0", 3'600'000);
    make("policy1", 3'000'000);
    fs::create_directories(dir() / "devices/system/cpu/cpufreq/other");  // not a policy
  }

  [[nodiscard]] std::string max(const std::string& policy) const {
    std::ifstream in(dir() / "devices/system/cpu/cpufreq" / policy / "scaling_max_freq");
    std::string v;
    in >> v;
    return v;
  }

 private:
  void make(const std::string& name, int scaling_max) const {
    const std::string d = "devices/system/cpu/cpufreq/" + name + "/";
    write(d + "cpuinfo_min_freq", "1200000\n");
    write(d + "cpuinfo_max_freq", "3600000\n");
    write(d + "scaling_max_freq", std::to_string(scaling_max) + "\n");
  }
};

#define REQUIRE_FAKE_GPU()                                                           \
  do {                                                                               \
    if (std::string(ZERNEL_FAKE_LIB_DIR).empty()) GTEST_SKIP() << "no emulated GPU"; \
  } while (0)

std::unique_ptr<sys::Nvml> load_nvml() {
  auto nvml = sys::Nvml::load(std::string(ZERNEL_FAKE_LIB_DIR) + "/libnvidia-ml.so.1");
  EXPECT_TRUE(nvml.ok()) << (nvml.ok() ? "" : nvml.error().message());
  return nvml.ok() ? std::move(*nvml) : nullptr;
}

PowerPlan plan(std::vector<Phase> gpus, Phase cpu) { return PowerPlan{std::move(gpus), cpu}; }

TEST(Power, sets_every_gpu_by_its_phase_and_the_cpus_then_restores_the_originals) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu(3);
  FakeSys sys;
  // GPU 2 starts with an administrator's 600 W limit (set by another process that exits
  // without restoring): it is restored to 600 W, not to the default.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto admin = sys::Nvml::load(std::string(ZERNEL_FAKE_LIB_DIR) + "/libnvidia-ml.so.1");
    _exit(admin.ok() && (*admin)->set_power_limit(2, 600'000).ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto nvml = load_nvml();
  ASSERT_NE(nvml, nullptr);
  ASSERT_EQ(nvml->power_limits(2)->current_mw, 600'000U);
  LogCapture log;
  {
    PowerManager pm({false, true, true, sys.root()}, nvml.get());
    EXPECT_EQ(pm.gpu_count(), 3U);
    EXPECT_EQ(pm.cpu_policy_count(), 2U);

    pm.apply(plan({Phase::data_loading, Phase::nccl_collective, Phase::gpu_compute},
                  Phase::gpu_compute));
    auto c0 = nvml->clocks(0);
    auto c1 = nvml->clocks(1);
    auto c2 = nvml->clocks(2);
    ASSERT_TRUE(c0.ok() && c1.ok() && c2.ok());
    EXPECT_EQ(c0->sm_application, 660U);  // 1980 / 3
    EXPECT_EQ(c1->sm_application, 990U);  // 1980 / 2
    EXPECT_EQ(c2->sm_application, 1980U);
    EXPECT_EQ(nvml->power_limits(0)->current_mw, 546'000U);  // 78 % of 700 W
    EXPECT_EQ(nvml->power_limits(1)->current_mw, 595'000U);  // 85 %
    EXPECT_EQ(sys.max("policy0"), "1200000");
    EXPECT_EQ(sys.max("policy1"), "1200000");
    EXPECT_TRUE(contains(log.text(), "power: set GPU 0 SM clock 1980 -> 660 MHz"));
    EXPECT_TRUE(contains(log.text(), "power: set GPU 1 power limit 700 -> 595 W"));
    EXPECT_TRUE(
        contains(log.text(), "power: set CPU max frequency (policy1) 3000000 -> 1200000 kHz"));
    EXPECT_FALSE(contains(log.text(), "GPU 2 SM clock"));

    // Only changes are applied: the same plan again logs nothing.
    const std::string before = log.text();
    pm.apply(plan({Phase::data_loading, Phase::nccl_collective, Phase::gpu_compute},
                  Phase::gpu_compute));
    EXPECT_EQ(log.text(), before);

    // GPU 0 goes to compute (back to the original), GPU 1 to data loading; CPUs full = original.
    pm.apply(plan({Phase::gpu_compute, Phase::data_loading, Phase::optimizer_step},
                  Phase::data_loading));
    EXPECT_EQ(nvml->clocks(0)->sm_application, 1980U);
    EXPECT_EQ(nvml->power_limits(0)->current_mw, 700'000U);
    EXPECT_EQ(nvml->clocks(1)->sm_application, 660U);
    EXPECT_EQ(nvml->power_limits(1)->current_mw, 546'000U);
    EXPECT_EQ(sys.max("policy0"), "3600000");
    EXPECT_EQ(sys.max("policy1"), "3000000");  // the admin's cap, not cpuinfo_max_freq

    pm.apply(plan({Phase::nccl_collective, Phase::data_loading, Phase::data_loading},
                  Phase::nccl_collective));
    EXPECT_EQ(nvml->power_limits(2)->current_mw, 546'000U);
    EXPECT_EQ(pm.errors(), 0U);
    ASSERT_TRUE(pm.restore().ok());
    ASSERT_TRUE(pm.restore().ok());  // idempotent
    for (std::uint32_t d = 0; d < 2; ++d) {
      EXPECT_EQ(nvml->clocks(d)->sm_application, 1980U) << d;
      EXPECT_EQ(nvml->power_limits(d)->current_mw, 700'000U) << d;
    }
    EXPECT_EQ(nvml->power_limits(2)->current_mw, 600'000U);
    EXPECT_EQ(sys.max("policy0"), "3600000");
    EXPECT_EQ(sys.max("policy1"), "3000000");

    // The destructor restores what a later apply changed.
    pm.apply(plan({Phase::data_loading}, Phase::gpu_compute));
    EXPECT_EQ(nvml->clocks(0)->sm_application, 660U);
    EXPECT_EQ(sys.max("policy0"), "1200000");
  }
  EXPECT_EQ(nvml->clocks(0)->sm_application, 1980U);
  EXPECT_EQ(nvml->power_limits(0)->current_mw, 700'000U);
  EXPECT_EQ(sys.max("policy0"), "3600000");
  EXPECT_EQ(sys.max("policy1"), "3000000");
}

TEST(Power, dry_run_logs_every_change_and_makes_none) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu(2);
  FakeSys sys;
  auto nvml = load_nvml();
  ASSERT_NE(nvml, nullptr);
  LogCapture log;
  PowerManager pm({true, true, true, sys.root()}, nvml.get());
  pm.apply(plan({Phase::gpu_compute, Phase::data_loading}, Phase::gpu_compute));
  const std::string text = log.text();
  EXPECT_TRUE(contains(text, "power: would set GPU 1 SM clock 1980 -> 660 MHz")) << text;
  EXPECT_TRUE(contains(text, "power: would set GPU 1 power limit 700 -> 546 W")) << text;
  EXPECT_TRUE(contains(text, "power: would set CPU max frequency (policy0) 3600000 -> 1200000 kHz"))
      << text;
  EXPECT_FALSE(contains(text, "GPU 0 SM clock"));
  EXPECT_EQ(nvml->clocks(1)->sm_application, 1980U);
  EXPECT_EQ(nvml->power_limits(1)->current_mw, 700'000U);
  EXPECT_FALSE(nvml->original_settings(1).changed());
  EXPECT_EQ(sys.max("policy0"), "3600000");
  pm.apply(plan({Phase::gpu_compute, Phase::gpu_compute}, Phase::data_loading));
  EXPECT_TRUE(contains(log.text(), "power: would set GPU 1 SM clock 660 -> 1980 MHz"));
  EXPECT_TRUE(
      contains(log.text(), "power: would set CPU max frequency (policy1) 1200000 -> 3000000 kHz"));
  EXPECT_TRUE(pm.restore().ok());
}

TEST(Power, clamps_the_power_limit_to_the_device_minimum) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu(1);
  auto nvml = load_nvml();
  ASSERT_NE(nvml, nullptr);
  // The emulated device's limits are fixed (200..700 W), so 78 % of the default always fits;
  // this checks that the limit set stays within them (the clamp itself is plain arithmetic).
  PowerManager pm({false, true, false, "/nonexistent"}, nvml.get());
  pm.apply(plan({Phase::data_loading}, Phase::unknown));
  const auto limits = nvml->power_limits(0);
  ASSERT_TRUE(limits.ok());
  EXPECT_GE(limits->current_mw, limits->min_mw);
  EXPECT_LE(limits->current_mw, limits->max_mw);
  EXPECT_EQ(pm.cpu_policy_count(), 0U);
}

TEST(Power, a_failing_setter_is_counted_and_the_rest_goes_on) {
  REQUIRE_FAKE_GPU();
  if (geteuid() == 0) GTEST_SKIP() << "root may set anything";
  EmulatedGpu gpu(1);
  unsetenv("ZERNEL_FAKE_GPU_UNRESTRICTED");
  FakeSys sys;
  auto nvml = load_nvml();
  ASSERT_NE(nvml, nullptr);
  PowerManager pm({false, true, true, sys.root()}, nvml.get());
  pm.apply(plan({Phase::data_loading}, Phase::gpu_compute));
  EXPECT_GE(pm.errors(), 1U);
  EXPECT_EQ(sys.max("policy0"), "1200000");
}

TEST(Power, cpu_writes_that_fail_are_counted_and_restore_reports_them) {
  FakeSys sys;
  PowerManager pm({false, false, true, sys.root()}, nullptr);
  ASSERT_EQ(pm.cpu_policy_count(), 2U);
  // Replace policy0's file by a directory: writing it fails.
  const fs::path f = fs::path(sys.root()) / "devices/system/cpu/cpufreq/policy0/scaling_max_freq";
  fs::remove(f);
  fs::create_directory(f);
  pm.apply(plan({}, Phase::gpu_compute));
  EXPECT_EQ(pm.errors(), 1U);
  EXPECT_EQ(sys.max("policy1"), "1200000");
  EXPECT_TRUE(pm.restore().ok());  // policy0 was never changed; policy1 is put back
  EXPECT_EQ(sys.max("policy1"), "3000000");
}

// A settings journal in a fresh temporary directory (removed with it).
class TempJournal : public test_support::TempTree {
 public:
  TempJournal() : TempTree("zernel-power-journal") {}
  [[nodiscard]] std::string path() const { return TempTree::path("run/settings.journal").string(); }
};

TEST(Power, journals_the_originals_before_the_first_change_and_removes_them_after_restore) {
  REQUIRE_FAKE_GPU();
  EmulatedGpu gpu(2);
  FakeSys sys;
  TempJournal tj;
  auto nvml = load_nvml();
  ASSERT_NE(nvml, nullptr);
  auto journal = SettingsJournal::open(tj.path());
  ASSERT_TRUE(journal.ok()) << journal.error().message();
  PowerManager pm({false, true, true, sys.root()}, nvml.get(), *journal);
  EXPECT_FALSE(fs::exists(tj.path()));  // nothing changed yet
  pm.apply(plan({Phase::gpu_compute, Phase::gpu_compute}, Phase::data_loading));
  EXPECT_FALSE(fs::exists(tj.path()));  // full everywhere: still nothing changed
  pm.apply(plan({Phase::data_loading, Phase::gpu_compute}, Phase::gpu_compute));
  EXPECT_EQ(nvml->clocks(0)->sm_application, 660U);
  auto j = read_settings_journal(tj.path());
  ASSERT_TRUE(j.ok() && j->has_value());
  const SettingsOriginals& o = (*j)->originals;
  ASSERT_EQ(o.gpus.size(), 2U);  // every managed GPU, the untouched one too
  EXPECT_EQ(o.gpus[0].bus_id, nvml->devices()[0].bus_id);
  EXPECT_EQ(o.gpus[0].clocks, (sys::ApplicationClocks{3201, 1980}));
  EXPECT_EQ(o.gpus[0].power_limit_mw, 700'000U);
  EXPECT_EQ(o.cpufreq,
            (std::vector<CpufreqOriginal>{{"policy0", 3'600'000}, {"policy1", 3'000'000}}));
  EXPECT_FALSE(o.delayacct.has_value());
  ASSERT_TRUE(pm.restore().ok());
  EXPECT_FALSE(fs::exists(tj.path()));
  EXPECT_EQ(nvml->clocks(0)->sm_application, 1980U);
}

TEST(Power, a_dry_run_journals_nothing) {
  FakeSys sys;
  TempJournal tj;
  auto journal = SettingsJournal::open(tj.path());
  ASSERT_TRUE(journal.ok());
  PowerManager pm({true, false, true, sys.root()}, nullptr, *journal);
  pm.apply(plan({}, Phase::gpu_compute));
  EXPECT_FALSE(fs::exists(tj.path()));
  EXPECT_TRUE(pm.restore().ok());
}

TEST(Power, without_a_journal_it_changes_nothing_and_counts_the_error_fail) {
  FakeSys sys;
  TempJournal tj;
  tj.write("run", "a file where the journal's directory should be");
  auto journal = SettingsJournal::open(tj.path());
  ASSERT_TRUE(journal.ok());
  LogCapture log;
  PowerManager pm({false, false, true, sys.root()}, nullptr, *journal);
  pm.apply(plan({}, Phase::gpu_compute));
  EXPECT_EQ(sys.max("policy0"), "3600000");
  EXPECT_EQ(sys.max("policy1"), "3000000");
  EXPECT_GE(pm.errors(), 1U);
  EXPECT_TRUE(contains(log.text(), "power: no change until the originals are journaled"))
      << log.text();
  tj.remove("run");
  pm.apply(plan({}, Phase::data_loading));  // back to full: nothing to do
  pm.apply(plan({}, Phase::gpu_compute));   // the journal works again: the change is made
  EXPECT_EQ(sys.max("policy0"), "1200000");
  EXPECT_TRUE(fs::exists(tj.path()));
  EXPECT_TRUE(pm.restore().ok());
  EXPECT_FALSE(fs::exists(tj.path()));
}

TEST(Power, make_power_manager_is_null_when_disabled) {
  config::PowerConfig cfg;
  EXPECT_EQ(make_power_manager(cfg, nullptr, "/nonexistent"), nullptr);
  cfg.enabled = true;
  cfg.manage_gpu = false;
  FakeSys sys;
  auto pm = make_power_manager(cfg, nullptr, sys.root());
  ASSERT_NE(pm, nullptr);
  EXPECT_EQ(pm->cpu_policy_count(), 2U);
  apply_power(nullptr, policy::Engine(policy::EngineOptions{}, policy::Topology::single_node(1)));
}

}  // namespace
}  // namespace zernel::enforce
