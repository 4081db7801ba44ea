#pragma once
// A directory tree for one test (a fabricated /proc or /sys, a config file), made fresh under the
// system's temporary directory and removed, with everything in it, when the object goes. The
// fake trees of the collector and backend tests derive from it and add their own builders.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <system_error>

namespace zernel::test_support {

class TempTree {
 public:
  explicit TempTree(const std::string& prefix = "zernel-test") {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() /
           (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(dir_);
  }
  ~TempTree() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }
  [[nodiscard]] std::string root() const { return dir_.string(); }
  [[nodiscard]] std::filesystem::path path(const std::string& rel) const { return dir_ / rel; }

  // Writes TEXT to REL, replacing it; missing parent directories are made.
  void write(const std::string& rel, const std::string& text) const {
    const std::filesystem::path p = dir_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  }
  // Makes REL a symbolic link to TARGET; missing parent directories are made.
  void link(const std::string& rel, const std::string& target) const {
    const std::filesystem::path p = dir_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::filesystem::create_symlink(target, p);
  }
  // Removes REL and everything below it (no error when it is not there).
  void remove(const std::string& rel) const {
    std::error_code ec;
    std::filesystem::remove_all(dir_ / rel, ec);
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace zernel::test_support
