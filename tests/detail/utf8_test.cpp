// SPDX-License-Identifier: Apache-2.0
#include "edgellm/detail/utf8.hpp"

#include <catch2/catch.hpp>

#include <string>

namespace test_detail_utf8 {

using edgellm::detail::append_utf8;
using edgellm::detail::utf8_sequence_length;

TEST_CASE("append_utf8 and utf8_sequence_length agree on every scalar value", "[detail]") {
  for (char32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x1000 ? 1 : 97)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    append_utf8(s, cp);
    REQUIRE(s.size() == (cp < 0x80 ? 1u : cp < 0x800 ? 2u : cp < 0x10000 ? 3u : 4u));
    REQUIRE(utf8_sequence_length(s, 0) == s.size());
  }
}

TEST_CASE("utf8_sequence_length rejects malformed sequences", "[detail]") {
  for (const char* bad : {"\x80", "\xC0\xAF", "\xC1\xBF", "\xE0\x80\xAF", "\xED\xA0\x80",
                          "\xF0\x80\x80\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xE2\x82",
                          "\xFF"}) {
    INFO("bytes " << bad);
    REQUIRE(utf8_sequence_length(bad, 0) == 0);
  }
}

}  // namespace test_detail_utf8
