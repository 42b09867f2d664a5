// SPDX-License-Identifier: Apache-2.0
// Speculative decoding through the session: a small draft model proposes k tokens, the target
// verifies them in one batched forward. Greedy output is token-for-token the target's own; under
// sampling the output distribution is the target's (lossless rejection rule). Also: a draft with
// no second model (n-gram lookup in the text so far).
//
//   edgellm-example-speculative [TARGET_DIR] [DRAFT_DIR]    (defaults: the bundled KJV pair)
#include <edgellm/session.hpp>

#include <cstdio>
#include <string>
#include <string_view>

int main(int argc, char** argv) {
  using namespace edgellm;
  const std::string target_dir = argc > 1 ? argv[1] : "models/kjv-target-awq";
  const std::string draft_dir = argc > 2 ? argv[2] : "models/kjv-draft-awq";
  const auto die = [](const std::string& msg) { return std::fprintf(stderr, "%s\n", msg.c_str()), 1; };

  EngineOptions target_options;
  auto target = Engine::load(target_dir, target_options);
  if (!target) return die(target.error().message);
  // A draft only proposes: int4 lm_head, no tokenizer of its own (it must share the target's).
  auto draft = Engine::load(draft_dir, EngineOptions::draft_of(target_options));
  if (!draft) return die(draft.error().message);

  SessionOptions options;
  options.sampling = decode::SamplingOptions::greedy();
  options.context_size = 512;
  options.draft = *draft;  // a draft with another vocabulary is refused here
  options.speculative.k = 4;
  options.speculative.adaptive = true;  // picks k from measured acceptance and costs
  auto session = Session::create(*target, options);
  if (!session) return die(session.error().message);

  GenerateOptions gen;
  gen.max_new_tokens = 48;
  const auto print = [](std::string_view text, std::int32_t) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return true;
  };
  auto out = session->generate("And God said", gen, print);
  if (!out) return die(out.error().message);
  const decode::SpeculativeStats* stats = session->speculative_stats();
  if (stats == nullptr) return die("the session has no speculative decoder");
  const decode::SpeculativeStats& s = *stats;
  std::printf("\n[draft model] %zu drafted, %zu accepted, %.2f tokens per target forward\n", s.drafted,
              s.accepted, s.tokens_per_forward());

  // Prompt-lookup drafting: no second model; proposes continuations of n-grams already seen.
  options.draft = nullptr;
  options.prompt_lookup = true;
  auto lookup = Session::create(*target, options);
  if (!lookup) return die(lookup.error().message);
  out = lookup->generate("And God said", gen, print);
  if (!out) return die(out.error().message);
  if (lookup->speculative_stats() == nullptr) return die("the session has no speculative decoder");
  std::printf("\n[lookup] %.2f tokens per target forward\n",
              lookup->speculative_stats()->tokens_per_forward());
  return 0;
}
