// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/tokenizer/bpe.hpp: BpeModel::encode_word on hand-built models: merge
// order by rank (leftmost among equals), unknown characters with and without unk_token and
// fuse_unk, byte fallback, ignore_merges.
#include "edgellm/model/tokenizer/bpe.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace test_model_tokenizer_bpe {

namespace {

namespace tok = edgellm::model::detail::tok;
using Ids = std::vector<std::int32_t>;

/// A model with `vocab` (ids in order) and `merges` (ranked in order), as the loader builds it.
tok::BpeModel make_model(const std::vector<std::string>& vocab,
                         const std::vector<std::pair<std::string, std::string>>& merges) {
  tok::BpeModel m;
  for (std::size_t i = 0; i < vocab.size(); ++i) {
    m.vocab.emplace(vocab[i], static_cast<std::int32_t>(i));
  }
  m.id_to_token.assign(vocab.size(), std::string_view());
  m.has_id.assign(vocab.size(), 1);
  for (const auto& [token, id] : m.vocab) m.id_to_token[static_cast<std::size_t>(id)] = token;
  std::uint32_t rank = 0;
  for (const auto& [a, b] : merges) {
    m.merges[tok::pair_key(*m.lookup(a), *m.lookup(b))] = tok::MergeValue{rank++, *m.lookup(a + b)};
  }
  m.byte_token_ids.fill(-1);
  return m;
}

Ids encode(const tok::BpeModel& m, std::string_view word) {
  Ids out;
  const auto st = m.encode_word(word, out);
  if (!st) FAIL(st.error().message);
  return out;
}

}  // namespace

TEST_CASE("BPE merges by rank, leftmost among equals", "[tokenizer]") {
  const auto m =
      make_model({"a", "b", "c", "ab", "abc", "bc"}, {{"a", "b"}, {"ab", "c"}, {"b", "c"}});
  CHECK(encode(m, "abcab") == Ids{4, 3});
  CHECK(encode(m, "bca") == Ids{5, 0});
  CHECK(encode(m, "").empty());
  CHECK(encode(m, "axb") == Ids{3});  // unknown "x" without unk_token is dropped, as in HF
  CHECK(m.lookup("abc") == 4);
  CHECK(!m.lookup("x"));

  const auto aa = make_model({"a", "aa"}, {{"a", "a"}});
  CHECK(encode(aa, "aaa") == Ids{1, 0});
  CHECK(encode(aa, "aaaa") == Ids{1, 1});
}

TEST_CASE("BPE: unknown characters, byte fallback, ignore_merges", "[tokenizer]") {
  auto m = make_model({"a", "<unk>", "<0xC3>", "<0xA9>", "abc", "b", "c"}, {});
  m.unk_token = "<unk>";
  CHECK(encode(m, "xxa") == Ids{1, 1, 0});
  m.fuse_unk = true;
  CHECK(encode(m, "xxa") == Ids{1, 0});

  // Byte fallback spells an unknown character with its <0xXX> tokens when all of them exist.
  m.byte_fallback = true;
  m.byte_token_ids[0xC3] = 2;
  m.byte_token_ids[0xA9] = 3;
  CHECK(encode(m, "a\xC3\xA9") == Ids{0, 2, 3});
  CHECK(encode(m, "\xC3\xA8") == Ids{1});  // <0xA8> is missing: <unk>

  CHECK(encode(m, "abc") == Ids{0, 5, 6});
  m.ignore_merges = true;  // a word that is a vocabulary entry is taken whole
  CHECK(encode(m, "abc") == Ids{4});

  // An unk_token that the vocabulary lacks fails only when it is needed.
  auto bad = make_model({"a"}, {});
  bad.unk_token = "<unk>";
  CHECK(encode(bad, "aa") == Ids{0, 0});
  Ids out;
  const auto st = bad.encode_word("ab", out);
  REQUIRE(!st);
  CHECK(st.error().code == edgellm::errc::format_error);
  CHECK_THAT(st.error().message, Catch::Matchers::Contains("unk_token '<unk>'"));
}

TEST_CASE("BPE: continuing_subword_prefix and end_of_word_suffix", "[tokenizer]") {
  auto m = make_model({"h", "##e", "##y</w>", "he", "hey</w>", "h</w>"}, {});
  m.continuing_subword_prefix = "##";
  m.end_of_word_suffix = "</w>";
  m.merges[tok::pair_key(0, 1)] = tok::MergeValue{0, 3};  // h ##e -> he
  m.merges[tok::pair_key(3, 2)] = tok::MergeValue{1, 4};  // he ##y</w> -> hey</w>
  CHECK(encode(m, "hey") == Ids{4});
  CHECK(encode(m, "h") == Ids{5});
}

}  // namespace test_model_tokenizer_bpe
