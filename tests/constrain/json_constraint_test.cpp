// SPDX-License-Identifier: Apache-2.0
// JsonConstraint on the bundled model: the trie walk gives the scalar twin's mask in every state
// met on the way through sample texts; sampled generations through a Session stay JSON (whole
// texts parse as objects, cut ones are viable prefixes); the state follows any history order
// (rollback); a history the constraint would not have produced is an error that says so; with
// the token budget it knows, a generation always ends in a whole text.
#include "edgellm/constrain/json_constraint.hpp"

#include "edgellm/io/json.hpp"
#include "edgellm/session.hpp"
#include "support/bundled_engine.hpp"
#include "support/prelude.hpp"
#include "support/test_env.hpp"

#include <memory>
#include <string>
#include <vector>

namespace test_json_constraint {

using namespace edgellm;
using constrain::JsonConstraint;
using constrain::JsonMatcher;

std::shared_ptr<const Engine> engine() { return test::bundled_engine(); }

std::shared_ptr<const constrain::TokenTrie> trie() {
  auto t = constrain::TokenTrie::build(*engine()->tokenizer(), engine()->config().vocab_size);
  REQUIRE(t);
  return *t;
}

std::vector<std::int32_t> stops() {
  return {engine()->eos_ids().begin(), engine()->eos_ids().end()};
}

TEST_CASE("JsonConstraint: the trie walk equals the scalar twin in every state", "[constrain]") {
  auto c = JsonConstraint::create(trie(), stops(), 0);
  REQUIRE(c);
  const std::string texts[] = {
      "{\"name\": \"Moses\", \"age\": 120, \"sons\": [\"Gershom\", \"Eliezer\"], \"ok\": true}",
      "{\"e\":\"\\u00e9\\n\",\"x\":{\"y\":[-1.5e3,null,{}]}}",
  };
  std::size_t states = 0;
  for (const std::string& text : texts) {
    JsonMatcher m;
    for (std::size_t i = 0; i <= text.size(); ++i) {
      INFO(text.substr(0, i));
      REQUIRE((*c)->mask_for(m) == (*c)->mask_scalar(m));
      ++states;
      if (i < text.size()) REQUIRE(m.feed(static_cast<unsigned char>(text[i])));
    }
    REQUIRE(m.done());
  }
  CHECK(states > 100);
  CHECK((*c)->stats().cache_hits > 0);  // states repeat (inside strings, after values)
}

TEST_CASE("JsonConstraint keeps sampled generations JSON", "[constrain]") {
  const auto tr = trie();
  auto session = Session::create(engine(), {});
  REQUIRE(session);
  auto prompt = engine()->tokenizer()->encode("And God said", {});
  REQUIRE(prompt);
  json::ParseOptions po;
  po.reject_duplicate_keys = false;
  std::size_t whole = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    decode::SamplingOptions so;
    so.seed = seed;
    so.temperature = 1.0f;
    REQUIRE(session->set_sampling(so));
    // Half the runs with the budget known to the constraint: those always close the object.
    const bool budget = seed % 2 == 0;
    auto c = JsonConstraint::create(tr, stops(), prompt->size(),
                                    {.max_new_tokens = budget ? 48u : 0u});
    REQUIRE(c);
    GenerateOptions go;
    go.max_new_tokens = budget ? 48 : 96;
    go.logits_processor = c->get();
    std::string text;
    auto out = session->generate(std::span<const std::int32_t>(*prompt), go,
                                 [&](std::string_view piece, std::int32_t) {
                                   text += piece;
                                   return true;
                                 });
    REQUIRE(out);
    INFO("seed " << seed << ": " << text);
    JsonMatcher m;
    std::string bytes;
    for (const auto id : out->tokens) bytes += std::string(*tr->bytes_of(id));
    REQUIRE(m.feed(bytes));  // every emitted token continued the text
    if (budget) REQUIRE(out->stats.stop == decode::StopReason::eos);
    if (out->stats.stop == decode::StopReason::eos) {
      ++whole;
      REQUIRE(m.done());
      auto doc = json::parse(bytes, "generated", po);
      REQUIRE(doc);
      CHECK(doc->is_object());
    } else {
      CHECK(out->stats.stop == decode::StopReason::max_tokens);
    }
  }
  // The processor is the call's only: without it the next generation is free again.
  auto free_run = session->generate(std::span<const std::int32_t>(*prompt), {.max_new_tokens = 8});
  REQUIRE(free_run);
  UNSCOPED_INFO(whole << " of 6 generations closed their object");
  CHECK(whole >= 3);
}

TEST_CASE("JsonConstraint under speculative decoding: greedy output unchanged", "[constrain]") {
  // The speculative decoder asks for draft and verified positions out of order and rolls back;
  // the constraint keys its state on the history, so greedy output equals plain decoding's.
  auto draft = Engine::load(test::source_dir() + "/models/kjv-draft-awq",
                            EngineOptions::draft_of({}));
  REQUIRE(draft);
  const auto tr = trie();
  auto prompt = engine()->tokenizer()->encode("And God said", {});
  REQUIRE(prompt);
  const auto run = [&](bool speculative, decode::SamplingOptions sampling) {
    SessionOptions so;
    so.sampling = sampling;
    if (speculative) so.draft = *draft;
    auto session = Session::create(engine(), so);
    REQUIRE(session);
    auto c = JsonConstraint::create(tr, stops(), prompt->size());
    REQUIRE(c);
    GenerateOptions go;
    go.max_new_tokens = 64;
    go.logits_processor = c->get();
    auto out = session->generate(std::span<const std::int32_t>(*prompt), go);
    REQUIRE(out);
    std::string bytes;
    for (const auto id : out->tokens) bytes += std::string(*tr->bytes_of(id));
    JsonMatcher m;
    CHECK(m.feed(bytes));
    return out->tokens;
  };
  CHECK(run(true, decode::SamplingOptions::greedy()) == run(false, decode::SamplingOptions::greedy()));
  decode::SamplingOptions sampled;
  sampled.seed = 3;
  (void)run(true, sampled);  // sampled: still JSON (checked inside)
}

TEST_CASE("JsonConstraint follows the history in any order", "[constrain]") {
  const auto tr = trie();
  const std::vector<std::int32_t> prompt{5, 6, 7};
  auto enc = [&](std::string_view s) {
    auto ids = engine()->tokenizer()->encode(s, {.add_special = false});
    REQUIRE(ids);
    std::vector<std::int32_t> h = prompt;
    h.insert(h.end(), ids->begin(), ids->end());
    return h;
  };
  auto c = JsonConstraint::create(tr, stops(), prompt.size());
  REQUIRE(c);
  const auto long_history = enc("{\"a\": [1, 2");
  const auto other = enc("{\"b\": \"x");
  auto s1 = (*c)->state_after(long_history);
  REQUIRE(s1);
  auto s2 = (*c)->state_after(other);  // a different branch: rolled back and replayed
  REQUIRE(s2);
  auto s3 = (*c)->state_after(long_history);
  REQUIRE(s3);
  CHECK(*s3 == *s1);
  JsonMatcher fresh;
  REQUIRE(fresh.feed("{\"b\": \"x"));
  CHECK(*s2 == fresh);
  auto s0 = (*c)->state_after(prompt);
  REQUIRE(s0);
  CHECK(*s0 == JsonMatcher());

  // Errors: a history shorter than the prompt; a token that breaks the JSON.
  auto shorter = (*c)->state_after(std::vector<std::int32_t>{5});
  REQUIRE_FALSE(shorter);
  CHECK_THAT(shorter.error().message, Contains("shorter than the prompt"));
  auto broken = (*c)->state_after(enc("x"));
  REQUIRE_FALSE(broken);
  CHECK_THAT(broken.error().message, Contains("does not continue the document"));
  CHECK_FALSE(JsonConstraint::create(tr, {}, 0));
  CHECK_FALSE(JsonConstraint::create(tr, {-1}, 0));
  CHECK_FALSE(JsonConstraint::create(nullptr, stops(), 0));
}

TEST_CASE("JsonConstraint: constraints over one vocabulary share a mask cache", "[constrain]") {
  const auto tr = trie();
  auto shared = std::make_shared<constrain::JsonMaskCache>(tr, 64);
  auto a = JsonConstraint::create(tr, stops(), 0, {.shared_cache = shared});
  auto b = JsonConstraint::create(tr, stops(), 0, {.shared_cache = shared});
  REQUIRE(a);
  REQUIRE(b);
  JsonMatcher m;
  REQUIRE(m.feed("{\"k\": \"v"));
  const auto first = (*a)->mask_for(m);
  const auto second = (*b)->mask_for(m);
  CHECK(first == second);
  CHECK(first == (*a)->mask_scalar(m));
  CHECK((*a)->stats().masks_computed == 1);
  CHECK((*b)->stats().masks_computed == 0);  // the first one's walk
  CHECK((*b)->stats().cache_hits == 1);
  auto other = JsonConstraint::create(trie(), stops(), 0, {.shared_cache = shared});
  REQUIRE_FALSE(other);  // another TokenTrie object: another vocabulary as far as it knows
  CHECK_THAT(other.error().message, Contains("another vocabulary"));
}

TEST_CASE("JsonConstraint allows only the stop ids once the text is whole", "[constrain]") {
  auto c = JsonConstraint::create(trie(), stops(), 0);
  REQUIRE(c);
  JsonMatcher m;
  REQUIRE(m.feed("{\"a\":1}"));
  const auto& mask = (*c)->mask_for(m);
  std::size_t allowed = 0;
  for (std::size_t i = 0; i < engine()->config().vocab_size; ++i) allowed += constrain::mask_allows(mask, i);
  CHECK(allowed == stops().size());
  for (const auto id : stops()) CHECK(constrain::mask_allows(mask, static_cast<std::size_t>(id)));
  JsonMatcher open;
  REQUIRE(open.feed("{\"a\":"));
  for (const auto id : stops())
    CHECK_FALSE(constrain::mask_allows((*c)->mask_for(open), static_cast<std::size_t>(id)));
}

}  // namespace test_json_constraint
