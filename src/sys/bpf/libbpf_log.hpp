#pragma once
// libbpf's messages into the daemon's log, for every BPF object we load (the GPU sync probes,
// the sched_ext scheduler): warnings stay warnings (a failed load carries the verifier log),
// libbpf's info lines are debug detail, its debug lines trace. Built with the BPF toolchain only.

namespace zernel::sys {

// Installs the routing (libbpf_set_print) once per process; later calls do nothing.
void route_libbpf_log();

}  // namespace zernel::sys
