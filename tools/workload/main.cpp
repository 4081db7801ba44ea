// zernel-workload: parses arguments and dispatches; everything else lives in the library.
#include <exception>

#include <fmt/format.h>

#include "workload/cli.hpp"
#include "workload/options.hpp"

int main(int argc, char** argv) {
  try {
    return zernel::workload::run_cli(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "zernel-workload: {}\n", e.what());
    return zernel::workload::kExitError;
  }
}
