// SPDX-License-Identifier: Apache-2.0
// Embedding an edgellm model: load a Hugging Face checkpoint directory (Llama, Qwen2, Qwen3 or
// Mistral; AutoAWQ int4 or fp16/bf16, quantised to int4 at load) by mmap, then prefill a prompt of
// token ids with one batched forward and decode greedily, one token per forward. This is the layer
// below the session facade (edgellm/session.hpp, examples/generate_text.cpp): a model::Transformer
// driven by hand, for apps that bring their own decoding loop.
//
//   edgellm-example-run-model [DIR] [N]     (DIR defaults to the committed test fixture)
#include <edgellm/edgellm.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  using namespace edgellm;
#ifdef EDGELLM_SOURCE_DIR
  std::string dir = std::string(EDGELLM_SOURCE_DIR) + "/tests/data/model/qwen2-awq-gemm";
#else
  std::string dir = "tests/data/model/qwen2-awq-gemm";
#endif
  if (argc > 1) dir = argv[1];
  const std::size_t n_new = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 16;

  // 1. Weights: loaded once, read-only, shareable by any number of sessions and threads.
  auto weights = model::load_weights(dir);
  if (!weights) return std::fprintf(stderr, "%s\n", weights.error().message.c_str()), 1;
  const auto& cfg = (*weights)->config;
  std::printf("%s: %zu layers, hidden %zu, vocab %zu, %.1f MB of weights in memory\n",
              dir.c_str(), cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size,
              static_cast<double>((*weights)->owned_bytes()) / 1e6);

  // 2. A session: its own KV cache (fp32 here; fp16 via cache::KVCacheF16) on the app's threads.
  auto pool = ThreadPool::create(2);
  if (!pool) return std::fprintf(stderr, "%s\n", pool.error().message.c_str()), 1;
  model::TransformerOptions opts;
  opts.pool = pool->get();
  opts.context_size = 256;
  auto session = model::Transformer<cache::KVCacheF32>::create(*weights, opts);
  if (!session) return std::fprintf(stderr, "%s\n", session.error().message.c_str()), 1;

  // 3. Prefill (one GEMM per weight matrix over all prompt tokens), then greedy decode (GEMV).
  std::vector<std::int32_t> tokens = {1, 17, 42, 7, 99};
  std::vector<float> logits(session->vocab_size());
  if (auto st = session->forward(tokens, decode::LogitsMode::last, logits); !st)
    return std::fprintf(stderr, "%s\n", st.error().message.c_str()), 1;
  for (std::size_t i = 0; i < n_new; ++i) {
    const auto next = static_cast<std::int32_t>(
        std::max_element(logits.begin(), logits.end()) - logits.begin());
    tokens.push_back(next);
    if (auto st = session->forward({&tokens.back(), 1}, decode::LogitsMode::last, logits); !st)
      return std::fprintf(stderr, "%s\n", st.error().message.c_str()), 1;
  }
  std::printf("tokens:");
  for (auto t : tokens) std::printf(" %d", t);
  std::printf("\nposition %zu of %zu\n", session->position(), session->context_size());

  // 4. Roll back (e.g. after a rejected speculation) and bad input: errors, never crashes.
  if (auto st = session->truncate(5); !st)
    return std::fprintf(stderr, "%s\n", st.error().message.c_str()), 1;
  const std::int32_t bad = static_cast<std::int32_t>(session->vocab_size());
  auto st = session->forward({&bad, 1}, decode::LogitsMode::last, logits);
  std::printf("token id %d -> %s\n", bad, st ? "ok?!" : st.error().message.c_str());
  return 0;
}
