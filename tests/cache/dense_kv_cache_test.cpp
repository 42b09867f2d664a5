// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/cache/dense_kv_cache.hpp (fp32 and fp16 storage): attention against the
// double-precision oracle, storage, truncation, ordering and capacity errors, and thread-count /
// batch invariance. The int8 cache and prefix blobs of every type: quantized_kv_cache_test.cpp.
#include "edgellm/cache/dense_kv_cache.hpp"

#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/reference_attention.hpp"
#include "support/test_util.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace test_cache_dense_kv_cache {

namespace {

using Catch::Matchers::Contains;
using edgellm::errc;
using edgellm::ThreadPool;
using edgellm::cache::KVCacheF16;
using edgellm::cache::KVCacheF32;

static_assert(edgellm::cache::PrefixKVCache<KVCacheF32>);
static_assert(edgellm::cache::PrefixKVCache<KVCacheF16>);

struct Shape {
  std::size_t kv_heads, group, head_dim, first_pos, n_q;
};

// What the cache stores for a value: exact for fp32, rounded once to fp16 for fp16.
template <class Cache>
float stored(float x) {
  if constexpr (std::is_same_v<Cache, KVCacheF16>) {
    return edgellm::kernels::f16_to_f32(edgellm::kernels::f32_to_f16(x));
  } else {
    return x;
  }
}

// Fills one layer with `len` random positions; returns K, V as the oracle wants them
// ([kv_heads][len][head_dim], values as stored).
template <class Cache>
void fill(Cache& c, std::size_t layer, std::size_t len, std::mt19937_64& rng,
          std::vector<float>& k_ref, std::vector<float>& v_ref, std::size_t chunk = 3) {
  const std::size_t kvh = c.kv_heads(), hd = c.head_dim(), row = kvh * hd;
  const auto k = edgellm::test::random_floats(rng, len * row, 1.5f);
  const auto v = edgellm::test::random_floats(rng, len * row, 1.0f);
  for (std::size_t p = 0; p < len; p += chunk) {
    const std::size_t n = std::min(chunk, len - p);
    REQUIRE(c.append(layer, p, n, std::span(k).subspan(p * row, n * row),
                     std::span(v).subspan(p * row, n * row)));
  }
  k_ref.assign(kvh * len * hd, 0.0f);
  v_ref.assign(kvh * len * hd, 0.0f);
  for (std::size_t p = 0; p < len; ++p)
    for (std::size_t h = 0; h < kvh; ++h)
      for (std::size_t d = 0; d < hd; ++d) {
        k_ref[(h * len + p) * hd + d] = stored<Cache>(k[p * row + h * hd + d]);
        v_ref[(h * len + p) * hd + d] = stored<Cache>(v[p * row + h * hd + d]);
      }
}

// The first-order bound of DenseKVCache's class comment, with a factor 2 of slack:
//   |out - ref| <= (2E + (2S + 2L + 2nb + 18) u) * max_j |v_jc|,
//   E = max_j (hd + 2) u scale sum_c |q_c k_jc|,  S = max_j s_j - min_j s_j,
//   L = min(p + 1, 256),  nb = p / 256 + 1
template <class Cache>
void check_against_oracle(const Cache& /*tag*/, const std::vector<float>& q,
                          const std::vector<float>& out, const Shape& s, std::size_t heads,
                          const std::vector<float>& k_ref, const std::vector<float>& v_ref,
                          std::size_t len) {
  const std::size_t hd = s.head_dim;
  std::vector<float> ref(out.size());
  edgellm::kernels::reference::attention(q.data(), s.n_q, s.first_pos, heads, s.kv_heads, hd,
                                         len, k_ref.data(), v_ref.data(), ref.data());
  const double u = std::ldexp(1.0, -24), scale = edgellm::kernels::attention_scale(hd);
  for (std::size_t i = 0; i < s.n_q; ++i) {
    const std::size_t pos = s.first_pos + i;
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t kvh = h / s.group;
      const float* qh = q.data() + (i * heads + h) * hd;
      double e = 0.0, smin = 1e300, smax = -1e300;
      std::vector<double> vmax(hd, 0.0);
      for (std::size_t j = 0; j <= pos; ++j) {
        double a = 0.0, d = 0.0;
        for (std::size_t c = 0; c < hd; ++c) {
          const double qk = static_cast<double>(qh[c]) * k_ref[(kvh * len + j) * hd + c];
          a += std::fabs(qk);
          d += qk;
          vmax[c] =
              std::max(vmax[c], std::fabs(static_cast<double>(v_ref[(kvh * len + j) * hd + c])));
        }
        e = std::max(e, static_cast<double>(hd + 2) * u * scale * a);
        smin = std::min(smin, d * scale);
        smax = std::max(smax, d * scale);
      }
      const double L = static_cast<double>(std::min<std::size_t>(pos + 1, 256));
      const double nb = static_cast<double>(pos / 256 + 1);
      for (std::size_t c = 0; c < hd; ++c) {
        const std::size_t at = (i * heads + h) * hd + c;
        const double tol =
            2.0 * (2.0 * e + (2.0 * (smax - smin) + 2.0 * L + 2.0 * nb + 18.0) * u) * vmax[c];
        INFO("query " << i << " head " << h << " dim " << c);
        REQUIRE(std::fabs(static_cast<double>(out[at]) - ref[at]) <= tol);
      }
    }
  }
}

}  // namespace

TEMPLATE_TEST_CASE("KV cache attention matches the oracle", "[cache]", KVCacheF32, KVCacheF16) {
  const Shape s = GENERATE(Shape{1, 1, 8, 0, 1},     // one head, first token
                           Shape{2, 2, 16, 0, 7},    // GQA 2, prefill from 0
                           Shape{2, 3, 12, 5, 4},    // GQA 3, head_dim not a multiple of 8
                           Shape{4, 1, 32, 20, 1},   // MHA, decode step deep in the cache
                           Shape{1, 4, 64, 9, 11},   // MQA, prefill after a prefix
                           Shape{2, 7, 24, 300, 3},  // GQA 7, two chunks of 256 positions
                           Shape{1, 2, 16, 520, 1}); // decode over three chunks
  const std::size_t heads = s.kv_heads * s.group, len = s.first_pos + s.n_q, layers = 2;
  auto rng = edgellm::test::make_rng(s.head_dim * 131 + s.first_pos);
  auto c = TestType::create(layers, s.kv_heads, s.head_dim, len + 3);
  REQUIRE(c);
  std::vector<float> k0, v0, k1, v1;
  fill(*c, 0, len, rng, k0, v0);
  fill(*c, 1, len, rng, k1, v1, 1);
  CHECK(c->length() == len);
  CHECK(c->layer_length(1) == len);

  const auto q = edgellm::test::random_floats(rng, s.n_q * heads * s.head_dim, 1.5f);
  std::vector<float> out(q.size());
  REQUIRE(c->attend(1, q, s.n_q, s.first_pos, heads, out, nullptr));
  check_against_oracle(*c, q, out, s, heads, k1, v1, len);
  REQUIRE(c->attend(0, q, s.n_q, s.first_pos, heads, out, nullptr));
  check_against_oracle(*c, q, out, s, heads, k0, v0, len);

  SECTION("bit-identical for every thread count") {
    for (std::size_t threads : {1, 2, 3}) {
      auto pool = ThreadPool::create(threads);
      REQUIRE(pool);
      std::vector<float> par(out.size());
      REQUIRE(c->attend(0, q, s.n_q, s.first_pos, heads, par, pool->get()));
      REQUIRE(par == out);
    }
  }
  SECTION("a query gives the same bits alone as in a batch") {
    const std::size_t row = heads * s.head_dim;
    for (std::size_t i = 0; i < s.n_q; ++i) {
      std::vector<float> one(row);
      REQUIRE(c->attend(0, std::span(q).subspan(i * row, row), 1, s.first_pos + i, heads, one,
                        nullptr));
      REQUIRE(
          std::equal(one.begin(), one.end(), out.begin() + static_cast<std::ptrdiff_t>(i * row)));
    }
  }
}

TEMPLATE_TEST_CASE("KV cache: truncate then append equals a fresh append", "[cache]", KVCacheF32,
                   KVCacheF16) {
  const std::size_t kvh = 2, hd = 8, heads = 4, cap = 12, row = kvh * hd;
  auto rng = edgellm::test::make_rng(7);
  const auto k = edgellm::test::random_floats(rng, cap * row),
             v = edgellm::test::random_floats(rng, cap * row);
  const auto k2 = edgellm::test::random_floats(rng, cap * row),
             v2 = edgellm::test::random_floats(rng, cap * row);
  auto a = TestType::create(1, kvh, hd, cap), b = TestType::create(1, kvh, hd, cap);
  REQUIRE((a && b));
  // a: 10 positions of (k, v), truncated to 4, then 6 positions of (k2, v2).
  REQUIRE(a->append(0, 0, 10, std::span(k).first(10 * row), std::span(v).first(10 * row)));
  REQUIRE(a->truncate(4));
  CHECK(a->length() == 4);
  REQUIRE(a->append(0, 4, 6, std::span(k2).first(6 * row), std::span(v2).first(6 * row)));
  // b: the same 4 + 6 positions appended fresh.
  REQUIRE(b->append(0, 0, 4, std::span(k).first(4 * row), std::span(v).first(4 * row)));
  REQUIRE(b->append(0, 4, 6, std::span(k2).first(6 * row), std::span(v2).first(6 * row)));
  const auto q = edgellm::test::random_floats(rng, 10 * heads * hd);
  std::vector<float> oa(q.size()), ob(q.size());
  REQUIRE(a->attend(0, q, 10, 0, heads, oa, nullptr));
  REQUIRE(b->attend(0, q, 10, 0, heads, ob, nullptr));
  CHECK(oa == ob);
  // Positions are allocated in tiles of 16.
  CHECK(a->bytes() == 2 * 16 * row * sizeof(typename TestType::element));
}

TEST_CASE("KVCacheF16 stores half the bytes of KVCacheF32 and rounds to fp16", "[cache]") {
  auto a = KVCacheF32::create(3, 2, 64, 100);
  auto b = KVCacheF16::create(3, 2, 64, 100);
  REQUIRE((a && b));
  CHECK(a->bytes() == 2 * 3 * 2 * 64 * 112 * 4);  // capacity rounded up to 16 positions
  CHECK(b->bytes() * 2 == a->bytes());
  CHECK(a->capacity() == 100);
  CHECK(a->layers() == 3);
  CHECK(a->kv_heads() == 2);
  CHECK(a->head_dim() == 64);
}

TEST_CASE("KV cache errors", "[cache]") {
  const std::size_t kvh = 2, hd = 4, row = kvh * hd;
  std::vector<float> kv(5 * row, 0.5f), q(5 * 4 * hd, 0.1f), out(5 * 4 * hd);

  SECTION("create") {
    CHECK_FALSE(KVCacheF32::create(0, 1, 1, 1));
    CHECK_FALSE(KVCacheF32::create(1, 0, 1, 1));
    CHECK_FALSE(KVCacheF32::create(1, 1, 0, 1));
    auto e = KVCacheF16::create(1, 1, 1, 0);
    REQUIRE_FALSE(e);
    CHECK_THAT(e.error().message, Contains("[KVCacheF16::create] capacity"));
    auto huge = KVCacheF32::create(1 << 20, 1 << 20, 1 << 20, 1 << 20);
    REQUIRE_FALSE(huge);
    CHECK(huge.error().code == errc::capacity_exceeded);
  }
  auto c = KVCacheF32::create(2, kvh, hd, 4);
  REQUIRE(c);
  SECTION("capacity") {
    REQUIRE(c->append(0, 0, 4, std::span(kv).first(4 * row), std::span(kv).first(4 * row)));
    auto e = c->append(0, 4, 1, std::span(kv).first(row), std::span(kv).first(row));
    REQUIRE_FALSE(e);
    CHECK(e.error().code == errc::capacity_exceeded);
    CHECK(e.error().message == "[KVCacheF32::append] position 4 >= capacity 4");
    auto e2 = c->append(1, 0, 5, std::span(kv).first(5 * row), std::span(kv).first(5 * row));
    REQUIRE_FALSE(e2);
    CHECK(e2.error().message == "[KVCacheF32::append] position 4 >= capacity 4");
    CHECK(c->layer_length(1) == 0);
  }
  SECTION("append out of order, bad layer, bad sizes") {
    auto e = c->append(0, 1, 1, std::span(kv).first(row), std::span(kv).first(row));
    REQUIRE_FALSE(e);
    CHECK_THAT(e.error().message, Contains("position 1 but the layer holds 0 positions"));
    CHECK_FALSE(c->append(2, 0, 1, std::span(kv).first(row), std::span(kv).first(row)));
    auto s = c->append(0, 0, 1, std::span(kv).first(row - 1), std::span(kv).first(row));
    REQUIRE_FALSE(s);
    CHECK(s.error().code == errc::shape_mismatch);
    CHECK_FALSE(c->append(0, 0, 0, {}, {}));
    CHECK(c->length() == 0);
  }
  SECTION("attend to positions not cached, bad heads, bad sizes") {
    REQUIRE(c->append(0, 0, 2, std::span(kv).first(2 * row), std::span(kv).first(2 * row)));
    const std::size_t sz = 4 * hd;
    auto e = c->attend(0, std::span(q).first(sz), 1, 2, 4, std::span(out).first(sz), nullptr);
    REQUIRE_FALSE(e);
    CHECK_THAT(e.error().message, Contains("only 2 positions are cached"));
    CHECK_FALSE(c->attend(1, std::span(q).first(sz), 1, 0, 4, std::span(out).first(sz), nullptr));
    CHECK_FALSE(
        c->attend(0, std::span(q).first(3 * hd), 1, 0, 3, std::span(out).first(3 * hd), nullptr));
    CHECK_FALSE(
        c->attend(0, std::span(q).first(sz - 1), 1, 0, 4, std::span(out).first(sz), nullptr));
    CHECK_FALSE(c->attend(5, std::span(q).first(sz), 1, 0, 4, std::span(out).first(sz), nullptr));
    CHECK(c->attend(0, std::span(q).first(2 * sz), 2, 0, 4, std::span(out).first(2 * sz), nullptr));
  }
  SECTION("truncate cannot grow the cache") {
    REQUIRE(c->append(0, 0, 2, std::span(kv).first(2 * row), std::span(kv).first(2 * row)));
    REQUIRE(c->append(1, 0, 1, std::span(kv).first(row), std::span(kv).first(row)));
    CHECK(c->length() == 1);  // layers are filled one after another; length() is the minimum
    auto e = c->truncate(2);
    REQUIRE_FALSE(e);
    CHECK(e.error().code == errc::out_of_range);
    REQUIRE(c->truncate(1));
    CHECK(c->layer_length(0) == 1);
    REQUIRE(c->truncate(0));
    CHECK(c->length() == 0);
  }
}

TEST_CASE("KV cache: softmax is stable for large scores", "[cache]") {
  // Scores around 1e4 would overflow exp without the max subtraction.
  const std::size_t hd = 8, len = 3;
  auto c = KVCacheF32::create(1, 1, hd, len);
  REQUIRE(c);
  std::vector<float> k(len * hd, 100.0f), v(len * hd);
  for (std::size_t j = 0; j < len; ++j)
    for (std::size_t d = 0; d < hd; ++d) v[j * hd + d] = static_cast<float>(j + 1);
  k[0] = 90.0f;  // position 0 scores lower
  REQUIRE(c->append(0, 0, len, k, v));
  std::vector<float> q(hd, 50.0f), out(hd);
  REQUIRE(c->attend(0, q, 1, len - 1, 1, out, nullptr));
  for (float o : out) {
    REQUIRE(std::isfinite(o));
    CHECK(o == Approx(2.5f).epsilon(1e-6));  // positions 1 and 2 tie, position 0 is ~e^-176
  }
}

}  // namespace test_cache_dense_kv_cache
