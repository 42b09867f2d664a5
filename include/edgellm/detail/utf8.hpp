// SPDX-License-Identifier: Apache-2.0
// UTF-8 encoding and validation, shared by the JSON parser and the tokenizer.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace edgellm::detail {

/// Appends the UTF-8 encoding of a Unicode scalar value (cp <= 0x10FFFF, not a surrogate).
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong forms, no
/// surrogates, nothing above U+10FFFF), or 0 when the bytes there are not one.
/// Precondition: i < s.size().
inline std::size_t utf8_sequence_length(std::string_view s, std::size_t i) noexcept {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [](unsigned char c) { return c >= 0x80 && c <= 0xBF; };
  const std::size_t avail = s.size() - i;
  const unsigned char c0 = b(0);
  if (c0 < 0x80) return 1;
  if (c0 >= 0xC2 && c0 <= 0xDF) return avail >= 2 && cont(b(1)) ? 2 : 0;
  if (c0 >= 0xE0 && c0 <= 0xEF) {
    if (avail < 3) return 0;
    const unsigned char c1 = b(1);
    const bool ok1 = c0 == 0xE0   ? (c1 >= 0xA0 && c1 <= 0xBF)
                     : c0 == 0xED ? (c1 >= 0x80 && c1 <= 0x9F)  // U+D800..DFFF
                                  : cont(c1);
    return ok1 && cont(b(2)) ? 3 : 0;
  }
  if (c0 >= 0xF0 && c0 <= 0xF4) {
    if (avail < 4) return 0;
    const unsigned char c1 = b(1);
    const bool ok1 = c0 == 0xF0   ? (c1 >= 0x90 && c1 <= 0xBF)
                     : c0 == 0xF4 ? (c1 >= 0x80 && c1 <= 0x8F)  // cap at U+10FFFF
                                  : cont(c1);
    return ok1 && cont(b(2)) && cont(b(3)) ? 4 : 0;
  }
  return 0;
}

}  // namespace edgellm::detail
