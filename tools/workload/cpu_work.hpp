#pragma once
// CPU work that stands for a DataLoader's decode and an optimizer's parameter update.
//
// Both are measured in CPU time of the calling thread, not wall time: the amount of work is fixed,
// so a process that a noisy neighbour keeps off the CPU takes longer in wall time, which is the
// effect a CPU scheduler is there to fix.

#include <cstddef>
#include <cstdint>
#include <span>

namespace zernel::workload {

// Decodes `in` into `out` (same size) like a decompressor would: a byte-wise state machine whose
// output depends on everything before it, passing over the data again and again until `cpu_ns` of
// this thread's CPU time is spent (at least one pass), or a stop is requested (stop.hpp).
// Returns a checksum of the last output.
std::uint64_t decode(std::span<const std::byte> in, std::span<std::byte> out, std::uint64_t cpu_ns);

// Burns `cpu_ns` of this thread's CPU time on an optimizer-like parameter update (p -= lr * g over
// a small float array) and returns a value derived from it, so the work cannot be optimised away.
std::uint64_t burn_cpu(std::uint64_t cpu_ns);

}  // namespace zernel::workload
