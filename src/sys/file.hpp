#pragma once
// Reading and writing the small files the kernel exposes (/proc, sysfs, cgroupfs) and the
// daemon's own small files: one family instead of a helper in every module.
//
// The kernel produces such a file in one read and takes a value in one write, so a writer issues
// exactly one write(2) and a short write is an error (the value was not taken). Readers cap what
// they read: a file that grows without end (a link to /dev/zero) is an error, not a hang.
//
// Two styles, as callers need them: Result / optional for the cold paths (start-up, settings),
// errno values with caller-owned buffers for the hot paths (a scan over every pid every tick),
// which allocate nothing once their buffers have grown.

#include <fcntl.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/result.hpp"

namespace zernel::sys {

// What the cold-path readers read at most unless told otherwise.
inline constexpr std::size_t kMaxSmallFileBytes = std::size_t{1} << 20;

// Reads the whole file `rel` under `dirfd` (AT_FDCWD: a path) into `out` (its capacity is kept
// between calls), at most `max_bytes`. Returns 0 or an errno value; EFBIG when the file is larger
// than max_bytes.
int read_file_at(int dirfd, const char* rel, std::string& out,
                 std::size_t max_bytes = kMaxSmallFileBytes);

// Reads the file at `path` into `buf`, at most buf.size() bytes (a larger file is cut there), and
// sets `len` to the bytes read. Returns 0 or an errno value. For hot paths with a fixed buffer.
int read_file_into(const char* path, std::span<char> buf, std::size_t& len);

// The whole file; errors carry the errno and the path.
Result<std::string> read_file(const std::string& path, std::size_t max_bytes = kMaxSmallFileBytes);

// The whole file without trailing white space; nullopt when it cannot be read.
std::optional<std::string> read_trimmed(const std::string& path);

// The first line without its newline; nullopt when the file cannot be read.
std::optional<std::string> read_first_line(const std::string& path);

// A decimal number after optional leading white space, as sysfs attributes hold one ("2400000\n");
// nullopt when the file cannot be read or does not start with a number.
std::optional<std::uint64_t> read_u64(const std::string& path);
// The same, nullopt also when the number does not fit 32 bits (a frequency in kHz).
std::optional<std::uint32_t> read_u32(const std::string& path);

// Opens `path` O_WRONLY | O_CLOEXEC | `flags` (O_TRUNC by default; O_CREAT creates it mode 0644)
// and writes `text` in one write(2). Errors carry the errno and the path; a short write is EIO.
Result<void> write_file(const std::string& path, std::string_view text, int flags = O_TRUNC);

}  // namespace zernel::sys
