#include "collect/discovery.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "support/temp_tree.hpp"

namespace zernel::collect {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

// One fabricated process, built with chained setters: P().pid(100).ppid(50).fds({...}).
struct P {
  std::uint32_t pid_ = 0;
  std::string comm_ = "python";
  char state_ = 'S';
  std::uint32_t ppid_ = 1;
  std::uint64_t starttime_ = 1000;
  std::uint32_t flags_ = 4194560;  // PF_RANDOMIZE | PF_FORKNOEXEC, a user process
  std::uint32_t threads_ = 1;
  std::vector<std::pair<int, std::string>> fds_;  // fd number -> link target
  std::string cmdline_;                           // with NULs; empty: comm
  std::string cgroup_ = "0::/user.slice\n";
  std::uint32_t uid_ = 1000;

  P& pid(std::uint32_t v) {
    pid_ = v;
    return *this;
  }
  P& comm(std::string v) {
    comm_ = std::move(v);
    return *this;
  }
  P& state(char v) {
    state_ = v;
    return *this;
  }
  P& ppid(std::uint32_t v) {
    ppid_ = v;
    return *this;
  }
  P& starttime(std::uint64_t v) {
    starttime_ = v;
    return *this;
  }
  P& flags(std::uint32_t v) {
    flags_ = v;
    return *this;
  }
  P& threads(std::uint32_t v) {
    threads_ = v;
    return *this;
  }
  P& fds(std::vector<std::pair<int, std::string>> v) {
    fds_ = std::move(v);
    return *this;
  }
  P& cmdline(std::string v) {
    cmdline_ = std::move(v);
    return *this;
  }
  P& cgroup(std::string v) {
    cgroup_ = std::move(v);
    return *this;
  }
  P& uid(std::uint32_t v) {
    uid_ = v;
    return *this;
  }
};

// Tenant match rules and scan inputs, the same way.
struct M {
  config::TenantMatch m;
  M& comm(std::vector<std::string> v) {
    m.comm = std::move(v);
    return *this;
  }
  M& cmdline(std::vector<std::string> v) {
    m.cmdline = std::move(v);
    return *this;
  }
  M& cgroup(std::vector<std::string> v) {
    m.cgroup = std::move(v);
    return *this;
  }
  M& uid(std::vector<std::uint32_t> v) {
    m.uid = std::move(v);
    return *this;
  }
};

struct In {
  DiscoveryInput in;
  In& nvml_processes(const GpuProcessMap* v) {
    in.nvml_processes = v;
    return *this;
  }
  In& tenants(std::span<const config::TenantConfig> v) {
    in.tenants = v;
    return *this;
  }
  In& max_tracked_tasks(std::uint32_t v) {
    in.max_tracked_tasks = v;
    return *this;
  }
  operator DiscoveryInput() const { return in; }  // NOLINT(google-explicit-constructor)
};

// A fabricated /proc in a fresh temporary directory, removed at the end.
class FakeProc : public test_support::TempTree {
 public:
  FakeProc() : TempTree("zernel-disc") {}
  static std::string stat_text(const P& p) {
    return std::to_string(p.pid_) + " (" + p.comm_ + ") " + p.state_ + " " +
           std::to_string(p.ppid_) + " 1 1 0 -1 " + std::to_string(p.flags_) +
           " 0 0 0 0 10 5 0 0 20 0 " + std::to_string(p.threads_) + " 0 " +
           std::to_string(p.starttime_) +
           " 1000 10 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 3 0 0 0 0 0 0 0 0 0 0\n";
  }
  void add(const P& p) const {
    const std::string d = std::to_string(p.pid_);
    write(d + "/stat", stat_text(p));
    write(d + "/task/" + d + "/stat", stat_text(p));
    write(d + "/cmdline", p.cmdline_.empty() ? p.comm_ + '\0' : p.cmdline_);
    write(d + "/cgroup", p.cgroup_);
    write(d + "/status", "Name:\t" + p.comm_ + "\nTgid:\t" + d + "\nUid:\t" +
                             std::to_string(p.uid_) + "\t" + std::to_string(p.uid_) + "\t0\t0\n");
    fs::create_directories(dir() / d / "fd");
    for (const auto& [fd, target] : p.fds_) {
      fs::create_symlink(target, dir() / d / "fd" / std::to_string(fd));
    }
  }
  void remove(std::uint32_t pid) const { fs::remove_all(dir() / std::to_string(pid)); }
};

const DiscoveredProcess* find(const DiscoveryResult& r, std::uint32_t pid) {
  for (const auto& p : r.processes) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

using Pids = std::vector<std::uint32_t>;

Pids pids(const DiscoveryResult& r) {
  std::vector<std::uint32_t> out;
  for (const auto& p : r.processes) out.push_back(p.pid);
  return out;
}

config::TenantConfig tenant(const std::string& id, const M& match) {
  config::TenantConfig t;
  t.spec.id = id;
  t.match = match.m;
  return t;
}

// A typical node: init, a shell, kernel threads, and nothing using the GPU.
void add_background(const FakeProc& fp) {
  fp.add(P().pid(1).comm("systemd").ppid(0).fds({{0, "/dev/null"}}));
  fp.add(P().pid(2).comm("kthreadd").ppid(0).flags(0x00208040));
  fp.add(P().pid(3).comm("kworker/0:0").state('I').ppid(2).flags(0x04208060));
  fp.add(P().pid(50).comm("bash").ppid(1).fds({{0, "/dev/pts/0"}}));
}

TEST(Discovery, nvidia_device_fds_make_a_gpu_owner_with_the_index) {
  FakeProc fp;
  add_background(fp);
  fp.add(P().pid(100).ppid(50).fds(
      {{0, "/dev/pts/0"}, {3, "/dev/nvidiactl"}, {4, "/dev/nvidia-uvm"}, {5, "/dev/nvidia2"}}));
  ProcessDiscovery d(fp.root());
  auto r = d.scan({});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(pids(*r), Pids{100});
  const auto* p = find(*r, 100);
  EXPECT_EQ(p->role, ProcessRole::gpu_owner);
  EXPECT_EQ(p->gpu, 2U);
  EXPECT_TRUE(p->is_ml);
  EXPECT_EQ(p->ppid, 50U);
  EXPECT_EQ(p->comm, "python");
  EXPECT_EQ(p->starttime_ticks, 1000U);
  EXPECT_FALSE(p->tenant.has_value());
  EXPECT_EQ(p->change, ProcessChange::added);
  EXPECT_EQ(r->dropped, 0U);
  EXPECT_EQ(r->unreadable, 0U);
}

TEST(Discovery, control_devices_only_mean_ml_with_an_unknown_gpu) {
  FakeProc fp;
  fp.add(P().pid(100).fds({{3, "/dev/nvidiactl"}}));
  fp.add(P().pid(101).fds({{3, "/dev/nvidia-uvm"}}));
  fp.add(P().pid(102).fds({{3, "/dev/nvidia-modeset"}}));
  ProcessDiscovery d(fp.root());
  auto r = d.scan({});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(pids(*r), (Pids{100, 101, 102}));
  for (const auto& p : r->processes) {
    EXPECT_EQ(p.role, ProcessRole::gpu_owner);
    EXPECT_TRUE(p.is_ml);
    EXPECT_FALSE(p.gpu.has_value()) << p.pid;
  }
}

TEST(Discovery, several_gpus_open_without_nvml_leave_the_gpu_unknown) {
  FakeProc fp;
  fp.add(P().pid(100).fds(
      {{3, "/dev/nvidiactl"}, {4, "/dev/nvidia0"}, {5, "/dev/nvidia1"}, {6, "/dev/nvidia0"}}));
  fp.add(P().pid(101).fds({{4, "/dev/nvidia3"}, {6, "/dev/nvidia3"}}));
  ProcessDiscovery d(fp.root());
  auto r = d.scan({});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(find(*r, 100)->gpu.has_value());
  EXPECT_EQ(find(*r, 101)->gpu, 3U);
  // NVML says which one holds the context.
  const GpuProcessMap nvml = {{100, 1}};
  auto r2 = d.scan(In().nvml_processes(&nvml));
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(find(*r2, 100)->gpu, 1U);
}

TEST(Discovery, nvml_only_processes_are_gpu_owners_and_nvml_wins_the_index) {
  FakeProc fp;
  fp.add(P().pid(200));                                       // no fds visible (other namespace)
  fp.add(P().pid(201).fds({{5, "/dev/nvidia0"}}));            // NVML knows better
  const GpuProcessMap nvml = {{200, 3}, {201, 1}, {999, 0}};  // 999 is not in this /proc
  ProcessDiscovery d(fp.root());
  auto r = d.scan(In().nvml_processes(&nvml));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(pids(*r), (Pids{200, 201}));
  EXPECT_EQ(find(*r, 200)->role, ProcessRole::gpu_owner);
  EXPECT_EQ(find(*r, 200)->gpu, 3U);
  EXPECT_EQ(find(*r, 201)->gpu, 1U);
}

TEST(Discovery, descendants_of_an_owner_are_workers_bound_to_its_gpu) {
  FakeProc fp;
  add_background(fp);
  fp.add(P().pid(100).ppid(50).fds({{3, "/dev/nvidiactl"}, {5, "/dev/nvidia1"}}));
  fp.add(P().pid(110).comm("pt_data_worker").ppid(100));  // child
  fp.add(P().pid(120).comm("decoder").ppid(110));         // grandchild
  fp.add(P().pid(60).comm("vim").ppid(50));               // unrelated
  ProcessDiscovery d(fp.root());
  auto r = d.scan({});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(pids(*r), (Pids{100, 110, 120}));
  for (std::uint32_t pid : {110U, 120U}) {
    const auto* w = find(*r, pid);
    EXPECT_EQ(w->role, ProcessRole::dataloader_worker) << pid;
    EXPECT_EQ(w->gpu, 1U) << pid;
    EXPECT_TRUE(w->is_ml);
  }
}

TEST(Discovery, a_forked_worker_with_inherited_nvidia_fds_is_still_a_worker) {
  FakeProc fp;
  const std::vector<std::pair<int, std::string>> owner_fds = {
      {3, "/dev/nvidiactl"}, {4, "/dev/nvidia-uvm"}, {5, "/dev/nvidia0"}, {9, "/dev/nvidia0"}};
  fp.add(P().pid(100).fds(owner_fds));
  // fork() copies descriptors: same numbers, same targets (some closed afterwards).
  fp.add(P().pid(101).ppid(100).fds({{3, "/dev/nvidiactl"}, {5, "/dev/nvidia0"}}));
  // A grandchild inherits from the worker.
  fp.add(P().pid(102).ppid(101).fds({{5, "/dev/nvidia0"}}));
  // A child that opened a device of its own (another number or another GPU) has its own context.
  fp.add(P().pid(103).ppid(100).fds({{3, "/dev/nvidiactl"}, {6, "/dev/nvidia1"}}));
  ProcessDiscovery d(fp.root());
  auto r = d.scan({});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(pids(*r), (Pids{100, 101, 102, 103}));
  EXPECT_EQ(find(*r, 100)->role, ProcessRole::gpu_owner);
  EXPECT_EQ(find(*r, 101)->role, ProcessRole::dataloader_worker);
  EXPECT_EQ(find(*r, 101)->gpu, 0U);
  EXPECT_EQ(find(*r, 102)->role, ProcessRole::dataloader_worker);
  EXPECT_EQ(find(*r, 103)->role, ProcessRole::gpu_owner);
  EXPECT_EQ(find(*r, 103)->gpu, 1U);
  // NVML listing the inherited child means it made a context after all.
  const GpuProcessMap nvml = {{100, 0}, {101, 2}};
  auto r2 = d.scan(In().nvml_processes(&nvml));
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(find(*r2, 101)->role, ProcessRole::gpu_owner);
  EXPECT_EQ(find(*r2, 101)->gpu, 2U);
  EXPECT_EQ(find(*r2, 102)->role, ProcessRole::dataloader_worker);
  EXPECT_EQ(find(*r2, 102)->gpu, 2U);  // nearest owner is now 101
}

TEST(Discovery, zombies_kernel_threads_and_thread_entries_are_not_processes) {
  FakeProc fp;
  add_background(fp);
  fp.add(P().pid(100).fds({{5, "/dev/nvidia0"}}));
  fp.add(P().pid(101).state('Z').ppid(100).fds({}));  // a dead worker
  fp.add(P().pid(102).state('Z').ppid(1).threads(1).fds({{5, "/dev/nvidia0"}}));
  fp.add(P().pid(103).state('X').ppid(1).fds({{5, "/dev/nvidia0"}}));
  // Leader exited (pthread_exit) but other threads still run: alive.
  fp.add(P().pid(104).state('Z').ppid(1).threads(4).fds({{5, "/dev/nvidia1"}}));
  // A kernel thread can hold nothing of ours, whatever its fd directory says.
  fp.add(P().pid(4).comm("nv_queue").ppid(2).flags(0x00208040).fds({{1, "/dev/nvidia0"}}));
  // Threads of 100 live under its task/ directory and are never processes.
  fp.write("100/task/105/stat", FakeProc::stat_text(P().pid(105).ppid(1)));
  fp.write("100/task/106/stat", FakeProc::stat_text(P().pid(106).ppid(1)));
  ProcessDiscovery d(fp.root());
  auto r = d.scan({});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(pids(*r), (Pids{100, 104}));
}

TEST(Discovery, inside_a_pid_namespace_pid_2_is_an_ordinary_process) {
  // A containerised daemon sees its own pid namespace: no kthreadd, and pid 2 may be anything.
  FakeProc fp;
  fp.add(P().pid(1).comm("tini").ppid(0));
  fp.add(P().pid(2).comm("python").ppid(1).fds({{5, "/dev/nvidia0"}}));
  fp.add(P().pid(3).comm("pt_data_worker").ppid(2));
  ProcessDiscovery d(fp.root());
  auto r = d.scan({});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(pids(*r), (Pids{2, 3}));
  EXPECT_EQ(find(*r, 2)->role, ProcessRole::gpu_owner);
  EXPECT_EQ(find(*r, 3)->role, ProcessRole::dataloader_worker);
}

TEST(Discovery, vanished_and_garbled_processes_are_skipped_without_failing) {
  FakeProc fp;
  fp.add(P().pid(100).fds({{5, "/dev/nvidia0"}}));
  fp.write("200/status", "Uid:\t0\t0\t0\t0\n");  // exited between listing and reading stat
  fp.add(P().pid(300).fds({{5, "/dev/nvidia0"}}));
  fp.write("300/stat", "300 (py) S garbage\n");  // garbled
  fp.add(P().pid(400).fds({{5, "/dev/nvidia0"}}));
  fp.write("400/stat", "");  // empty
  fp.add(P().pid(500).fds({{5, "/dev/nvidia0"}}));
  fp.write("500/stat", FakeProc::stat_text(P().pid(501)));  // stat of another pid
  fp.write("self/stat", "not a pid directory");
  fp.write("sys/kernel/x", "");
  ProcessDiscovery d(fp.root());
  auto r = d.scan({});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(pids(*r), Pids{100});
  EXPECT_EQ(r->scanned, 5U);
  EXPECT_EQ(r->unreadable, 3U);
}

TEST(Discovery, a_missing_proc_root_is_an_error_naming_it) {
  ProcessDiscovery d("/nonexistent/zernel-proc");
  auto r = d.scan({});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("/nonexistent/zernel-proc"), std::string::npos);
}

TEST(Discovery, pid_reuse_is_reported_as_replaced_and_exits_as_removed) {
  FakeProc fp;
  fp.add(P().pid(100).starttime(500).fds({{5, "/dev/nvidia0"}}));
  fp.add(P().pid(200).starttime(600).fds({{5, "/dev/nvidia1"}}));
  fp.add(P().pid(300).starttime(700).fds({{5, "/dev/nvidia1"}}));
  ProcessDiscovery d(fp.root());
  auto r1 = d.scan({});
  ASSERT_TRUE(r1.ok());
  for (const auto& p : r1->processes) EXPECT_EQ(p.change, ProcessChange::added);

  // 100 exits and a new process gets its pid; 300 exits; 200 lives on; 400 starts.
  fp.remove(100);
  fp.add(P().pid(100).starttime(9000).fds({{5, "/dev/nvidia3"}}));
  fp.remove(300);
  fp.add(P().pid(400).starttime(9100).fds({{5, "/dev/nvidia0"}}));
  auto r2 = d.scan({});
  ASSERT_TRUE(r2.ok());
  ASSERT_EQ(pids(*r2), (Pids{100, 200, 400}));
  EXPECT_EQ(find(*r2, 100)->change, ProcessChange::replaced);
  EXPECT_EQ(find(*r2, 100)->gpu, 3U);
  EXPECT_EQ(find(*r2, 200)->change, ProcessChange::unchanged);
  EXPECT_EQ(find(*r2, 400)->change, ProcessChange::added);
  EXPECT_EQ(r2->removed, Pids{300});

  // A reused pid that no longer qualifies is simply removed.
  fp.remove(200);
  fp.add(P().pid(200).starttime(9200));
  auto r3 = d.scan({});
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(pids(*r3), (Pids{100, 400}));
  EXPECT_EQ(r3->removed, Pids{200});

  d.reset();
  auto r4 = d.scan({});
  ASSERT_TRUE(r4.ok());
  EXPECT_EQ(find(*r4, 100)->change, ProcessChange::added);
  EXPECT_TRUE(r4->removed.empty());
}

TEST(Discovery, match_rules_add_processes_and_the_first_tenant_wins) {
  FakeProc fp;
  add_background(fp);
  fp.add(P().pid(100)
             .comm("python3")
             .ppid(50)
             .fds({{5, "/dev/nvidia0"}})
             .cgroup("0::/jobs/team-a/run1\n")
             .uid(1001));
  fp.add(P().pid(200)
             .comm("infer-server")
             .ppid(1)
             .cmdline("/opt/bin/infer-server\0--model\0llama\0"s)
             .cgroup("0::/jobs/team-b\n")
             .uid(1002));
  fp.add(P().pid(300).comm("preproc").ppid(1).cgroup("0::/jobs/team-bc\n").uid(1003));
  fp.add(P().pid(400).comm("python3").ppid(1).cgroup("0::/other\n").uid(1004));
  fp.add(P().pid(500).comm("python3").ppid(1).cgroup("0::/other\n").uid(1001));
  const std::vector<config::TenantConfig> tenants = {
      tenant("explicit-only", M()),                         // matches nothing
      tenant("team-a", M().comm({"python*"}).uid({1001})),  // AND across lists
      tenant("team-b", M().cmdline({"*--model llama*"}).cgroup({"/jobs/team-b"})),
      tenant("team-a-cgroup", M().cgroup({"/jobs/team-a"})),  // 100 matched above first
      tenant("python-any", M().comm({"nomatch", "py*3"})),    // OR within a list
  };
  ProcessDiscovery d(fp.root());
  auto r = d.scan(In().tenants(tenants));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(pids(*r), (Pids{100, 200, 400, 500}));
  EXPECT_EQ(find(*r, 100)->role, ProcessRole::gpu_owner);
  EXPECT_EQ(find(*r, 100)->tenant, 1U);
  EXPECT_EQ(find(*r, 200)->role, ProcessRole::matched);
  EXPECT_TRUE(find(*r, 200)->is_ml);
  EXPECT_EQ(find(*r, 200)->tenant, 2U);
  EXPECT_EQ(find(*r, 400)->tenant, 4U);  // python3 but uid 1004: not team-a
  EXPECT_EQ(find(*r, 500)->tenant, 1U);
  EXPECT_EQ(find(*r, 500)->role, ProcessRole::matched);
  // 300's cgroup /jobs/team-bc is not under /jobs/team-b.
  EXPECT_EQ(find(*r, 300), nullptr);
}

TEST(Discovery, workers_get_their_own_tenant_match) {
  FakeProc fp;
  fp.add(P().pid(100).comm("python3").fds({{5, "/dev/nvidia0"}}).cgroup("0::/jobs/a\n"));
  fp.add(P().pid(101).comm("pt_data_worker").ppid(100).cgroup("0::/jobs/a\n"));
  const std::vector<config::TenantConfig> tenants = {tenant("a", M().cgroup({"/jobs/a"}))};
  ProcessDiscovery d(fp.root());
  auto r = d.scan(In().tenants(tenants));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(find(*r, 100)->tenant, 0U);
  EXPECT_EQ(find(*r, 101)->tenant, 0U);
  EXPECT_EQ(find(*r, 101)->role, ProcessRole::dataloader_worker);
}

TEST(TenantMatching, follows_the_documented_semantics) {
  const std::vector<config::TenantConfig> tenants = {
      tenant("none", M()),
      tenant("uid", M().uid({7})),
      tenant("cg", M().cgroup({"/a/b"})),
      tenant("cmd", M().cmdline({"python *train.py"})),
      tenant("both", M().comm({"tor?hrun"}).cgroup({"/k"})),
  };
  EXPECT_EQ(match_tenant(tenants, "x", "", std::nullopt, 7U), 1U);
  EXPECT_EQ(match_tenant(tenants, "x", "", std::nullopt, std::nullopt), std::nullopt);
  EXPECT_EQ(match_tenant(tenants, "x", "", "/a/b/c", 8U), 2U);
  EXPECT_EQ(match_tenant(tenants, "x", "", "/a/bc", 8U), std::nullopt);
  EXPECT_EQ(match_tenant(tenants, "x", "python -u train.py", "/z", 8U), 3U);
  EXPECT_EQ(match_tenant(tenants, "x", "python train.py --x", "/z", 8U), std::nullopt);
  EXPECT_EQ(match_tenant(tenants, "torchrun", "", "/k/j", 8U), 4U);
  EXPECT_EQ(match_tenant(tenants, "torchrun", "", "/kk", 8U), std::nullopt);
  EXPECT_EQ(match_tenant(tenants, "torchrun", "", std::nullopt, 8U), std::nullopt);
  // fnmatch flags 0: '*' crosses '/', a leading '.' is not special.
  const std::vector<config::TenantConfig> slash = {tenant("s", M().cmdline({"*/bin/*"}))};
  EXPECT_EQ(match_tenant(slash, "x", "/usr/local/bin/a/b", std::nullopt, std::nullopt), 0U);
  EXPECT_EQ(match_tenant({}, "x", "", std::nullopt, std::nullopt), std::nullopt);
}

TEST(Discovery, the_cap_keeps_owners_then_workers_then_matched) {
  FakeProc fp;
  fp.add(P().pid(500).fds({{5, "/dev/nvidia0"}}));
  fp.add(P().pid(600).fds({{5, "/dev/nvidia1"}}));
  fp.add(P().pid(110).ppid(500));
  fp.add(P().pid(120).ppid(600));
  fp.add(P().pid(10).comm("etl"));
  fp.add(P().pid(20).comm("etl"));
  const std::vector<config::TenantConfig> tenants = {tenant("t", M().comm({"etl"}))};
  ProcessDiscovery d(fp.root());
  for (std::uint32_t cap : {1U, 2U, 3U, 5U, 6U, 100U}) {
    d.reset();
    auto r = d.scan(In().tenants(tenants).max_tracked_tasks(cap));
    ASSERT_TRUE(r.ok());
    const std::vector<std::uint32_t> by_priority = {500, 600, 110, 120, 10, 20};
    std::vector<std::uint32_t> expected(by_priority.begin(),
                                        by_priority.begin() + std::min<std::ptrdiff_t>(cap, 6));
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(pids(*r), expected) << "cap " << cap;
    EXPECT_EQ(r->dropped, 6 - expected.size()) << "cap " << cap;
  }
}

TEST(Discovery, a_worker_whose_owner_is_dropped_by_the_cap_is_not_possible) {
  // Owners come first, so any kept worker's owner is kept too and its GPU is known.
  FakeProc fp;
  fp.add(P().pid(900).fds({{5, "/dev/nvidia4"}}));
  fp.add(P().pid(10).ppid(900));
  ProcessDiscovery d(fp.root());
  auto r = d.scan(In().max_tracked_tasks(2));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(pids(*r), (Pids{10, 900}));
  EXPECT_EQ(find(*r, 10)->gpu, 4U);
}

TEST(Discovery, a_parent_cycle_in_a_fabricated_tree_terminates) {
  FakeProc fp;
  fp.add(P().pid(10).ppid(11));
  fp.add(P().pid(11).ppid(10));
  fp.add(P().pid(12).ppid(12).fds({{5, "/dev/nvidia0"}}));
  fp.add(P().pid(13).ppid(11));
  ProcessDiscovery d(fp.root());
  auto r = d.scan({});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(pids(*r), Pids{12});
}

// ---- following process events (collect/proc_events.hpp) --------------------------------------

constexpr std::uint64_t kSec = 1'000'000'000;

ProcEvent ev(ProcEventKind kind, std::uint32_t pid, std::uint32_t ppid = 0) {
  ProcEvent e;
  e.kind = kind;
  e.pid = e.tid = pid;
  e.ppid = ppid;
  return e;
}

TEST(DiscoveryEvents, a_fork_of_an_owner_is_a_worker_without_listing_proc) {
  FakeProc fp;
  add_background(fp);
  fp.add(P().pid(100).comm("train").fds({{5, "/dev/nvidia2"}}));
  ProcessDiscovery d(fp.root());
  ASSERT_TRUE(d.scan({}).ok());
  EXPECT_FALSE(d.pending(0));
  // A worker forked (it holds its parent's descriptors), and a process nobody announced.
  fp.add(P().pid(101).comm("train").ppid(100).starttime(2000).fds({{5, "/dev/nvidia2"}}));
  fp.add(P().pid(300).fds({{5, "/dev/nvidia0"}}));
  const ProcEvent fork = ev(ProcEventKind::fork, 101, 100);
  d.apply(std::span(&fork, 1), 10 * kSec);
  EXPECT_TRUE(d.pending(10 * kSec));
  auto r = d.update({}, 10 * kSec);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(pids(*r), (Pids{100, 101}));  // 300 waits for the next scan
  EXPECT_EQ(find(*r, 101)->role, ProcessRole::dataloader_worker);
  EXPECT_EQ(find(*r, 101)->gpu, 2U);
  EXPECT_EQ(find(*r, 101)->starttime_ticks, 2000U);  // read once it is tracked
  EXPECT_EQ(find(*r, 101)->change, ProcessChange::added);
  EXPECT_EQ(find(*r, 100)->change, ProcessChange::unchanged);
  EXPECT_EQ(r->scanned, 0U);
  auto s = d.scan({});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(pids(*s), (Pids{100, 101, 300}));
}

TEST(DiscoveryEvents, an_exec_is_read_again_and_an_exit_removes) {
  FakeProc fp;
  fp.add(P().pid(10).comm("bash"));
  fp.add(P().pid(20).comm("etl"));
  const std::vector<config::TenantConfig> tenants = {tenant("t", M().comm({"etl"}))};
  ProcessDiscovery d(fp.root());
  auto r1 = d.scan(In().tenants(tenants));
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(pids(*r1), Pids{20});
  // 10 execs into etl; 20 exits.
  fp.remove(10);
  fp.add(P().pid(10).comm("etl"));
  fp.remove(20);
  const std::vector<ProcEvent> events = {ev(ProcEventKind::exec, 10), ev(ProcEventKind::exit, 20)};
  d.apply(events, kSec);
  auto r2 = d.update(In().tenants(tenants), kSec);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(pids(*r2), Pids{10});
  EXPECT_EQ(find(*r2, 10)->tenant, 0U);
  EXPECT_EQ(r2->removed, Pids{20});
  EXPECT_EQ(d.known(), 1U);
}

TEST(DiscoveryEvents, a_reused_pid_is_replaced) {
  FakeProc fp;
  fp.add(P().pid(100).starttime(500).fds({{5, "/dev/nvidia0"}}));
  fp.add(P().pid(50).starttime(100));
  ProcessDiscovery d(fp.root());
  ASSERT_TRUE(d.scan({}).ok());
  fp.remove(100);
  fp.add(P().pid(100).ppid(50).starttime(9000).fds({{7, "/dev/nvidia1"}}));
  // The child of 50 got the pid, then exec'd and opened its GPU.
  const std::vector<ProcEvent> events = {
      ev(ProcEventKind::exit, 100), ev(ProcEventKind::fork, 100, 50), ev(ProcEventKind::exec, 100)};
  d.apply(events, kSec);
  auto r = d.update({}, kSec);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(pids(*r), Pids{100});
  EXPECT_EQ(find(*r, 100)->change, ProcessChange::replaced);
  EXPECT_EQ(find(*r, 100)->gpu, 1U);
}

TEST(DiscoveryEvents, a_device_opened_after_the_exec_is_found_at_the_recheck) {
  FakeProc fp;
  fp.add(P().pid(10).comm("bash"));
  ProcessDiscovery d(fp.root());
  ASSERT_TRUE(d.scan({}).ok());
  fp.add(P().pid(11).ppid(10).comm("python"));
  const std::vector<ProcEvent> events = {ev(ProcEventKind::fork, 11, 10),
                                         ev(ProcEventKind::exec, 11)};
  d.apply(events, 100 * kSec);
  auto r1 = d.update({}, 100 * kSec);
  ASSERT_TRUE(r1.ok());
  EXPECT_TRUE(r1->processes.empty());
  EXPECT_FALSE(d.pending(100 * kSec + kSec / 2));
  // CUDA's initialisation opens the devices.
  fs::create_symlink("/dev/nvidia3", fp.dir() / "11" / "fd" / "9");
  EXPECT_TRUE(d.pending(101 * kSec));
  auto r2 = d.update({}, 101 * kSec);
  ASSERT_TRUE(r2.ok());
  ASSERT_EQ(pids(*r2), Pids{11});
  EXPECT_EQ(find(*r2, 11)->role, ProcessRole::gpu_owner);
  EXPECT_EQ(find(*r2, 11)->gpu, 3U);
  // Two looks (1 s and 5 s after the exec), then only scans.
  EXPECT_FALSE(d.pending(102 * kSec));
  EXPECT_TRUE(d.pending(105 * kSec));
  ASSERT_TRUE(d.update({}, 105 * kSec).ok());
  EXPECT_FALSE(d.pending(1000 * kSec));
}

TEST(DiscoveryEvents, a_child_of_an_unknown_parent_is_read_whole_and_kernel_threads_are_not_kept) {
  FakeProc fp;
  add_background(fp);
  ProcessDiscovery d(fp.root());
  ASSERT_TRUE(d.scan({}).ok());
  const std::size_t known = d.known();
  fp.add(P().pid(60).ppid(2).comm("kworker/1:2").flags(0x04208060));
  fp.add(P().pid(70).ppid(999).fds({{5, "/dev/nvidia1"}}));
  const std::vector<ProcEvent> events = {ev(ProcEventKind::fork, 60, 2),
                                         ev(ProcEventKind::fork, 70, 999)};
  d.apply(events, kSec);
  auto r = d.update({}, kSec);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(pids(*r), Pids{70});
  EXPECT_EQ(d.known(), known + 1);  // the kernel thread is not kept
}

TEST(Discovery, scans_the_real_proc_and_finds_this_process_by_a_match_rule) {
  ProcessDiscovery d;
  auto r = d.scan({});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_GT(r->scanned, 0U);
  for (const auto& p : r->processes) {
    auto st = sys::read_stat("/proc", p.pid);
    if (st.ok()) {
      EXPECT_FALSE(st->is_kernel_thread()) << p.pid << " " << p.comm;
    }
  }
  // Select this test binary by its comm (whatever the binary is called) and uid.
  auto self_stat = sys::read_stat("/proc", static_cast<std::uint32_t>(::getpid()));
  ASSERT_TRUE(self_stat.ok()) << self_stat.error().message();
  const std::vector<config::TenantConfig> tenants = {
      tenant("self", M().comm({self_stat->comm}).uid({static_cast<std::uint32_t>(::getuid())}))};
  auto r2 = d.scan(In().tenants(tenants));
  ASSERT_TRUE(r2.ok()) << r2.error().message();
  const auto* self = find(*r2, static_cast<std::uint32_t>(::getpid()));
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(self->role, ProcessRole::matched);
  EXPECT_EQ(self->tenant, 0U);
  EXPECT_EQ(self->ppid, static_cast<std::uint32_t>(::getppid()));
}

}  // namespace
}  // namespace zernel::collect
