// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/backend.hpp: a whole model::Transformer on a Vulkan device
// (lavapipe in CI, validation on) against the CPU's exact path with the same KV type: logits
// of the test fixtures (Llama, Qwen2, Qwen3; AutoAWQ int4 and fp16 quantised at load) and
// greedy continuations of the bundled model; one submission per forward chunk; rollback;
// refusals that name what the device cannot run.
#include "edgellm/backend/vulkan/backend.hpp"

#include "backend/vulkan/test_device.hpp"
#include "edgellm/cache/dense_kv_cache.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/model/weights.hpp"
#include "model/model_test_support.hpp"
#include "support/prelude.hpp"
#include "support/test_env.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace test_backend_vulkan_backend {

namespace vk = edgellm::backend::vk;
using edgellm::model::LogitsMode;
using edgellm::model::Transformer;
using edgellm::model::TransformerOptions;
using edgellm::model::TransformerWeights;
using WeightsPtr = std::shared_ptr<const TransformerWeights>;
using VkModel = Transformer<vk::KVCache, vk::Backend>;

namespace {

WeightsPtr load(const std::string& dir) {
  auto w = edgellm::model::load_weights(dir, {});
  INFO(dir << ": " << (w ? std::string() : w.error().message));
  REQUIRE(w);
  return *w;
}

edgellm::result<VkModel> make_vk(vk::Device& dev, const WeightsPtr& w, vk::KvFormat format,
                        std::size_t ctx, std::size_t max_batch) {
  const auto& c = w->config;
  TransformerOptions o;
  o.context_size = ctx;
  o.max_batch = max_batch;
  auto cache = vk::KVCache::create(dev, format, c.num_hidden_layers, c.num_key_value_heads,
                                   c.head_dim, ctx);
  if (!cache) return cache.error();
  auto b = vk::Backend::create(dev, VkModel::model_shape(c, max_batch));
  if (!b) return b.error();
  return VkModel::assemble(w, o, std::move(*cache), std::move(*b));
}

template <class Cache>
Transformer<Cache> make_cpu(const WeightsPtr& w, std::size_t ctx, std::size_t max_batch) {
  TransformerOptions o;
  o.context_size = ctx;
  o.max_batch = max_batch;
  o.path = edgellm::kernels::MatmulPath::exact;
  auto t = Transformer<Cache>::create(w, o);
  INFO((t ? std::string() : t.error().message));
  REQUIRE(t);
  return std::move(*t);
}

// Every position's logits of `ids`, [ids.size()][V].
template <class M>
std::vector<float> all_logits(M& m, const std::vector<std::int32_t>& ids) {
  std::vector<float> out(ids.size() * m.vocab_size());
  const auto st = m.forward(ids, LogitsMode::all, out);
  INFO((st ? std::string() : st.error().message));
  REQUIRE(st);
  return out;
}

// Largest |a - b| of any position relative to that position's logit range in b.
double worst_relative(const std::vector<float>& a, const std::vector<float>& b, std::size_t V) {
  double worst = 0;
  for (std::size_t p = 0; p < a.size() / V; ++p) {
    const std::vector<float> row(b.begin() + static_cast<std::ptrdiff_t>(p * V),
                                 b.begin() + static_cast<std::ptrdiff_t>((p + 1) * V));
    worst = std::max(worst, double{edgellm::test::max_abs_diff(a.data() + p * V, row.data(), V)} /
                                edgellm::test::logit_range(row));
  }
  return worst;
}

}  // namespace

TEST_CASE("a Transformer on Vulkan matches the CPU's exact path on the fixtures",
          "[vulkan][vk_backend]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    for (const char* name : {"llama-awq-gemm", "llama-awq-gemv", "qwen2-awq-gemm",
                             "qwen3-awq-gemm", "llama-fp16", "qwen2-fp16", "qwen3-fp16"}) {
      INFO(name);
      const WeightsPtr w = load(edgellm::test::model_fixture(name));
      const auto e = edgellm::test::load_expected(edgellm::test::model_fixture(name));
      const std::size_t V = w->config.vocab_size;
      // max_batch 4: the prompt runs as several chunks, the GEMM on most and a GEMV on the last.
      for (const vk::KvFormat format : {vk::KvFormat::int8, vk::KvFormat::f16}) {
        INFO(vk::kv_format_name(format));
        auto model = make_vk(*dev, w, format, 64, 4);
        INFO((model ? std::string() : model.error().message));
        REQUIRE(model);
        const auto got = all_logits(*model, e.ids);
        std::vector<float> want;
        if (format == vk::KvFormat::int8) {
          auto cpu = make_cpu<edgellm::cache::KVCacheQ8>(w, 64, 4);
          want = all_logits(cpu, e.ids);
        } else {
          auto cpu = make_cpu<edgellm::cache::KVCacheF16>(w, 64, 4);
          want = all_logits(cpu, e.ids);
        }
        // The bar: within 1e-2 of each position's logit range. fp32 sums in another
        // order (and int8 KV rows quantised from slightly different keys) differ by far less.
        CHECK(worst_relative(got, want, V) <= 1e-2);
        CHECK(model->backend().submits() == (e.ids.size() + 3) / 4);
      }
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("Vulkan decode: one submission a token, rollback, and the bundled model's greedy text",
          "[vulkan][vk_backend]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    const WeightsPtr w = load(edgellm::test::source_dir() + "/models/kjv-target-awq");
    const std::size_t V = w->config.vocab_size;
    auto model = make_vk(*dev, w, vk::KvFormat::f16, 160, 16);
    INFO((model ? std::string() : model.error().message));
    REQUIRE(model);
    auto cpu = make_cpu<edgellm::cache::KVCacheF16>(w, 160, 16);
    // Four prompts of token ids (the tokenizer is not under test here).
    const std::vector<std::vector<std::int32_t>> prompts = {
        {5, 17, 230, 41, 9, 88, 1021, 3},
        {300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317},
        {2000, 14},
        {77, 901, 1500, 33, 64, 12, 400, 7, 7, 7, 250, 3999}};
    std::size_t parted = 0;
    for (const auto& prompt : prompts) {
      REQUIRE(model->truncate(0));
      REQUIRE(cpu.truncate(0));
      std::vector<float> a(V), b(V);
      REQUIRE(model->forward(prompt, LogitsMode::last, a));
      REQUIRE(cpu.forward(prompt, LogitsMode::last, b));
      // 64 greedy tokens (16 at EDGELLM_TEST_SCALE=small: ASan), each a single-token forward on
      // both: the same ids until the top two CPU logits come within the tolerance (then the
      // continuations may part legitimately).
      const int steps = edgellm::test::scaled(64, 16);
      for (int step = 0; step < steps; ++step) {
        const std::int32_t next_vk = edgellm::test::argmax(a.data(), V);
        const std::int32_t next = edgellm::test::argmax(b.data(), V);
        if (next_vk != next) {
          std::vector<float> sorted(b);
          std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
          INFO("step " << step << ": vulkan " << next_vk << ", cpu " << next);
          CHECK(sorted[0] - sorted[1] <= 1e-2 * edgellm::test::logit_range(b));
          ++parted;
          break;
        }
        const std::size_t submits = model->backend().submits();
        REQUIRE(model->forward(std::span(&next, 1), LogitsMode::last, a));
        CHECK(model->backend().submits() == submits + 1);  // a decode step is one submission
        REQUIRE(cpu.forward(std::span(&next, 1), LogitsMode::last, b));
      }
    }
    CHECK(parted <= 1);
    // Rollback: truncating to the prompt and forwarding the same token gives the same logits.
    REQUIRE(model->truncate(0));
    const std::vector<std::int32_t> ids = {5, 17, 230, 41, 9};
    std::vector<float> first(V), again(V);
    REQUIRE(model->forward(ids, LogitsMode::last, first));
    const std::int32_t t = 42;
    REQUIRE(model->forward(std::span(&t, 1), LogitsMode::last, first));
    REQUIRE(model->truncate(ids.size()));
    REQUIRE(model->forward(std::span(&t, 1), LogitsMode::last, again));
    CHECK(first == again);
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("the Vulkan backend refuses what it cannot run, by name", "[vulkan][vk_backend]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    // A bf16 lm_head (the llama-bf16 fixture stores it so) has no shader.
    const WeightsPtr bf16 = load(edgellm::test::model_fixture("llama-bf16"));
    auto m1 = make_vk(*dev, bf16, vk::KvFormat::int8, 16, 2);
    REQUIRE_FALSE(m1);
    CHECK(m1.error().code == errc::unsupported);
    CHECK_THAT(m1.error().message, Contains("BF16") && Contains("--backend cpu"));
    // An int8 lm_head (the CLI's default) neither: the message says what to choose instead.
    edgellm::model::LoadOptions lo;
    lo.lm_head = edgellm::model::LmHeadFormat::int8;
    auto int8 = edgellm::model::load_weights(edgellm::test::model_fixture("qwen2-awq-gemm"), lo);
    REQUIRE(int8);
    auto m2 = make_vk(*dev, *int8, vk::KvFormat::int8, 16, 2);
    REQUIRE_FALSE(m2);
    CHECK_THAT(m2.error().message, Contains("int8") && Contains("--lm-head f16"));
    // A backend for another shape than the cache's model is refused by assemble().
    const WeightsPtr w = load(edgellm::test::model_fixture("qwen2-awq-gemm"));
    auto cache = vk::KVCache::create(*dev, vk::KvFormat::int8, 1, w->config.num_key_value_heads,
                                     w->config.head_dim, 16);
    auto b = vk::Backend::create(*dev, VkModel::model_shape(w->config, 2));
    REQUIRE((cache && b));
    TransformerOptions o;
    o.max_batch = 2;
    auto m3 = VkModel::assemble(w, o, std::move(*cache), std::move(*b));
    REQUIRE_FALSE(m3);
    CHECK(m3.error().code == errc::shape_mismatch);
    // An out-of-vocabulary id is refused before anything is recorded.
    auto ok = make_vk(*dev, w, vk::KvFormat::int8, 16, 2);
    REQUIRE(ok);
    std::vector<float> logits(ok->vocab_size());
    const std::int32_t bad = static_cast<std::int32_t>(ok->vocab_size());
    CHECK_FALSE(ok->forward(std::span(&bad, 1), LogitsMode::last, logits));
    CHECK(ok->position() == 0);
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_backend
