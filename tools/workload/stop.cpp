#include "workload/stop.hpp"

#include <atomic>

namespace zernel::workload {
namespace {

// Lock-free atomics are async-signal-safe, and visible to the noise threads.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  g_stop_signal.compare_exchange_strong(expected, sig);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: blocking calls return EINTR
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGPIPE, &ign, nullptr);
}

bool stop_requested() { return g_stop_signal.load(std::memory_order_relaxed) != 0; }

int stop_signal() { return g_stop_signal.load(std::memory_order_relaxed); }

void request_stop(int sig) { on_stop_signal(sig); }

}  // namespace zernel::workload
