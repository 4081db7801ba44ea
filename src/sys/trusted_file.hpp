#pragma once
// Files the daemon reads or writes as root and acts on: its config and its journals (whose
// "originals" it writes back into the kernel, into other processes' nice values and affinity).
// Whoever can put something at such a path must not be able to hang, exhaust or steer the
// daemon, so:
//   - reading opens with O_NOFOLLOW | O_NONBLOCK (a symlink is refused; a FIFO cannot block the
//     open) and checks with fstat, before reading a byte, that it is a regular file owned by root
//     (or by the daemon's own uid, for an unprivileged daemon) that others cannot write, nor a
//     group but root's (or the daemon's own) (/dev/null reads as an empty file); it reads at most
//     max_bytes (a link to /dev/zero is refused, not read forever);
//   - writing creates a new temporary file with O_EXCL (mkostemp: an unpredictable name, never
//     following a link planted there) in a directory no other user can write, created 0700 when
//     missing, fsyncs it and renames it over the target.
// Only the last path component is checked: the directories above are root's to protect.
// Every refusal is an error that names the path, what is wrong and what to do.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "common/result.hpp"

namespace zernel::sys {

struct TrustedText {
  std::string text;
  std::int64_t mtime_ns = 0;  // CLOCK_REALTIME, as the file system keeps it
};

// nullopt when the file does not exist. Errors: ELOOP (a symbolic link), ENXIO (not a regular
// file), EPERM (owner or mode), EFBIG (larger than max_bytes), EAGAIN (it changed while being
// read), or the errno of open/read.
Result<std::optional<TrustedText>> read_trusted_file(const std::string& path,
                                                     std::size_t max_bytes);

// The directory exists (created mode 0700 when missing, parents included), is a directory,
// belongs to root or this uid and is not writable by group or others.
Result<void> ensure_private_dir(const std::string& dir);

// Writes `text` to a fresh O_EXCL temporary file next to `path` (mode 0600), fsyncs it, renames
// it over `path` and fsyncs the directory (ensure_private_dir first). On failure `path` is
// untouched and the temporary file removed.
Result<void> write_trusted_file(const std::string& path, const std::string& text);

}  // namespace zernel::sys
