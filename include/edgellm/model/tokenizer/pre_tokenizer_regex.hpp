// SPDX-License-Identifier: Apache-2.0
// The three Split regexes of real tokenizer.json files (GPT-2's, Qwen2's, Llama-3's), matched
// by a hand-written scanner instead of a regex engine: the patterns are recognised as exact
// strings and each is walked as a backtracking engine would walk it.
#pragma once

#include "edgellm/detail/unicode.hpp"
#include "edgellm/model/tokenizer/text.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace edgellm::model::detail::tok {

/// The Split regexes edgellm recognises (compared as exact strings, after JSON unescaping).
enum class SplitRegex : std::uint8_t { gpt2, qwen2, llama3 };

inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

inline std::optional<SplitRegex> recognize_split_regex(std::string_view pattern) noexcept {
  if (pattern == kQwen2Pattern) return SplitRegex::qwen2;
  if (pattern == kLlama3Pattern) return SplitRegex::llama3;
  if (pattern == kGpt2Pattern) return SplitRegex::gpt2;
  return std::nullopt;
}

/// All non-overlapping matches of `kind` in valid UTF-8 `text`, left to right, as the
/// backtracking engines (Oniguruma, PCRE, Python's regex) find them: alternatives are tried in
/// order and the first that matches wins. Each regex matches every character, so the matches
/// tile the text. Appends byte spans to `out`.
inline void regex_find_all(SplitRegex kind, std::string_view text, std::vector<Span>& out) {
  // Code points, their byte offsets (n + 1 entries) and class bits.
  std::vector<char32_t> cp;
  std::vector<std::size_t> at;
  std::vector<std::uint8_t> cls;
  cp.reserve(text.size());
  at.reserve(text.size() + 1);
  cls.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::size_t len = uni::utf8_sequence_length(text, i);
    if (len == 0) len = 1;  // callers pass valid UTF-8; stay in bounds regardless
    const char32_t c = uni::decode_at(text, i, len);
    cp.push_back(c);
    at.push_back(i);
    cls.push_back(uni::char_class(c));
    i += len;
  }
  at.push_back(text.size());
  const std::size_t n = cp.size();

  const auto has = [&](std::size_t k, std::uint8_t bits) { return k < n && (cls[k] & bits) != 0; };
  const auto letter = [&](std::size_t k) { return has(k, uni::kLetter); };
  const auto number = [&](std::size_t k) { return has(k, uni::kNumber); };
  const auto space = [&](std::size_t k) { return has(k, uni::kSpace); };
  // [^\s\p{L}\p{N}]
  const auto other = [&](std::size_t k) {
    return k < n && (cls[k] & (uni::kLetter | uni::kNumber | uni::kSpace)) == 0;
  };
  const auto crlf = [&](std::size_t k) { return k < n && (cp[k] == U'\r' || cp[k] == U'\n'); };
  const auto is = [&](std::size_t k, char32_t c) { return k < n && cp[k] == c; };
  const auto run = [&](std::size_t k, auto&& pred) {
    while (pred(k)) ++k;
    return k;
  };
  const bool gpt2 = kind == SplitRegex::gpt2;
  // Case-insensitive letters of the contractions: (?i) folds ſ (U+017F) to s as well.
  const auto fold = [&](std::size_t k) -> char32_t {
    if (k >= n) return 0;
    const char32_t c = cp[k];
    if (gpt2) return c;
    if (c >= U'A' && c <= U'Z') return c + 32;
    if (c == 0x17F) return U's';
    return c;
  };

  // End of the match that starts at i (always > i).
  const auto match_at = [&](std::size_t i) -> std::size_t {
    // '(?i:)'s|'t|'re|'ve|'m|'ll|'d
    if (cp[i] == U'\'') {
      const char32_t a = fold(i + 1);
      if (a == U's' || a == U't' || a == U'm' || a == U'd') return i + 2;
      const char32_t b = fold(i + 2);
      if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) {
        return i + 3;
      }
    }
    if (gpt2) {
      // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
      const std::size_t k = is(i, U' ') ? i + 1 : i;
      if (letter(k)) return run(k, letter);
      if (number(k)) return run(k, number);
      if (other(k)) return run(k, other);
    } else {
      // [^\r\n\p{L}\p{N}]?\p{L}+
      if (letter(i)) return run(i, letter);
      if (!crlf(i) && !number(i) && letter(i + 1)) return run(i + 1, letter);
      // \p{N} or \p{N}{1,3}
      if (number(i)) {
        if (kind == SplitRegex::qwen2) return i + 1;
        std::size_t k = i + 1;
        while (k < i + 3 && number(k)) ++k;
        return k;
      }
      // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
      const std::size_t k = is(i, U' ') && other(i + 1) ? i + 1 : i;
      if (other(k)) return run(run(k, other), crlf);
      // \s*[\r\n]+ : up to the last CR/LF of the whitespace run (backtracking of \s*)
      const std::size_t ws_end = run(i, space);
      for (std::size_t k2 = ws_end; k2 > i; --k2) {
        if (crlf(k2 - 1)) return k2;
      }
    }
    // \s+(?!\S) : the whitespace run, minus its last character unless it ends the text
    if (space(i)) {
      const std::size_t ws_end = run(i, space);
      if (ws_end == n) return ws_end;
      if (ws_end - 1 > i) return ws_end - 1;
      return ws_end;  // \s+
    }
    return i + 1;  // not reached: every character is L, N, \s or [^\s\p{L}\p{N}]
  };

  std::size_t i = 0;
  while (i < n) {
    const std::size_t j = match_at(i);
    out.push_back(Span{at[i], at[j]});
    i = j;
  }
}

/// The pieces `kind` splits valid UTF-8 `text` into (Split with behavior Isolated).
inline std::vector<std::string_view> regex_split(SplitRegex kind, std::string_view text) {
  std::vector<Span> spans;
  regex_find_all(kind, text, spans);
  std::vector<std::string_view> out;
  out.reserve(spans.size());
  for (const Span& s : spans) out.push_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

}  // namespace edgellm::model::detail::tok
