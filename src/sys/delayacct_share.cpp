#include "sys/delayacct_share.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <utility>
#include <vector>

#include "sys/journal_file.hpp"
#include "sys/procfs.hpp"
#include "sys/trusted_file.hpp"

namespace zernel::sys {
namespace {

constexpr std::string_view kMagic = "zernel-delayacct-holders 1";

struct Holder {
  std::uint32_t pid = 0;
  std::uint64_t start = 0;
};

struct Holders {
  bool original = false;
  std::vector<Holder> holders;
};

bool running(const std::string& proc_root, const Holder& h) {
  auto st = read_stat(proc_root, h.pid);
  return st && st->starttime_ticks == h.start && !st->is_dead();
}

Holder self(const std::string& proc_root) {
  Holder h;
  h.pid = static_cast<std::uint32_t>(::getpid());
  if (auto st = read_stat(proc_root, h.pid)) h.start = st->starttime_ticks;
  return h;
}

// flock() of the directory: the file itself is replaced by rename, so it cannot carry the lock.
class DirLock {
 public:
  static Result<DirLock> take(const std::string& holders_path) {
    const std::filesystem::path p(holders_path);
    const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
    if (auto ok = ensure_private_dir(dir); !ok) return ok.error();
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno_error("opening " + dir);
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno != EINTR) {
        const int err = errno;
        ::close(fd);
        return errno_error("locking " + dir, err);
      }
    }
    return DirLock(fd);
  }
  DirLock(DirLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  DirLock& operator=(DirLock&&) = delete;
  ~DirLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

Result<std::optional<Holders>> read_holders(const std::string& path) {
  auto text = read_whole_file(path);
  if (!text) return text.error();
  if (!text->has_value()) return std::optional<Holders>{};
  Holders h;
  bool have_original = false;
  auto parsed = parse_journal_text(
      **text, kMagic, "not a zernel delayacct holders file (version 1)",
      [&](const std::vector<std::string_view>& f) -> std::optional<std::string> {
        if (f[0] == "original" && !have_original) {
          if (f.size() != 2 || (f[1] != "0" && f[1] != "1")) return "expected: original 0|1";
          h.original = f[1] == "1";
          have_original = true;
          return std::nullopt;
        }
        if (f[0] == "holder" && have_original) {
          auto pid = f.size() == 3 ? parse_number<std::uint32_t>(f[1]) : std::nullopt;
          auto start = f.size() == 3 ? parse_number<std::uint64_t>(f[2]) : std::nullopt;
          if (!pid || !start || *pid == 0) return "expected: holder PID START";
          h.holders.push_back({*pid, *start});
          return std::nullopt;
        }
        return "unexpected record";
      },
      [&] { return have_original; });
  if (!parsed) return parsed.error().context(path);
  return std::optional<Holders>(std::move(h));
}

Result<void> write_holders(const std::string& path, const Holders& h) {
  std::string out(kMagic);
  out += fmt::format("\noriginal {}\n", h.original ? 1 : 0);
  for (const Holder& x : h.holders) out += fmt::format("holder {} {}\n", x.pid, x.start);
  out += "end\n";
  return write_file_atomically(path, out);
}

// The live holders other than this process.
void prune(Holders& h, const std::string& proc_root, const Holder& me) {
  std::erase_if(h.holders, [&](const Holder& x) {
    return (x.pid == me.pid && x.start == me.start) || !running(proc_root, x);
  });
}

}  // namespace

Result<bool> delayacct_join(const std::string& holders_path, const std::string& proc_root,
                            bool current) {
  auto lock = DirLock::take(holders_path);
  if (!lock) return lock.error();
  auto read = read_holders(holders_path);
  if (!read) return read.error();
  Holders h;
  h.original = current;
  if (read->has_value()) h = std::move(**read);
  const Holder me = self(proc_root);
  prune(h, proc_root, me);
  h.holders.push_back(me);
  if (auto w = write_holders(holders_path, h); !w) return w.error();
  return h.original;
}

Result<std::optional<bool>> delayacct_leave(const std::string& holders_path,
                                            const std::string& proc_root) {
  auto lock = DirLock::take(holders_path);
  if (!lock) return lock.error();
  auto read = read_holders(holders_path);
  if (!read) return read.error();
  if (!read->has_value()) return std::optional<bool>{};  // someone removed it: nothing to do
  Holders h = std::move(**read);
  prune(h, proc_root, self(proc_root));
  if (!h.holders.empty()) {
    if (auto w = write_holders(holders_path, h); !w) return w.error();
    return std::optional<bool>{};
  }
  if (auto r = remove_file(holders_path); !r) return r.error();
  return std::optional<bool>(h.original);
}

Result<bool> delayacct_held_by_others(const std::string& holders_path,
                                      const std::string& proc_root) {
  auto lock = DirLock::take(holders_path);
  if (!lock) return lock.error();
  auto read = read_holders(holders_path);
  if (!read) return read.error();
  if (!read->has_value()) return false;
  Holders h = std::move(**read);
  prune(h, proc_root, self(proc_root));
  if (!h.holders.empty()) {
    if (auto w = write_holders(holders_path, h); !w) return w.error();
    return true;
  }
  if (auto r = remove_file(holders_path); !r) return r.error();
  return false;
}

}  // namespace zernel::sys
