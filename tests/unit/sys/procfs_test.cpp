#include "sys/procfs.hpp"

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

#include "support/temp_tree.hpp"

namespace zernel::sys {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

// A realistic stat line: pid 4242, comm `comm`, every field up to 52 filled.
std::string stat_line(const std::string& comm, const std::string& tail_after_comm = "") {
  if (!tail_after_comm.empty()) return "4242 (" + comm + ")" + tail_after_comm;
  // 3 state, 4 ppid, 5 pgrp, 6 session, 7 tty, 8 tpgid, 9 flags, 10-13 faults, 14 utime,
  // 15 stime, 16 cutime, 17 cstime, 18 prio, 19 nice, 20 threads, 21 itreal, 22 starttime,
  // 23 vsize, 24 rss, 25 rsslim, 26-41 misc, 42 blkio, 43-52 misc.
  return "4242 (" + comm +
         ") S 17 4242 4242 0 -1 4194560 1000 0 3 0 250 75 0 0 20 0 9 0 123456 "
         "1000000 200 18446744073709551615 1 1 0 0 0 0 0 16781312 17922 0 0 0 17 3 0 0 "
         "77 0 0 0 0 0 0 0 0 0 0\n";
}

TEST(ProcStatParse, reads_the_fields_the_collectors_use) {
  auto st = parse_stat(stat_line("python3"));
  ASSERT_TRUE(st.ok()) << st.error().message();
  EXPECT_EQ(st->pid, 4242U);
  EXPECT_EQ(st->comm, "python3");
  EXPECT_EQ(st->state, 'S');
  EXPECT_EQ(st->ppid, 17U);
  EXPECT_EQ(st->flags, 4194560U);
  EXPECT_EQ(st->utime_ticks, 250U);
  EXPECT_EQ(st->stime_ticks, 75U);
  EXPECT_EQ(st->num_threads, 9U);
  EXPECT_EQ(st->starttime_ticks, 123456U);
  ASSERT_TRUE(st->delayacct_blkio_ticks.has_value());
  EXPECT_EQ(*st->delayacct_blkio_ticks, 77U);
  EXPECT_FALSE(st->is_kernel_thread());
  EXPECT_FALSE(st->is_dead());
}

TEST(ProcStatParse, comm_with_parentheses_and_spaces_is_taken_up_to_the_last_paren) {
  for (const std::string comm : {"a) (b", ") R 1 2 (", "((x))", "sp ace", ")", "("}) {
    auto st = parse_stat(stat_line(comm));
    ASSERT_TRUE(st.ok()) << comm << ": " << st.error().message();
    EXPECT_EQ(st->comm, comm);
    EXPECT_EQ(st->ppid, 17U) << comm;
    EXPECT_EQ(st->starttime_ticks, 123456U) << comm;
  }
}

TEST(ProcStatParse, every_truncation_fails_cleanly_or_parses_without_field_42) {
  const std::string full = stat_line("worker) (1");
  for (std::size_t len = 0; len <= full.size(); ++len) {
    auto st = parse_stat(std::string_view(full).substr(0, len));
    if (st.ok()) {
      EXPECT_EQ(st->starttime_ticks, 123456U) << len;
      if (st->delayacct_blkio_ticks) {
        EXPECT_EQ(*st->delayacct_blkio_ticks, 77U) << len;
      }
    }
  }
  // Up to field 22 is required, 42 is optional.
  auto short_line = parse_stat("1 (x) R 0 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 99\n");
  ASSERT_TRUE(short_line.ok()) << short_line.error().message();
  EXPECT_FALSE(short_line->delayacct_blkio_ticks.has_value());
  EXPECT_FALSE(parse_stat("1 (x) R 0 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0\n").ok());
  // Without the newline the last field may be cut ("99" of "990"), so it does not count.
  EXPECT_FALSE(parse_stat("1 (x) R 0 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 99").ok());
  auto cut42 = parse_stat(
      "1 (x) R 0 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 99 0 0 0 0 0 0 0 0 0 0 "
      "0 0 0 0 0 0 0 0 0 7");  // field 42 is the cut "7"
  ASSERT_TRUE(cut42.ok());
  EXPECT_FALSE(cut42->delayacct_blkio_ticks.has_value());
}

TEST(ProcStatParse, rejects_garbage_and_numbers_that_do_not_fit) {
  EXPECT_FALSE(parse_stat("").ok());
  EXPECT_FALSE(parse_stat("\n").ok());
  EXPECT_FALSE(parse_stat("4242 python S 1").ok());
  EXPECT_FALSE(parse_stat(") 4242 (").ok());
  EXPECT_FALSE(parse_stat("abc (x) S 1 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 99").ok());
  // utime of 2^64 and beyond.
  EXPECT_FALSE(
      parse_stat("1 (x) R 0 1 1 0 -1 0 0 0 0 0 18446744073709551616 6 0 0 20 0 1 0 99").ok());
  EXPECT_FALSE(parse_stat("1 (x) R 99999999999 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 99").ok());
  EXPECT_FALSE(parse_stat("1 (x) R -1 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 99").ok());
  EXPECT_FALSE(parse_stat("1 (x) RS 0 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 99").ok());
  auto e = parse_stat("1 (x) R 0 1 1 0 -1 0 0 0 0 0 zz 6 0 0 20 0 1 0 99");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("utime"), std::string::npos) << e.error().message();
  // The largest values that fit are fine.
  auto big = parse_stat(
      "1 (x) R 0 1 1 0 -1 4294967295 0 0 0 0 18446744073709551615 6 0 0 20 0 1 0 "
      "18446744073709551615\n");
  ASSERT_TRUE(big.ok()) << big.error().message();
  EXPECT_EQ(big->utime_ticks, 18446744073709551615ULL);
}

TEST(ProcStatParse, kernel_threads_and_zombies_are_recognised) {
  auto kthreadd = parse_stat("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 2\n");
  ASSERT_TRUE(kthreadd.ok());
  EXPECT_TRUE(kthreadd->is_kernel_thread());
  auto kworker = parse_stat("77 (kworker/0:1) I 2 0 0 0 -1 69238880 0 0 0 0 0 0 0 0 20 0 1 0 9\n");
  ASSERT_TRUE(kworker.ok());
  EXPECT_TRUE(kworker->is_kernel_thread());
  auto flagged = parse_stat("90 (odd) S 1 0 0 0 -1 2097152 0 0 0 0 0 0 0 0 20 0 1 0 9\n");
  ASSERT_TRUE(flagged.ok());
  EXPECT_TRUE(flagged->is_kernel_thread());  // PF_KTHREAD
  // In a pid namespace pid 2 and its children are ordinary processes.
  auto ns_child = parse_stat("5 (python) S 2 0 0 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 9\n");
  ASSERT_TRUE(ns_child.ok());
  EXPECT_FALSE(ns_child->is_kernel_thread());
  auto zombie = parse_stat("300 (defunct) Z 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9\n");
  ASSERT_TRUE(zombie.ok());
  EXPECT_TRUE(zombie->is_dead());
  // The leader exited with pthread_exit but two threads still run.
  auto leader_gone = parse_stat("301 (py) Z 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 3 0 9\n");
  ASSERT_TRUE(leader_gone.ok());
  EXPECT_FALSE(leader_gone->is_dead());
}

TEST(ProcStatusParse, reads_tgid_and_real_uid) {
  auto st = parse_status(
      "Name:\tpython\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n"
      "Pid:\t4243\nUid:\t1001\t1002\t1001\t1001\nGid:\t0\t0\t0\t0\n");
  ASSERT_TRUE(st.ok()) << st.error().message();
  EXPECT_EQ(st->tgid, 4242U);
  EXPECT_EQ(st->ruid, 1001U);
  EXPECT_EQ(st->euid, 1002U);
}

TEST(ProcStatusParse, missing_or_garbled_uid_is_an_error) {
  EXPECT_FALSE(parse_status("").ok());
  EXPECT_FALSE(parse_status("Name:\tx\nTgid:\t1\n").ok());
  EXPECT_FALSE(parse_status("Uid:\tabc\t0\t0\t0\n").ok());
  EXPECT_FALSE(parse_status("Uid:\t99999999999\t0\t0\t0\n").ok());
  EXPECT_FALSE(parse_status("Uid:\t5").ok());  // truncated after the first value
  EXPECT_FALSE(parse_status("Tgid:\tx\nUid:\t0\t0\t0\t0\n").ok());
}

TEST(Cmdline, nuls_become_spaces_and_trailing_nuls_go) {
  EXPECT_EQ(cmdline_to_string("python\0train.py\0--lr\0001e-3\0"s), "python train.py --lr 1e-3");
  EXPECT_EQ(cmdline_to_string(""), "");
  EXPECT_EQ(cmdline_to_string("\0\0"s), "");
  EXPECT_EQ(cmdline_to_string("setproctitle style"), "setproctitle style");
}

TEST(CgroupParse, reads_v2_and_v1_lines) {
  auto v2 = parse_cgroup("0::/kubepods.slice/team-a/pod1\n");
  ASSERT_TRUE(v2.ok());
  ASSERT_TRUE(v2->v2_path.has_value());
  EXPECT_EQ(*v2->v2_path, "/kubepods.slice/team-a/pod1");
  EXPECT_EQ(v2->match_path(), "/kubepods.slice/team-a/pod1");

  auto v1 = parse_cgroup(
      "12:pids:/user.slice\n4:cpu,cpuacct:/docker/abc:def\n1:name=systemd:/system.slice/x\n");
  ASSERT_TRUE(v1.ok()) << v1.error().message();
  EXPECT_FALSE(v1->v2_path.has_value());
  ASSERT_EQ(v1->v1.size(), 3U);
  EXPECT_EQ(v1->v1[1].hierarchy, 4U);
  EXPECT_EQ(v1->v1[1].controllers, "cpu,cpuacct");
  EXPECT_EQ(v1->v1[1].path, "/docker/abc:def");  // ':' inside the path survives
  EXPECT_EQ(v1->match_path(), "/docker/abc:def");

  auto hybrid = parse_cgroup("1:name=systemd:/init.scope\n0::/init.scope\n");
  ASSERT_TRUE(hybrid.ok());
  EXPECT_EQ(hybrid->match_path(), "/init.scope");
  auto systemd_only = parse_cgroup("1:name=systemd:/user.slice/u\n");
  ASSERT_TRUE(systemd_only.ok());
  EXPECT_EQ(systemd_only->match_path(), "/user.slice/u");
  auto empty = parse_cgroup("");
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->match_path().has_value());
}

TEST(CgroupParse, malformed_lines_are_errors_and_the_view_skips_them) {
  EXPECT_FALSE(parse_cgroup("garbage\n").ok());
  EXPECT_FALSE(parse_cgroup("x::/a\n").ok());
  EXPECT_FALSE(parse_cgroup("0:/a\n").ok());
  EXPECT_FALSE(parse_cgroup("99999999999::/a\n").ok());
  EXPECT_EQ(cgroup_match_path("garbage\n0::/a/b\n"), "/a/b");
  EXPECT_EQ(cgroup_match_path("3:cpu:/c\n1:name=systemd:/s\n"), "/c");
  // A last line without its newline may be cut ("/jobs/team-b" of "/jobs/team-bc"): ignored.
  EXPECT_FALSE(cgroup_match_path("0::/jobs/team-b").has_value());
  EXPECT_FALSE(parse_cgroup("0::/jobs/team-b")->v2_path.has_value());
  EXPECT_FALSE(cgroup_match_path("").has_value());
}

TEST(CgroupPrefix, matches_whole_components_only) {
  EXPECT_TRUE(cgroup_path_has_prefix("/a/b", "/a/b"));
  EXPECT_TRUE(cgroup_path_has_prefix("/a/b/c", "/a/b"));
  EXPECT_FALSE(cgroup_path_has_prefix("/a/bc", "/a/b"));
  EXPECT_FALSE(cgroup_path_has_prefix("/a", "/a/b"));
  EXPECT_TRUE(cgroup_path_has_prefix("/a/b/c", "/a/b/"));
  EXPECT_TRUE(cgroup_path_has_prefix("/anything", "/"));
  EXPECT_TRUE(cgroup_path_has_prefix("/", "/"));
  EXPECT_FALSE(cgroup_path_has_prefix("", "/a"));
}

TEST(MapsParse, takes_the_path_column_including_spaces_and_deleted) {
  EXPECT_EQ(maps_line_path("7f00-7f10 r-xp 00000000 08:01 1234   /usr/lib/libnccl.so.2\n"),
            "/usr/lib/libnccl.so.2");
  EXPECT_EQ(maps_line_path("7f00-7f10 rw-s 00000000 00:1a 77 /dev/shm/nccl-ab12 (deleted)"),
            "/dev/shm/nccl-ab12 (deleted)");
  EXPECT_EQ(maps_line_path("7f00-7f10 r--p 00000000 08:01 9 /home/u/my data/f.bin"),
            "/home/u/my data/f.bin");
  EXPECT_EQ(maps_line_path("5600-5700 rw-p 00000000 00:00 0   [heap]"), "[heap]");
  EXPECT_FALSE(maps_line_path("7f00-7f10 rw-p 00000000 00:00 0 ").has_value());  // anonymous
  EXPECT_FALSE(maps_line_path("7f00-7f10 rw-p 00000000").has_value());           // truncated
  EXPECT_FALSE(maps_line_path("").has_value());
  EXPECT_FALSE(maps_line_path("no dash here at all x y z").has_value());
}

TEST(MapsParse, lists_distinct_file_paths_in_order) {
  const std::string maps =
      "5600-5700 r--p 00000000 08:01 10 /usr/bin/python3.11\n"
      "5700-5800 r-xp 00001000 08:01 10 /usr/bin/python3.11\n"
      "5800-5900 rw-p 00000000 00:00 0 [heap]\n"
      "7f00-7f10 r-xp 00000000 08:01 11 /usr/lib/libc.so.6\n"
      "7f10-7f20 rw-p 00000000 00:00 0\n"
      "7f20-7f30 r--p 00000000 08:01 10 /usr/bin/python3.11\n"
      "7f30-7f40 r--p 000";  // truncated last line
  EXPECT_EQ(parse_mapped_paths(maps),
            (std::vector<std::string>{"/usr/bin/python3.11", "/usr/lib/libc.so.6"}));
  EXPECT_TRUE(parse_mapped_paths("").empty());
}

TEST(NvidiaDevice, gives_the_gpu_index_of_dev_nvidia_n_only) {
  auto gpu3 = parse_nvidia_device("/dev/nvidia3");
  ASSERT_TRUE(gpu3.has_value());
  EXPECT_EQ(gpu3->gpu, 3U);
  EXPECT_EQ(parse_nvidia_device("/dev/nvidia15")->gpu, 15U);
  EXPECT_EQ(parse_nvidia_device("/dev/nvidia2 (deleted)")->gpu, 2U);
  for (const char* control :
       {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
        "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia99999999999999999999", "/dev/nvidia"}) {
    auto d = parse_nvidia_device(control);
    ASSERT_TRUE(d.has_value()) << control;
    EXPECT_FALSE(d->gpu.has_value()) << control;
  }
  for (const char* other : {"/dev/null", "socket:[1234]", "/home/nvidia0", "", "anon_inode:[x]"}) {
    EXPECT_FALSE(parse_nvidia_device(other).has_value()) << other;
  }
}

TEST(NcclPaths, library_and_shm_segments_count) {
  EXPECT_TRUE(is_nccl_mapping("/usr/lib/x86_64-linux-gnu/libnccl.so.2.18.3"));
  EXPECT_TRUE(is_nccl_mapping("/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"));
  EXPECT_TRUE(is_nccl_mapping("/dev/shm/nccl-Xy12 (deleted)"));
  EXPECT_TRUE(is_nccl_shm_path("/dev/shm/nccl-abc"));
  EXPECT_FALSE(is_nccl_shm_path("/dev/shm/torch_123"));
  EXPECT_FALSE(is_nccl_mapping("/usr/lib/libcuda.so.1"));
  EXPECT_FALSE(is_nccl_mapping("/dev/shm/ncclx"));
}

TEST(ProcStatCpus, reads_per_cpu_lines_indexed_by_id_with_gaps) {
  const std::string text =
      "cpu  100 0 50 1000 5 1 1 0 0 0\n"
      "cpu0 10 1 5 100 2 1 1 3 0 0\n"
      "cpu2 20 0 10 200 0 0 0 0 0 0\n"
      "intr 12345 1 2 3\n"
      "ctxt 999\n"
      "cpu3 1 2 3 4\n";  // an old kernel's four values
  auto r = parse_proc_stat_cpus(text);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->size(), 4U);
  ASSERT_TRUE((*r)[0].has_value());
  EXPECT_EQ((*r)[0]->user, 10U);
  EXPECT_EQ((*r)[0]->steal, 3U);
  EXPECT_EQ((*r)[0]->total(), 10U + 1 + 5 + 100 + 2 + 1 + 1 + 3);
  EXPECT_EQ((*r)[0]->idle_total(), 102U);
  EXPECT_FALSE((*r)[1].has_value());  // offline
  EXPECT_EQ((*r)[3]->idle, 4U);
  EXPECT_EQ((*r)[3]->iowait, 0U);
}

TEST(ProcStatCpus, malformed_lines_are_errors) {
  EXPECT_FALSE(parse_proc_stat_cpus("").ok());
  EXPECT_FALSE(parse_proc_stat_cpus("cpu 1 2 3 4\n").ok());  // only the aggregate
  EXPECT_FALSE(parse_proc_stat_cpus("cpu0 1 2 3\n").ok());
  EXPECT_FALSE(parse_proc_stat_cpus("cpu0 1 2 x 4\n").ok());
  EXPECT_FALSE(parse_proc_stat_cpus("cpu0 1 2 3 99999999999999999999999\n").ok());
  EXPECT_FALSE(parse_proc_stat_cpus("cpu99999999 1 2 3 4\n").ok());
  EXPECT_FALSE(parse_proc_stat_cpus("cpu4294967296 1 2 3 4\n").ok());
  EXPECT_FALSE(parse_proc_stat_cpus("cpu0 1 2 3 4\ncpu0 1 2 3 4\n").ok());
  EXPECT_FALSE(parse_proc_stat_cpus("cpu1x 1 2 3 4\n").ok());
}

TEST(TaskDelayacct, parses_zero_and_one_only) {
  EXPECT_EQ(*parse_task_delayacct("0\n"), false);
  EXPECT_EQ(*parse_task_delayacct(" 1 "), true);
  EXPECT_FALSE(parse_task_delayacct("").ok());
  EXPECT_FALSE(parse_task_delayacct("2\n").ok());
  EXPECT_FALSE(parse_task_delayacct("on").ok());
}

TEST(PidName, accepts_plain_positive_decimals_only) {
  EXPECT_EQ(parse_pid_name("1"), 1U);
  EXPECT_EQ(parse_pid_name("4194304"), 4194304U);
  EXPECT_FALSE(parse_pid_name("0").has_value());
  EXPECT_FALSE(parse_pid_name("01").has_value());
  EXPECT_FALSE(parse_pid_name("self").has_value());
  EXPECT_FALSE(parse_pid_name("").has_value());
  EXPECT_FALSE(parse_pid_name("+5").has_value());
  EXPECT_FALSE(parse_pid_name("2147483648").has_value());
  EXPECT_FALSE(parse_pid_name("99999999999").has_value());
}

TEST(ProcParsers, random_bytes_never_crash) {
  std::mt19937 rng(12345);
  const std::string alphabet = "0123456789 ()\n\t:-/abcRSZ\0"s;
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 200, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    (void)parse_stat(s);
    (void)parse_status(s);
    (void)parse_cgroup(s);
    (void)cgroup_match_path(s);
    (void)maps_line_path(s);
    (void)parse_mapped_paths(s);
    (void)parse_nvidia_device(s);
    (void)parse_proc_stat_cpus(s);
    (void)parse_task_delayacct(s);
    (void)cmdline_to_string(s);
  }
  SUCCEED();
}

// ---------------------------------------------------------------------------------------------
// Readers on a fabricated tree.

class FakeProc : public test_support::TempTree {
 public:
  FakeProc() : TempTree("zernel-procfs") {}
};

TEST(ProcReaders, a_missing_process_is_gone_not_an_error) {
  FakeProc p;
  auto st = read_stat(p.root(), 123);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(is_gone(st.error())) << st.error().message();
  EXPECT_NE(st.error().message().find("process is gone"), std::string::npos);
  // The directory exists but stat went away between listing and reading.
  p.write("124/status", "Uid:\t0\t0\t0\t0\n");
  auto st2 = read_stat(p.root(), 124);
  ASSERT_FALSE(st2.ok());
  EXPECT_TRUE(is_gone(st2.error()));
  EXPECT_TRUE(read_status(p.root(), 124).ok());
  EXPECT_TRUE(is_gone(read_fd_targets(p.root(), 123).error()));
  EXPECT_TRUE(is_gone(read_thread_ids(p.root(), 123).error()));
}

TEST(ProcReaders, a_garbled_file_is_an_error_naming_it) {
  FakeProc p;
  p.write("77/stat", "77 (x) R garbage\n");
  auto st = read_stat(p.root(), 77);
  ASSERT_FALSE(st.ok());
  EXPECT_FALSE(is_gone(st.error()));
  EXPECT_NE(st.error().message().find("/77/stat"), std::string::npos) << st.error().message();
  p.write("78/stat", "");
  EXPECT_FALSE(read_stat(p.root(), 78).ok());
}

TEST(ProcReaders, read_fd_targets_threads_cmdline_cgroup_maps) {
  FakeProc p;
  p.write("10/stat", stat_line("py"));
  p.link("10/fd/0", "/dev/null");
  p.link("10/fd/5", "/dev/nvidia1");
  p.write("10/task/10/stat", stat_line("py"));
  p.write("10/task/12/stat", stat_line("py"));
  p.write("10/task/11/stat", stat_line("py"));
  p.write("10/task/notatid/stat", "");
  p.write("10/cmdline", "python\0-m\0train\0"s);
  p.write("10/cgroup", "0::/jobs/a\n");
  p.write("10/maps", "7f00-7f10 r-xp 00000000 08:01 11 /usr/lib/libnccl.so.2\n");
  auto fds = read_fd_targets(p.root(), 10);
  ASSERT_TRUE(fds.ok()) << fds.error().message();
  std::sort(fds->begin(), fds->end());
  EXPECT_EQ(*fds, (std::vector<std::string>{"/dev/null", "/dev/nvidia1"}));
  auto tids = read_thread_ids(p.root(), 10);
  ASSERT_TRUE(tids.ok());
  EXPECT_EQ(*tids, (std::vector<std::uint32_t>{10, 11, 12}));
  EXPECT_EQ(*read_cmdline(p.root(), 10), "python -m train");
  EXPECT_EQ(read_cgroup(p.root(), 10)->match_path(), "/jobs/a");
  EXPECT_EQ(*read_mapped_paths(p.root(), 10), std::vector<std::string>{"/usr/lib/libnccl.so.2"});
  auto thread = read_thread_stat(p.root(), 10, 12);
  ASSERT_TRUE(thread.ok());
  EXPECT_EQ(thread->delayacct_blkio_ticks, 77U);
}

TEST(ProcReaders, read_file_at_refuses_files_over_the_limit) {
  FakeProc p;
  p.write("big", std::string(10000, 'x'));
  const UniqueFd dir(::open(p.root().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(dir.valid());
  std::string out;
  EXPECT_EQ(read_file_at(dir.get(), "big", out, 9999), EFBIG);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(read_file_at(dir.get(), "big", out, 10000), 0);
  EXPECT_EQ(out.size(), 10000U);
  EXPECT_EQ(read_file_at(dir.get(), "missing", out), ENOENT);
}

// ---------------------------------------------------------------------------------------------
// The real /proc.

TEST(ProcReaders, reads_this_process_on_the_real_proc) {
  const auto self = static_cast<std::uint32_t>(::getpid());
  auto st = read_stat("/proc", self);
  ASSERT_TRUE(st.ok()) << st.error().message();
  EXPECT_EQ(st->pid, self);
  EXPECT_EQ(st->ppid, static_cast<std::uint32_t>(::getppid()));
  EXPECT_GT(st->starttime_ticks, 0U);
  EXPECT_FALSE(st->is_kernel_thread());
  EXPECT_TRUE(st->delayacct_blkio_ticks.has_value());
  auto status = read_status("/proc", self);
  ASSERT_TRUE(status.ok()) << status.error().message();
  EXPECT_EQ(status->tgid, self);
  EXPECT_EQ(status->ruid, ::getuid());
  auto cmdline = read_cmdline("/proc", self);
  ASSERT_TRUE(cmdline.ok());
  EXPECT_NE(cmdline->find(program_invocation_short_name), std::string::npos) << *cmdline;
  EXPECT_TRUE(read_cgroup("/proc", self).ok());
  auto maps = read_mapped_paths("/proc", self);
  ASSERT_TRUE(maps.ok());
  EXPECT_FALSE(maps->empty());
  auto fds = read_fd_targets("/proc", self);
  ASSERT_TRUE(fds.ok());
  EXPECT_FALSE(fds->empty());
  auto tids = read_thread_ids("/proc", self);
  ASSERT_TRUE(tids.ok());
  EXPECT_NE(std::find(tids->begin(), tids->end(), self), tids->end());
  auto cpus = read_proc_stat_cpus("/proc");
  ASSERT_TRUE(cpus.ok()) << cpus.error().message();
  EXPECT_FALSE(cpus->empty());
}

}  // namespace
}  // namespace zernel::sys
