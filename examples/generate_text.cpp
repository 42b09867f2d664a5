// SPDX-License-Identifier: Apache-2.0
// Text in, text out: load a checkpoint directory (weights + tokenizer.json), encode a prompt,
// sample a continuation and stream it to stdout as it is generated.
//
//   edgellm-example-generate-text [DIR] [PROMPT]     (DIR defaults to the bundled KJV model)
#include <edgellm/edgellm.hpp>

#include <cstdio>
#include <string>
#include <string_view>

int main(int argc, char** argv) {
  using namespace edgellm;
  const std::string dir = argc > 1 ? argv[1] : "models/kjv-target-awq";
  const std::string prompt = argc > 2 ? argv[2] : "And God said";
  const auto die = [](const std::string& msg) { return std::fprintf(stderr, "%s\n", msg.c_str()), 1; };

  // 1. Weights (shared, read-only) and the tokenizer.
  auto weights = model::load_weights(dir);
  if (!weights) return die(weights.error().message);
  auto tokenizer = model::Tokenizer::load(dir);
  if (!tokenizer) return die(tokenizer.error().message);

  // 2. A session with its own KV cache, on two threads owned by the app.
  auto pool = ThreadPool::create(2);
  if (!pool) return die(pool.error().message);
  model::TransformerOptions topts;
  topts.pool = pool->get();
  topts.context_size = 1024;
  auto session = model::Transformer<cache::KVCacheF16>::create(*weights, topts);
  if (!session) return die(session.error().message);

  // 3. Sampling knobs, stop conditions, and the plain (one token per forward) decoder.
  decode::SamplingOptions sopts;
  sopts.temperature = 0.7f;
  sopts.top_k = 40;
  sopts.top_p = 0.95f;
  sopts.seed = 7;
  auto sampler = decode::Sampler::create(sopts);
  if (!sampler) return die(sampler.error().message);
  auto decoder = decode::PlainDecoder<model::Transformer<cache::KVCacheF16>>::create(*session);
  if (!decoder) return die(decoder.error().message);
  decode::GenerateOptions gopts;
  gopts.max_new_tokens = 64;
  gopts.stop_strings = {"\n\n"};
  for (auto id : (*weights)->config.eos_token_ids) gopts.stop_ids.push_back(static_cast<std::int32_t>(id));

  // 4. Encode, generate, stream.
  auto ids = tokenizer->encode(prompt);
  if (!ids) return die(ids.error().message);
  std::printf("%s", prompt.c_str());
  auto stats = decode::generate(*decoder, *sampler, *tokenizer, *ids, gopts, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;  // false would stop generation here
  });
  if (!stats) return die(stats.error().message);
  std::printf("\n");
  std::fprintf(stderr, "%zu tokens, first after %.1f ms, then %.1f tok/s (stop: %s)\n", stats->new_tokens,
               stats->time_to_first_token_s * 1e3, stats->decode_tok_s(), decode::to_string(stats->stop));
  return 0;
}
