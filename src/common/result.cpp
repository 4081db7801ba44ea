#include "common/result.hpp"

#include <cstring>

namespace zernel {

Error errno_error(const std::string& what, int err) {
  return Error(err, what + ": " + std::strerror(err));
}

}  // namespace zernel
