// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/tokenizer/added_tokens.hpp: the trie's leftmost-longest matching, the
// lookups AddedVocabulary builds, and how split() honours special, single_word, lstrip and rstrip.
#include "edgellm/model/tokenizer/added_tokens.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace test_model_tokenizer_added_tokens {

namespace {

namespace tok = edgellm::model::detail::tok;
using edgellm::model::AddedToken;
using V = std::vector<std::string>;

AddedToken token(std::int32_t id, std::string content, bool special = false) {
  AddedToken t;
  t.id = id;
  t.content = std::move(content);
  t.special = special;
  return t;
}

/// split() as a list: stretches of text as they are, tokens as "#id".
V split(const tok::AddedVocabulary& v, std::string_view text, bool parse_special = true) {
  V out;
  v.split(
      text, v.raw_trie, parse_special,
      [&](tok::Span s) { out.emplace_back(text.substr(s.begin, s.end - s.begin)); },
      [&](std::int32_t id) {
        std::string s = "#";
        s += std::to_string(id);
        out.push_back(s);
      });
  return out;
}

}  // namespace

TEST_CASE("added tokens: the trie finds the leftmost, then longest match", "[tokenizer]") {
  tok::TokenTrie trie;
  CHECK(trie.empty());
  CHECK(!trie.find("anything", 0));
  trie.insert("", 9);  // ignored
  CHECK(trie.empty());
  trie.insert("ab", 0);
  trie.insert("abc", 1);
  trie.insert("b", 2);
  trie.insert("ab", 3);  // the first insertion of a pattern wins
  CHECK_FALSE(trie.empty());

  const auto m = trie.find("xabcd", 0);
  REQUIRE(m);
  CHECK(m->begin == 1);
  CHECK(m->end == 4);
  CHECK(m->value == 1);
  CHECK(trie.find("xabd", 0)->value == 0);
  CHECK(trie.find("xbd", 0)->value == 2);
  CHECK(trie.find("abab", 1)->begin == 1);  // "b" at 1 starts before "ab" at 2
  CHECK(trie.find("abab", 2)->value == 0);
  CHECK(!trie.find("xyz", 0));
}

TEST_CASE("added tokens: AddedVocabulary lookups and split()", "[tokenizer]") {
  std::vector<AddedToken> list = {token(10, "<|x|>", true), token(11, "x|>"), token(12, "y"),
                                  token(13, "><"), token(14, "H\xC3\xA9")};
  list[2].lstrip = list[2].rstrip = true;
  list[3].single_word = true;
  list[4].normalized = true;
  const auto v =
      tok::AddedVocabulary::build(list, [](std::string_view s) { return "n:" + std::string(s); });

  CHECK(v.tokens.size() == 5);
  CHECK(v.content_of(12) == std::string_view("y"));
  CHECK(!v.content_of(99));
  CHECK(v.by_content.find(std::string_view("x|>"))->second == 11);
  CHECK(v.by_id.at(13) == 3);
  // A normalized token is matched by its normalized content, in the normalized trie only.
  CHECK(v.normalized_trie.find("a n:H\xC3\xA9", 0)->value == 4);
  CHECK(!v.raw_trie.find("H\xC3\xA9", 0));

  CHECK(split(v, "<|x|>") == V{"#10"});
  // Not parsing special tokens: the skipped match still consumes its bytes, so "x|>" inside it
  // is not found (HF's scan resumes after a match).
  CHECK(split(v, "<|x|>", false) == V{"<|x|>"});
  CHECK(split(v, "ax|>") == V{"a", "#11"});
  CHECK(split(v, "x  y  x") == V{"x", "#12", "x"});  // lstrip and rstrip swallow whitespace
  CHECK(split(v, "x><x") == V{"x><x"});              // single_word between word characters
  CHECK(split(v, "|><|") == V{"|", "#13", "|"});
  CHECK(split(v, "").empty());
}

TEST_CASE("added tokens: special tokens are matched before others of the same content",
          "[tokenizer]") {
  const auto v = tok::AddedVocabulary::build(
      std::vector<AddedToken>{token(20, "same"), token(21, "same", true)},
      [](std::string_view s) { return std::string(s); });
  CHECK(split(v, "same") == V{"#21"});
  CHECK(split(v, "same", false) == V{"same"});  // the special match hides the other one
}

}  // namespace test_model_tokenizer_added_tokens
