// The sched_ext backend's pure parts (src/enforce/scx/*.hpp): decision -> map value translation,
// "unchanged" detection, tenant values, exit kinds and restart advice, /sys/kernel/sched_ext
// checks on fake trees, and the backend factory on a kernel without sched_ext. None of this
// needs a sched_ext kernel; the VM tests (tests/vm/scx_*) cover the scheduler itself.

#include <gtest/gtest.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>

#include "enforce/backend.hpp"
#include "enforce/scx/decision_map.hpp"
#include "enforce/scx/exit_info.hpp"
#include "policy/decision.hpp"
#include "policy/phase.hpp"
#include "support/temp_tree.hpp"
#include "sys/sched_ext.hpp"

#ifdef ZERNEL_HAVE_SCX
#include "enforce/scx/scx_backend.hpp"
#endif

namespace zernel::enforce::scx {
namespace {

namespace fs = std::filesystem;

policy::Decision sample() {
  policy::Decision d;
  d.pid = 4242;
  d.phase = policy::Phase::nccl_collective;
  d.preempt = true;
  d.priority = 10;
  d.weight = 9537;
  d.latency_target_us = 50;
  d.slice_ns = 10'000'000;
  d.preferred_cpu = 3;
  d.tenant = 7;
  d.tenant_weight = 300;
  return d;
}

// A fake sysfs root, removed at the end of the test.
class FakeSys : public test_support::TempTree {
 public:
  FakeSys() : TempTree("zernel-scx-test") {}
};

TEST(ScxDecisionMap, carries_every_field_of_the_decision) {
  auto v = to_map_value(sample());
  EXPECT_EQ(v.weight, 9537U);
  EXPECT_EQ(v.tenant_weight, 300U);
  EXPECT_EQ(v.slice_ns, 10'000'000U);
  EXPECT_EQ(v.latency_target_us, 50U);
  EXPECT_EQ(v.preferred_cpu, 3);
  EXPECT_EQ(v.preferred_node, ZERNEL_NO_CPU);  // the BPF side takes the preferred CPU's node
  EXPECT_EQ(v.tenant, 7U);
  EXPECT_EQ(v.phase, ZERNEL_PHASE_NCCL_COLLECTIVE);
  EXPECT_EQ(v.flags, ZERNEL_DF_PREEMPT);
  EXPECT_EQ(v.__reserved, 0U);
}

TEST(ScxDecisionMap, a_default_decision_is_weight_1024_no_tenant_no_cpu_no_preempt) {
  policy::Decision d;
  d.pid = 1;
  auto v = to_map_value(d);
  EXPECT_EQ(v.weight, 1024U);
  EXPECT_EQ(v.tenant, ZERNEL_NO_TENANT);
  EXPECT_EQ(v.tenant_weight, 100U);
  EXPECT_EQ(v.preferred_cpu, ZERNEL_NO_CPU);
  EXPECT_EQ(v.flags, 0U);
  EXPECT_EQ(v.latency_target_us, 0U);
  EXPECT_EQ(v.slice_ns, 20'000'000U);
  EXPECT_EQ(v.phase, ZERNEL_PHASE_UNKNOWN);
}

TEST(ScxDecisionMap, every_phase_maps_to_its_contract_value) {
  for (auto p : policy::kAllPhases) {
    policy::Decision d;
    d.phase = p;
    EXPECT_EQ(to_map_value(d).phase, policy::index_of(p)) << policy::phase_name(p);
  }
}

TEST(ScxDecisionMap, clamps_weights_and_slices_to_the_contract_ranges) {
  policy::Decision d;
  d.weight = 0;
  d.tenant_weight = 0;
  d.slice_ns = 1;
  auto lo = to_map_value(d);
  EXPECT_EQ(lo.weight, std::uint32_t{ZERNEL_WEIGHT_MIN});
  EXPECT_EQ(lo.tenant_weight, std::uint32_t{ZERNEL_TENANT_WEIGHT_MIN});
  EXPECT_EQ(lo.slice_ns, kSliceMinNs);
  d.weight = 10'000'000;
  d.tenant_weight = 1'000'000;
  d.slice_ns = 60'000'000'000ULL;
  auto hi = to_map_value(d);
  EXPECT_EQ(hi.weight, std::uint32_t{ZERNEL_WEIGHT_MAX});
  EXPECT_EQ(hi.tenant_weight, std::uint32_t{ZERNEL_TENANT_WEIGHT_MAX});
  EXPECT_EQ(hi.slice_ns, kSliceMaxNs);
  d.slice_ns = 0;
  EXPECT_EQ(to_map_value(d).slice_ns, 0U);  // 0 = the scheduler's default slice
}

TEST(ScxDecisionMap, out_of_range_tenant_slots_and_negative_cpus_mean_none) {
  policy::Decision d;
  d.tenant = ZERNEL_MAX_TENANTS;
  d.preferred_cpu = -7;
  auto v = to_map_value(d);
  EXPECT_EQ(v.tenant, ZERNEL_NO_TENANT);
  EXPECT_EQ(v.preferred_cpu, ZERNEL_NO_CPU);
}

TEST(ScxDecisionMap, same_value_sees_a_change_in_any_field) {
  auto base = to_map_value(sample());
  EXPECT_TRUE(same_value(base, to_map_value(sample())));
  auto changed = [&](auto mutate) {
    auto d = sample();
    mutate(d);
    return !same_value(base, to_map_value(d));
  };
  EXPECT_TRUE(changed([](policy::Decision& d) { d.weight += 1; }));
  EXPECT_TRUE(changed([](policy::Decision& d) { d.tenant_weight += 1; }));
  EXPECT_TRUE(changed([](policy::Decision& d) { d.slice_ns += 1000; }));
  EXPECT_TRUE(changed([](policy::Decision& d) { d.latency_target_us += 1; }));
  EXPECT_TRUE(changed([](policy::Decision& d) { d.preferred_cpu = 4; }));
  EXPECT_TRUE(changed([](policy::Decision& d) { d.tenant = 8; }));
  EXPECT_TRUE(changed([](policy::Decision& d) { d.phase = policy::Phase::data_loading; }));
  EXPECT_TRUE(changed([](policy::Decision& d) { d.preempt = false; }));
  // Fields the kernel does not see do not count as changes.
  EXPECT_FALSE(changed([](policy::Decision& d) { d.phase_changed = !d.phase_changed; }));
  EXPECT_FALSE(changed([](policy::Decision& d) { d.priority += 1; }));
}

TEST(ScxDecisionMap, tenant_values_are_clamped_to_the_cpu_weight_range) {
  EXPECT_EQ(tenant_value(300).weight, 300U);
  EXPECT_EQ(tenant_value(0).weight, 1U);
  EXPECT_EQ(tenant_value(50'000).weight, 10'000U);
  EXPECT_EQ(tenant_value(300).__pad0, 0U);
}

TEST(ScxContract, layouts_match_on_the_cpp_side) {
  EXPECT_EQ(sizeof(zernel_decision), 40U);
  EXPECT_EQ(sizeof(zernel_tenant), 8U);
  EXPECT_EQ(sizeof(zernel_tenant_load), 16U);
  EXPECT_EQ(sizeof(zernel_task_ctx), 80U);
  EXPECT_EQ(ZERNEL_MAX_TASKS, 65536);
}

TEST(ScxExit, names_every_kernel_exit_kind) {
  EXPECT_EQ(exit_kind_name(ZERNEL_EXIT_UNREG), "UNREG");
  EXPECT_EQ(exit_kind_name(ZERNEL_EXIT_SYSRQ), "SYSRQ");
  EXPECT_EQ(exit_kind_name(ZERNEL_EXIT_ERROR_BPF), "ERROR_BPF");
  EXPECT_EQ(exit_kind_name(ZERNEL_EXIT_ERROR_STALL), "ERROR_STALL");
  EXPECT_EQ(exit_kind_name(12345), "UNKNOWN");
}

TEST(ScxExit, the_kernels_restart_request_means_restart_now) {
  auto code = static_cast<std::int64_t>(ZERNEL_ECODE_ACT_RESTART | ZERNEL_ECODE_RSN_HOTPLUG);
  EXPECT_EQ(restart_advice(ZERNEL_EXIT_UNREG_KERN, code), RestartAdvice::restart);
  EXPECT_EQ(restart_advice(ZERNEL_EXIT_UNREG_BPF, code), RestartAdvice::restart);
}

TEST(ScxExit, errors_and_stalls_advise_a_restart_with_backoff) {
  EXPECT_EQ(restart_advice(ZERNEL_EXIT_ERROR, 0), RestartAdvice::restart_with_backoff);
  EXPECT_EQ(restart_advice(ZERNEL_EXIT_ERROR_BPF, 0), RestartAdvice::restart_with_backoff);
  EXPECT_EQ(restart_advice(ZERNEL_EXIT_ERROR_STALL, 0), RestartAdvice::restart_with_backoff);
  EXPECT_EQ(restart_advice(ZERNEL_EXIT_UNREG_KERN, 0), RestartAdvice::restart_with_backoff);
}

TEST(ScxExit, deliberate_unloads_advise_no_restart) {
  EXPECT_EQ(restart_advice(ZERNEL_EXIT_UNREG, 0), RestartAdvice::none);
  EXPECT_EQ(restart_advice(ZERNEL_EXIT_UNREG_BPF, 0), RestartAdvice::none);
  EXPECT_EQ(restart_advice(ZERNEL_EXIT_SYSRQ, 0), RestartAdvice::none);
  EXPECT_EQ(restart_advice(ZERNEL_EXIT_DONE, 0), RestartAdvice::none);
}

TEST(ScxExit, every_counter_has_a_distinct_name) {
  std::set<std::string_view> names(kStatNames.begin(), kStatNames.end());
  EXPECT_EQ(names.size(), std::size_t{ZERNEL_STAT_NR});
  EXPECT_EQ(names.count(""), 0U);
  EXPECT_EQ(kStatNames[ZERNEL_STAT_KICK_PREEMPT], "kick_preempt");
  EXPECT_EQ(kStatNames[ZERNEL_STAT_RUN_NS_UNDECIDED], "run_ns_undecided");
}

TEST(ScxSysfs, a_kernel_without_sched_ext_is_not_supported) {
  FakeSys fake;
  auto r = sys::check_sched_ext_free(fake.root());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), ENOTSUP);
  EXPECT_NE(r.error().message().find("CONFIG_SCHED_CLASS_EXT"), std::string::npos);
}

TEST(ScxSysfs, a_disabled_sched_ext_is_free) {
  FakeSys fake;
  fake.write("kernel/sched_ext/state", "disabled\n");
  EXPECT_TRUE(sys::check_sched_ext_free(fake.root()));
  auto s = sys::read_sched_ext_state(fake.root());
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, "disabled");
  EXPECT_EQ(s->ops, "");
}

TEST(ScxSysfs, another_loaded_scheduler_is_reported_by_name) {
  FakeSys fake;
  fake.write("kernel/sched_ext/state", "enabled\n");
  fake.write("kernel/sched_ext/root/ops", "scx_simple\n");
  auto r = sys::check_sched_ext_free(fake.root());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), EBUSY);
  EXPECT_NE(r.error().message().find("scx_simple"), std::string::npos);
  EXPECT_NE(r.error().message().find("enabled"), std::string::npos);
}

// Without sched_ext, auto takes the userspace backend (root or CAP_SYS_NICE), else observes.
TEST(BackendFactory, auto_falls_back_to_userspace_without_sched_ext) {
  if (fs::exists("/sys/kernel/sched_ext/state")) {
    GTEST_SKIP() << "this kernel has sched_ext: auto would load the scheduler";
  }
  const fs::path dir = fs::temp_directory_path() / ("zernel-auto-" + std::to_string(::getpid()));
  ::setenv(kUserspaceJournalEnv, (dir / "journal").c_str(), 1);
  ::setenv(kUserspaceCgroupEnv, ("zernel-auto-" + std::to_string(::getpid())).c_str(), 1);
  auto b = make_backend("auto");
  ::unsetenv(kUserspaceJournalEnv);
  ::unsetenv(kUserspaceCgroupEnv);
  ASSERT_TRUE(b) << b.error().message();
  EXPECT_EQ(b.value()->name(), ::geteuid() == 0 ? "userspace" : "observe");
  EXPECT_TRUE(b.value()->shutdown());
  fs::remove_all(dir);
}

TEST(BackendFactory, sched_ext_without_kernel_support_is_a_clear_error) {
  if (fs::exists("/sys/kernel/sched_ext/state")) {
    GTEST_SKIP() << "this kernel has sched_ext";
  }
  auto b = make_backend("sched_ext");
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code(), ENOTSUP);
}

#ifdef ZERNEL_HAVE_SCX
TEST(ScxBackend, create_fails_cleanly_on_a_kernel_without_sched_ext) {
  FakeSys fake;
  Options o;
  o.sys_root = fake.root();
  auto b = ScxBackend::create(o);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code(), ENOTSUP);
  EXPECT_NE(b.error().message().find("loading the sched_ext scheduler"), std::string::npos);
}

TEST(ScxBackend, create_refuses_when_another_scheduler_is_loaded) {
  FakeSys fake;
  fake.write("kernel/sched_ext/state", "enabled\n");
  fake.write("kernel/sched_ext/root/ops", "rusty\n");
  Options o;
  o.sys_root = fake.root();
  auto b = ScxBackend::create(o);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code(), EBUSY);
  EXPECT_NE(b.error().message().find("rusty"), std::string::npos);
}

TEST(ScxBackend, reads_a_boolean_option_from_a_kernel_config) {
  FakeSys fake;
  fake.write("config-y", "CONFIG_A=y\nCONFIG_EXT_GROUP_SCHED=y\n");
  fake.write("config-n", "# CONFIG_EXT_GROUP_SCHED is not set\nCONFIG_EXT_GROUP_SCHED_X=y\n");
  EXPECT_EQ(read_config_bool(fake.dir() / "config-y", "EXT_GROUP_SCHED"), true);
  EXPECT_EQ(read_config_bool(fake.dir() / "config-n", "EXT_GROUP_SCHED"), false);
  EXPECT_EQ(read_config_bool(fake.dir() / "missing", "EXT_GROUP_SCHED"), std::nullopt);
}

TEST(ScxBackend, finds_the_first_cgroup_with_a_cpu_max_quota) {
  FakeSys fake;
  fake.write("cg/cgroup.controllers", "cpu memory\n");
  fake.write("cg/cpu.max", "max 100000\n");
  fake.write("cg/system.slice/cpu.max", "max 100000\n");
  fake.write("cg/system.slice/a.service/cpu.max", "max 100000\n");
  EXPECT_EQ(find_cpu_max_quota(fake.dir() / "cg"), std::nullopt);
  fake.write("cg/kubepods.slice/pod1/cpu.max", "200000 100000\n");
  EXPECT_EQ(find_cpu_max_quota(fake.dir() / "cg"),
            std::optional<std::string>("kubepods.slice/pod1"));
  // Not a cgroup v2 tree: nothing to say.
  fake.write("v1/cpu.max", "20000 100000\n");
  EXPECT_EQ(find_cpu_max_quota(fake.dir() / "v1"), std::nullopt);
  // The directory cap bounds the walk.
  EXPECT_EQ(find_cpu_max_quota(fake.dir() / "cg", 1), std::nullopt);
}

TEST(ScxBackend, reads_the_tick_rate_from_a_kernel_config) {
  FakeSys fake;
  fake.write("config-a", "# comment\nCONFIG_HZ_250=y\nCONFIG_HZ=250\nCONFIG_X=1\n");
  fake.write("config-b", "CONFIG_HZ_1000=y\n");
  fake.write("config-c", "CONFIG_HZ=abc\n");
  fake.write("config-d", "CONFIG_HZ=0\n");
  fake.write("config-e", "CONFIG_HZ=250x\n");
  EXPECT_EQ(read_config_hz(fake.dir() / "config-a"), 250U);
  EXPECT_EQ(read_config_hz(fake.dir() / "config-b"), std::nullopt);
  EXPECT_EQ(read_config_hz(fake.dir() / "config-c"), std::nullopt);
  EXPECT_EQ(read_config_hz(fake.dir() / "config-d"), std::nullopt);
  EXPECT_EQ(read_config_hz(fake.dir() / "config-e"), std::nullopt);
  EXPECT_EQ(read_config_hz(fake.dir() / "missing"), std::nullopt);
  // The host's own config, when it has one, names a sane rate.
  utsname u{};
  ASSERT_EQ(uname(&u), 0);
  if (auto hz = read_config_hz(fs::path("/boot") / (std::string("config-") + u.release))) {
    EXPECT_GE(*hz, 100U);
    EXPECT_LE(*hz, 1000U);
  }
}
#endif

}  // namespace
}  // namespace zernel::enforce::scx
