#pragma once
// The zernel-workload command line. Exit codes: 0 success, 1 a runtime error (the message names
// it), 2 bad command-line usage.

namespace zernel::workload {

int run_cli(int argc, char** argv);

}  // namespace zernel::workload
