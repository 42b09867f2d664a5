// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/tokenizer/text.hpp: literal search and replace, code points around a
// byte offset, and White_Space runs (Unicode spaces included).
#include "edgellm/model/tokenizer/text.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace test_model_tokenizer_text {

namespace {

namespace tok = edgellm::model::detail::tok;

std::vector<std::string> pieces(std::string_view text, const std::vector<tok::Span>& spans) {
  std::vector<std::string> out;
  for (const tok::Span& s : spans) out.emplace_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

}  // namespace

TEST_CASE("tokenizer text: literal search and replace", "[tokenizer]") {
  using V = std::vector<std::string>;
  std::vector<tok::Span> spans;
  tok::find_literal("abab a", "ab", spans);
  CHECK(pieces("abab a", spans) == V{"ab", "ab"});
  CHECK(spans[1].begin == 2);
  spans.clear();
  tok::find_literal("aaaaa", "aa", spans);  // non-overlapping, leftmost first
  REQUIRE(spans.size() == 2);
  CHECK(spans[1].begin == 2);
  spans.clear();
  tok::find_literal("abc", "", spans);
  CHECK(spans.empty());

  CHECK(tok::replace_all("a--b--", "--", "+") == "a+b+");
  CHECK(tok::replace_all("aaa", "aa", "b") == "ba");
  CHECK(tok::replace_all("abc", "", "x") == "abc");
  CHECK(tok::replace_all("a b", " ", "\xE2\x96\x81") ==
        "a\xE2\x96\x81"
        "b");

  tok::StringIdMap map;
  map.emplace("key", 7);
  CHECK(map.find(std::string_view("key"))->second == 7);  // lookup by string_view, no copy
}

TEST_CASE("tokenizer text: code points and whitespace runs", "[tokenizer]") {
  const std::string_view s = "a\xC3\xA9\xF0\x9F\x98\x80";  // a é 😀
  CHECK(tok::code_point_at(s, 0) == U'a');
  CHECK(tok::code_point_at(s, 1) == 0xE9);
  CHECK(tok::code_point_before(s, 3) == 0xE9);
  CHECK(tok::code_point_before(s, s.size()) == 0x1F600);

  const std::string_view w = "ab \t\xE3\x80\x80";  // U+3000 IDEOGRAPHIC SPACE is White_Space
  CHECK(tok::whitespace_run_before(w, w.size()) == 2);
  CHECK(tok::whitespace_run_before(w, 2) == 2);
  CHECK(tok::whitespace_run_after(w, 2) == w.size());
  CHECK(tok::whitespace_run_after(w, 0) == 0);
  CHECK(tok::whitespace_run_after("\xE2\x80\x8B", 0) == 0);  // ZERO WIDTH SPACE is not
}

}  // namespace test_model_tokenizer_text
