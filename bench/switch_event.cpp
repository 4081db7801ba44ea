// switch_event: holds a BPF program on one process's own software context-switch event, for
// bench/tax_alternatives.sh. It opens PERF_COUNT_SW_CONTEXT_SWITCHES for each thread of PID
// (sample period 1, inherited by the threads it creates), attaches the object's program
// `zernel_alt` (SEC("perf_event")) to each, prints "ready" and holds them until its standard
// input closes. The kernel runs such a program at the followed thread's own switch-outs only;
// every other task of the machine meets the perf hooks' tests at its switches (the software
// event's hash lookup, the task's empty perf context), not a BPF program: what the script
// measures against a program on sched_switch.
//   switch_event OBJECT PID        (root)
#include <dirent.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int open_switch_event(int tid) {
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CONTEXT_SWITCHES;
  attr.sample_period = 1;
  attr.inherit = 1;
  attr.disabled = 0;
  return static_cast<int>(syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: switch_event OBJECT PID\n");
    return 2;
  }
  const int pid = std::atoi(argv[2]);
  bpf_object* obj = bpf_object__open_file(argv[1], nullptr);
  if (!obj) {
    std::fprintf(stderr, "switch_event: cannot open %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  if (int err = bpf_object__load(obj); err) {
    std::fprintf(stderr, "switch_event: loading %s failed: %s\n", argv[1], std::strerror(-err));
    return 1;
  }
  bpf_program* prog = bpf_object__find_program_by_name(obj, "zernel_alt");
  if (!prog) {
    std::fprintf(stderr, "switch_event: %s has no program zernel_alt\n", argv[1]);
    return 1;
  }
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (!d) {
    std::fprintf(stderr, "switch_event: %s: %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  std::vector<bpf_link*> links;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const int tid = std::atoi(e->d_name);
    const int fd = open_switch_event(tid);
    if (fd < 0 && errno == ESRCH) continue;  // the thread exited since the listing
    if (fd < 0) {
      std::fprintf(stderr, "switch_event: perf_event_open for %d: %s\n", tid, std::strerror(errno));
      return 1;
    }
    bpf_link* link = bpf_program__attach_perf_event(prog, fd);
    if (!link) {
      std::fprintf(stderr, "switch_event: attaching to %d's event: %s\n", tid,
                   std::strerror(errno));
      return 1;
    }
    links.push_back(link);
  }
  closedir(d);
  std::printf("ready %zu\n", links.size());
  std::fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) {
  }
  for (bpf_link* l : links) bpf_link__destroy(l);
  bpf_object__close(obj);
  return 0;
}
