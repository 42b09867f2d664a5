// SPDX-License-Identifier: Apache-2.0
// TokenTrie over the bundled tokenizer: every token with text is there once, in byte order, with
// the right shared-prefix lengths and bytes that decode back to what the tokenizer decodes.
#include "edgellm/constrain/token_trie.hpp"

#include "support/prelude.hpp"
#include "support/test_env.hpp"

#include <set>
#include <string>

namespace test_token_trie {

using namespace edgellm;

TEST_CASE("TokenTrie lists the vocabulary's bytes in order", "[constrain]") {
  auto tok = model::Tokenizer::load(test::source_dir() + "/models/kjv-target-awq/tokenizer.json");
  REQUIRE(tok);
  auto trie = constrain::TokenTrie::build(*tok, tok->vocab_size());
  REQUIRE(trie);
  const auto& t = **trie;
  CHECK(t.size() > 100);
  std::set<std::int32_t> ids;
  for (std::size_t k = 0; k < t.size(); ++k) {
    ids.insert(t.id(k));
    CHECK_FALSE(t.bytes(k).empty());
    CHECK_FALSE(tok->is_special(t.id(k)));
    if (k > 0) {
      CHECK(t.bytes(k - 1) <= t.bytes(k));
      const auto a = t.bytes(k - 1), b = t.bytes(k);
      std::size_t common = 0;
      while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
      CHECK(t.shared(k) == common);
    }
    CHECK(t.bytes_of(t.id(k)) == t.bytes(k));
  }
  CHECK(ids.size() == t.size());
  // Plain tokens in the mask, the others in the rest trie: each token in exactly one.
  REQUIRE(t.rest() != nullptr);
  std::size_t plain = 0;
  for (std::size_t k = 0; k < t.size(); ++k) {
    const bool in_mask = constrain::mask_allows(t.plain(), static_cast<std::size_t>(t.id(k)));
    CHECK(in_mask == constrain::TokenTrie::is_plain(t.bytes(k)));
    CHECK(t.rest()->bytes_of(t.id(k)).has_value() == !in_mask);
    plain += in_mask;
  }
  CHECK(plain + t.rest()->size() == t.size());
  CHECK(plain > t.size() / 2);  // most of a vocabulary is plain text
  // Mid-text bytes: a text's tokens' bytes concatenate to the text.
  const std::string text = "And God said, Let there be light: and there was light.";
  auto enc = tok->encode(text, {.add_special = false});
  REQUIRE(enc);
  std::string joined;
  for (const auto id : *enc) joined += std::string(t.bytes_of(id).value_or("?"));
  CHECK(joined == text);
  CHECK_FALSE(constrain::TokenTrie::build(*tok, 0));
}

}  // namespace test_token_trie
