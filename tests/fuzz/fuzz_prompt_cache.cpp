// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: prompt-cache files (decode::read_prompt_cache, restore_prompt_cache into a
// tiny model, then one forward step). The model: tests/data/model/llama-awq-gemm (2 layers,
// hidden 64), context 16.
// Input: byte 0 = options, the rest = the file. Options: bits 0-1 the KV cache type (int8, f16,
// f32, int8); bit 2 rewrites the token-id checksum and bit 3 the state blob's payload size and
// checksum to match the bytes, so mutations get past the checksums to the fields behind them.
// Properties: an error names the file (read) or the function (restore) and leaves the model
// unchanged; a restored model holds exactly the cache's tokens and runs one more token.
// Seeds (EDGELLM_FUZZ_WRITE_SEEDS=DIR): caches saved by the model after 3 tokens, each KV type.
#include "edgellm/cache/prefix_blob.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/decode/prompt_cache.hpp"
#include "edgellm/detail/bytes.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/model/weights.hpp"
#include "fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

using WeightsPtr = std::shared_ptr<const edgellm::model::TransformerWeights>;
constexpr std::size_t kContext = 16;

const WeightsPtr& weights() {
  static const WeightsPtr w = [] {
    auto r = edgellm::model::load_weights(edgellm::fuzz::data_path("model/llama-awq-gemm"), {});
    EDGELLM_FUZZ_CHECK(r.has_value());
    return *r;
  }();
  return w;
}

const edgellm::fuzz::ScratchDir& dir() {
  static const edgellm::fuzz::ScratchDir d("prompt-cache");
  return d;
}

// Rewrites the checksums the options ask for, where the bytes are long enough to hold them.
void repair(std::string& file, bool tokens, bool blob) {
  namespace b = edgellm::detail;
  auto* p = reinterpret_cast<std::byte*>(file.data());
  if (file.size() < 24) return;
  const std::uint64_t n = b::load_le64(p + 8);
  if (n > (file.size() - 24) / 4) return;
  if (tokens) {
    std::vector<std::int32_t> ids(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<std::int32_t>(b::load_le32(p + 16 + 4 * i));
    b::store_le64(p + 16 + 4 * n, edgellm::decode::detail::tokens_checksum(ids));
  }
  const std::size_t state = 24 + 4 * n;
  const std::size_t hb = edgellm::cache::kPrefixHeaderBytes;
  if (blob && file.size() - state >= hb + 8) {
    const std::span<std::byte> s(p + state, file.size() - state);
    b::store_le64(s.data() + 72, s.size() - hb - 8);
    edgellm::cache::seal_prefix_blob(s);
  }
}

template <class Cache>
void run(const std::string& path) {
  auto t = edgellm::model::Transformer<Cache>::create(weights(), {.context_size = kContext});
  EDGELLM_FUZZ_CHECK(t.has_value());
  auto c = edgellm::decode::read_prompt_cache(path);
  if (!c) {
    EDGELLM_FUZZ_CHECK(c.error().message.find(path) != std::string::npos);
    return;
  }
  if (auto st = edgellm::decode::restore_prompt_cache(*t, *c); !st) {
    EDGELLM_FUZZ_CHECK(t->position() == 0);  // unchanged on error
    return;
  }
  EDGELLM_FUZZ_CHECK(t->position() == c->tokens.size());
  std::vector<float> logits(t->vocab_size());
  const std::int32_t token = 1;
  const auto st = t->forward({&token, 1}, edgellm::model::LogitsMode::last, logits);
  EDGELLM_FUZZ_CHECK(st.has_value() == (c->tokens.size() < kContext));
}

template <class Cache>
void write_seeds(const std::string& out, unsigned kv) {
  auto t = edgellm::model::Transformer<Cache>::create(weights(), {.context_size = kContext});
  EDGELLM_FUZZ_CHECK(t.has_value());
  const std::int32_t ids[3] = {1, 42, 7};
  std::vector<float> logits(t->vocab_size());
  EDGELLM_FUZZ_CHECK(t->forward(ids, edgellm::model::LogitsMode::last, logits).has_value());
  edgellm::decode::PromptCache c;
  EDGELLM_FUZZ_CHECK(edgellm::decode::save_prompt_cache(*t, ids, c).has_value());
  const std::string path = dir().file("seed.bin");
  EDGELLM_FUZZ_CHECK(edgellm::decode::write_prompt_cache(path, c).has_value());
  const std::string bytes = edgellm::fuzz::read_file(path);
  edgellm::fuzz::write_seed(out, "kv" + std::to_string(kv), std::string(1, char(kv)) + bytes);
  edgellm::fuzz::write_seed(out, "kv" + std::to_string(kv) + "_repair",
                            std::string(1, char(kv | 12)) + bytes);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)weights();
  if (const std::string out = edgellm::fuzz::seed_dir(); !out.empty()) {
    write_seeds<edgellm::cache::KVCacheQ8>(out, 0);
    write_seeds<edgellm::cache::KVCacheF16>(out, 1);
    write_seeds<edgellm::cache::KVCacheF32>(out, 2);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  repair(file, (data[0] & 4) != 0, (data[0] & 8) != 0);
  const std::string path = dir().file("prompt.cache");
  edgellm::fuzz::write_file(path, file);
  switch (data[0] & 3) {
    case 1: run<edgellm::cache::KVCacheF16>(path); break;
    case 2: run<edgellm::cache::KVCacheF32>(path); break;
    default: run<edgellm::cache::KVCacheQ8>(path); break;
  }
  return 0;
}
