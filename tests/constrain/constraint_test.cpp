// SPDX-License-Identifier: Apache-2.0
// constrain::Constraint on the bundled model: errors name what was wrong in each kind of source;
// under a grammar (a JSON Schema's) the trie walk gives the scalar twin's mask in every state met
// along valid instances (the plain-token fast path included); sampled generations under schemas
// always end whole within their token budget and are sentences of the grammar; speculative
// decoding under a schema gives plain decoding's greedy tokens; choices, regex and GBNF.
#include "edgellm/constrain/constraint.hpp"

#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/session.hpp"
#include "support/bundled_engine.hpp"
#include "support/prelude.hpp"
#include "support/test_env.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace test_constraint {

using namespace edgellm;
using constrain::Constraint;
using constrain::ConstraintKind;
using constrain::GrammarMatcher;

std::shared_ptr<const Engine> engine() { return test::bundled_engine(); }

std::shared_ptr<const constrain::TokenTrie> trie() {
  static const auto t = [] {
    auto r = constrain::TokenTrie::build(*engine()->tokenizer(), engine()->config().vocab_size);
    REQUIRE(r);
    return *r;
  }();
  return t;
}

std::vector<std::int32_t> stops() {
  return {engine()->eos_ids().begin(), engine()->eos_ids().end()};
}

std::string fixture(const std::string& name) {
  auto text = io::read_text_file(test::source_dir() + "/tests/data/json_schemas/" + name);
  REQUIRE(text);
  return *text;
}

std::shared_ptr<const constrain::Grammar> schema_grammar(const std::string& schema) {
  auto gbnf = constrain::json_schema_to_gbnf(std::string_view(schema));
  REQUIRE(gbnf);
  auto g = constrain::parse_gbnf(*gbnf);
  REQUIRE(g);
  return *g;
}

// Schemas of different shapes (objects with optional members, arrays, nesting, enums, numbers).
const char* const kSchemas[] = {"additional_properties_schema", "array_of_objects",
                                "string_enum",                  "deep_nesting",
                                "number_bounded_unit",          "flat_object_optional",
                                "recursive_tree",               "string_lengths"};

TEST_CASE("Constraint::compile: errors name the keyword, line or offset", "[constrain]") {
  using S = constrain::ConstraintSpec;
  auto schema = Constraint::compile(S{.kind = ConstraintKind::json_schema,
                                      .source = R"({"type":"object","properties":{"a":{"not":{}}}})"});
  REQUIRE_FALSE(schema);
  CHECK_THAT(schema.error().message, Contains("\"not\"") && Contains("/properties/a"));
  auto gbnf = Constraint::compile(S{.kind = ConstraintKind::grammar, .source = "root ::= \"a\" (b"});
  REQUIRE_FALSE(gbnf);
  CHECK_THAT(gbnf.error().message, Contains("1:"));
  CHECK_FALSE(Constraint::compile(S{.kind = ConstraintKind::grammar, .source = "a ::= \"x\""}));
  auto regex = Constraint::compile(S{.kind = ConstraintKind::regex, .source = "a(?=b)"});
  REQUIRE_FALSE(regex);
  CHECK_THAT(regex.error().message, Contains("offset"));
  CHECK_FALSE(Constraint::compile(S{.kind = ConstraintKind::choices}));
  CHECK_FALSE(Constraint::compile(S{.kind = ConstraintKind::json_schema, .source = "{"}));
  auto ok = Constraint::compile(S{.kind = ConstraintKind::json_schema, .source = "true"});
  REQUIRE(ok);
  CHECK_FALSE((*ok)->gbnf().empty());
  CHECK_FALSE((*ok)->start(nullptr, stops(), 0, 0));
  CHECK_FALSE((*ok)->start(trie(), {}, 0, 0));
}

TEST_CASE("Grammar constraint: the trie walk equals the scalar twin in every state", "[constrain]") {
  std::size_t states = 0, plain_states = 0;
  for (const char* name : kSchemas) {
    INFO(name);
    const std::string valid = fixture(std::string(name) + ".valid.jsonl");
    const std::string instance = valid.substr(0, valid.find('\n'));
    const auto grammar = schema_grammar(fixture(std::string(name) + ".json"));
    auto c = constrain::TokenConstraint<GrammarMatcher>::create(trie(), stops(), 0,
                                                                GrammarMatcher(grammar));
    REQUIRE(c);
    auto ids = engine()->tokenizer()->encode(instance, {.add_special = false});
    REQUIRE(ids);
    GrammarMatcher m(grammar);
    for (std::size_t k = 0; k <= ids->size(); ++k) {
      INFO("after " << k << " tokens of " << instance);
      REQUIRE((*c)->mask_for(m) == (*c)->mask_scalar(m));
      ++states;
      plain_states += m.in_string_body() ? 1 : 0;
      if (k < ids->size()) REQUIRE(m.feed(*trie()->bytes_of((*ids)[k])));
    }
    CHECK(m.accepting());
  }
  CHECK(states > 60);
  CHECK(plain_states > 0);  // string bodies met: the fast path was compared too
}

TEST_CASE("Schema-constrained generations end whole within their budget", "[constrain]") {
  auto session = Session::create(engine(), {});
  REQUIRE(session);
  auto prompt = engine()->tokenizer()->encode("And God said", {});
  REQUIRE(prompt);
  std::size_t forced = 0;
  // Under sanitizers and emulation (small scale): three schemas, one budget.
  const std::size_t n_schemas = test::scaled<std::size_t>(std::size(kSchemas), 3);
  for (const char* name : std::span(kSchemas).first(n_schemas)) {
    const std::string schema = fixture(std::string(name) + ".json");
    auto compiled = Constraint::compile({.kind = ConstraintKind::json_schema, .source = schema});
    REQUIRE(compiled);
    // Room for the smallest document of each (deep_nesting's is 32 bytes) at a byte per token.
    const std::vector<std::size_t> budgets = test::scaled<std::vector<std::size_t>>({40, 64}, {40});
    for (const std::size_t budget : budgets) {
      decode::SamplingOptions so;
      so.seed = budget;
      so.temperature = 1.0f;
      REQUIRE(session->set_sampling(so));
      auto c = (*compiled)->start(trie(), stops(), prompt->size(), budget);
      REQUIRE(c);
      GenerateOptions go;
      go.max_new_tokens = budget;
      go.logits_processor = c->get();
      auto out = session->generate(std::span<const std::int32_t>(*prompt), go);
      REQUIRE(out);
      std::string text;
      for (const auto id : out->tokens) text += std::string(*trie()->bytes_of(id));
      INFO(name << ", budget " << budget << ": " << text);
      CHECK(out->stats.stop == decode::StopReason::eos);
      CHECK(out->tokens.size() < budget);
      GrammarMatcher m(schema_grammar(schema));
      CHECK(m.feed(text));
      CHECK(m.accepting());
      CHECK((*c)->complete());
      CHECK(json::parse(text, "generated", {.reject_duplicate_keys = false}));
      forced += (*c)->forced() ? 1 : 0;
    }
  }
  UNSCOPED_INFO(forced << " generations had the budget override the model");
}

TEST_CASE("Schema constraint under speculative decoding: greedy output unchanged", "[constrain]") {
  auto draft = Engine::load(test::source_dir() + "/models/kjv-draft-awq",
                            EngineOptions::draft_of({}));
  REQUIRE(draft);
  auto prompt = engine()->tokenizer()->encode("And God said", {});
  REQUIRE(prompt);
  auto compiled = Constraint::compile(
      {.kind = ConstraintKind::json_schema, .source = fixture("array_of_objects.json")});
  REQUIRE(compiled);
  const auto run = [&](bool speculative) {
    SessionOptions so;
    so.sampling = decode::SamplingOptions::greedy();
    if (speculative) so.draft = *draft;
    auto session = Session::create(engine(), so);
    REQUIRE(session);
    auto c = (*compiled)->start(trie(), stops(), prompt->size(), 48);
    REQUIRE(c);
    GenerateOptions go;
    go.max_new_tokens = 48;
    go.logits_processor = c->get();
    auto out = session->generate(std::span<const std::int32_t>(*prompt), go);
    REQUIRE(out);
    CHECK(out->stats.stop == decode::StopReason::eos);
    return out->tokens;
  };
  CHECK(run(true) == run(false));
}

TEST_CASE("Choices, regular expressions and GBNF constrain generations", "[constrain]") {
  auto session = Session::create(engine(), {});
  REQUIRE(session);
  auto prompt = engine()->tokenizer()->encode("And God said", {});
  REQUIRE(prompt);
  const auto generate = [&](const constrain::ConstraintSpec& spec, std::size_t budget) {
    auto compiled = Constraint::compile(spec);
    REQUIRE(compiled);
    auto c = (*compiled)->start(trie(), stops(), prompt->size(), budget);
    REQUIRE(c);
    GenerateOptions go;
    go.max_new_tokens = budget;
    go.logits_processor = c->get();
    auto out = session->generate(std::span<const std::int32_t>(*prompt), go);
    REQUIRE(out);
    CHECK(out->stats.stop == decode::StopReason::eos);
    std::string text;
    for (const auto id : out->tokens) text += std::string(*trie()->bytes_of(id));
    return text;
  };
  const std::vector<std::string> choices{"light", "darkness", "the waters"};
  const std::string chosen = generate({.kind = ConstraintKind::choices, .choices = choices}, 8);
  CHECK(std::find(choices.begin(), choices.end(), chosen) != choices.end());
  const std::string date = generate(
      {.kind = ConstraintKind::regex, .source = "[0-9]{4}-(0[1-9]|1[0-2])-[0-2][0-9]"}, 16);
  CHECK(date.size() == 10);
  CHECK(date[4] == '-');
  auto list = io::read_text_file(test::source_dir() + "/tests/data/grammars/list.gbnf");
  REQUIRE(list);
  const std::string items = generate({.kind = ConstraintKind::grammar, .source = *list}, 32);
  CHECK(items.starts_with("- "));
  CHECK(items.ends_with("\n"));
}

TEST_CASE("apply_token_mask equals its scalar twin on random masks", "[constrain]") {
  std::mt19937_64 rng(17);
  const auto pick = [&rng](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  std::size_t cases = 0;
  // Widths around the word (64) and vector (4, 8, 16) sizes, and a Qwen-sized row.
  for (const std::size_t n : {0, 1, 5, 8, 9, 15, 16, 63, 64, 65, 100, 128, 130, 777, 4099, 151665})
    for (int round = 0; round < (n > 10000 ? 4 : 24); ++round) {
      // Words of each kind a state's mask has: all refused, all allowed, sparse, dense.
      constrain::TokenMask mask((n + 63) / 64 + (round % 5 == 4 ? 1 : 0));  // some a word longer
      if (round % 7 == 6 && !mask.empty()) mask.pop_back();       // some shorter than the row
      for (auto& word : mask) {
        const std::uint64_t r = rng();
        switch (pick(5)) {
          case 0: word = 0; break;
          case 1: word = ~std::uint64_t{0}; break;
          case 2: word = r & rng() & rng(); break;
          case 3: word = r | rng() | rng(); break;
          default: word = r; break;
        }
      }
      // Stop ids: none, a few (some refused by the mask, some twice, some past the row), and
      // more than fit on the stack.
      std::vector<std::int32_t> keep;
      const std::size_t kept = round % 6 == 5 ? 12 : pick(4);
      for (std::size_t k = 0; k < kept; ++k)
        keep.push_back(static_cast<std::int32_t>(n == 0 || k == 2 ? n + 3 : pick(n)));
      if (keep.size() > 1) keep.push_back(keep[0]);
      // Rows at each 4-byte offset from a cache line.
      const std::size_t offset = pick(16);
      std::vector<float> fast(n + 16), scalar(n + 16);
      for (std::size_t i = 0; i < fast.size(); ++i)
        fast[i] = scalar[i] = static_cast<float>(pick(2001)) - 1000.0f;
      constrain::apply_token_mask(std::span<float>(fast).subspan(offset, n), mask, keep);
      constrain::apply_token_mask_scalar(std::span<float>(scalar).subspan(offset, n), mask, keep);
      INFO("n " << n << " round " << round << " offset " << offset);
      REQUIRE(fast == scalar);  // the scores outside the row untouched too
      ++cases;
    }
  CHECK(cases > 300);
}

TEST_CASE("TokenConstraint::apply masks as its mask and the stop ids say", "[constrain]") {
  // A regular language whose documents may go on once whole: the stop ids pass beside the mask.
  auto compiled = Constraint::compile({.kind = ConstraintKind::regex, .source = "[a-z ]+[0-9]*"});
  REQUIRE(compiled);
  auto started = (*compiled)->start(trie(), stops(), 0, 0);
  REQUIRE(started);
  auto* c = dynamic_cast<constrain::TokenConstraint<GrammarMatcher>*>(started->get());
  REQUIRE(c != nullptr);
  auto ids = engine()->tokenizer()->encode("and god said let there be light 12",
                                          {.add_special = false});
  REQUIRE(ids);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> score(-20.0f, 20.0f);
  const std::vector<std::int32_t> stop_ids = stops();
  std::vector<float> logits(engine()->config().vocab_size), expected;
  std::size_t whole = 0;
  for (std::size_t k = 0; k <= ids->size(); ++k) {
    const auto history = std::span<const std::int32_t>(*ids).first(k);
    for (float& x : logits) x = score(rng);
    expected = logits;
    REQUIRE((*started)->apply(logits, history));
    auto state = c->state_after(history);
    REQUIRE(state);
    const auto keep = state->accepting() ? std::span<const std::int32_t>(stop_ids)
                                         : std::span<const std::int32_t>();
    whole += state->accepting();
    constrain::apply_token_mask_scalar(expected, c->mask_for(*state), keep);
    INFO("after " << k << " tokens");
    REQUIRE(logits == expected);
  }
  CHECK(whole > 0);
}

}  // namespace test_constraint
