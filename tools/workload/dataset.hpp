#pragma once
// The job's training data: a few files of random bytes in a temporary directory, read back by the
// DataLoader workers so that loading a batch does real block I/O.
//
// The files are written, fsync'ed and dropped from the page cache at creation. A batch reads one
// whole file with O_DIRECT, which bypasses the page cache, so every read reaches the disk. Where
// the filesystem refuses O_DIRECT (tmpfs, some overlays) the reader falls back to a plain read
// after posix_fadvise(POSIX_FADV_DONTNEED), which still forces I/O on a disk-backed filesystem
// and is an ordinary memory copy on tmpfs.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace zernel::workload {

inline constexpr std::size_t kIoAlign = 4096;

class Dataset {
 public:
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;
  Dataset(Dataset&& other) noexcept;
  Dataset& operator=(Dataset&&) = delete;
  // Removes the files and the directory (only in the process that created them).
  ~Dataset();

  // Creates `files` files of `file_bytes` (rounded up to kIoAlign) under a new directory
  // <parent>/zernel-workload-XXXXXX.
  static Result<Dataset> create(const std::string& parent, std::size_t files,
                                std::size_t file_bytes);

  [[nodiscard]] std::size_t files() const { return paths_.size(); }
  [[nodiscard]] std::size_t file_bytes() const { return file_bytes_; }
  [[nodiscard]] const std::string& dir() const { return dir_; }
  [[nodiscard]] const std::string& path(std::size_t i) const { return paths_[i % paths_.size()]; }

  // Removes the files now (idempotent); also done by the destructor in the owning process.
  void remove();

  // Removes the files from whichever process calls it: a rank whose launcher was killed cleans
  // up after it. Missing files are ignored.
  void remove_orphaned() const;

 private:
  Dataset() = default;
  std::string dir_;
  std::vector<std::string> paths_;
  std::size_t file_bytes_ = 0;
  int owner_pid_ = 0;
};

// An I/O buffer aligned for O_DIRECT.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(std::size_t bytes);
  [[nodiscard]] std::span<std::byte> span() { return {data_.get(), size_}; }
  [[nodiscard]] std::span<const std::byte> span() const { return {data_.get(), size_}; }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t size_;
};

struct ReadStats {
  std::size_t bytes = 0;
  bool direct = false;  // O_DIRECT was used
};

// Reads the start of file `path` into `buf` (kIoAlign-aligned, a multiple of kIoAlign long),
// bypassing or dropping the page cache as described above.
Result<ReadStats> read_uncached(const std::string& path, std::span<std::byte> buf);

}  // namespace zernel::workload
