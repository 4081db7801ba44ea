// The process events connector: datagrams parsed into what discovery follows, and, as root, the
// kernel's events of a child this test forks and of a thread it starts.
#include "collect/proc_events.hpp"

#include <gtest/gtest.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace zernel::collect {
namespace {

// A datagram as the kernel sends it: netlink header, connector header, proc_event (what, cpu,
// timestamp, then the union's 32-bit fields).
std::vector<std::byte> datagram(std::uint32_t what, std::vector<std::int32_t> fields,
                                std::uint32_t idx = CN_IDX_PROC) {
  const std::size_t event_bytes = 16 + 24;
  std::vector<std::byte> d(NLMSG_HDRLEN + sizeof(cn_msg) + event_bytes);
  nlmsghdr nh{};
  nh.nlmsg_len = static_cast<std::uint32_t>(d.size());
  nh.nlmsg_type = NLMSG_DONE;
  cn_msg cn{};
  cn.id = {idx, CN_VAL_PROC};
  cn.len = event_bytes;
  std::memcpy(d.data(), &nh, sizeof nh);
  std::memcpy(d.data() + NLMSG_HDRLEN, &cn, sizeof cn);
  std::byte* ep = d.data() + NLMSG_HDRLEN + sizeof cn;
  const std::uint64_t t = 12345;
  std::memcpy(ep, &what, 4);
  std::memcpy(ep + 8, &t, 8);
  std::memcpy(ep + 16, fields.data(), fields.size() * 4);
  return d;
}

TEST(ProcEvents, datagrams_become_the_events_discovery_follows) {
  std::vector<ProcEvent> out;
  EXPECT_TRUE(parse_proc_event(datagram(0x1, {10, 10, 20, 20}), out));  // fork: 10 -> 20
  EXPECT_TRUE(parse_proc_event(datagram(0x1, {10, 10, 21, 10}), out));  // a new thread: none
  EXPECT_TRUE(parse_proc_event(datagram(0x2, {20, 20}), out));          // exec
  EXPECT_TRUE(parse_proc_event(datagram(0x80000000, {21, 10, 0, 17, 1, 1}), out));  // thread
  EXPECT_TRUE(parse_proc_event(datagram(0x80000000, {20, 20, 0, 17, 1, 1}), out));  // process
  EXPECT_TRUE(parse_proc_event(datagram(0x200, {20, 20}), out));      // comm of the leader
  EXPECT_TRUE(parse_proc_event(datagram(0x200, {22, 20}), out));      // another thread's: none
  EXPECT_TRUE(parse_proc_event(datagram(0x4, {20, 20, 0, 0}), out));  // uid
  EXPECT_TRUE(parse_proc_event(datagram(0x80, {20, 20}), out));       // sid: not used
  ASSERT_EQ(out.size(), 6U);
  EXPECT_EQ(out[0].kind, ProcEventKind::fork);
  EXPECT_EQ(out[0].pid, 20U);
  EXPECT_EQ(out[0].ppid, 10U);
  EXPECT_EQ(out[0].t_ns, 12345U);
  EXPECT_EQ(out[1].kind, ProcEventKind::exec);
  EXPECT_EQ(out[2].kind, ProcEventKind::thread_exit);
  EXPECT_EQ(out[2].pid, 10U);
  EXPECT_EQ(out[2].tid, 21U);
  EXPECT_EQ(out[3].kind, ProcEventKind::exit);
  EXPECT_EQ(out[3].pid, 20U);
  EXPECT_EQ(out[4].kind, ProcEventKind::comm);
  EXPECT_EQ(out[5].kind, ProcEventKind::uid);
}

TEST(ProcEvents, malformed_datagrams_are_refused) {
  std::vector<ProcEvent> out;
  std::vector<std::byte> d = datagram(0x1, {10, 10, 20, 20});
  EXPECT_FALSE(parse_proc_event(std::span(d.data(), 10), out));             // cut short
  EXPECT_FALSE(parse_proc_event(datagram(0x1, {10, 10, 20, 20}, 7), out));  // another id
  std::vector<std::byte> lying = d;
  nlmsghdr nh{};
  std::memcpy(&nh, lying.data(), sizeof nh);
  nh.nlmsg_len = static_cast<std::uint32_t>(lying.size() + 100);  // longer than it is
  std::memcpy(lying.data(), &nh, sizeof nh);
  EXPECT_FALSE(parse_proc_event(lying, out));
  EXPECT_FALSE(parse_proc_event(datagram(0x2, {0, 0}), out));  // pid 0
  EXPECT_TRUE(out.empty());
}

TEST(ProcEvents, the_kernel_reports_a_fork_a_thread_and_the_exits) {
  auto pe = ProcEvents::open();
  if (!pe) GTEST_SKIP() << pe.error().message();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  std::thread([] {}).join();
  std::vector<ProcEvent> events;
  bool fork_seen = false;
  bool exit_seen = false;
  bool thread_seen = false;
  const auto self = static_cast<std::uint32_t>(getpid());
  for (int i = 0; i < 100 && !(fork_seen && exit_seen && thread_seen); ++i) {
    events.clear();
    EXPECT_TRUE((*pe)->drain(events));
    for (const ProcEvent& e : events) {
      if (e.kind == ProcEventKind::fork && e.pid == static_cast<std::uint32_t>(child)) {
        fork_seen = e.ppid == self;
      }
      if (e.kind == ProcEventKind::exit && e.pid == static_cast<std::uint32_t>(child)) {
        exit_seen = true;
      }
      if (e.kind == ProcEventKind::thread_exit && e.pid == self && e.tid != self) {
        thread_seen = true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(fork_seen);
  EXPECT_TRUE(exit_seen);
  EXPECT_TRUE(thread_seen);
  EXPECT_GT((*pe)->stats().events, 0U);
}

// A process's event as RecentSpawns reads it (pid = tid); t_ns 0: no kernel time (now_ns counts).
ProcEvent proc_event(ProcEventKind kind, std::uint32_t pid, std::uint64_t t_ns = 0) {
  ProcEvent e;
  e.kind = kind;
  e.pid = pid;
  e.tid = pid;
  e.t_ns = t_ns;
  return e;
}

// RecentSpawns: a spawned process keeps the window open until it exits or a window has passed
// since its last fork or exec; other events do not count; a spawn beyond the capacity keeps it
// open for a whole window.
TEST(RecentSpawns, a_spawn_counts_until_it_exits_or_its_window_passes) {
  constexpr std::uint64_t kWindow = 30'000;
  RecentSpawns r(kWindow, /*min_age_ns=*/100, /*capacity=*/3);
  EXPECT_FALSE(r.any(0));
  const std::vector<ProcEvent> quiet = {proc_event(ProcEventKind::comm, 5),
                                        proc_event(ProcEventKind::uid, 5),
                                        proc_event(ProcEventKind::thread_exit, 5)};
  r.apply(quiet, 100);
  EXPECT_FALSE(r.any(100)) << "only forks and execs open the window";

  // A health probe's shell: forked, exec'd, gone within a tick.
  const std::vector<ProcEvent> probe = {proc_event(ProcEventKind::fork, 10),
                                        proc_event(ProcEventKind::exec, 10),
                                        proc_event(ProcEventKind::exit, 10)};
  r.apply(probe, 1'000);
  EXPECT_FALSE(r.any(1'000)) << "a process that exited does not hold the window";
  EXPECT_FALSE(r.churning()) << "one short command is no churn";

  // A kernel thread (a workqueue's new worker, kthreadd's child) never holds it.
  ProcEvent kworker = proc_event(ProcEventKind::fork, 12);
  kworker.ppid = RecentSpawns::kKthreadd;
  r.apply(std::vector<ProcEvent>{kworker}, 1'500);
  EXPECT_FALSE(r.any(1'500)) << "a kernel thread is no GPU process";
  EXPECT_EQ(r.size(), 0U);

  // A new rank on a quiet node: forked at 2,000, exec'd at 5,000, alive: it counts at once, until
  // 5,000 + the window.
  r.apply(std::vector<ProcEvent>{proc_event(ProcEventKind::fork, 20)}, 2'000);
  EXPECT_TRUE(r.any(2'000)) << "no minimum age without churn";
  r.apply(std::vector<ProcEvent>{proc_event(ProcEventKind::exec, 20)}, 5'000);
  EXPECT_TRUE(r.any(5'000 + kWindow - 1));
  EXPECT_FALSE(r.any(5'000 + kWindow));
  EXPECT_EQ(r.size(), 0U) << "an expired spawn is forgotten";

  // Capacity 3: the fourth spawn is not held, but keeps the window open for a whole window.
  r.apply(std::vector<ProcEvent>{proc_event(ProcEventKind::fork, 31),
                                 proc_event(ProcEventKind::fork, 32),
                                 proc_event(ProcEventKind::fork, 33),
                                 proc_event(ProcEventKind::fork, 34)},
          100'000);
  EXPECT_EQ(r.size(), 3U);
  r.apply(std::vector<ProcEvent>{proc_event(ProcEventKind::exit, 31),
                                 proc_event(ProcEventKind::exit, 32),
                                 proc_event(ProcEventKind::exit, 33)},
          100'001);
  EXPECT_TRUE(r.any(100'002)) << "the spawn beyond the capacity holds the window";
  EXPECT_TRUE(r.any(100'000 + kWindow - 1));
  EXPECT_FALSE(r.any(100'000 + kWindow));
}

// Commands run back to back (a loop's 50-ms ones): once kChurnExits of them exited younger than
// the minimum age, a new process counts only from that age on, so the loop's next commands never
// do and a rank still does; the minimum age goes once the churn stops for two buckets.
TEST(RecentSpawns, churn_of_short_commands_makes_a_new_process_count_from_its_minimum_age) {
  constexpr std::uint64_t kMs = 1'000'000;
  constexpr std::uint64_t kMinAge = 100 * kMs;
  RecentSpawns r(30'000 * kMs, kMinAge);
  // Ticks every 100 ms from t = 1 s; a command forked 10 ms before each tick lives 55 ms, so its
  // exit is drained at the next tick.
  std::uint64_t t = 1'000 * kMs;
  std::uint32_t pid = 1'000;
  std::uint32_t held = 0;  // ticks at which the loop's commands held the window
  for (std::uint32_t i = 0; i < 3 * RecentSpawns::kChurnExits; ++i, t += 100 * kMs, ++pid) {
    r.apply(std::vector<ProcEvent>{proc_event(ProcEventKind::exit, pid - 1, t - 55 * kMs),
                                   proc_event(ProcEventKind::fork, pid, t - 10 * kMs),
                                   proc_event(ProcEventKind::exec, pid, t - 9 * kMs)},
            t);
    if (r.any(t)) ++held;
  }
  EXPECT_TRUE(r.churning());
  EXPECT_LE(held, RecentSpawns::kChurnExits + 1) << "only until the churn is seen";
  r.apply(std::vector<ProcEvent>{proc_event(ProcEventKind::exit, pid - 1, t - 55 * kMs)}, t);
  EXPECT_FALSE(r.any(t));

  // A rank starts in the churn: it counts from its minimum age on.
  r.apply(std::vector<ProcEvent>{proc_event(ProcEventKind::fork, 5)}, t);
  EXPECT_FALSE(r.any(t + kMinAge - 1)) << "younger than the minimum age while churning";
  EXPECT_TRUE(r.any(t + kMinAge));
  r.apply(std::vector<ProcEvent>{proc_event(ProcEventKind::exit, 5)}, t + kMinAge + 1);
  EXPECT_FALSE(r.any(t + kMinAge + 1));

  // The loop stops: two buckets later there is no churn, and a new process counts at once.
  t += 2 * RecentSpawns::kChurnBucketNs + kMinAge;
  r.apply(std::vector<ProcEvent>{proc_event(ProcEventKind::fork, 6)}, t);
  EXPECT_FALSE(r.churning());
  EXPECT_TRUE(r.any(t));
}

}  // namespace
}  // namespace zernel::collect
