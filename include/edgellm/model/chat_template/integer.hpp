// SPDX-License-Identifier: Apache-2.0
// Python's integer arithmetic on the int64_t a chat template computes with. Python's integers
// are unbounded; here a result outside int64_t is an error naming the operation ("integer
// overflow in 2 ** 64"), never a wrapped value or undefined behaviour. Floor division and
// modulo round toward negative infinity, as Python's do.
#pragma once

#include "edgellm/result.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace edgellm::model::detail::jinja::integer {

inline error overflow(std::string_view expression) {
  return error{errc::out_of_range,
               "integer overflow in " + std::string(expression) + " (integers are 64-bit here)"};
}

inline error overflow(std::int64_t a, std::string_view op, std::int64_t b) {
  return overflow(std::to_string(a) + " " + std::string(op) + " " + std::to_string(b));
}

inline result<std::int64_t> add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return overflow(a, "+", b);
  return r;
}

inline result<std::int64_t> sub(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) return overflow(a, "-", b);
  return r;
}

inline result<std::int64_t> mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return overflow(a, "*", b);
  return r;
}

inline result<std::int64_t> neg(std::int64_t a) {
  if (a == INT64_MIN) return overflow("-(" + std::to_string(a) + ")");
  return -a;
}

inline result<std::int64_t> abs(std::int64_t a) {
  if (a == INT64_MIN) return overflow("abs(" + std::to_string(a) + ")");
  return a < 0 ? -a : a;
}

/// a // b for b != 0 (the caller reports division by zero).
inline result<std::int64_t> floor_div(std::int64_t a, std::int64_t b) {
  if (a == INT64_MIN && b == -1) return overflow(a, "//", b);
  std::int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}

/// a % b for b != 0, with the sign of b; never overflows.
inline std::int64_t mod(std::int64_t a, std::int64_t b) noexcept {
  if (b == -1) return 0;  // INT64_MIN % -1 would trap
  std::int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

/// a ** b for b >= 0 (a negative exponent gives a float, the caller's case), by squaring: at
/// most 63 multiplications, each checked.
inline result<std::int64_t> pow(std::int64_t a, std::int64_t b) {
  std::int64_t r = 1, base = a;
  for (std::int64_t e = b; e > 0; e >>= 1) {
    if ((e & 1) != 0 && __builtin_mul_overflow(r, base, &r)) return overflow(a, "**", b);
    // Squared only while a higher bit remains: |base|^2 beyond int64_t then means |a ** b| is.
    if (e > 1 && __builtin_mul_overflow(base, base, &base)) return overflow(a, "**", b);
  }
  return r;
}

/// How many values range(start, stop, step) has (step != 0), counted in unsigned arithmetic so
/// that no bound near INT64_MIN or INT64_MAX overflows. The k-th value, start + k * step, then
/// lies between start and stop and is representable.
inline std::uint64_t range_length(std::int64_t start, std::int64_t stop,
                                  std::int64_t step) noexcept {
  const auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
  if (step > 0) return start < stop ? (u(stop) - u(start) - 1) / u(step) + 1 : 0;
  // -step as unsigned: exact for step == INT64_MIN too.
  return start > stop ? (u(start) - u(stop) - 1) / (0 - u(step)) + 1 : 0;
}

/// start + k * step for k < range_length(start, stop, step): in range, so computed unsigned
/// (two's complement wraps back into int64_t exactly).
inline std::int64_t range_at(std::int64_t start, std::int64_t step, std::uint64_t k) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(start) +
                                   k * static_cast<std::uint64_t>(step));
}

}  // namespace edgellm::model::detail::jinja::integer
