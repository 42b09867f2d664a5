// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/decode/generate.hpp: the generation loop (streamed text, stop ids, stop
// strings held back across tokens, budget, full context, caller stop, statistics), the plain
// decoder's prefix reuse, and the ChatML format. A scripted Model emits known tokens.
#include "edgellm/decode/generate.hpp"

#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace test_decode_generate {

namespace {

using namespace edgellm;
using decode::GenerateOptions;
using decode::PlainDecoder;
using decode::StopReason;

/// A Model whose greedy continuation after n consumed tokens is script[n % script.size()].
/// Counts the tokens it is asked to forward.
class ScriptedModel {
 public:
  ScriptedModel(std::vector<std::int32_t> script, std::size_t vocab, std::size_t context)
      : script_(std::move(script)), vocab_(vocab), context_(context) {}
  std::size_t vocab_size() const { return vocab_; }
  std::size_t position() const { return pos_; }
  std::size_t context_size() const { return context_; }
  status forward(std::span<const std::int32_t> tokens, decode::LogitsMode mode, std::span<float> logits) {
    if (tokens.empty() || pos_ + tokens.size() > context_)
      return make_error(errc::capacity_exceeded, "ScriptedModel", "bad forward");
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      ++pos_;
      ++forwarded;
      if (mode == decode::LogitsMode::all || i + 1 == tokens.size()) {
        float* row = logits.data() + (mode == decode::LogitsMode::all ? i * vocab_ : 0);
        for (std::size_t v = 0; v < vocab_; ++v) row[v] = 0.0f;
        row[static_cast<std::size_t>(script_[pos_ % script_.size()])] = 10.0f;
      }
    }
    return {};
  }
  status truncate(std::size_t n) {
    if (n > pos_) return make_error(errc::out_of_range, "ScriptedModel", "n");
    pos_ = n;
    return {};
  }
  std::size_t forwarded = 0;

 private:
  std::vector<std::int32_t> script_;
  std::size_t vocab_, context_, pos_ = 0;
};
static_assert(decode::Model<ScriptedModel>);
static_assert(decode::TokenSource<PlainDecoder<ScriptedModel>>);

model::Tokenizer load_tokenizer() {
  auto t = model::Tokenizer::load(test::source_dir() + "/tests/data/tokenizer/qwen2_bytelevel.json");
  REQUIRE(t);
  return std::move(*t);
}

struct Run {
  std::string text;
  std::vector<std::string> pieces;
  std::vector<std::int32_t> ids;
  decode::GenerateStats stats;
};

Run run(ScriptedModel& m, const model::Tokenizer& tok, std::vector<std::int32_t> prompt,
        const GenerateOptions& go, std::size_t stop_after_pieces = 0) {
  auto dec = PlainDecoder<ScriptedModel>::create(m);
  REQUIRE(dec);
  auto sampler = decode::Sampler::create(decode::SamplingOptions::greedy());
  REQUIRE(sampler);
  Run r;
  auto st = decode::generate(*dec, *sampler, tok, prompt, go, [&](std::string_view piece) {
    r.text += piece;
    r.pieces.emplace_back(piece);
    return stop_after_pieces == 0 || r.pieces.size() < stop_after_pieces;
  }, &r.ids);
  REQUIRE(st);
  r.stats = *st;
  return r;
}

}  // namespace

TEST_CASE("generate: streamed text, stop ids, budget and statistics", "[generate]") {
  const auto tok = load_tokenizer();
  auto ids = tok.encode("In the beginning God created the heaven and the earth. 价格", {.add_special = false});
  REQUIRE(ids);
  const std::int32_t eos = *tok.token_to_id("<|endoftext|>");
  std::vector<std::int32_t> script = {0, 0, 0};  // positions 0..2 are the prompt
  script.insert(script.end(), ids->begin(), ids->end());
  script.push_back(eos);
  ScriptedModel m(script, tok.vocab_size(), 256);
  GenerateOptions go;
  go.stop_ids = {eos};
  auto r = run(m, tok, {1, 2, 3}, go);
  CHECK(r.ids == *ids);
  CHECK(r.text == tok.decode(*ids));
  CHECK(r.stats.stop == StopReason::eos);
  CHECK(r.stats.new_tokens == ids->size());
  CHECK(r.stats.prompt_tokens == 3);
  CHECK(r.stats.time_to_first_token_s >= r.stats.prefill_s);
  // The stop id is sampled after the last text token's forward and is itself never forwarded.
  CHECK(m.forwarded == 3 + ids->size());

  ScriptedModel m2(script, tok.vocab_size(), 256);
  go.max_new_tokens = 4;
  auto r2 = run(m2, tok, {1, 2, 3}, go);
  CHECK(r2.stats.stop == StopReason::max_tokens);
  CHECK(r2.ids == std::vector<std::int32_t>(ids->begin(), ids->begin() + 4));

  ScriptedModel m3(script, tok.vocab_size(), 256);
  go.max_new_tokens = 100;
  auto r3 = run(m3, tok, {1, 2, 3}, go, 2);
  CHECK(r3.stats.stop == StopReason::callback);
  CHECK(r3.pieces.size() == 2);
}

TEST_CASE("generate: stop strings are cut, and held back across tokens", "[generate]") {
  const auto tok = load_tokenizer();
  const std::string text = "And God said, Let there be light: and there was light.";
  auto ids = tok.encode(text, {.add_special = false});
  REQUIRE(ids);
  std::vector<std::int32_t> script = {0};
  script.insert(script.end(), ids->begin(), ids->end());
  for (const std::string stop : {"light:", "be l", "was", ".", "xyz"}) {
    ScriptedModel m(script, tok.vocab_size(), 256);
    GenerateOptions go;
    go.stop_strings = {stop};
    go.max_new_tokens = ids->size();
    auto r = run(m, tok, {5}, go);
    const auto at = text.find(stop);
    INFO("stop '" << stop << "'");
    if (at == std::string::npos) {
      CHECK(r.text == text);
      CHECK(r.stats.stop == StopReason::max_tokens);
    } else {
      CHECK(r.text == text.substr(0, at));
      CHECK(r.stats.stop == StopReason::stop_string);
    }
    // Nothing streamed ever contained a prefix of the stop string that was later completed.
    std::string so_far;
    for (const auto& p : r.pieces) {
      so_far += p;
      CHECK(text.substr(0, so_far.size()) == so_far);
    }
  }
  CHECK(decode::detail::stop_holdback("abc li", {"light"}) == 2);
  CHECK(decode::detail::stop_holdback("abc", {"light", "c!"}) == 1);
  CHECK(decode::detail::stop_holdback("abc", {"x"}) == 0);
}

TEST_CASE("generate: a full context ends generation, bad arguments are errors", "[generate]") {
  const auto tok = load_tokenizer();
  ScriptedModel m({7, 8, 9, 10, 11}, tok.vocab_size(), 6);
  GenerateOptions go;
  auto r = run(m, tok, {1, 2, 3, 4}, go);
  CHECK(r.stats.stop == StopReason::context_full);
  CHECK(r.ids.size() == 3);  // 4 prompt + 2 forwarded emitted tokens fill 6; the third is pending

  ScriptedModel fresh({7, 8, 9, 10, 11}, tok.vocab_size(), 6);
  auto dec = PlainDecoder<ScriptedModel>::create(fresh);
  REQUIRE(dec);
  auto sampler = decode::Sampler::create(decode::SamplingOptions::greedy());
  const auto ignore = [](std::string_view) { return true; };
  auto empty = decode::generate(*dec, *sampler, tok, std::vector<std::int32_t>{}, go, ignore);
  REQUIRE_FALSE(empty);
  CHECK_THAT(empty.error().message, Catch::Contains("prompt"));
  GenerateOptions zero;
  zero.max_new_tokens = 0;
  auto z = decode::generate(*dec, *sampler, tok, std::vector<std::int32_t>{1}, zero, ignore);
  REQUIRE_FALSE(z);
  CHECK_THAT(z.error().message, Catch::Contains("max_new_tokens"));
  auto too_long = decode::generate(*dec, *sampler, tok, std::vector<std::int32_t>(7, 1), go, ignore);
  REQUIRE_FALSE(too_long);
  CHECK_THAT(too_long.error().message, Catch::Contains("context"));
  std::vector<std::int32_t> held = {1, 2};
  CHECK_FALSE(PlainDecoder<ScriptedModel>::create(m, held));  // the model holds a different count
}

TEST_CASE("generate: the plain decoder reuses the prefix its model holds", "[generate]") {
  ScriptedModel m({1, 2, 3, 4, 5, 6, 7}, 16, 64);
  auto dec = PlainDecoder<ScriptedModel>::create(m);
  REQUIRE(dec);
  std::vector<std::int32_t> prompt = {1, 2, 3, 4, 5};
  REQUIRE(dec->begin(prompt));
  CHECK(m.forwarded == 5);
  prompt.insert(prompt.end(), {6, 7});
  REQUIRE(dec->begin(prompt));  // extends: only the 2 new tokens
  CHECK(m.forwarded == 7);
  REQUIRE(dec->begin(prompt));  // identical: the last token is re-forwarded for its logits
  CHECK(m.forwarded == 8);
  prompt[3] = 9;  // diverges at 3: truncate to 3, forward 4
  REQUIRE(dec->begin(prompt));
  CHECK(m.forwarded == 12);
  CHECK(m.position() == prompt.size());
}

}  // namespace test_decode_generate
