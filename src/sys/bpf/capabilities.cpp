#include "sys/bpf/capabilities.hpp"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace zernel::sys {
namespace {

// Whether the effective capability set holds `cap` (capget, no libcap).
bool has_capability(int cap) {
  __user_cap_header_struct hdr{};
  hdr.version = _LINUX_CAPABILITY_VERSION_3;
  hdr.pid = 0;
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  const auto idx = static_cast<std::size_t>(cap / 32);
  return idx < 2 && (data[idx].effective & (1U << (cap % 32))) != 0;
}

}  // namespace

bool can_use_bpf_tracing() {
  constexpr int kCapPerfmon = 38;  // not in older headers
  constexpr int kCapBpf = 39;
  return has_capability(CAP_SYS_ADMIN) || (has_capability(kCapBpf) && has_capability(kCapPerfmon));
}

Error libbpf_error(const std::string& what, int err, const char* need_root) {
  if (err < 0) err = -err;
  if (err == EPERM) return Error(EPERM, what + ": " + need_root);
  return errno_error(what, err);
}

}  // namespace zernel::sys
