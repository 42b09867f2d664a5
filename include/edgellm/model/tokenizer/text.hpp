// SPDX-License-Identifier: Apache-2.0
// Byte spans, literal search and replace, and White_Space runs over UTF-8 text: the small
// string operations the tokenizer's stages (normalizer, pre-tokenizer, added tokens, decoder)
// share.
#pragma once

#include "edgellm/detail/unicode.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace edgellm::model::detail::tok {

namespace uni = ::edgellm::detail::unicode;

/// A byte range [begin, end).
struct Span {
  std::size_t begin = 0;
  std::size_t end = 0;
};

/// Hash for heterogeneous lookup of std::string keys by std::string_view.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
using StringIdMap = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

/// Non-overlapping occurrences of a non-empty literal, left to right.
inline void find_literal(std::string_view text, std::string_view literal, std::vector<Span>& out) {
  if (literal.empty()) return;
  std::size_t pos = 0;
  while ((pos = text.find(literal, pos)) != std::string_view::npos) {
    out.push_back(Span{pos, pos + literal.size()});
    pos += literal.size();
  }
}

/// `text` with every non-overlapping occurrence of `pattern` (leftmost first) replaced.
inline std::string replace_all(std::string_view text, std::string_view pattern,
                               std::string_view content) {
  if (pattern.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  for (;;) {
    const std::size_t hit = text.find(pattern, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(content);
    pos = hit + pattern.size();
  }
  out.append(text.substr(pos));
  return out;
}

/// Code point of the character that ends at `end` (valid UTF-8, end > 0).
inline char32_t code_point_before(std::string_view s, std::size_t end) noexcept {
  std::size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  std::size_t n = uni::utf8_sequence_length(s, b);
  if (n == 0) n = 1;
  return uni::decode_at(s, b, n);
}

/// Code point of the character that starts at `begin` (valid UTF-8, begin < size).
inline char32_t code_point_at(std::string_view s, std::size_t begin) noexcept {
  std::size_t n = uni::utf8_sequence_length(s, begin);
  if (n == 0) n = 1;
  return uni::decode_at(s, begin, n);
}

/// Start of the run of White_Space characters that ends at `end`.
inline std::size_t whitespace_run_before(std::string_view s, std::size_t end) noexcept {
  while (end > 0) {
    std::size_t b = end - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    if (!uni::is_space(code_point_at(s, b))) break;
    end = b;
  }
  return end;
}

/// End of the run of White_Space characters that starts at `begin`.
inline std::size_t whitespace_run_after(std::string_view s, std::size_t begin) noexcept {
  while (begin < s.size()) {
    std::size_t n = uni::utf8_sequence_length(s, begin);
    if (n == 0) n = 1;
    if (!uni::is_space(uni::decode_at(s, begin, n))) break;
    begin += n;
  }
  return begin;
}

}  // namespace edgellm::model::detail::tok
