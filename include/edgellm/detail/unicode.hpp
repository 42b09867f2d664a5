// SPDX-License-Identifier: Apache-2.0
// UTF-8 decoding and validation, the character classes of the pre-tokenizer regexes, and the
// NFC / NFD normalization forms, over the generated tables of unicode_tables.hpp.
#pragma once

#include "edgellm/detail/unicode_tables.hpp"
#include "edgellm/detail/utf8.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::detail::unicode {

/// U+FFFD REPLACEMENT CHARACTER in UTF-8.
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

using edgellm::detail::utf8_sequence_length;  // detail/utf8.hpp

/// Byte offset of the first byte that does not start a well-formed UTF-8 sequence, or npos
/// when all of `s` is valid UTF-8.
inline std::size_t find_invalid_utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

/// Length of the longest prefix of s[i..] that is a proper prefix of some well-formed
/// sequence (what a decoder must hold back until more bytes arrive), or 0. Lies in [0, 3].
/// It is the "maximal subpart" of Unicode §3.9 when the input ends there.
inline std::size_t utf8_incomplete_prefix_length(std::string_view s, std::size_t i) noexcept {
  const std::size_t avail = s.size() - i;
  if (avail == 0 || avail >= 4) return 0;
  const auto c0 = static_cast<unsigned char>(s[i]);
  std::size_t need = 0;
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    need = 2;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    need = 3;
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    need = 4;
  } else {
    return 0;
  }
  if (avail >= need) return 0;
  for (std::size_t k = 1; k < avail; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    bool ok = c >= 0x80 && c <= 0xBF;
    if (k == 1) {
      if (c0 == 0xE0) ok = c >= 0xA0 && c <= 0xBF;
      if (c0 == 0xED) ok = c >= 0x80 && c <= 0x9F;
      if (c0 == 0xF0) ok = c >= 0x90 && c <= 0xBF;
      if (c0 == 0xF4) ok = c >= 0x80 && c <= 0x8F;
    }
    if (!ok) return 0;
  }
  return avail;
}

/// Decodes the code point at s[i], which must start a well-formed sequence of length `len`.
inline char32_t decode_at(std::string_view s, std::size_t i, std::size_t len) noexcept {
  const auto b = [&](std::size_t k) {
    return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]));
  };
  switch (len) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

/// Decodes valid UTF-8 (checked by the caller) into code points.
inline std::vector<char32_t> decode_utf8(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) n = 1;  // not reached for valid input; keeps the loop finite regardless
    out.push_back(decode_at(s, i, n));
    i += n;
  }
  return out;
}

using edgellm::detail::append_utf8;  // detail/utf8.hpp

inline std::string encode_utf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (const char32_t c : cps) append_utf8(out, c);
  return out;
}

/// Lossy UTF-8 decoding as Rust's String::from_utf8_lossy does it: every maximal subpart of
/// an ill-formed sequence (Unicode §3.9, "substitution of maximal subparts") becomes one
/// U+FFFD; everything else is copied.
inline std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t n = utf8_sequence_length(s, i);
    if (n != 0) {
      out.append(s.data() + i, n);
      i += n;
      continue;
    }
    // The maximal subpart is the longest prefix of a well-formed sequence; at least one byte.
    std::size_t bad = 1;
    for (std::size_t len = std::min<std::size_t>(3, s.size() - i); len > 1; --len) {
      if (utf8_incomplete_prefix_length(s.substr(0, i + len), i) == len) {
        bad = len;
        break;
      }
    }
    out += kReplacementUtf8;
    i += bad;
  }
  return out;
}

// --- character classes ---------------------------------------------------------------------

/// The class bits (kLetter | kNumber | kWord | kSpace) of a code point.
inline std::uint8_t char_class(char32_t cp) noexcept {
  if (cp < 0x80) return kAsciiClass[cp];
  if (cp > 0x10FFFF) return 0;
  // Last run whose first code point is <= cp.
  const std::uint32_t key = (static_cast<std::uint32_t>(cp) << 4) | 0xF;
  const auto* it = std::upper_bound(std::begin(kClassRuns), std::end(kClassRuns), key);
  return static_cast<std::uint8_t>(*(it - 1) & 0xF);
}

inline bool is_letter(char32_t cp) noexcept { return (char_class(cp) & kLetter) != 0; }
inline bool is_number(char32_t cp) noexcept { return (char_class(cp) & kNumber) != 0; }
inline bool is_space(char32_t cp) noexcept { return (char_class(cp) & kSpace) != 0; }
inline bool is_word(char32_t cp) noexcept { return (char_class(cp) & kWord) != 0; }

// --- normalization (UAX #15) ----------------------------------------------------------------

inline constexpr char32_t kHangulSBase = 0xAC00, kHangulLBase = 0x1100, kHangulVBase = 0x1161,
                          kHangulTBase = 0x11A7;
inline constexpr char32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28;
inline constexpr char32_t kHangulNCount = kHangulVCount * kHangulTCount;  // 588
inline constexpr char32_t kHangulSCount = kHangulLCount * kHangulNCount;  // 11172

/// Canonical combining class.
inline std::uint8_t combining_class(char32_t cp) noexcept {
  if (cp < 0x300) return 0;
  const auto* it = std::upper_bound(std::begin(kCccRanges), std::end(kCccRanges), cp,
                                    [](char32_t c, const CccRange& r) { return c < r.first; });
  if (it == std::begin(kCccRanges)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

/// True when NFC may change text containing `cp` (ccc != 0 or NFC_Quick_Check != Yes).
inline bool nfc_unsafe(char32_t cp) noexcept {
  if (cp < 0x300) return false;
  const auto* it =
      std::upper_bound(std::begin(kNfcUnsafeRanges), std::end(kNfcUnsafeRanges), cp,
                       [](char32_t c, const CodePointRange& r) { return c < r.first; });
  if (it == std::begin(kNfcUnsafeRanges)) return false;
  --it;
  return cp <= it->last;
}

/// Appends the full canonical decomposition of `cp` (recursive, Hangul included).
inline void append_canonical_decomposition(std::vector<char32_t>& out, char32_t cp) {
  if (cp >= kHangulSBase && cp < kHangulSBase + kHangulSCount) {
    const char32_t s = cp - kHangulSBase;
    out.push_back(kHangulLBase + s / kHangulNCount);
    out.push_back(kHangulVBase + (s % kHangulNCount) / kHangulTCount);
    if (s % kHangulTCount != 0) out.push_back(kHangulTBase + s % kHangulTCount);
    return;
  }
  if (cp >= 0xC0) {
    const auto* it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                                      [](const Decomposition& d, char32_t c) { return d.cp < c; });
    if (it != std::end(kDecompositions) && it->cp == cp) {
      append_canonical_decomposition(out, it->first);  // depth <= 4 in Unicode's data
      if (it->second != 0) append_canonical_decomposition(out, it->second);
      return;
    }
  }
  out.push_back(cp);
}

/// The primary composite of (a, b), or 0 when there is none.
inline char32_t compose_pair(char32_t a, char32_t b) noexcept {
  if (a >= kHangulLBase && a < kHangulLBase + kHangulLCount && b >= kHangulVBase &&
      b < kHangulVBase + kHangulVCount) {
    return kHangulSBase + ((a - kHangulLBase) * kHangulVCount + (b - kHangulVBase)) * kHangulTCount;
  }
  if (a >= kHangulSBase && a < kHangulSBase + kHangulSCount &&
      (a - kHangulSBase) % kHangulTCount == 0 && b > kHangulTBase &&
      b < kHangulTBase + kHangulTCount) {
    return a + (b - kHangulTBase);
  }
  const auto* it = std::lower_bound(
      std::begin(kCompositions), std::end(kCompositions), std::pair<char32_t, char32_t>(a, b),
      [](const Composition& c, const std::pair<char32_t, char32_t>& k) {
        return c.first != k.first ? c.first < k.first : c.second < k.second;
      });
  if (it != std::end(kCompositions) && it->first == a && it->second == b) return it->composed;
  return 0;
}

/// Canonical decomposition followed by the canonical ordering algorithm (stable sort of each
/// run of non-starters by combining class).
inline std::vector<char32_t> nfd_code_points(std::string_view valid_utf8) {
  std::vector<char32_t> out;
  out.reserve(valid_utf8.size() + 8);
  for (const char32_t cp : decode_utf8(valid_utf8)) append_canonical_decomposition(out, cp);
  std::size_t i = 0;
  while (i < out.size()) {
    if (combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < out.size() && combining_class(out[j]) != 0) ++j;
    std::stable_sort(
        out.begin() + static_cast<std::ptrdiff_t>(i), out.begin() + static_cast<std::ptrdiff_t>(j),
        [](char32_t x, char32_t y) { return combining_class(x) < combining_class(y); });
    i = j;
  }
  return out;
}

/// True when every code point of `s` is NFC-safe, so nfc(s) == s (and nfd(s) == s when `s`
/// also has nothing to decompose, which holds below U+00C0).
inline bool quick_check_nfc(std::string_view valid_utf8) noexcept {
  std::size_t i = 0;
  while (i < valid_utf8.size()) {
    const auto c0 = static_cast<unsigned char>(valid_utf8[i]);
    if (c0 < 0xCC) {  // lead bytes below 0xCC encode code points below U+0300
      i += c0 < 0x80 ? 1 : 2;
      continue;
    }
    std::size_t n = utf8_sequence_length(valid_utf8, i);
    if (n == 0) n = 1;
    if (nfc_unsafe(decode_at(valid_utf8, i, n))) return false;
    i += n;
  }
  return true;
}

/// Unicode Normalization Form D of valid UTF-8.
inline std::string nfd(std::string_view valid_utf8) {
  return encode_utf8(nfd_code_points(valid_utf8));
}

/// Unicode Normalization Form C of valid UTF-8 (UAX #15: canonical decomposition, canonical
/// ordering, canonical composition). Text that passes quick_check_nfc is returned unchanged
/// without decoding.
inline std::string nfc(std::string_view valid_utf8) {
  if (quick_check_nfc(valid_utf8)) return std::string(valid_utf8);
  std::vector<char32_t> cps = nfd_code_points(valid_utf8);
  // Canonical composition: each character C after the last starter S composes with S when
  // it is not blocked (no character between them has ccc 0 or ccc >= ccc(C)).
  std::size_t starter = 0;
  bool have_starter = false;
  std::uint8_t last_ccc = 0;
  std::size_t w = 0;  // write index
  for (std::size_t r = 0; r < cps.size(); ++r) {
    const char32_t c = cps[r];
    const std::uint8_t ccc = combining_class(c);
    if (have_starter) {
      const bool blocked = w > starter + 1 && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        if (const char32_t composed = compose_pair(cps[starter], c); composed != 0) {
          cps[starter] = composed;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = w;
      have_starter = true;
    }
    last_ccc = ccc;
    cps[w++] = c;
  }
  cps.resize(w);
  return encode_utf8(cps);
}

}  // namespace edgellm::detail::unicode
