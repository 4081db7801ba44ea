#pragma once
// Result<T>: the return type of every operation that can fail for a reason outside the program
// (a syscall, a file, a parse). It carries either a value or an Error, and an Error carries an
// errno-style code plus a chain of context, outermost first:
//   "loading /etc/zernel/scheduler.toml: [general] phase_eval_interval_ms: must be at least 1"
// No exceptions cross module boundaries; only main turns a fatal Error into a message and an exit code.

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

namespace zernel {

class Error {
 public:
  Error(int code, std::string message) : code_(code), message_(std::move(message)) {}
  explicit Error(std::string message) : code_(EINVAL), message_(std::move(message)) {}

  // errno-style code (EINVAL for bad input, ENOENT for a missing file, ...).
  [[nodiscard]] int code() const { return code_; }
  [[nodiscard]] const std::string& message() const { return message_; }

  // Prepends context: Error("no such file").context("reading x") -> "reading x: no such file".
  [[nodiscard]] Error context(const std::string& what) const& {
    return Error(code_, what + ": " + message_);
  }
  [[nodiscard]] Error context(const std::string& what) && {
    message_ = what + ": " + message_;
    return std::move(*this);
  }

 private:
  int code_;
  std::string message_;
};

// Builds an Error from errno (or an explicit errno value) and a description of what failed.
Error errno_error(const std::string& what, int err = errno);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  [[nodiscard]] T& value() & { return std::get<0>(v_); }
  [[nodiscard]] const T& value() const& { return std::get<0>(v_); }
  [[nodiscard]] T&& value() && { return std::get<0>(std::move(v_)); }
  [[nodiscard]] const Error& error() const { return std::get<1>(v_); }

  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success carries nothing.
struct Ok {};
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Ok) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : err_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  [[nodiscard]] const Error& error() const { return err_; }

 private:
  Error err_{0, ""};
  bool ok_ = true;
};

}  // namespace zernel
