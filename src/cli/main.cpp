// zernel-scheduler: parses arguments and dispatches; everything else lives in the libraries.
#include "cli/app.hpp"

int main(int argc, char** argv) { return zernel::cli::run(argc, argv); }
