#pragma once
// Stop requests: SIGINT and SIGTERM set a flag that every loop of the workload checks.
//
// The handlers are installed without SA_RESTART, so a process blocked in read(), poll(), a futex
// wait or a sleep returns with EINTR and notices the request at once. Children inherit the
// handlers across fork().

#include <csignal>

namespace zernel::workload {

// Installs the SIGINT/SIGTERM handlers and ignores SIGPIPE (a closed pipe is reported as EPIPE).
void install_stop_handlers();

// True once SIGINT or SIGTERM has arrived.
bool stop_requested();

// The signal that asked to stop (0 when none).
int stop_signal();

// Sets the flag as a signal would (for a process that decides to stop on its own).
void request_stop(int sig);

}  // namespace zernel::workload
