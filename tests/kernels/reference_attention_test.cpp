// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/kernels/reference_attention.hpp's oracle, which the attention kernels are
// tested against: cases whose result is known in closed form, the GQA head mapping and
// causality (the twin, attention_stored, is checked against it in quantized_kv_cache_test.cpp).
#include "edgellm/kernels/reference_attention.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <vector>

namespace test_kernels_reference_attention {

namespace {
using edgellm::kernels::reference::attention;
}  // namespace

TEST_CASE("reference attention: one position returns its value, equal keys the mean",
          "[kernels]") {
  const std::size_t hd = 4;
  const std::vector<float> q = {0.5f, -1.0f, 2.0f, 0.25f};
  {
    const std::vector<float> k = {1.0f, 2.0f, 3.0f, 4.0f}, v = {-1.0f, 0.5f, 7.0f, 3.0f};
    std::vector<float> out(hd);
    attention(q.data(), 1, 0, 1, 1, hd, 1, k.data(), v.data(), out.data());
    CHECK(out == v);
  }
  {
    // Three positions with equal keys: softmax weights 1/3 each.
    const std::vector<float> k = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const std::vector<float> v = {3, 0, 6, -3, 0, 3, 0, 3, 0, 0, 3, 9};
    std::vector<float> out(hd);
    attention(q.data(), 1, 2, 1, 1, hd, 3, k.data(), v.data(), out.data());
    for (std::size_t c = 0; c < hd; ++c)
      CHECK(out[c] == Approx((v[c] + v[hd + c] + v[2 * hd + c]) / 3.0).margin(1e-6));
  }
}

TEST_CASE("reference attention: softmax of the scaled scores, GQA heads, causal", "[kernels]") {
  // head_dim 1, two kv heads, four query heads (group 2), positions 0..2.
  const std::size_t hd = 1, heads = 4, kv_heads = 2, len = 3;
  const std::vector<float> k = {1.0f, 2.0f, 3.0f, /* kv head 1 */ -1.0f, 0.0f, 1.0f};
  const std::vector<float> v = {10.0f, 20.0f, 30.0f, /* kv head 1 */ -5.0f, 5.0f, 15.0f};
  const std::vector<float> q = {1.0f, 0.5f, -1.0f, 2.0f};  // one query at position 1
  std::vector<float> out(heads);
  attention(q.data(), 1, 1, heads, kv_heads, hd, len, k.data(), v.data(), out.data());
  for (std::size_t h = 0; h < heads; ++h) {
    const std::size_t g = h / 2;  // kv head of query head h
    // Only positions 0 and 1 are visible from position 1; scale = 1 / sqrt(1).
    const double s0 = q[h] * k[g * len], s1 = q[h] * k[g * len + 1];
    const double w0 = std::exp(s0), w1 = std::exp(s1);
    const double expect = (w0 * v[g * len] + w1 * v[g * len + 1]) / (w0 + w1);
    CHECK(out[h] == Approx(expect).epsilon(1e-6));
  }
  // Changing position 2 (not visible) changes nothing.
  std::vector<float> v2 = v, out2(heads);
  v2[2] = 1e6f;
  v2[5] = -1e6f;
  attention(q.data(), 1, 1, heads, kv_heads, hd, len, k.data(), v2.data(), out2.data());
  CHECK(out2 == out);
}

}  // namespace test_kernels_reference_attention
