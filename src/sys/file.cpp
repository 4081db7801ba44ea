#include "sys/file.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>

#include "sys/unique_fd.hpp"

namespace zernel::sys {

int read_file_at(int dirfd, const char* rel, std::string& out, std::size_t max_bytes) {
  out.clear();
  UniqueFd fd(::openat(dirfd, rel, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errno;
  std::size_t len = 0;
  out.resize(std::min(std::max<std::size_t>(out.capacity(), 4096), max_bytes + 1));
  for (;;) {
    if (len == out.size()) {
      const std::size_t grown = std::min(out.size() * 2, max_bytes + 1);
      if (grown == out.size()) {
        out.clear();
        return EFBIG;
      }
      out.resize(grown);
    }
    const ssize_t n = ::read(fd.get(), out.data() + len, out.size() - len);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      out.clear();
      return err;
    }
    if (n == 0) break;
    len += static_cast<std::size_t>(n);
  }
  out.resize(len);
  if (len > max_bytes) {
    out.clear();
    return EFBIG;
  }
  return 0;
}

int read_file_into(const char* path, std::span<char> buf, std::size_t& len) {
  len = 0;
  const UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errno;
  while (len < buf.size()) {
    const ssize_t n = ::read(fd.get(), buf.data() + len, buf.size() - len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) break;
    len += static_cast<std::size_t>(n);
  }
  return 0;
}

Result<std::string> read_file(const std::string& path, std::size_t max_bytes) {
  std::string out;
  if (const int err = read_file_at(AT_FDCWD, path.c_str(), out, max_bytes); err != 0) {
    return errno_error("reading " + path, err);
  }
  return out;
}

std::optional<std::string> read_trimmed(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::nullopt;
  std::string s = std::move(*text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.pop_back();
  return s;
}

std::optional<std::string> read_first_line(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::nullopt;
  std::string s = std::move(*text);
  if (const auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

std::optional<std::uint64_t> read_u64(const std::string& path) {
  auto text = read_file(path, 4096);
  if (!text) return std::nullopt;
  const char* p = text->data();
  const char* end = p + text->size();
  while (p < end && std::isspace(static_cast<unsigned char>(*p)) != 0) ++p;
  std::uint64_t v = 0;
  const auto [next, ec] = std::from_chars(p, end, v);
  if (ec != std::errc()) return std::nullopt;
  return v;
}

std::optional<std::uint32_t> read_u32(const std::string& path) {
  const auto v = read_u64(path);
  if (!v || *v > UINT32_MAX) return std::nullopt;
  return static_cast<std::uint32_t>(*v);
}

Result<void> write_file(const std::string& path, std::string_view text, int flags) {
  const UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | flags, 0644));
  if (!fd.valid()) return errno_error("opening " + path);
  const std::string what =
      "writing \"" + std::string(text.substr(0, text.find_last_not_of('\n') + 1)) + "\" to " + path;
  for (;;) {
    const ssize_t n = ::write(fd.get(), text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error(what);
    if (static_cast<std::size_t>(n) != text.size()) return Error(EIO, what + ": short write");
    return Ok{};
  }
}

}  // namespace zernel::sys
