// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/kernels/attention.hpp: the scheduling helpers, the tiled layout of a layer
// view and the vector exp the softmax uses (the kernels themselves are tested through the caches
// that run them against reference_attention.hpp's twin: dense_kv_cache_test.cpp,
// quantized_kv_cache_test.cpp).
#include "edgellm/kernels/attention.hpp"

#include "support/test_env.hpp"
#include "support/test_util.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>

namespace test_kernels_attention {

using namespace edgellm::kernels;

TEST_CASE("attention_macs counts the causal positions of each query", "[kernels]") {
  // One query at position 0 sees 1 position; three queries at 4, 5, 6 see 5 + 6 + 7.
  CHECK(attention_macs(1, 0, 1, 1) == 2);
  CHECK(attention_macs(3, 4, 2, 8) == (5 + 6 + 7) * 2 * 8 * 2);
  static_assert(attention_macs(1, 99, 32, 64) == 100 * 32 * 64 * 2);
}

TEST_CASE("attention_worth_forking: short decode steps stay on the caller", "[kernels]") {
  // TinyLlama's shape (32 heads x 64): a decode step forks from position 256 on.
  CHECK_FALSE(attention_worth_forking(1, 254, 32, 64));
  CHECK(attention_worth_forking(1, 255, 32, 64));
  // A prefill chunk of 128 tokens forks from the start.
  CHECK(attention_worth_forking(128, 0, 32, 64));
  CHECK(attention_macs(1, 255, 32, 64) == kAttentionForkMinMacs);
}

TEST_CASE("KvLayerView: whole key tiles, each stored transposed", "[kernels]") {
  static_assert(attention_slots(1) == kAttentionTile);
  static_assert(attention_slots(kAttentionTile) == kAttentionTile);
  static_assert(attention_slots(kAttentionTile + 1) == 2 * kAttentionTile);
  const std::size_t hd = 8;
  // Position j, coordinate c of a head: tile j / 16, row c of the tile, lane j % 16.
  CHECK(KvLayerView<float>::k_index(0, 0, hd) == 0);
  CHECK(KvLayerView<float>::k_index(1, 0, hd) == 1);
  CHECK(KvLayerView<float>::k_index(0, 1, hd) == kAttentionTile);
  CHECK(KvLayerView<float>::k_index(kAttentionTile + 2, 3, hd) ==
        kAttentionTile * hd + 3 * kAttentionTile + 2);
}

TEMPLATE_LIST_TEST_CASE("the kernels' exp is within 4u of exp on the softmax range", "[kernels]",
                        edgellm::test::TestArchs) {
  // The attention bound assumes a relative error <= 4u of the vector exp on [-88, 0] (its
  // arguments are s - max s <= 0; below -87.3 it returns 0, far below any tolerance).
  constexpr double kU = 0x1p-24;  // fp32 unit roundoff
  using B = xsimd::batch<float, TestType>;
  constexpr std::size_t W = B::size;
  auto rng = edgellm::test::make_rng(5);
  std::uniform_real_distribution<float> dist(-87.0f, 0.0f);
  const std::size_t n = edgellm::test::scaled<std::size_t>(200000, 20000);
  double worst = 0.0;
  alignas(64) float x[W], y[W];
  for (std::size_t i = 0; i < n; i += W) {
    for (std::size_t l = 0; l < W; ++l)
      x[l] = i == 0 && l < 3 ? -static_cast<float>(l) * 1e-7f : dist(rng);
    detail::exp_f32<TestType>(B::load_aligned(x)).store_aligned(y);
    for (std::size_t l = 0; l < W; ++l) {
      const double e = std::exp(static_cast<double>(x[l]));
      worst = std::max(worst, std::fabs(y[l] - e) / e);
    }
  }
  INFO(TestType::name() << ": worst relative error " << worst / kU << " u");
  CHECK(worst <= 4.0 * kU);
}

}  // namespace test_kernels_attention
