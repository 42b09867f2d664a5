// SPDX-License-Identifier: Apache-2.0
// Speculative decoding: a small draft model proposes k tokens, the target verifies them in one
// batched forward. Greedy output is token-for-token the target's own; under sampling the output
// distribution is the target's (lossless rejection rule). Also: a draft with no second model
// (n-gram lookup in the text so far).
//
//   edgellm-example-speculative [TARGET_DIR] [DRAFT_DIR]    (defaults: the bundled KJV pair)
#include <edgellm/edgellm.hpp>

#include <cstdio>
#include <string>
#include <string_view>

int main(int argc, char** argv) {
  using namespace edgellm;
  using Model = model::Transformer<cache::KVCacheQ8>;
  const std::string target_dir = argc > 1 ? argv[1] : "models/kjv-target-awq";
  const std::string draft_dir = argc > 2 ? argv[2] : "models/kjv-draft-awq";
  const auto die = [](const std::string& msg) { return std::fprintf(stderr, "%s\n", msg.c_str()), 1; };

  auto tw = model::load_weights(target_dir);
  if (!tw) return die(tw.error().message);
  auto dw = model::load_weights(draft_dir);
  if (!dw) return die(dw.error().message);
  auto tokenizer = model::Tokenizer::load(target_dir);
  if (!tokenizer) return die(tokenizer.error().message);
  auto target = Model::create(*tw, {.context_size = 512});
  auto draft = Model::create(*dw, {.context_size = 512});
  if (!target || !draft) return die("cannot create the sessions");

  // The decoder only needs the decode::Model concept: any pair with the same vocabulary works
  // (a draft with another vocabulary is refused here).
  decode::SpeculativeOptions opts;
  opts.k = 4;
  opts.adaptive = true;  // picks k from measured acceptance and costs; stops drafting if it does not pay
  auto spec = decode::SpeculativeDecoder<Model, Model>::create(*target, *draft, opts);
  if (!spec) return die(spec.error().message);
  auto sampler = decode::Sampler::create(decode::SamplingOptions::greedy());
  auto prompt = tokenizer->encode("And God said");
  if (!sampler || !prompt) return die("bad sampler or prompt");

  decode::GenerateOptions gopts;
  gopts.max_new_tokens = 48;
  const auto print = [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    return true;
  };
  auto stats = decode::generate(*spec, *sampler, *tokenizer, *prompt, gopts, print);
  if (!stats) return die(stats.error().message);
  const auto& s = spec->stats();
  std::printf("\n[draft model] %zu drafted, %zu accepted, %.2f tokens per target forward\n", s.drafted,
              s.accepted, s.tokens_per_forward());

  // Prompt-lookup drafting: no second model; proposes continuations of n-grams already seen.
  if (!target->truncate(0)) return 1;
  auto lookup = decode::LookupDraft::create(target->vocab_size(), target->context_size());
  if (!lookup) return die(lookup.error().message);
  auto spec2 = decode::SpeculativeDecoder<Model, decode::LookupDraft>::create(*target, *lookup, {});
  if (!spec2) return die(spec2.error().message);
  stats = decode::generate(*spec2, *sampler, *tokenizer, *prompt, gopts, print);
  if (!stats) return die(stats.error().message);
  std::printf("\n[lookup] %.2f tokens per target forward\n", spec2->stats().tokens_per_forward());
  return 0;
}
