#pragma once
// The zernel-scheduler command line (docs/operations.md). Exit codes: 0 success, 1 a runtime or
// configuration error (the message names the problem), 2 bad command-line usage.

namespace zernel::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

int run(int argc, char** argv);

}  // namespace zernel::cli
