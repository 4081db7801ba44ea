#pragma once
// Whether this process may load BPF tracing programs (the GPU sync probes, the task iterator):
// CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON, in its effective set. Checked before loading so that
// an unprivileged daemon says so in one line instead of libbpf's log of a refused load.

namespace zernel::sys {

bool can_use_bpf_tracing();

}  // namespace zernel::sys
