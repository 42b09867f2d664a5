// SPDX-License-Identifier: Apache-2.0
// result<T>: a value or an error with a message naming what was wrong (no exceptions).
#pragma once

#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace edgellm {

/// Error categories. The message says which file, tensor or argument was at fault.
enum class errc {
  invalid_argument,  ///< a caller-supplied value is out of range or inconsistent
  shape_mismatch,    ///< tensor or buffer shapes disagree
  io_error,          ///< a file could not be opened, mapped or read
  format_error,      ///< a file's content is malformed or lies about itself
  unsupported,       ///< a well-formed input that edgellm does not handle
  out_of_range,      ///< an index, token id or position past its limit
  capacity_exceeded, ///< a preallocated buffer (context, cache) is full
  out_of_memory,     ///< memory (or a thread) could not be allocated; the message says for what
  internal,          ///< an unexpected exception inside the library, turned into an error
};

inline const char* to_string(errc e) noexcept {
  switch (e) {
    case errc::invalid_argument: return "invalid argument";
    case errc::shape_mismatch: return "shape mismatch";
    case errc::io_error: return "I/O error";
    case errc::format_error: return "format error";
    case errc::unsupported: return "unsupported";
    case errc::out_of_range: return "out of range";
    case errc::capacity_exceeded: return "capacity exceeded";
    case errc::out_of_memory: return "out of memory";
    case errc::internal: return "internal error";
  }
  return "error";
}

/// An error: a category and a human-readable message such as
/// "[gemv] x: size 100 is smaller than k = 128".
struct error {
  errc code;
  std::string message;
};

/// A subset of std::expected<T, error>: check with `if (!r)` / `r.has_value()`, read with
/// `*r` / `r.value()`, and `r.error()` on failure.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(implicit)
  result(edgellm::error e) : v_(std::in_place_index<1>, std::move(e)) {}      // NOLINT(implicit)

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const edgellm::error& error() const& { return std::get<1>(v_); }

 private:
  std::variant<T, edgellm::error> v_;
};

/// result<void>: success or an error.
template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(edgellm::error e) : err_(std::move(e)), ok_(false) {}  // NOLINT(implicit)
  bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  const edgellm::error& error() const& { return err_; }

 private:
  edgellm::error err_{};
  bool ok_ = true;
};

using status = result<void>;

/// Builds an error whose message is "[where] what".
inline error make_error(errc code, std::string_view where, std::string_view what) {
  std::string m;
  m.reserve(where.size() + what.size() + 3);
  m += '[';
  m += where;
  m += "] ";
  m += what;
  return error{code, std::move(m)};
}

}  // namespace edgellm
