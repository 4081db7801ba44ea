// The settings journal (enforce/settings_journal.hpp): its format, and crash recovery on fake
// /proc and /sys trees (and the emulated GPU) in a temporary directory.

#include "enforce/settings_journal.hpp"

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
#include "sys/journal_file.hpp"

#ifndef ZERNEL_FAKE_LIB_DIR
#define ZERNEL_FAKE_LIB_DIR ""
#endif

namespace zernel::enforce {
namespace {

using test_support::contains;
using test_support::EmulatedGpu;
using test_support::LogCapture;

namespace fs = std::filesystem;

// ROOT/proc (task_delayacct, and stat files of the pids a test makes), ROOT/sys (cpufreq
// policy0 and policy1) and ROOT/run/settings.journal.
class FakeMachine : public test_support::TempTree {
 public:
  FakeMachine() : TempTree("zernel-settings") {
    set_delayacct("0");
    for (const char* p : {"policy0", "policy1"}) set_max(p, "3600000");
  }

  [[nodiscard]] std::string proc() const { return path("proc").string(); }
  [[nodiscard]] std::string sys() const { return path("sys").string(); }
  [[nodiscard]] std::string journal() const { return path("run/settings.journal").string(); }

  void set_delayacct(const std::string& v) const {
    write("proc/sys/kernel/task_delayacct", v + "\n");
  }
  [[nodiscard]] std::string delayacct() const { return read("proc/sys/kernel/task_delayacct"); }
  void set_max(const std::string& policy, const std::string& khz) const {
    write(max_file(policy), khz + "\n");
  }
  [[nodiscard]] std::string max(const std::string& policy) const { return read(max_file(policy)); }
  // A process PID that started at START, as /proc/PID/stat shows it.
  void add_process(std::uint32_t pid, std::uint64_t start) const {
    write("proc/" + std::to_string(pid) + "/stat",
          std::to_string(pid) + " (zernel-schedul) S 1 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 " +
              std::to_string(start) + "\n");
  }

 private:
  static std::string max_file(const std::string& policy) {
    return "sys/devices/system/cpu/cpufreq/" + policy + "/scaling_max_freq";
  }
  [[nodiscard]] std::string read(const std::string& rel) const {
    std::ifstream in(path(rel));
    std::string v;
    in >> v;
    return v;
  }
};

SettingsJournalFile sample(std::uint32_t pid = 4242, std::uint64_t start = 1000) {
  SettingsJournalFile j;
  j.owner_pid = pid;
  j.owner_start = start;
  j.originals.delayacct = false;
  j.originals.cpufreq = {{"policy0", 3'600'000}, {"policy1", 3'000'000}};
  j.originals.gpus = {{0, "0000:1b:00.0", {3201, 1980}, 700'000},
                      {1, "0000:1c:00.0", {3201, 1800}, 650'000}};
  return j;
}

TEST(SettingsJournal, format_and_parse_round_trip) {
  const SettingsJournalFile j = sample();
  const std::string text = format_settings_journal(j);
  EXPECT_EQ(text,
            "zernel-settings-journal 1\n"
            "owner 4242 1000\n"
            "delayacct 0\n"
            "cpufreq 706f6c69637930 3600000\n"
            "cpufreq 706f6c69637931 3000000\n"
            "gpu 0 303030303a31623a30302e30 3201 1980 700000\n"
            "gpu 1 303030303a31633a30302e30 3201 1800 650000\n"
            "end\n");
  auto back = parse_settings_journal(text);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, j);

  SettingsJournalFile empty;
  empty.owner_pid = 7;
  empty.owner_start = 9;
  auto e = parse_settings_journal(format_settings_journal(empty));
  ASSERT_TRUE(e.ok()) << e.error().message();
  EXPECT_EQ(*e, empty);
}

TEST(SettingsJournal, a_truncated_journal_is_an_error_naming_the_last_line_fail) {
  std::string text = format_settings_journal(sample());
  text.resize(text.rfind("end\n"));  // a crash before the last line
  auto r = parse_settings_journal(text);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), EINVAL);
  EXPECT_TRUE(contains(r.error().message(), "truncated after line 7")) << r.error().message();
  EXPECT_FALSE(parse_settings_journal("").ok());
}

TEST(SettingsJournal, a_bad_line_is_an_error_naming_it_fail) {
  const std::string head = "zernel-settings-journal 1\nowner 4242 1000\n";
  for (const auto& [line, why] : std::vector<std::pair<std::string, std::string>>{
           {"delayacct 2", "expected: delayacct 0|1"},
           {"cpufreq 706f6c69637930", "expected: cpufreq POLICY KHZ"},
           {"cpufreq 2f 3600000", "bad cpufreq policy name"},    // "/"
           {"cpufreq 2e2e 3600000", "bad cpufreq policy name"},  // ".."
           {"cpufreq 706f6c69637930 fast", "bad frequency"},
           {"gpu 0 zz 3201 1980 700000", "bad PCI bus id"},
           {"gpu 0 303030303a31623a30302e30 3201 0 700000", "bad clocks or power limit"},
           {"thread 1 2 3 0-3", "unexpected record"},
           {"", "empty line"}}) {
    auto r = parse_settings_journal(head + line + "\nend\n");
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_EQ(r.error().code(), EINVAL);
    EXPECT_TRUE(contains(r.error().message(), "line 3: " + why)) << r.error().message();
  }
  auto magic = parse_settings_journal("zernel-userspace-journal 1\nowner 1 2\nend\n");
  ASSERT_FALSE(magic.ok());
  EXPECT_TRUE(contains(magic.error().message(), "line 1: not a zernel settings journal"));
  auto twice = parse_settings_journal(head + "delayacct 0\ndelayacct 1\nend\n");
  ASSERT_FALSE(twice.ok());
  EXPECT_TRUE(contains(twice.error().message(), "line 4: a second delayacct record"));
  auto after = parse_settings_journal(head + "end\ndelayacct 0\n");
  ASSERT_FALSE(after.ok());
  EXPECT_TRUE(contains(after.error().message(), "line 4: text after \"end\""));
}

TEST(SettingsJournal, the_path_comes_from_the_environment_when_set) {
  unsetenv(kSettingsJournalEnv);
  EXPECT_EQ(settings_journal_path(), "/run/zernel/settings.journal");
  setenv(kSettingsJournalEnv, "/tmp/x.journal", 1);
  EXPECT_EQ(settings_journal_path(), "/tmp/x.journal");
  unsetenv(kSettingsJournalEnv);
}

TEST(SettingsJournal, no_journal_means_nothing_to_recover) {
  FakeMachine m;
  m.set_delayacct("1");
  ASSERT_TRUE(recover_settings(m.journal(), m.proc(), m.sys(), nullptr).ok());
  EXPECT_EQ(m.delayacct(), "1");
}

TEST(SettingsJournal, recovery_of_a_dead_owner_restores_every_setting_and_removes_the_file) {
  FakeMachine m;
  // What the killed daemon left: delay accounting on, both policies at the minimum.
  m.set_delayacct("1");
  m.set_max("policy0", "1200000");
  m.set_max("policy1", "1200000");
  SettingsJournalFile j = sample();
  j.originals.gpus.clear();
  ASSERT_TRUE(write_settings_journal(m.journal(), j).ok());  // pid 4242: not in the fake /proc
  LogCapture log("%l %v");
  auto r = recover_settings(m.journal(), m.proc(), m.sys(), nullptr);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(m.delayacct(), "0");
  EXPECT_EQ(m.max("policy0"), "3600000");
  EXPECT_EQ(m.max("policy1"), "3000000");
  EXPECT_FALSE(fs::exists(m.journal()));
  const std::string text = log.text();
  EXPECT_TRUE(contains(text, "restored kernel.task_delayacct to 0")) << text;
  EXPECT_TRUE(contains(text, "restored CPU max frequency (policy1) 1200000 -> 3000000 kHz"))
      << text;
  EXPECT_TRUE(contains(text, "restored 3 settings left by daemon 4242 (not stopped cleanly)"))
      << text;
}

TEST(SettingsJournal, a_reused_pid_counts_as_a_dead_owner) {
  FakeMachine m;
  m.add_process(4242, 999);  // pid 4242 now, but started at another time
  m.set_delayacct("1");
  ASSERT_TRUE(write_settings_journal(m.journal(), sample(4242, 1000)).ok());
  EXPECT_FALSE(process_running(m.proc(), 4242, 1000));
  EXPECT_TRUE(process_running(m.proc(), 4242, 999));
  auto r = recover_settings(m.journal(), m.proc(), m.sys(), nullptr);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(m.delayacct(), "0");
}

TEST(SettingsJournal, a_live_owner_is_refused_and_nothing_changes_fail) {
  FakeMachine m;
  m.set_delayacct("1");
  const auto self = static_cast<std::uint32_t>(getpid());
  const std::uint64_t start = own_start_time("/proc");
  ASSERT_NE(start, 0U);
  ASSERT_TRUE(process_running("/proc", self, start));
  ASSERT_TRUE(write_settings_journal(m.journal(), sample(self, start)).ok());
  m.add_process(self, start);  // the fake /proc shows this process as the owner too
  auto r = recover_settings(m.journal(), m.proc(), m.sys(), nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), EBUSY);
  EXPECT_TRUE(contains(r.error().message(), m.journal())) << r.error().message();
  EXPECT_TRUE(contains(r.error().message(), "(pid " + std::to_string(self) + ")"))
      << r.error().message();
  EXPECT_EQ(m.delayacct(), "1");
  EXPECT_TRUE(fs::exists(m.journal()));
  // SettingsJournal::open refuses another running daemon's file too.
  m.add_process(555, 5);
  ASSERT_TRUE(write_settings_journal(m.journal(), sample(555, 5)).ok());
  auto open = SettingsJournal::open(m.journal(), m.proc());
  ASSERT_FALSE(open.ok());
  EXPECT_EQ(open.error().code(), EBUSY);
}

TEST(SettingsJournal, a_corrupt_journal_names_the_file_and_line_and_what_to_do_fail) {
  FakeMachine m;
  m.set_delayacct("1");
  ASSERT_TRUE(sys::write_file_atomically(m.journal(),
                                         "zernel-settings-journal 1\nowner 4242 1000\nbogus\nend\n")
                  .ok());
  auto r = recover_settings(m.journal(), m.proc(), m.sys(), nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), EINVAL);
  EXPECT_TRUE(contains(r.error().message(), m.journal() + ": line 3")) << r.error().message();
  EXPECT_TRUE(contains(r.error().message(), "remove the file")) << r.error().message();
  EXPECT_EQ(m.delayacct(), "1");
  EXPECT_TRUE(fs::exists(m.journal()));
}

TEST(SettingsJournal, without_nvml_the_gpu_entries_are_kept_for_a_later_start) {
  FakeMachine m;
  m.set_delayacct("1");
  ASSERT_TRUE(write_settings_journal(m.journal(), sample()).ok());
  LogCapture log("%l %v");
  ASSERT_TRUE(recover_settings(m.journal(), m.proc(), m.sys(), nullptr).ok());
  EXPECT_EQ(m.delayacct(), "0");
  EXPECT_TRUE(contains(log.text(),
                       "warning settings journal: 2 GPU setting(s) not restored: NVML "
                       "is not available"))
      << log.text();
  auto left = read_settings_journal(m.journal());
  ASSERT_TRUE(left.ok() && left->has_value());
  EXPECT_EQ((*left)->owner_pid, 4242U);
  EXPECT_FALSE((*left)->originals.delayacct.has_value());
  EXPECT_TRUE((*left)->originals.cpufreq.empty());
  EXPECT_EQ((*left)->originals.gpus, sample().originals.gpus);

  // This daemon's journal keeps them when it records its own originals, and so does its clean
  // exit: the file stays for the start that has NVML.
  auto j = SettingsJournal::open(m.journal(), m.proc());
  ASSERT_TRUE(j.ok()) << j.error().message();
  SettingsOriginals acct;
  acct.delayacct = false;
  ASSERT_TRUE((*j)->record(acct).ok());
  auto now = read_settings_journal(m.journal());
  ASSERT_TRUE(now.ok() && now->has_value());
  EXPECT_EQ((*now)->owner_pid, static_cast<std::uint32_t>(getpid()));
  EXPECT_EQ((*now)->originals.gpus.size(), 2U);
  EXPECT_EQ((*now)->originals.delayacct, std::optional<bool>(false));
  ASSERT_TRUE((*j)->forget(acct).ok());
  auto after = read_settings_journal(m.journal());
  ASSERT_TRUE(after.ok() && after->has_value());
  EXPECT_EQ((*after)->originals.gpus.size(), 2U);
  EXPECT_FALSE((*after)->originals.delayacct.has_value());
}

TEST(SettingsJournal, a_setting_that_cannot_be_restored_is_a_warning_and_the_rest_goes_on) {
  FakeMachine m;
  m.set_delayacct("1");
  SettingsJournalFile j = sample();
  j.originals.gpus.clear();
  j.originals.cpufreq.push_back({"policy9", 2'000'000});  // gone since
  ASSERT_TRUE(write_settings_journal(m.journal(), j).ok());
  m.set_max("policy0", "1200000");
  LogCapture log("%l %v");
  ASSERT_TRUE(recover_settings(m.journal(), m.proc(), m.sys(), nullptr).ok());
  EXPECT_TRUE(contains(log.text(), "CPU max frequency (policy9) not restored to 2000000 kHz"))
      << log.text();
  EXPECT_TRUE(contains(log.text(), "restored 3 settings left by daemon 4242")) << log.text();
  EXPECT_EQ(m.max("policy0"), "3600000");
  EXPECT_EQ(m.delayacct(), "0");
  EXPECT_FALSE(fs::exists(m.journal()));
}

TEST(SettingsJournal, records_before_changes_keeps_the_first_original_and_removes_the_empty_file) {
  FakeMachine m;
  auto opened = SettingsJournal::open(m.journal(), m.proc());
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  SettingsJournal& j = **opened;
  EXPECT_FALSE(fs::exists(m.journal()));  // nothing recorded, nothing written
  SettingsOriginals cpu;
  cpu.cpufreq = {{"policy0", 3'600'000}};
  ASSERT_TRUE(j.record(cpu).ok());
  SettingsOriginals later;
  later.cpufreq = {{"policy0", 1'200'000}};  // a later "original" of the same policy
  later.delayacct = false;
  ASSERT_TRUE(j.record(later).ok());
  auto f = read_settings_journal(m.journal());
  ASSERT_TRUE(f.ok() && f->has_value());
  EXPECT_EQ((*f)->owner_pid, static_cast<std::uint32_t>(getpid()));
  ASSERT_EQ((*f)->originals.cpufreq.size(), 1U);
  EXPECT_EQ((*f)->originals.cpufreq[0].khz, 3'600'000U);
  EXPECT_EQ((*f)->originals.delayacct, std::optional<bool>(false));
  ASSERT_TRUE(j.forget(cpu).ok());
  EXPECT_TRUE(fs::exists(m.journal()));
  ASSERT_TRUE(j.forget(later).ok());
  EXPECT_FALSE(fs::exists(m.journal()));
}

TEST(SettingsJournal, an_unwritable_journal_is_an_error_and_records_nothing_fail) {
  FakeMachine m;
  // A regular file where the directory should be.
  const std::string blocker = fs::path(m.journal()).parent_path().string();
  std::ofstream(blocker) << "x";
  auto opened = SettingsJournal::open(blocker + "/settings.journal", m.proc());
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  SettingsOriginals acct;
  acct.delayacct = false;
  EXPECT_FALSE((*opened)->record(acct).ok());
  EXPECT_TRUE((*opened)->originals().empty());
}

// ---- GPUs, on the emulated GPU (tools/fake_gpu)

std::string fake_nvml() { return std::string(ZERNEL_FAKE_LIB_DIR) + "/libnvidia-ml.so.1"; }

TEST(SettingsJournal, recovery_restores_the_gpus_by_bus_id_and_leaves_nothing_to_undo) {
  if (std::string(ZERNEL_FAKE_LIB_DIR).empty()) GTEST_SKIP() << "no emulated GPU";
  EmulatedGpu gpu(2);
  FakeMachine m;
  m.set_delayacct("0");
  // A killed daemon lowered both GPUs (a child that exits without restoring).
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto k = sys::Nvml::load(fake_nvml());
    const bool ok = k.ok() && (*k)->set_application_clocks(0, {3201, 660}).ok() &&
                    (*k)->set_power_limit(0, 546'000).ok() &&
                    (*k)->set_application_clocks(1, {3201, 990}).ok() &&
                    (*k)->set_power_limit(1, 595'000).ok();
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  auto nvml = sys::Nvml::load(fake_nvml());
  ASSERT_TRUE(nvml.ok()) << nvml.error().message();
  sys::Nvml& n = **nvml;
  ASSERT_EQ(n.devices().size(), 2U);
  SettingsJournalFile j;
  j.owner_pid = 4242;
  j.owner_start = 1000;
  // GPU 1's entry carries a stale index: the bus id decides.
  j.originals.gpus = {{7, n.devices()[1].bus_id, {3201, 1800}, 650'000},
                      {0, n.devices()[0].bus_id, {3201, 1980}, 700'000},
                      {2, "0000:99:00.0", {3201, 1980}, 700'000}};  // not in this machine
  ASSERT_TRUE(write_settings_journal(m.journal(), j).ok());
  LogCapture log("%l %v");
  ASSERT_TRUE(recover_settings(m.journal(), m.proc(), m.sys(), &n).ok());
  EXPECT_EQ(n.clocks(0)->sm_application, 1980U);
  EXPECT_EQ(n.power_limits(0)->current_mw, 700'000U);
  EXPECT_EQ(n.clocks(1)->sm_application, 1800U);
  EXPECT_EQ(n.power_limits(1)->current_mw, 650'000U);
  // The restored values are the originals now: nothing for this Nvml to undo at its end.
  EXPECT_FALSE(n.original_settings(0).changed());
  EXPECT_FALSE(n.original_settings(1).changed());
  EXPECT_FALSE(fs::exists(m.journal()));
  const std::string text = log.text();
  EXPECT_TRUE(contains(
      text, "restored GPU 1 (" + n.devices()[1].bus_id + ") application clocks 990 -> 1800 MHz"))
      << text;
  EXPECT_TRUE(contains(text, "GPU 2 (0000:99:00.0) not restored: no GPU with that bus id")) << text;
  EXPECT_TRUE(contains(text, "restored 2 settings left by daemon 4242 (not stopped cleanly)"))
      << text;
}

}  // namespace
}  // namespace zernel::enforce
