// SPDX-License-Identifier: Apache-2.0
// The KV cache is a template parameter of the model: int8 (KVCacheQ8, about half the bytes of
// fp16, attention computed on the int8 codes), fp16 or fp32. Rolling back is O(1), and the
// state after a prompt prefix can be saved (in memory or to a file) and restored, so a long
// system prompt is prefilled once.
//
//   edgellm-example-kv-cache [DIR]      (DIR defaults to the bundled KJV model)
#include <edgellm/edgellm.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  using namespace edgellm;
  const std::string dir = argc > 1 ? argv[1] : "models/kjv-target-awq";
  const auto die = [](const std::string& msg) { return std::fprintf(stderr, "%s\n", msg.c_str()), 1; };
  auto weights = model::load_weights(dir);
  if (!weights) return die(weights.error().message);
  auto tokenizer = model::Tokenizer::load(dir);
  if (!tokenizer) return die(tokenizer.error().message);

  // 1. Memory: the same context in each cache type.
  auto q8 = model::Transformer<cache::KVCacheQ8>::create(*weights, {.context_size = 2048});
  auto f16 = model::Transformer<cache::KVCacheF16>::create(*weights, {.context_size = 2048});
  if (!q8) return die(q8.error().message);
  if (!f16) return die(f16.error().message);
  std::printf("KV cache for 2048 tokens: int8 %.2f MB, fp16 %.2f MB\n", q8->cache().bytes() / 1e6,
              f16->cache().bytes() / 1e6);

  // 2. A system prompt, prefilled once; its state saved as a prompt cache (also to a file).
  auto system = tokenizer->encode("In the beginning God created the heaven and the earth.");
  auto user = tokenizer->encode(" And God said");
  if (!system) return die(system.error().message);
  if (!user) return die(user.error().message);
  std::vector<float> logits(q8->vocab_size());
  if (auto st = q8->forward(*system, decode::LogitsMode::last, logits); !st) return die(st.error().message);
  decode::PromptCache saved;
  if (auto st = decode::save_prompt_cache(*q8, *system, saved); !st) return die(st.error().message);
  if (auto st = decode::write_prompt_cache("/tmp/edgellm-example.prompt", saved); !st)
    return die(st.error().message);

  // 3. A later request: restore (instead of prefilling), then run only the user's tokens.
  auto restored = decode::read_prompt_cache("/tmp/edgellm-example.prompt");
  if (!restored) return die(restored.error().message);
  if (auto st = decode::restore_prompt_cache(*q8, *restored); !st) return die(st.error().message);
  if (auto st = q8->forward(*user, decode::LogitsMode::last, logits); !st) return die(st.error().message);
  std::printf("restored %zu tokens, position now %zu\n", restored->tokens.size(), q8->position());

  // 4. Roll back to the system prompt (O(1)); state from another model or a corrupted file is
  // refused with an error, and the cache stays usable.
  if (auto st = q8->truncate(system->size()); !st) return die(st.error().message);
  auto other = model::Transformer<cache::KVCacheF16>::create(*weights, {.context_size = 2048});
  if (!other) return die(other.error().message);
  auto st = decode::restore_prompt_cache(*other, saved);
  std::printf("int8 state into an fp16 cache: %s\n", st ? "accepted?!" : st.error().message.c_str());
  return 0;
}
