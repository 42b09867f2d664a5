// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/tokenizer/byte_level.hpp: GPT-2's byte alphabet maps every byte to one
// character and back, and tokens outside the alphabet decode to themselves.
#include "edgellm/model/tokenizer/byte_level.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <string_view>

namespace test_model_tokenizer_byte_level {

namespace {
namespace tok = edgellm::model::detail::tok;
}  // namespace

TEST_CASE("byte-level alphabet round-trips every byte", "[tokenizer]") {
  std::string all_bytes, spelled;
  for (int b = 0; b < 256; ++b) {
    const char ch = static_cast<char>(b);
    std::string one;
    tok::append_byte_level(one, std::string_view(&ch, 1));
    INFO("byte " << b);
    CHECK((one.size() == 1 || one.size() == 2));  // code points below U+0144
    std::string back;
    tok::append_byte_level_decoded(back, one);
    CHECK(back == std::string(1, ch));
    all_bytes += ch;
    spelled += one;
  }
  std::string back;
  tok::append_byte_level_decoded(back, spelled);
  CHECK(back == all_bytes);
}

TEST_CASE("byte-level alphabet: known spellings and foreign tokens", "[tokenizer]") {
  std::string s;
  tok::append_byte_level(s, " a\n");
  CHECK(s ==
        "\xC4\xA0"
        "a\xC4\x8A");                                // Ġ a Ċ
  CHECK(tok::kByteLevel.byte_to_cp[0xAD] == 0x143);  // the last of the 68 moved bytes
  CHECK(tok::kByteLevel.cp_to_byte[0xAD] == -1);

  // A token with any character outside the alphabet is appended as it is (HF's ByteLevel decoder).
  std::string out = "x";
  tok::append_byte_level_decoded(out, "a\xE6\x97\xA5");  // a 日
  CHECK(out == "xa\xE6\x97\xA5");
  out.clear();
  tok::append_byte_level_decoded(out, "\xC2\xAD");  // U+00AD is not in the alphabet
  CHECK(out == "\xC2\xAD");
  out.clear();
  tok::append_byte_level_decoded(out, "\xC3\x83\xC2\xA9");  // Ã© spells the bytes of é
  CHECK(out == "\xC3\xA9");
}

}  // namespace test_model_tokenizer_byte_level
