#include "workload/dataset.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace zernel::workload {
namespace {

std::size_t round_up(std::size_t n, std::size_t align) { return (n + align - 1) / align * align; }

Result<void> write_all(int fd, std::span<const std::byte> data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("write");
    }
    data = data.subspan(static_cast<std::size_t>(n));
  }
  return Ok{};
}

// Reads until `buf` is full or end of file; returns the bytes read.
Result<std::size_t> read_full(int fd, std::span<std::byte> buf) {
  std::size_t total = 0;
  while (total < buf.size()) {
    const ssize_t n = ::read(fd, buf.data() + total, buf.size() - total);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("read");
    }
    if (n == 0) break;
    total += static_cast<std::size_t>(n);
  }
  return total;
}

}  // namespace

AlignedBuffer::AlignedBuffer(std::size_t bytes)
    : data_(static_cast<std::byte*>(std::aligned_alloc(kIoAlign, round_up(bytes, kIoAlign)))),
      size_(round_up(bytes, kIoAlign)) {
  if (!data_) throw std::bad_alloc();
  std::memset(data_.get(), 0, size_);
}

void AlignedBuffer::Free::operator()(std::byte* p) const { std::free(p); }

Dataset::Dataset(Dataset&& other) noexcept
    : dir_(std::move(other.dir_)),
      paths_(std::move(other.paths_)),
      file_bytes_(other.file_bytes_),
      owner_pid_(std::exchange(other.owner_pid_, 0)) {}

Dataset::~Dataset() {
  if (owner_pid_ == getpid()) remove();
}

void Dataset::remove() {
  if (owner_pid_ != getpid()) return;
  remove_orphaned();
  owner_pid_ = 0;
}

void Dataset::remove_orphaned() const {
  for (const std::string& p : paths_) ::unlink(p.c_str());
  if (!dir_.empty()) ::rmdir(dir_.c_str());
}

Result<Dataset> Dataset::create(const std::string& parent, std::size_t files,
                                std::size_t file_bytes) {
  Dataset ds;
  std::string tmpl = parent + "/zernel-workload-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return errno_error("creating a data directory in " + parent);
  ds.dir_ = tmpl;
  ds.owner_pid_ = getpid();
  ds.file_bytes_ = round_up(file_bytes, kIoAlign);

  AlignedBuffer buf(ds.file_bytes_);
  std::uint64_t x = std::uint64_t{0x2545f4914f6cdd1dULL} ^ static_cast<std::uint32_t>(getpid());
  for (std::size_t f = 0; f < files; ++f) {
    // xorshift64: incompressible bytes, cheap to make.
    auto bytes = buf.span();
    for (std::size_t i = 0; i + sizeof x <= bytes.size(); i += sizeof x) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::memcpy(bytes.data() + i, &x, sizeof x);
    }
    std::string path = fmt::format("{}/shard-{:03}.bin", ds.dir_, f);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return errno_error("creating " + path);
    ds.paths_.push_back(path);
    auto w = write_all(fd, bytes);
    if (w && fsync(fd) != 0) w = errno_error("fsync");
    if (w) (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (!w) return w.error().context("writing " + path);
  }
  return ds;
}

Result<ReadStats> read_uncached(const std::string& path, std::span<std::byte> buf) {
  ReadStats stats;
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd >= 0) {
    auto n = read_full(fd, buf);
    close(fd);
    if (n) {
      stats.bytes = *n;
      stats.direct = true;
      return stats;
    }
    if (n.error().code() != EINVAL) return n.error().context("reading " + path);
    // EINVAL from an O_DIRECT read: the filesystem wants another alignment; read plainly.
  } else if (errno != EINVAL) {
    return errno_error("opening " + path);
  }
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("opening " + path);
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  auto n = read_full(fd, buf);
  close(fd);
  if (!n) return n.error().context("reading " + path);
  stats.bytes = *n;
  return stats;
}

}  // namespace zernel::workload
