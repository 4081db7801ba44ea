// process_tax: what following processes costs every other task of the node. Times the calls
// whose kernel path a process follower hooks: fork + exit + wait of a child, creating and joining
// a thread, and spawning /bin/true (fork, exec, exit), in rounds, with each way of following
// processes switched on in turn by a listener in a child process:
//   none      nothing follows processes (the baseline)
//   cn_proc   the process events connector, subscribed and drained every 100 ms as the daemon
//             does (collect::ProcEvents)
//   bpf       three BPF programs on the scheduler's fork, exec and exit tracepoints sending into
//             a ring buffer drained every 100 ms (bench/process_tax.bpf.c; BPF builds only)
// The modes take turns round by round (the order rotates), so a busy machine's noise falls on all
// of them alike; the best round of each is the figure. Prints one JSON line per call and mode:
// {"call", "mode", "best_ns", "median_ns", "rounds"} and, last, the events each listener received
// ({"mode", "events"}: it was following).
//   process_tax [--modes none,cn_proc,bpf] [--rounds N] [--calls N]       (root for the listeners)
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collect/proc_events.hpp"
#ifdef ZERNEL_TAX_BPF
#include <bpf/libbpf.h>

#include "process_tax.skel.h"
#endif

extern char** environ;

namespace {

std::uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return (static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL) +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// The listener: follows processes the way the parent asks (one byte on `cmd`: 'n' none, 'c'
// cn_proc, 'b' bpf; 'q' quits), answers each switch on `ack` (1 ok, 0 failed), drains every
// 100 ms, and at 'q' writes the events it received per mode (three u64) to `ack`.
[[noreturn]] void listener(int cmd, int ack) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  std::unique_ptr<zernel::collect::ProcEvents> pe;
  std::vector<zernel::collect::ProcEvent> out;
  std::uint64_t events[3] = {0, 0, 0};
#ifdef ZERNEL_TAX_BPF
  process_tax_bpf* skel = process_tax_bpf__open_and_load();
  ring_buffer* rb = nullptr;
  auto count = [](void* ctx, void* /*data*/, size_t /*size*/) -> int {
    ++*static_cast<std::uint64_t*>(ctx);
    return 0;
  };
  if (skel != nullptr) {
    rb = ring_buffer__new(bpf_map__fd(skel->maps.tax_events), count, &events[2], nullptr);
  }
#endif
  for (;;) {
    pollfd p{cmd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char c = 'q';
      if (::read(cmd, &c, 1) != 1 || c == 'q') break;
      char ok = 1;
      if (pe) {
        out.clear();
        (void)pe->drain(out);
        events[1] += out.size();
      }
      pe.reset();
#ifdef ZERNEL_TAX_BPF
      if (skel != nullptr) process_tax_bpf__detach(skel);
      if (c == 'b') ok = skel != nullptr && process_tax_bpf__attach(skel) == 0 ? 1 : 0;
#else
      if (c == 'b') ok = 0;
#endif
      if (c == 'c') {
        auto opened = zernel::collect::ProcEvents::open();
        if (opened) {
          pe = std::move(*opened);
        } else {
          std::fprintf(stderr, "process_tax: %s\n", opened.error().message().c_str());
          ok = 0;
        }
      }
      (void)::write(ack, &ok, 1);
    }
    if (pe) {
      out.clear();
      (void)pe->drain(out);
      events[1] += out.size();
    }
#ifdef ZERNEL_TAX_BPF
    if (rb != nullptr) (void)ring_buffer__consume(rb);
#endif
  }
  (void)::write(ack, events, sizeof events);
  ::_exit(0);
}

void* empty_thread(void* /*arg*/) { return nullptr; }

// One call of each kind.
void fork_exit() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int st = 0;
  ::waitpid(pid, &st, 0);
}
void thread_create_join() {
  pthread_t t{};
  ::pthread_create(&t, nullptr, empty_thread, nullptr);
  ::pthread_join(t, nullptr);
}
void spawn_true() {
  pid_t pid = 0;
  char arg0[] = "true";
  char* argv[] = {arg0, nullptr};
  if (::posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, environ) != 0) std::abort();
  int st = 0;
  ::waitpid(pid, &st, 0);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> modes = {"none", "cn_proc"};
#ifdef ZERNEL_TAX_BPF
  modes.emplace_back("bpf");
#endif
  int rounds = 9;
  int calls = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view k = argv[i];
    if (k == "--modes") {
      modes.clear();
      std::string_view list = argv[i + 1];
      while (!list.empty()) {
        const std::size_t comma = list.find(',');
        modes.emplace_back(list.substr(0, comma));
        list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
      }
    } else if (k == "--rounds") {
      rounds = std::max(1, std::atoi(argv[i + 1]));
    } else if (k == "--calls") {
      calls = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr,
                   "usage: process_tax [--modes none,cn_proc,bpf] [--rounds N] [--calls N]\n");
      return 2;
    }
  }
  for (const std::string& m : modes) {
    if (m != "none" && m != "cn_proc" && m != "bpf") {
      std::fprintf(stderr, "process_tax: unknown mode %s\n", m.c_str());
      return 2;
    }
  }
  int to_child[2];
  int from_child[2];
  if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) return 1;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(to_child[1]);
    ::close(from_child[0]);
    listener(to_child[0], from_child[1]);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  const auto switch_to = [&](const std::string& m) {
    const char c = m == "cn_proc" ? 'c' : m == "bpf" ? 'b' : 'n';
    char ok = 0;
    if (::write(to_child[1], &c, 1) != 1 || ::read(from_child[0], &ok, 1) != 1 || ok != 1) {
      std::fprintf(stderr, "process_tax: the listener could not switch to %s\n", m.c_str());
      std::exit(1);
    }
    ::usleep(50'000);
  };

  struct Call {
    const char* name;
    void (*fn)();
    int per_round;
  };
  // Spawning costs ~10x a fork: fewer per round, the same rounds.
  const Call kinds[] = {{"fork_exit", fork_exit, calls},
                        {"thread_create_join", thread_create_join, calls},
                        {"spawn_exec", spawn_true, std::max(1, calls / 10)}};
  for (const Call& c : kinds) {
    std::vector<std::vector<double>> per_call(modes.size());
    for (int r = 0; r < rounds; ++r) {
      for (std::size_t k = 0; k < modes.size(); ++k) {
        const std::size_t m = (k + static_cast<std::size_t>(r)) % modes.size();
        switch_to(modes[m]);
        const std::uint64_t t0 = now_ns();
        for (int i = 0; i < c.per_round; ++i) c.fn();
        per_call[m].push_back(static_cast<double>(now_ns() - t0) / c.per_round);
      }
    }
    for (std::size_t m = 0; m < modes.size(); ++m) {
      std::vector<double>& v = per_call[m];
      std::string list;
      for (double x : v) list += (list.empty() ? "" : ",") + std::to_string(std::lround(x));
      std::sort(v.begin(), v.end());
      std::printf(
          "{\"call\":\"%s\",\"mode\":\"%s\",\"best_ns\":%.0f,\"median_ns\":%.0f,"
          "\"rounds\":[%s]}\n",
          c.name, modes[m].c_str(), v.front(), v[v.size() / 2], list.c_str());
      std::fflush(stdout);
    }
  }
  const char q = 'q';
  (void)::write(to_child[1], &q, 1);
  std::uint64_t events[3] = {0, 0, 0};
  (void)::read(from_child[0], events, sizeof events);
  int st = 0;
  ::waitpid(child, &st, 0);
  std::printf("{\"mode\":\"cn_proc\",\"events\":%llu}\n{\"mode\":\"bpf\",\"events\":%llu}\n",
              static_cast<unsigned long long>(events[1]),
              static_cast<unsigned long long>(events[2]));
  return 0;
}
