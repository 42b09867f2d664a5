// SPDX-License-Identifier: Apache-2.0
// The byte-level alphabet of GPT-2 / Qwen2 / Llama-3 tokenizers (GPT-2's bytes_to_unicode):
// every byte spelled as one printable character, so a vocabulary of strings covers all bytes.
// The ByteLevel pre-tokenizer spells text this way; the ByteLevel decoder maps it back.
#pragma once

#include "edgellm/detail/unicode.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace edgellm::model::detail::tok {

namespace uni = ::edgellm::detail::unicode;

struct ByteLevelTables {
  char32_t byte_to_cp[256];
  std::int16_t cp_to_byte[0x144];  ///< -1 for code points outside the alphabet
};

/// Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF map to the code point of the same value; the other
/// 68 bytes, in increasing order, map to U+0100..U+0143 (docs/formats.md §4.1).
constexpr ByteLevelTables make_byte_level_tables() {
  ByteLevelTables t{};
  for (auto& c : t.cp_to_byte) c = -1;
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool same = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const char32_t cp = same ? static_cast<char32_t>(b) : next++;
    t.byte_to_cp[b] = cp;
    t.cp_to_byte[cp] = static_cast<std::int16_t>(b);
  }
  return t;
}
inline constexpr ByteLevelTables kByteLevel = make_byte_level_tables();

/// Appends the byte-level spelling of `bytes` (one alphabet character per byte).
inline void append_byte_level(std::string& out, std::string_view bytes) {
  for (const char ch : bytes) {
    uni::append_utf8(out, kByteLevel.byte_to_cp[static_cast<unsigned char>(ch)]);
  }
}

/// Appends the bytes a byte-level token stands for: each character mapped back through the
/// alphabet, or the token's own UTF-8 when any character is outside it (HF's ByteLevel decoder).
inline void append_byte_level_decoded(std::string& out, std::string_view token) {
  const std::size_t mark = out.size();
  std::size_t i = 0;
  while (i < token.size()) {
    const std::size_t n = uni::utf8_sequence_length(token, i);
    const char32_t cp = n == 0 ? 0x110000 : uni::decode_at(token, i, n);
    if (cp >= 0x144 || kByteLevel.cp_to_byte[cp] < 0) {
      out.resize(mark);
      out.append(token);
      return;
    }
    out += static_cast<char>(static_cast<unsigned char>(kByteLevel.cp_to_byte[cp]));
    i += n;
  }
}

}  // namespace edgellm::model::detail::tok
