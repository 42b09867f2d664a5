// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/tokenizer/tokenizer_json.hpp: what a tokenizer.json turns into (steps,
// flags, template ids, added-token defaults), and errors that name the file, the JSON path and
// the component edgellm does not support.
#include "edgellm/model/tokenizer/tokenizer_json.hpp"

#include "edgellm/io/json.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace test_model_tokenizer_tokenizer_json {

namespace {

namespace json = edgellm::io::json;
namespace tok = edgellm::model::detail::tok;
using Catch::Matchers::Contains;
using edgellm::errc;
using Ids = std::vector<std::int32_t>;

/// The spec of `text`, which must parse (the test stops otherwise).
edgellm::result<tok::TokenizerSpec> parse(std::string_view text) {
  auto spec = tok::parse_tokenizer_json(text, "t.json");
  if (!spec) FAIL(spec.error().message);
  return spec;
}

edgellm::error error_of(std::string_view text) {
  auto spec = tok::parse_tokenizer_json(text, "t.json");
  REQUIRE(!spec.has_value());
  return spec.error();
}

}  // namespace

TEST_CASE("tokenizer.json: a SentencePiece-style file", "[tokenizer]") {
  const auto s_parsed = parse(R"({
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "a": 4, "b": 5, "ab": 6},
              "merges": ["#version: 0.2", "a b"]},
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "added_tokens": [
        {"id": 1, "content": "<s>", "special": true},
        {"id": 7, "content": "<extra>"},
        {"id": 8, "content": ""}],
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                           "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
  })");
  const tok::TokenizerSpec& s = *s_parsed;
  CHECK(s.model.vocab.size() == 7);
  CHECK(s.model.unk_token == "<unk>");
  CHECK(s.model.byte_fallback);
  CHECK(s.model.fuse_unk);
  CHECK(s.model.byte_token_ids[0x0A] == 3);
  CHECK(s.model.byte_token_ids[0x0B] == -1);
  CHECK(s.model.id_to_token[6] == "ab");
  // "#version" lines take a rank, as in HF.
  const auto merge = s.model.merges.find(tok::pair_key(4, 5));
  REQUIRE(merge != s.model.merges.end());
  CHECK(merge->second.rank == 1);
  CHECK(merge->second.new_id == 6);

  REQUIRE(s.normalizers.size() == 2);  // the Sequence, flattened
  CHECK(s.normalizers[0].kind == tok::NormalizerStep::Kind::prepend);
  CHECK(s.normalizers[1].kind == tok::NormalizerStep::Kind::replace);
  CHECK(s.pre_tokenizers.empty());
  CHECK_FALSE(s.byte_level);

  REQUIRE(s.added.size() == 2);  // the empty one is dropped, as in HF
  CHECK(s.added[0].special);
  CHECK_FALSE(s.added[0].normalized);  // default: normalized = !special
  CHECK(s.added[1].normalized);

  CHECK(s.template_before == Ids{1});
  CHECK(s.template_after == Ids{2});

  CHECK(s.decoder.present);
  REQUIRE(s.decoder.steps.size() == 4);
  // Steps after a Fuse see one growing token.
  CHECK_FALSE(s.decoder.steps[2].fused_input);
  CHECK(s.decoder.steps[3].fused_input);
  CHECK(s.decoder.steps[3].start == 1);
}

TEST_CASE("tokenizer.json: byte-level pre-tokenizers and the Split regexes", "[tokenizer]") {
  const std::string model = R"("model": {"type": "BPE", "vocab": {"a": 0}, "merges": []})";
  const auto bl_parsed = parse("{" + model + R"(, "pre_tokenizer": {"type": "ByteLevel"}})");
  const tok::TokenizerSpec& bl = *bl_parsed;
  CHECK(bl.byte_level);
  REQUIRE(bl.pre_tokenizers.size() == 1);
  CHECK(bl.pre_tokenizers[0].add_prefix_space);  // HF's defaults
  CHECK(bl.pre_tokenizers[0].use_regex);
  CHECK_FALSE(bl.decoder.present);

  // The regex arrives JSON-escaped and is recognised after unescaping.
  const std::string pattern = json::dump(json::Value(std::string(tok::kLlama3Pattern)));
  const auto split_parsed =
      parse("{" + model + R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": )" +
            pattern + R"(}, "behavior": "MergedWithNext", "invert": true}})");
  const tok::TokenizerSpec& split = *split_parsed;
  REQUIRE(split.pre_tokenizers.size() == 1);
  CHECK(split.pre_tokenizers[0].regex == tok::SplitRegex::llama3);
  CHECK(split.pre_tokenizers[0].behavior == tok::SplitBehavior::merged_with_next);
  CHECK(split.pre_tokenizers[0].invert);
  CHECK_FALSE(split.byte_level);

  const auto meta_parsed = parse(
      "{" + model +
      R"(, "pre_tokenizer": {"type": "Metaspace", "replacement": "_", "prepend_scheme": "first", "split": false}})");
  const tok::TokenizerSpec& meta = *meta_parsed;
  REQUIRE(meta.pre_tokenizers.size() == 1);
  CHECK(meta.pre_tokenizers[0].replacement == "_");
  CHECK(meta.pre_tokenizers[0].prepend == tok::PrependScheme::first);
  CHECK_FALSE(meta.pre_tokenizers[0].split);
}

TEST_CASE("tokenizer.json: bad input is reported clearly", "[tokenizer]") {
  const std::string model_head =
      R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";

  SECTION("malformed JSON") {
    const auto e = error_of(R"({"model": {"type": "BPE",})");
    CHECK(e.code == errc::format_error);
    CHECK_THAT(e.message, Contains("t.json") && Contains("line 1"));
  }
  SECTION("unknown model type") {
    const auto e = error_of(R"({"model": {"type": "WordPiece", "vocab": {}}})");
    CHECK(e.code == errc::unsupported);
    CHECK_THAT(e.message, Contains("unknown model type 'WordPiece'"));
  }
  SECTION("missing merges") {
    const auto e = error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}}})");
    CHECK(e.code == errc::format_error);
    CHECK_THAT(e.message, Contains("model.merges") && Contains("missing"));
  }
  SECTION("merge of unknown tokens") {
    const auto e = error_of(
        R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}})");
    CHECK_THAT(e.message,
               Contains("model.merges[0]") && Contains("\"ab\" is not in the vocabulary"));
    const auto e2 = error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a c"]}})");
    CHECK_THAT(e2.message, Contains("\"c\" is not in the vocabulary"));
    const auto e3 =
        error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a a"]}})");
    CHECK_THAT(e3.message, Contains("two tokens separated by one space"));
  }
  SECTION("vocabulary problems") {
    CHECK_THAT(error_of(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})").message,
               Contains("model.vocab[\"a\"]"));
    CHECK_THAT(
        error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}})").message,
        Contains("id 0 is used by both \"a\" and \"b\""));
    CHECK_THAT(
        error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0, "a": 1}, "merges": []}})").message,
        Contains("token \"a\" appears twice"));
  }
  SECTION("unsupported pre-tokenizer pattern") {
    const auto e = error_of(
        "{" + model_head +
        R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": false}})");
    CHECK(e.code == errc::unsupported);
    CHECK_THAT(e.message,
               Contains("unsupported pre-tokenizer pattern") && Contains("pre_tokenizer.pattern"));
  }
  SECTION("unsupported components") {
    CHECK_THAT(error_of("{" + model_head + R"(, "normalizer": {"type": "NFKC"}})").message,
               Contains("normalizer type 'NFKC' is not supported"));
    CHECK_THAT(error_of("{" + model_head + R"(, "pre_tokenizer": {"type": "Whitespace"}})").message,
               Contains("pre-tokenizer type 'Whitespace'"));
    CHECK_THAT(error_of("{" + model_head + R"(, "decoder": {"type": "WordPiece"}})").message,
               Contains("decoder type 'WordPiece'"));
    CHECK_THAT(
        error_of("{" + model_head + R"(, "post_processor": {"type": "BertProcessing"}})").message,
        Contains("post-processor type 'BertProcessing'"));
    CHECK_THAT(
        error_of(
            "{" + model_head +
            R"(, "decoder": {"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "ByteFallback"}]}})")
            .message,
        Contains("ByteFallback after Fuse"));
    CHECK_THAT(error_of(R"({"model": {"type": "BPE", "dropout": 0.1, "vocab": {}, "merges": []}})")
                   .message,
               Contains("BPE-dropout"));
  }
}

}  // namespace test_model_tokenizer_tokenizer_json
