#pragma once
// Whether this process may load BPF tracing programs (the GPU sync probes, the task iterator):
// CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON, in its effective set. Checked before loading so that
// an unprivileged daemon says so in one line instead of libbpf's log of a refused load.

#include <string>

#include "common/result.hpp"

namespace zernel::sys {

bool can_use_bpf_tracing();

// A libbpf call's failure (`err` an errno value, either sign) as an Error on `what`; EPERM says
// what it needs instead (`need_root`, e.g. "BPF probes need root (CAP_BPF, CAP_PERFMON)").
Error libbpf_error(const std::string& what, int err, const char* need_root);

}  // namespace zernel::sys
