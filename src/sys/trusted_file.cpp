#include "sys/trusted_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "sys/unique_fd.hpp"

namespace zernel::sys {
namespace {

std::int64_t mtime_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

// Owner root, or the daemon's own uid (an unprivileged daemon's private files); no write bit for
// others, nor for a group other than root's (or the daemon's own): a checkout made under umask
// 002 is root:root 0664, writable by nobody but root.
Result<void> check_owner_and_mode(const std::string& path, const struct stat& st, bool dir) {
  const uid_t me = ::geteuid();
  if (st.st_uid != 0 && st.st_uid != me) {
    return Error(EPERM, fmt::format("{}: owned by uid {}, not by root{}; refused (only root's own "
                                    "files are trusted: chown root {})",
                                    path, st.st_uid, me == 0 ? "" : " or this user", path));
  }
  const bool group_writes =
      (st.st_mode & S_IWGRP) != 0 && st.st_gid != 0 && st.st_gid != ::getegid();
  if ((st.st_mode & S_IWOTH) != 0 || group_writes) {
    return Error(EPERM, fmt::format("{}: writable by {} (mode {:04o}); refused (another user could "
                                    "change what the daemon {}: chmod go-w {})",
                                    path, (st.st_mode & S_IWOTH) != 0 ? "others" : "its group",
                                    st.st_mode & 07777, dir ? "writes there" : "reads", path));
  }
  return Ok{};
}

}  // namespace

Result<std::optional<TrustedText>> read_trusted_file(const std::string& path,
                                                     std::size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return std::optional<TrustedText>{};
    if (err == ELOOP) {
      return Error(ELOOP, path +
                              ": is a symbolic link; refused (the daemon reads only regular "
                              "files, never through a link)");
    }
    return errno_error("opening " + path, err);
  }
  const UniqueFd closer(fd);
  struct stat before{};
  if (::fstat(fd, &before) != 0) return errno_error("fstat " + path);
  // /dev/null is the usual way to say "an empty file" (--config /dev/null): it cannot block,
  // grow or be replaced by an unprivileged user.
  if (S_ISCHR(before.st_mode) && before.st_rdev == makedev(1, 3)) {
    return std::optional<TrustedText>(TrustedText{});
  }
  if (!S_ISREG(before.st_mode)) {
    const char* kind = S_ISFIFO(before.st_mode)                             ? "a FIFO"
                       : S_ISDIR(before.st_mode)                            ? "a directory"
                       : S_ISSOCK(before.st_mode)                           ? "a socket"
                       : S_ISCHR(before.st_mode) || S_ISBLK(before.st_mode) ? "a device"
                                                                            : "not a file";
    return Error(ENXIO, fmt::format("{}: {}, not a regular file; refused", path, kind));
  }
  if (auto ok = check_owner_and_mode(path, before, false); !ok) return ok.error();
  if (static_cast<std::uint64_t>(before.st_size) > max_bytes) {
    return Error(EFBIG, fmt::format("{}: {} bytes, more than the {} this file may have; refused",
                                    path, before.st_size, max_bytes));
  }
  TrustedText out;
  out.text.reserve(static_cast<std::size_t>(before.st_size));
  std::vector<char> buf(65536);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("reading " + path);
    }
    if (n == 0) break;
    out.text.append(buf.data(), static_cast<std::size_t>(n));
    if (out.text.size() > max_bytes) {
      return Error(EFBIG, fmt::format("{}: more than {} bytes; refused", path, max_bytes));
    }
  }
  struct stat after{};
  if (::fstat(fd, &after) != 0) return errno_error("fstat " + path);
  if (mtime_ns(after) != mtime_ns(before) || after.st_size != before.st_size ||
      out.text.size() != static_cast<std::size_t>(after.st_size)) {
    return Error(EAGAIN, path + ": changed while being read");
  }
  out.mtime_ns = mtime_ns(after);
  return std::optional<TrustedText>(std::move(out));
}

Result<void> ensure_private_dir(const std::string& dir) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return errno_error("checking " + dir);
    const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec) return Error(ec.value(), "creating " + parent.string() + ": " + ec.message());
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return errno_error("creating " + dir);
    ::chmod(dir.c_str(), 0700);  // mkdir's mode is masked by the umask; 0700 is narrower anyway
    if (::stat(dir.c_str(), &st) != 0) return errno_error("checking " + dir);
  }
  if (!S_ISDIR(st.st_mode)) return Error(ENOTDIR, dir + ": not a directory");
  return check_owner_and_mode(dir, st, true);
}

Result<void> write_trusted_file(const std::string& path, const std::string& text) {
  const std::filesystem::path p(path);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  if (auto ok = ensure_private_dir(dir); !ok) return ok.error();
  std::string tmp = path + ".tmp.XXXXXX";
  // mkostemp: O_CREAT | O_EXCL with a random name, mode 0600.
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return errno_error("creating a temporary file for " + path);
  Result<void> r = Ok{};
  std::size_t done = 0;
  while (r && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      r = errno_error("writing " + tmp);
    } else {
      done += static_cast<std::size_t>(n);
    }
  }
  if (r && ::fsync(fd) != 0) r = errno_error("syncing " + tmp);
  ::close(fd);
  if (r && ::rename(tmp.c_str(), path.c_str()) != 0) {
    r = errno_error("renaming " + tmp + " to " + path);
  }
  if (!r) {
    ::unlink(tmp.c_str());
    return r;
  }
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return Ok{};
}

}  // namespace zernel::sys
