// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/tokenizer/pre_tokenizer.hpp: the five split behaviors (and invert) on
// one example, and the ByteLevel, Metaspace and Split steps run by pre_tokenize().
#include "edgellm/model/tokenizer/pre_tokenizer.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace test_model_tokenizer_pre_tokenizer {

namespace {

namespace tok = edgellm::model::detail::tok;
using B = tok::SplitBehavior;
using V = std::vector<std::string>;
const std::string kMeta = "\xE2\x96\x81";  // ▁

/// The pieces of "a-b--c" cut at each "-" with `behavior`.
V split_dashes(B behavior, bool invert = false) {
  const std::string_view text = "a-b--c";
  std::vector<tok::Span> matches, spans;
  tok::find_literal(text, "-", matches);
  tok::split_by_matches(text.size(), matches, behavior, invert, spans);
  V out;
  for (const tok::Span& s : spans) out.emplace_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

V texts(const std::vector<tok::Piece>& pieces) {
  V out;
  for (const tok::Piece& p : pieces) out.push_back(p.text);
  return out;
}

}  // namespace

TEST_CASE("pre-tokenizer: split behaviors as HF's NormalizedString::split", "[tokenizer]") {
  CHECK(split_dashes(B::removed) == V{"a", "b", "c"});
  CHECK(split_dashes(B::isolated) == V{"a", "-", "b", "-", "-", "c"});
  CHECK(split_dashes(B::merged_with_previous) == V{"a-", "b-", "-", "c"});
  CHECK(split_dashes(B::merged_with_next) == V{"a", "-b", "-", "-c"});
  CHECK(split_dashes(B::contiguous) == V{"a", "-", "b", "--", "c"});
  CHECK(split_dashes(B::removed, /*invert=*/true) == V{"-", "-", "-"});
}

TEST_CASE("pre-tokenizer: ByteLevel, Metaspace and Split steps", "[tokenizer]") {
  SECTION("ByteLevel: prefix space, GPT-2 regex, byte-level spelling") {
    tok::PreTokenizerStep step;
    step.kind = tok::PreTokenizerStep::Kind::byte_level;
    step.add_prefix_space = true;
    const std::vector<tok::PreTokenizerStep> steps = {step};
    std::vector<tok::Piece> pieces = {tok::Piece{"Hello world", true}};
    tok::pre_tokenize(steps, pieces);
    CHECK(texts(pieces) == V{"\xC4\xA0Hello", "\xC4\xA0world"});
    CHECK(pieces[0].at_origin);
    CHECK_FALSE(pieces[1].at_origin);
  }
  SECTION("Metaspace: prepend always / first, split merged with next") {
    tok::PreTokenizerStep step;
    step.kind = tok::PreTokenizerStep::Kind::metaspace;
    step.replacement = kMeta;
    std::vector<tok::PreTokenizerStep> steps = {step};
    std::vector<tok::Piece> pieces = {tok::Piece{"hi there", false}};
    tok::pre_tokenize(steps, pieces);
    CHECK(texts(pieces) == V{kMeta + "hi", kMeta + "there"});

    steps[0].prepend = tok::PrependScheme::first;
    pieces = {tok::Piece{"hi there", false}};
    tok::pre_tokenize(steps, pieces);
    CHECK(texts(pieces) == V{"hi", kMeta + "there"});
    pieces = {tok::Piece{"hi there", true}};
    tok::pre_tokenize(steps, pieces);
    CHECK(texts(pieces) == V{kMeta + "hi", kMeta + "there"});

    steps[0].split = false;
    pieces = {tok::Piece{"hi there", true}};
    tok::pre_tokenize(steps, pieces);
    CHECK(texts(pieces) == V{kMeta + "hi" + kMeta + "there"});
  }
  SECTION("a sequence: Split on a literal, then the Qwen2 regex") {
    tok::PreTokenizerStep literal;
    literal.kind = tok::PreTokenizerStep::Kind::split;
    literal.literal = "|";
    literal.behavior = B::removed;
    tok::PreTokenizerStep regex;
    regex.kind = tok::PreTokenizerStep::Kind::split;
    regex.regex = tok::SplitRegex::qwen2;
    const std::vector<tok::PreTokenizerStep> steps = {literal, regex};
    std::vector<tok::Piece> pieces = {tok::Piece{"ab 12|cd", true}};
    tok::pre_tokenize(steps, pieces);
    CHECK(texts(pieces) == V{"ab", " ", "1", "2", "cd"});
    CHECK(pieces[0].at_origin);
    CHECK_FALSE(pieces[4].at_origin);
  }
  SECTION("no steps: pieces unchanged") {
    std::vector<tok::Piece> pieces = {tok::Piece{"as is", true}};
    tok::pre_tokenize({}, pieces);
    CHECK(texts(pieces) == V{"as is"});
  }
}

}  // namespace test_model_tokenizer_pre_tokenizer
