// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/cache/quantized_kv_cache.hpp and the attention kernels it runs
// (edgellm/kernels/attention.hpp): the int8 storage against an independent quantiser, memory, the
// xsimd kernels on every compiled architecture against the double-precision twin (within the
// bound derived in dense_kv_cache.hpp) and the twin against reference::attention, accuracy
// against fp32 storage, thread-count and batch invariance, truncation, errors, prefix blobs of
// every KV type (their files: prefix_blob_test.cpp), and the Transformer over the int8 cache
// (logits, the decode::Model contract, prefix reuse).
#include "edgellm/cache/quantized_kv_cache.hpp"

#include "decode/model_contract.hpp"
#include "edgellm/kernels/reference_attention.hpp"
#include "edgellm/model/transformer.hpp"
#include "model/model_test_support.hpp"
#include "support/temp_dir.hpp"
#include "support/test_env.hpp"
#include "support/test_util.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace test_cache_quantized_kv_cache {

namespace {

using Catch::Matchers::Contains;
using edgellm::errc;
using edgellm::ThreadPool;
using edgellm::cache::KVCacheF16;
using edgellm::cache::KVCacheF32;
using edgellm::cache::KVCacheQ4;
using edgellm::cache::KVCacheQ8;
using edgellm::cache::QuantizedKVCache;
using edgellm::kernels::KvLayerView;
namespace detail = edgellm::cache::detail;
namespace kref = edgellm::kernels::reference;

static_assert(edgellm::cache::KVCache<KVCacheQ8>);
static_assert(edgellm::cache::PrefixKVCache<KVCacheQ8>);
static_assert(edgellm::cache::KVCache<KVCacheQ4>);
static_assert(edgellm::cache::PrefixKVCache<KVCacheQ4>);
static_assert(edgellm::cache::PrefixKVCache<KVCacheF16>);
static_assert(edgellm::cache::PrefixKVCache<KVCacheF32>);
static_assert(std::is_same_v<QuantizedKVCache<>, KVCacheQ8>);
static_assert(std::is_same_v<QuantizedKVCache<detail::StoreF16>, KVCacheF16>);

constexpr double kU = 0x1p-24;  // fp32 unit roundoff

struct Shape {
  std::size_t kv_heads, group, head_dim, first_pos, n_q;
};

// Fills `layer` with len random positions appended `chunk` at a time; returns the fp32 inputs
// [len][kv_heads][head_dim] of keys and values.
template <class Cache>
std::pair<std::vector<float>, std::vector<float>> fill(Cache& c, std::size_t layer,
                                                       std::size_t len, std::mt19937_64& rng,
                                                       std::size_t chunk = 7, float k_std = 1.0f,
                                                       float v_std = 1.0f) {
  const std::size_t row = c.kv_heads() * c.head_dim();
  auto k = edgellm::test::random_floats(rng, len * row, k_std);
  auto v = edgellm::test::random_floats(rng, len * row, v_std);
  for (std::size_t p = 0; p < len; p += chunk) {
    const std::size_t n = std::min(chunk, len - p);
    REQUIRE(c.append(layer, p, n, std::span(k).subspan(p * row, n * row),
                     std::span(v).subspan(p * row, n * row)));
  }
  return {std::move(k), std::move(v)};
}

// The independent int8 quantiser the cache must match: amax / 127, nearbyint(x * 127 / amax).
float quantize_row(const float* x, std::size_t n, std::int8_t* code) {
  float amax = 0.0f;
  for (std::size_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  if (amax == 0.0f) {
    std::fill(code, code + n, std::int8_t{0});
    return 0.0f;
  }
  const float inv = 127.0f / amax;
  for (std::size_t i = 0; i < n; ++i)
    code[i] = static_cast<std::int8_t>(std::max(-127.0f, std::min(127.0f, std::nearbyint(x[i] * inv))));
  return amax / 127.0f;
}

// The stored (dequantised) keys and values of a layer as reference::attention wants them,
// [kv_heads][len][head_dim], rounded to fp32.
template <class Cache>
void stored_kv(const Cache& c, std::size_t layer, std::size_t len, std::vector<float>& k,
               std::vector<float>& v) {
  const auto view = c.layer_view(layer);
  const std::size_t hd = c.head_dim();
  k.assign(c.kv_heads() * len * hd, 0.0f);
  v.assign(k.size(), 0.0f);
  for (std::size_t g = 0; g < c.kv_heads(); ++g)
    for (std::size_t j = 0; j < len; ++j)
      for (std::size_t d = 0; d < hd; ++d) {
        k[(g * len + j) * hd + d] = static_cast<float>(kref::stored_key(view, g, j, d));
        v[(g * len + j) * hd + d] = static_cast<float>(kref::stored_value(view, g, j, d));
      }
}

// The bound of DenseKVCache's class comment for output (query i, head h, coordinate c), from
// the stored data in double: (2E + (2S + 2L + 2nb + 18) u) max_j |v_jc|.
template <class View>
double derived_bound(const View& kv, const float* q, std::size_t pos,
                     std::size_t g, std::size_t c) {
  const std::size_t hd = kv.head_dim;
  const double scale = edgellm::kernels::attention_scale(hd);
  double e = 0.0, smin = 1e300, smax = -1e300, vmax = 0.0;
  for (std::size_t j = 0; j <= pos; ++j) {
    double a = 0.0, d = 0.0;
    for (std::size_t x = 0; x < hd; ++x) {
      const double qk = static_cast<double>(q[x]) * kref::stored_key(kv, g, j, x);
      a += std::fabs(qk);
      d += qk;
    }
    e = std::max(e, static_cast<double>(hd + 2) * kU * scale * a);
    smin = std::min(smin, d * scale);
    smax = std::max(smax, d * scale);
    vmax = std::max(vmax, std::fabs(kref::stored_value(kv, g, j, c)));
  }
  constexpr std::size_t chunk = edgellm::kernels::kAttentionChunk;
  const double L = static_cast<double>(std::min<std::size_t>(pos + 1, chunk));
  const double nb = static_cast<double>(pos / chunk + 1);
  return (2.0 * e + (2.0 * (smax - smin) + 2.0 * L + 2.0 * nb + 18.0) * kU) * vmax;
}

// Runs attend<Arch> on a filled cache and checks it against the twin (factor 2 on the derived
// bound) and the twin against reference::attention on the dequantised data.
template <class Arch, class Cache>
void check_kernel(const Shape& s, std::uint64_t seed) {
  const std::size_t heads = s.kv_heads * s.group, len = s.first_pos + s.n_q, hd = s.head_dim;
  auto rng = edgellm::test::make_rng(seed);
  auto c = Cache::create(2, s.kv_heads, hd, len + 5);
  REQUIRE(c);
  fill(*c, 0, len, rng, 5);
  fill(*c, 1, len, rng, 64, 1.5f, 1.0f);
  const auto q = edgellm::test::random_floats(rng, s.n_q * heads * hd, 1.5f);
  for (std::size_t layer : {std::size_t{0}, std::size_t{1}}) {
    std::vector<float> out(q.size()), twin(q.size()), ref(q.size()), k, v;
    REQUIRE(c->template attend<Arch>(layer, q, s.n_q, s.first_pos, heads, out, nullptr));
    const auto view = c->layer_view(layer);
    kref::attention_stored(view, q.data(), s.n_q, s.first_pos, heads, twin.data());
    stored_kv(*c, layer, len, k, v);
    kref::attention(q.data(), s.n_q, s.first_pos, heads, s.kv_heads, hd, len, k.data(), v.data(),
                    ref.data());
    for (std::size_t i = 0; i < s.n_q; ++i) {
      for (std::size_t h = 0; h < heads; ++h) {
        const float* qh = q.data() + (i * heads + h) * hd;
        for (std::size_t d = 0; d < hd; ++d) {
          const std::size_t at = (i * heads + h) * hd + d;
          const double bound = derived_bound(view, qh, s.first_pos + i, h / s.group, d);
          INFO(Cache::type_name << " layer " << layer << " query " << i << " head " << h
                                << " dim " << d << ": " << out[at] << " vs twin " << twin[at]
                                << ", bound " << bound);
          REQUIRE(std::fabs(static_cast<double>(out[at]) - twin[at]) <= 2.0 * bound);
          // The twin is exact to double rounding; the reference differs from it only by the
          // fp32 rounding of the dequantised inputs and of both outputs (a few u of the
          // bound's terms).
          REQUIRE(std::fabs(static_cast<double>(ref[at]) - twin[at]) <= bound);
        }
      }
    }
  }
}

std::vector<Shape> kernel_shapes() {
  std::vector<Shape> s = {
      {1, 1, 8, 0, 1},     // one head, first token
      {2, 3, 12, 5, 4},    // head_dim not a multiple of any batch width
      {3, 5, 20, 17, 6},   // odd group (5 -> one padded piece of 8), prefill
      {2, 6, 24, 260, 3},  // group 6, across the first chunk boundary
      {1, 16, 16, 40, 2},  // group 16: two pieces of 8
      {2, 2, 36, 511, 2},  // last position of chunk 1, first of chunk 2
  };
  if (edgellm::test::test_scale() == edgellm::test::scale::full) {
    s.push_back({4, 7, 128, 600, 1});  // Qwen2-7B attention, decode over 3 chunks
    s.push_back({8, 4, 128, 300, 2});  // Llama-3-8B attention
  } else {
    s.push_back({4, 7, 128, 40, 1});
    s.push_back({8, 4, 128, 20, 1});
  }
  return s;
}

// The same kinds of shapes with head_dim a multiple of 32 (the int4 cache's groups).
std::vector<Shape> q4_kernel_shapes() {
  std::vector<Shape> s = {
      {1, 1, 32, 0, 1}, {2, 3, 32, 5, 4}, {3, 5, 64, 17, 6}, {2, 6, 32, 260, 3},
      {1, 16, 64, 40, 2}, {2, 2, 96, 511, 2},
  };
  if (edgellm::test::test_scale() == edgellm::test::scale::full) {
    s.push_back({4, 7, 128, 600, 1});
    s.push_back({8, 4, 128, 300, 2});
  } else {
    s.push_back({4, 7, 128, 40, 1});
  }
  return s;
}

// Bitwise equality of two float vectors (NaN-aware: same bits).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("KVCacheQ8 stores one int8 absmax code per value and an fp32 scale per row",
          "[kv_cache]") {
  const std::size_t layers = 2, kvh = 3, hd = 40, len = 37, row = kvh * hd;
  auto c = KVCacheQ8::create(layers, kvh, hd, 50);
  REQUIRE(c);
  auto rng = edgellm::test::make_rng(11);
  auto k = edgellm::test::random_floats(rng, len * row, 2.0f);
  auto v = edgellm::test::random_floats(rng, len * row, 0.5f);
  std::fill(k.begin() + 3 * row, k.begin() + 3 * row + hd, 0.0f);  // an all-zero row
  v[5 * row + 7] = 1000.0f;                                       // one dominant value
  k[6 * row] = 0.5f * (2.0f * 127.0f / 127.0f);                   // a code exactly at a tie
  REQUIRE(c->append(1, 0, len, k, v));
  const auto view = c->layer_view(1);
  std::vector<std::int8_t> code(hd);
  for (std::size_t j = 0; j < len; ++j) {
    for (std::size_t g = 0; g < kvh; ++g) {
      for (const bool key : {true, false}) {
        const float* x = (key ? k.data() : v.data()) + j * row + g * hd;
        const float scale = quantize_row(x, hd, code.data());
        const float stored_scale = key ? view.k_scale_head(g)[j] : view.v_scale_head(g)[j];
        INFO("position " << j << " kv head " << g << (key ? " key" : " value"));
        REQUIRE(stored_scale == scale);
        for (std::size_t d = 0; d < hd; ++d) {
          const std::int8_t got = key ? view.k_head(g)[KvLayerView<std::int8_t>::k_index(j, d, hd)]
                                      : view.v_head(g)[j * hd + d];
          REQUIRE(got == code[d]);
          const double stored = key ? kref::stored_key(view, g, j, d)
                                    : kref::stored_value(view, g, j, d);
          // Half a step, plus the fp32 rounding of 127 / amax in the code computation.
          REQUIRE(std::fabs(stored - x[d]) <= 0.5 * scale * (1.0 + 1e-5) + 1e-30);
        }
      }
    }
  }
  CHECK(c->layer_length(0) == 0);
  CHECK(c->length() == 0);

  SECTION("a row with inf or NaN is stored as NaN, which attention propagates") {
    auto d = KVCacheQ8::create(1, 1, 8, 4);
    REQUIRE(d);
    std::vector<float> good(8, 0.25f), bad(8, 0.5f), q(8, 1.0f), out(8);
    bad[3] = std::numeric_limits<float>::infinity();
    REQUIRE(d->append(0, 0, 1, good, good));
    REQUIRE(d->attend(0, q, 1, 0, 1, out, nullptr));
    for (float o : out) CHECK(o == Approx(0.25f).epsilon(1e-6));
    REQUIRE(d->append(0, 1, 1, bad, good));
    REQUIRE(d->attend(0, q, 1, 1, 1, out, nullptr));
    for (float o : out) CHECK(std::isnan(o));
  }
}

TEST_CASE("KVCacheQ8 takes at most 0.53 x the bytes of KVCacheF16 at head_dim 128", "[kv_cache]") {
  struct Model {
    const char* name;
    std::size_t layers, kv_heads;
  };
  for (const Model m : {Model{"Qwen2-7B", 28, 4}, Model{"Llama-3-8B", 32, 8}}) {
    for (std::size_t ctx : {std::size_t{4096}, std::size_t{1000}}) {
      auto q8 = KVCacheQ8::create(m.layers, m.kv_heads, 128, ctx);
      auto f16 = KVCacheF16::create(m.layers, m.kv_heads, 128, ctx);
      auto f32 = KVCacheF32::create(m.layers, m.kv_heads, 128, ctx);
      REQUIRE((q8 && f16 && f32));
      INFO(m.name << " context " << ctx);
      const std::size_t slots = (ctx + 15) / 16 * 16;
      // int8 codes + one fp32 scale per position, kv head and K/V: (128 + 4) / 256 = 0.516.
      CHECK(q8->bytes() == 2 * m.layers * m.kv_heads * slots * (128 + 4));
      CHECK(f16->bytes() == 2 * m.layers * m.kv_heads * slots * 128 * 2);
      CHECK(f32->bytes() == 2 * f16->bytes());
      CHECK(static_cast<double>(q8->bytes()) <= 0.53 * static_cast<double>(f16->bytes()));
    }
  }
}

TEST_CASE("KVCacheQ4 stores 4-bit absmax codes with an fp16 scale per 32 values, in 0.3 x f16",
          "[kv_cache]") {
  using edgellm::kernels::f16_to_f32;
  using edgellm::kernels::f32_to_f16;
  const std::size_t layers = 1, kvh = 2, hd = 64, len = 40, row = kvh * hd;
  auto c = KVCacheQ4::create(layers, kvh, hd, 48);
  REQUIRE(c);
  auto rng = edgellm::test::make_rng(12);
  auto k = edgellm::test::random_floats(rng, len * row, 2.0f);
  auto v = edgellm::test::random_floats(rng, len * row, 0.5f);
  std::fill(k.begin() + 3 * row, k.begin() + 3 * row + 32, 0.0f);  // an all-zero group
  v[5 * row + 7] = 1000.0f;                                        // one dominant value
  REQUIRE(c->append(0, 0, len, k, v));
  const auto view = c->layer_view(0);
  for (std::size_t j = 0; j < len; ++j) {
    for (std::size_t g = 0; g < kvh; ++g) {
      for (const bool key : {true, false}) {
        const float* x = (key ? k.data() : v.data()) + j * row + g * hd;
        for (std::size_t b = 0; b < hd / 32; ++b) {
          // The independent quantiser: scale fp16(amax / 7), codes nearbyint(x / scale) in ±7.
          float amax = 0.0f;
          for (std::size_t d = 0; d < 32; ++d) amax = std::max(amax, std::fabs(x[b * 32 + d]));
          const float scale = f16_to_f32(f32_to_f16(amax / 7.0f));
          INFO("position " << j << " kv head " << g << (key ? " key" : " value") << " group " << b);
          const std::uint16_t stored = key ? view.key_scale(g, j, b * 32) : view.value_scale(g, j, b * 32);
          REQUIRE(f16_to_f32(stored) == scale);
          for (std::size_t d = b * 32; d < b * 32 + 32; ++d) {
            const int want = scale == 0.0f ? 0
                                           : static_cast<int>(std::clamp(std::nearbyint(x[d] * (1.0f / scale)), -7.0f, 7.0f));
            const int got = key ? view.key_code(g, j, d) : view.value_code(g, j, d);
            REQUIRE(got == want);
            const double back = key ? kref::stored_key(view, g, j, d) : kref::stored_value(view, g, j, d);
            // Half a step, plus what the clamp takes when fp16 rounded the scale down.
            REQUIRE(std::fabs(back - x[d]) <= 0.5 * scale + amax * 0x1p-11 + 1e-30);
          }
        }
      }
    }
  }
  SECTION("a group with inf or NaN is stored as NaN, which attention propagates") {
    auto d = KVCacheQ4::create(1, 1, 32, 4);
    REQUIRE(d);
    std::vector<float> good(32, 0.25f), bad(32, 0.5f), q(32, 1.0f), out(32);
    bad[3] = std::numeric_limits<float>::quiet_NaN();
    REQUIRE(d->append(0, 0, 1, good, good));
    REQUIRE(d->attend(0, q, 1, 0, 1, out, nullptr));
    // 7 x fp16(0.25 / 7): within the scale's fp16 rounding of 0.25.
    for (float o : out) CHECK(o == Approx(0.25f).epsilon(0x1p-11));
    REQUIRE(d->append(0, 1, 1, good, bad));
    REQUIRE(d->attend(0, q, 1, 1, 1, out, nullptr));
    for (float o : out) CHECK(std::isnan(o));
  }
  SECTION("bytes: (64 + 8) / 256 of fp16 at head_dim 128; head_dim must be a multiple of 32") {
    auto q4 = KVCacheQ4::create(28, 4, 128, 4096);
    auto f16 = KVCacheF16::create(28, 4, 128, 4096);
    REQUIRE((q4 && f16));
    CHECK(q4->bytes() == 2 * 28 * 4 * 4096 * (64 + 8));
    CHECK(static_cast<double>(q4->bytes()) <= 0.3 * static_cast<double>(f16->bytes()));
    auto bad = KVCacheQ4::create(1, 1, 80, 16);
    REQUIRE_FALSE(bad);
    CHECK(bad.error().code == errc::invalid_argument);
    CHECK(bad.error().message ==
          "[KVCacheQ4::create] head_dim: 80 is not a multiple of 32 (the format's scale groups)");
  }
}

TEMPLATE_LIST_TEST_CASE("attention kernels agree with the double-precision twin within the bound",
                        "[kv_cache]", edgellm::test::TestArchs) {
  std::uint64_t seed = 100;
  for (const Shape& s : kernel_shapes()) {
    INFO("kv_heads " << s.kv_heads << " group " << s.group << " head_dim " << s.head_dim
                     << " first_pos " << s.first_pos << " n_q " << s.n_q << " on "
                     << TestType::name());
    check_kernel<TestType, KVCacheQ8>(s, ++seed);
    check_kernel<TestType, KVCacheF16>(s, ++seed);
    check_kernel<TestType, KVCacheF32>(s, ++seed);
  }
  for (const Shape& s : q4_kernel_shapes()) {
    INFO("int4: kv_heads " << s.kv_heads << " group " << s.group << " head_dim " << s.head_dim
                           << " first_pos " << s.first_pos << " n_q " << s.n_q << " on "
                           << TestType::name());
    check_kernel<TestType, KVCacheQ4>(s, ++seed);
  }
}

TEST_CASE("KVCacheQ8 attention is bit-identical for every pool and batch split", "[kv_cache]") {
  // Decode (one query, few kv heads) splits chunks of 256 positions over the threads and
  // merges them in order; prefill splits (query, kv head) pairs; both must give the same bits
  // as one thread, and a query the same bits alone as in a batch.
  const std::size_t len = edgellm::test::scaled<std::size_t>(1100, 530);
  const Shape shapes[] = {{1, 8, 64, len - 1, 1}, {4, 7, 128, len - 1, 1}, {2, 3, 32, len - 6, 6}};
  for (const Shape& s : shapes) {
    INFO("kv_heads " << s.kv_heads << " group " << s.group << " n_q " << s.n_q);
    const std::size_t heads = s.kv_heads * s.group;
    auto rng = edgellm::test::make_rng(s.kv_heads * 7 + s.n_q);
    auto c = KVCacheQ8::create(1, s.kv_heads, s.head_dim, len);
    REQUIRE(c);
    fill(*c, 0, len, rng, 100);
    const auto q = edgellm::test::random_floats(rng, s.n_q * heads * s.head_dim);
    std::vector<float> base(q.size());
    REQUIRE(c->attend(0, q, s.n_q, s.first_pos, heads, base, nullptr));
    for (std::size_t threads : {1, 2, 3}) {
      auto pool = ThreadPool::create(threads);
      REQUIRE(pool);
      std::vector<float> par(q.size());
      REQUIRE(c->attend(0, q, s.n_q, s.first_pos, heads, par, pool->get()));
      INFO(threads << " threads");
      CHECK(same_bits(par, base));
    }
    const std::size_t row = heads * s.head_dim;
    auto pool = ThreadPool::create(2);
    REQUIRE(pool);
    for (std::size_t i = 0; i < s.n_q; ++i) {
      std::vector<float> one(row);
      REQUIRE(c->attend(0, std::span(q).subspan(i * row, row), 1, s.first_pos + i, heads, one,
                        pool->get()));
      CHECK(std::memcmp(one.data(), base.data() + i * row, row * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("KVCacheQ8 attention error against fp32 storage on random data", "[kv_cache]") {
  // Measure: per (query, head), ||out_q8 - out_f32||_2 / ||out_f32||_2 over head_dim, with q,
  // k, v ~ N(0, 1) (scores ~ N(0, 1) after the head_dim^-0.5 scale). Int8 absmax steps are
  // amax / 127 ~ 2.6 / 127 of the values' spread, a rounding noise of ~0.6% of a value; the
  // output averages values and noise alike, so the ratio stays ~0.6% (values) plus the
  // score noise it causes (same order): ~0.9% on average, measured max 1.3% per head over
  // these shapes. The checks: mean over heads <= 1%, every head <= 2%, and the per-element
  // error within the first-order quantisation bound
  //   |dout_c| <= 2 max_j |ds_j| max_j |v_jc| + max_j step_vj / 2,
  //   |ds_j| <= scale sum_c |q_c| step_kj / 2      (step = amax / 127 of the row).
  const std::size_t len = edgellm::test::scaled<std::size_t>(1024, 300);
  const Shape shapes[] = {{4, 7, 128, len - 1, 1}, {8, 4, 128, len - 3, 3}};
  double worst = 0.0, sum = 0.0, count = 0.0, all_num = 0.0, all_den = 0.0;
  for (const Shape& s : shapes) {
    const std::size_t heads = s.kv_heads * s.group, hd = s.head_dim;
    auto q8 = KVCacheQ8::create(1, s.kv_heads, hd, len);
    auto f32 = KVCacheF32::create(1, s.kv_heads, hd, len);
    REQUIRE((q8 && f32));
    auto rng = edgellm::test::make_rng(77 + s.kv_heads);
    auto rng2 = rng;
    const auto [k, v] = fill(*q8, 0, len, rng, 64);
    fill(*f32, 0, len, rng2, 64);
    const auto q = edgellm::test::random_floats(rng, s.n_q * heads * hd);
    std::vector<float> a(q.size()), b(q.size());
    REQUIRE(q8->attend(0, q, s.n_q, s.first_pos, heads, a, nullptr));
    REQUIRE(f32->attend(0, q, s.n_q, s.first_pos, heads, b, nullptr));
    const std::size_t row = s.kv_heads * hd;
    const double scale = edgellm::kernels::attention_scale(hd);
    for (std::size_t i = 0; i < s.n_q; ++i) {
      const std::size_t pos = s.first_pos + i;
      for (std::size_t h = 0; h < heads; ++h) {
        const std::size_t g = h / s.group;
        const float* qh = q.data() + (i * heads + h) * hd;
        double num = 0.0, den = 0.0, ds = 0.0, vstep = 0.0, qsum = 0.0;
        for (std::size_t d = 0; d < hd; ++d) qsum += std::fabs(qh[d]);
        std::vector<double> vmax(hd, 0.0);
        for (std::size_t j = 0; j <= pos; ++j) {
          double ka = 0.0, va = 0.0;
          for (std::size_t d = 0; d < hd; ++d) {
            ka = std::max(ka, std::fabs(static_cast<double>(k[j * row + g * hd + d])));
            va = std::max(va, std::fabs(static_cast<double>(v[j * row + g * hd + d])));
            vmax[d] = std::max(vmax[d], std::fabs(static_cast<double>(v[j * row + g * hd + d])));
          }
          ds = std::max(ds, scale * qsum * ka / 254.0);
          vstep = std::max(vstep, va / 254.0);
        }
        for (std::size_t d = 0; d < hd; ++d) {
          const std::size_t at = (i * heads + h) * hd + d;
          const double diff = static_cast<double>(a[at]) - b[at];
          num += diff * diff;
          den += static_cast<double>(b[at]) * b[at];
          // First order, plus 1% for the second-order terms.
          REQUIRE(std::fabs(diff) <= 1.01 * (2.0 * ds * vmax[d] + vstep) + 1e-6);
        }
        all_num += num;
        all_den += den;
        const double rel = std::sqrt(num / den);
        worst = std::max(worst, rel);
        sum += rel;
        count += 1.0;
      }
    }
  }
  const double mean = sum / count, overall = std::sqrt(all_num / all_den);
  INFO("relative error per head: mean " << mean << ", max " << worst);
  WARN("KVCacheQ8 vs KVCacheF32, ||dout|| / ||out|| per head: mean " << mean << ", max " << worst
                                                                      << "; over all heads "
                                                                      << overall);
  CHECK(overall <= 0.01);
  CHECK(mean <= 0.01);
  CHECK(worst <= 0.02);
}

TEMPLATE_TEST_CASE("KV cache truncate(n) then re-append equals never having appended past n",
                   "[kv_cache]", KVCacheQ8, KVCacheQ4, KVCacheF16, KVCacheF32) {
  // int4 needs head_dim % 32 == 0; a cut inside a key tile re-writes nibbles in place.
  const std::size_t kvh = 2, hd = TestType::values_per_element == 2 ? 32 : 24, group = 3,
                    heads = kvh * group, row = kvh * hd;
  const std::size_t len = 600;
  auto rng = edgellm::test::make_rng(9);
  const auto k = edgellm::test::random_floats(rng, len * row), v = edgellm::test::random_floats(rng, len * row);
  const auto k2 = edgellm::test::random_floats(rng, len * row), v2 = edgellm::test::random_floats(rng, len * row);
  const auto q = edgellm::test::random_floats(rng, 2 * heads * hd);
  for (std::size_t cut : {std::size_t{0}, std::size_t{5}, std::size_t{16}, std::size_t{255},
                          std::size_t{256}, std::size_t{270}}) {
    INFO("cut at " << cut);
    auto a = TestType::create(1, kvh, hd, len), b = TestType::create(1, kvh, hd, len);
    REQUIRE((a && b));
    // a: 580 positions of (k, v), truncated to cut, then (k2, v2) up to 560.
    REQUIRE(a->append(0, 0, 580, std::span(k).first(580 * row), std::span(v).first(580 * row)));
    REQUIRE(a->truncate(cut));
    CHECK(a->length() == cut);
    const std::size_t more = 560 - cut;
    REQUIRE(a->append(0, cut, more, std::span(k2).first(more * row), std::span(v2).first(more * row)));
    // b: the same positions appended fresh.
    if (cut > 0) REQUIRE(b->append(0, 0, cut, std::span(k).first(cut * row), std::span(v).first(cut * row)));
    REQUIRE(b->append(0, cut, more, std::span(k2).first(more * row), std::span(v2).first(more * row)));
    for (std::size_t pos : {std::size_t{0}, cut, std::size_t{300}, std::size_t{558}}) {
      std::vector<float> oa(q.size()), ob(q.size());
      REQUIRE(a->attend(0, q, 2, pos, heads, oa, nullptr));
      REQUIRE(b->attend(0, q, 2, pos, heads, ob, nullptr));
      CHECK(same_bits(oa, ob));
    }
  }
}

TEST_CASE("KVCacheQ8 errors name the argument and leave the cache unchanged and usable",
          "[kv_cache]") {
  const std::size_t kvh = 2, hd = 8, heads = 4, row = kvh * hd;
  auto rng = edgellm::test::make_rng(3);
  const auto kv = edgellm::test::random_floats(rng, 6 * row);
  const auto q = edgellm::test::random_floats(rng, heads * hd);
  auto c = KVCacheQ8::create(2, kvh, hd, 4);
  REQUIRE(c);
  REQUIRE(c->append(0, 0, 2, std::span(kv).first(2 * row), std::span(kv).first(2 * row)));
  REQUIRE(c->append(1, 0, 2, std::span(kv).first(2 * row), std::span(kv).first(2 * row)));
  std::vector<float> before(q.size()), after(q.size());
  REQUIRE(c->attend(1, q, 1, 1, heads, before, nullptr));
  const auto unchanged = [&] {
    CHECK(c->length() == 2);
    REQUIRE(c->attend(1, q, 1, 1, heads, after, nullptr));
    CHECK(same_bits(before, after));
  };

  auto e = c->append(1, 2, 3, std::span(kv).first(3 * row), std::span(kv).first(3 * row));
  REQUIRE_FALSE(e);
  CHECK(e.error().code == errc::capacity_exceeded);
  CHECK(e.error().message == "[KVCacheQ8::append] position 4 >= capacity 4");
  unchanged();
  e = c->truncate(3);
  REQUIRE_FALSE(e);
  CHECK(e.error().code == errc::out_of_range);
  CHECK(e.error().message == "[KVCacheQ8::truncate] n: 3 is greater than the cached length 2");
  unchanged();
  e = c->append(1, 3, 1, std::span(kv).first(row), std::span(kv).first(row));
  REQUIRE_FALSE(e);
  CHECK(e.error().message ==
        "[KVCacheQ8::append] layer 1: position 3 but the layer holds 2 positions (append in "
        "order; truncate first to overwrite)");
  unchanged();
  e = c->append(1, 2, 1, std::span(kv).first(row - 1), std::span(kv).first(row));
  REQUIRE_FALSE(e);
  CHECK(e.error().code == errc::shape_mismatch);
  unchanged();
  e = c->attend(1, q, 1, 2, heads, after, nullptr);
  REQUIRE_FALSE(e);
  CHECK_THAT(e.error().message, Contains("[KVCacheQ8::attend] layer 1: queries at positions 2..2"));
  unchanged();
  auto bad = KVCacheQ8::create(1, 1, 0, 1);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "[KVCacheQ8::create] head_dim: must be positive");
  // Still usable: fill to capacity and attend.
  REQUIRE(c->append(1, 2, 2, std::span(kv).first(2 * row), std::span(kv).first(2 * row)));
  REQUIRE(c->attend(1, q, 1, 3, heads, after, nullptr));
  REQUIRE(c->truncate(1));
  CHECK(c->length() == 1);
}

TEMPLATE_TEST_CASE("KV prefix blobs round-trip and refuse foreign or damaged input",
                   "[kv_cache][prefix]", KVCacheQ8, KVCacheQ4, KVCacheF16, KVCacheF32) {
  const bool q4 = TestType::values_per_element == 2;  // head_dim a multiple of 32
  const std::size_t layers = 2, kvh = 2, hd = q4 ? 32 : 24, heads = 6, row = kvh * hd;
  const std::uint64_t fp = 0x0123456789abcdefull;
  auto rng = edgellm::test::make_rng(21);
  auto a = TestType::create(layers, kvh, hd, 400);
  REQUIRE(a);
  for (std::size_t l = 0; l < layers; ++l) fill(*a, l, 300, rng, 50);
  std::vector<std::byte> blob;
  auto st = a->export_prefix(301, fp, blob);
  REQUIRE_FALSE(st);
  CHECK(st.error().code == errc::out_of_range);
  REQUIRE(a->export_prefix(270, fp, blob));
  // int8: 2 x (24 + 4) bytes; int4: 2 x (16 + 1 fp16 scale).
  const std::size_t per_pos = 2 * TestType::row_bytes(hd);
  CHECK(per_pos == (q4 ? 36 : TestType::scaled ? 56 : 2 * hd * sizeof(typename TestType::element)));
  CHECK(blob.size() == 80 + layers * kvh * 270 * per_pos + 8);
  REQUIRE(a->truncate(270));

  const auto q = edgellm::test::random_floats(rng, 2 * heads * hd);
  const auto extra = edgellm::test::random_floats(rng, 20 * row);
  const auto outputs = [&](TestType& c) {
    std::vector<float> o(q.size()), all;
    for (std::size_t l = 0; l < layers; ++l) {
      for (std::size_t pos : {std::size_t{0}, c.length() / 3, c.length() - 2}) {
        REQUIRE(c.attend(l, q, 2, pos, heads, o, nullptr));
        all.insert(all.end(), o.begin(), o.end());
      }
    }
    return all;
  };

  SECTION("import gives the same state, bit for bit, also after appending more") {
    auto b = TestType::create(layers, kvh, hd, 290);  // another capacity is fine
    REQUIRE(b);
    fill(*b, 0, 33, rng);  // content to be replaced
    REQUIRE(b->import_prefix(blob, fp));
    CHECK(b->length() == 270);
    CHECK(same_bits(outputs(*a), outputs(*b)));
    for (auto* c : {&*a, &*b})
      for (std::size_t l = 0; l < layers; ++l)
        REQUIRE(c->append(l, 270, 20, extra, extra));
    CHECK(same_bits(outputs(*a), outputs(*b)));
    std::vector<std::byte> again;
    REQUIRE(b->export_prefix(270, fp, again));
    CHECK(again == blob);
  }

  SECTION("foreign or damaged blobs are refused; the cache is unchanged and usable") {
    auto c = TestType::create(layers, kvh, hd, 280);
    REQUIRE(c);
    fill(*c, 0, 40, rng);
    fill(*c, 1, 40, rng);
    const auto before = outputs(*c);
    const auto refused = [&](std::span<const std::byte> b, std::uint64_t f, errc code,
                             const std::string& what) {
      auto e = c->import_prefix(b, f);
      REQUIRE_FALSE(e);
      INFO(e.error().message);
      CHECK(e.error().code == code);
      CHECK_THAT(e.error().message,
                 Contains("[" + std::string(TestType::type_name) + "::import_prefix] " + what));
      CHECK(c->length() == 40);
      CHECK(same_bits(outputs(*c), before));
    };
    refused(blob, fp ^ 1, errc::invalid_argument,
            "the prefix was saved by another model: fingerprint 0x0123456789abcdef, this "
            "model's is 0x0123456789abcdee");
    // Another KV type of the same shape.
    std::vector<std::byte> other;
    if constexpr (std::is_same_v<TestType, KVCacheF32>) {
      auto o = KVCacheQ8::create(layers, kvh, hd, 40);
      REQUIRE(o);
      fill(*o, 0, 10, rng);
      fill(*o, 1, 10, rng);
      REQUIRE(o->export_prefix(10, fp, other));
      refused(other, fp, errc::invalid_argument,
              "the prefix holds KV type KVCacheQ8, this cache is KVCacheF32");
    } else {
      auto o = KVCacheF32::create(layers, kvh, hd, 40);
      REQUIRE(o);
      fill(*o, 0, 10, rng);
      fill(*o, 1, 10, rng);
      REQUIRE(o->export_prefix(10, fp, other));
      refused(other, fp, errc::invalid_argument,
              "the prefix holds KV type KVCacheF32, this cache is " + std::string(TestType::type_name));
    }
    // Another shape.
    auto s = TestType::create(layers, kvh, q4 ? 2 * hd : hd / 2, 40);
    REQUIRE(s);
    REQUIRE(s->export_prefix(0, fp, other));
    refused(other, fp, errc::invalid_argument,
            q4 ? "the prefix has layers x kv_heads x head_dim = 2 x 2 x 64, this cache 2 x 2 x 32"
               : "the prefix has layers x kv_heads x head_dim = 2 x 2 x 12, this cache 2 x 2 x 24");
    // More positions than the capacity.
    auto small = TestType::create(layers, kvh, hd, 269);
    REQUIRE(small);
    auto e = small->import_prefix(blob, fp);
    REQUIRE_FALSE(e);
    CHECK(e.error().code == errc::capacity_exceeded);
    CHECK(small->length() == 0);
    // Truncated.
    for (std::size_t size : {std::size_t{0}, std::size_t{50}, std::size_t{87}, std::size_t{88},
                             blob.size() / 2, blob.size() - 9, blob.size() - 1}) {
      INFO("truncated to " << size << " bytes");
      refused(std::span(blob).first(size), fp, errc::format_error,
              size < 88 ? "blob of " + std::to_string(size) + " bytes is shorter than the 88 bytes"
                        : "blob of " + std::to_string(size) + " bytes but its header describes");
    }
    // One flipped bit anywhere: header fields, payload, checksum.
    for (std::size_t at : {std::size_t{0}, std::size_t{9}, std::size_t{13}, std::size_t{17},
                           std::size_t{33}, std::size_t{41}, std::size_t{57}, std::size_t{66},
                           std::size_t{79}, std::size_t{80}, blob.size() / 2, blob.size() - 9,
                           blob.size() - 1}) {
      INFO("bit flipped in byte " << at);
      auto bad = blob;
      bad[at] ^= std::byte{0x10};
      auto r = c->import_prefix(bad, fp);
      REQUIRE_FALSE(r);
      INFO(r.error().message);
      if (at < 8) {
        CHECK_THAT(r.error().message, Contains("bad magic"));
      } else if (at < 16) {
        CHECK(r.error().code == errc::unsupported);
      } else if (at >= 72 && at < 80) {
        CHECK_THAT(r.error().message, Contains("header describes"));
      } else {
        CHECK_THAT(r.error().message, Contains("checksum mismatch"));
      }
      CHECK(c->length() == 40);
    }
    CHECK(same_bits(outputs(*c), before));
    // Still usable.
    REQUIRE(c->import_prefix(blob, fp));
    CHECK(c->length() == 270);
    CHECK(same_bits(outputs(*c), outputs(*a)));
  }
}

TEST_CASE("KvType names and parsing", "[kv_cache]") {
  using edgellm::cache::KvType;
  for (KvType t : {KvType::f32, KvType::f16, KvType::int8, KvType::int4}) {
    auto p = edgellm::cache::parse_kv_type(edgellm::cache::kv_type_name(t));
    REQUIRE(p);
    CHECK(*p == t);
  }
  CHECK(*edgellm::cache::parse_kv_type("q8") == KvType::int8);
  CHECK(*edgellm::cache::parse_kv_type("q4") == KvType::int4);
  auto bad = edgellm::cache::parse_kv_type("int2");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "[parse_kv_type] kv type 'int2': expected int8, int4, f16 or f32");
  CHECK(edgellm::cache::with_kv_type(KvType::int4, [](auto tag) {
          return std::string(decltype(tag)::type::type_name);
        }) == "KVCacheQ4");
  const auto name = edgellm::cache::with_kv_type(KvType::int8, [](auto tag) {
    return std::string(decltype(tag)::type::type_name);
  });
  CHECK(name == "KVCacheQ8");
}

// ---------------------------------------------------------------------------------------------
// The transformer over the int8 cache.

namespace {

using edgellm::decode::LogitsMode;
using edgellm::kernels::MatmulPath;
using edgellm::model::Transformer;
using edgellm::model::TransformerOptions;
using WeightsPtr = std::shared_ptr<const edgellm::model::TransformerWeights>;

WeightsPtr load_fixture(const std::string& name, bool reference) {
  edgellm::model::LoadOptions o;
  o.fp32_reference = reference;
  auto w = edgellm::model::load_weights(edgellm::test::model_fixture(name), o);
  INFO(name << ": " << (w ? std::string() : w.error().message));
  REQUIRE(w);
  return *w;
}

template <class Cache>
Transformer<Cache> session(const WeightsPtr& w, MatmulPath path = MatmulPath::exact,
                           ThreadPool* pool = nullptr) {
  TransformerOptions o;
  o.path = path;
  o.pool = pool;
  auto t = Transformer<Cache>::create(w, o);
  INFO((t ? std::string() : t.error().message));
  REQUIRE(t);
  return std::move(*t);
}

template <class Cache>
std::vector<float> logits_all(Transformer<Cache>& t, std::span<const std::int32_t> ids) {
  std::vector<float> out(ids.size() * t.vocab_size());
  auto st = t.forward(ids, LogitsMode::all, out);
  INFO((st ? std::string() : st.error().message));
  REQUIRE(st);
  return out;
}

}  // namespace

TEST_CASE("Transformer with the int8 KV cache: logits, contract, prefix reuse",
          "[kv_cache][model]") {
  const std::string name = GENERATE("qwen2-fp16", "llama-awq-gemm");
  const bool reference = name == std::string("qwen2-fp16");
  INFO(name);
  const std::string dir = edgellm::test::model_fixture(name);
  const auto e = edgellm::test::load_expected(dir);
  const WeightsPtr w = load_fixture(name, reference);
  std::vector<std::int32_t> ids = e.ids;
  ids.insert(ids.end(), e.greedy.begin(), e.greedy.end());
  const std::size_t V = e.vocab_size;

  SECTION("logits stay close to the fp32 cache's") {
    auto f32 = session<KVCacheF32>(w);
    auto q8 = session<KVCacheQ8>(w);
    CHECK(q8.cache().bytes() < f32.cache().bytes() / 2);
    const auto a = logits_all(f32, ids), b = logits_all(q8, ids);
    // Keys and values rounded to int8 (at most amax / 254 per value, ~0.4% of a row's largest
    // value, against fp16's 0.05%): by the fp16 test's first-order argument, each attention
    // output moves by at most (1 + 2 S) / 254 of max |v| for scores of magnitude S (a few
    // here), ~3% per layer; allow 5e-2 of the range for the 2 layers. Measured: see WARN.
    float worst = 0.0f;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const float* ra = a.data() + i * V;
      const float range = edgellm::test::logit_range(std::vector<float>(ra, ra + V));
      worst = std::max(worst, edgellm::test::max_abs_diff(ra, b.data() + i * V, V) / range);
    }
    WARN(name << ": int8 vs fp32 KV, worst logit difference " << worst << " of the range");
    CHECK(worst <= 5e-2f);
  }

  SECTION("decode::Model contract: splits, truncate then re-forward bit-identical") {
    // Reference mode: every split gives the same bits (as with the fp32 cache). int4 paths:
    // gemv vs gemm summation order, as in transformer_test.cpp.
    const float tol = reference ? 0.0f : 1e-4f * edgellm::test::logit_range(e.logits.back());
    edgellm::test::check_model_contract([&] { return session<KVCacheQ8>(w); }, e.ids, tol);
  }

  SECTION("thread counts give the same bits") {
    auto one = session<KVCacheQ8>(w);
    const auto expect = logits_all(one, ids);
    for (std::size_t threads : {2, 3}) {
      auto pool = ThreadPool::create(threads);
      REQUIRE(pool);
      auto t = session<KVCacheQ8>(w, MatmulPath::exact, pool->get());
      CHECK(logits_all(t, ids) == expect);
    }
  }

  SECTION("a saved prefix restores the state bit for bit, in memory and through a file") {
    const std::size_t k = 9;
    const auto head = std::span<const std::int32_t>(ids).first(k);
    const auto rest = std::span<const std::int32_t>(ids).subspan(k);
    auto a = session<KVCacheQ8>(w);
    logits_all(a, head);
    std::vector<std::byte> blob;
    auto st = a.save_prefix(k + 1, blob);
    REQUIRE_FALSE(st);
    REQUIRE(a.save_prefix(k, blob));
    const auto expect = logits_all(a, rest);

    auto b = session<KVCacheQ8>(w);
    REQUIRE(b.load_prefix(blob));
    CHECK(b.position() == k);
    CHECK(logits_all(b, rest) == expect);

    edgellm::test::TempDir tmp;
    const std::string path = tmp.file("system.kv");
    auto c = session<KVCacheQ8>(w);
    logits_all(c, head);
    REQUIRE(c.save_prefix_file(k, path));
    auto d = session<KVCacheQ8>(w);
    REQUIRE(d.load_prefix_file(path));
    CHECK(logits_all(d, rest) == expect);

    // A prefix is only accepted by the same model, settings and KV type.
    auto fast = session<KVCacheQ8>(w, MatmulPath::fast);
    if (!reference) {  // the fast path computes other keys and values
      CHECK(fast.model_fingerprint() != a.model_fingerprint());
      auto r = fast.load_prefix(blob);
      REQUIRE_FALSE(r);
      CHECK_THAT(r.error().message, Contains("saved by another model"));
      CHECK(fast.position() == 0);
    }
    const WeightsPtr other = load_fixture(reference ? "llama-fp16" : "qwen2-awq-gemm", reference);
    auto o = session<KVCacheQ8>(other);
    CHECK(o.model_fingerprint() != a.model_fingerprint());
    REQUIRE_FALSE(o.load_prefix(blob));
    CHECK(o.position() == 0);
    auto f16 = session<KVCacheF16>(w);
    CHECK(f16.model_fingerprint() == a.model_fingerprint());  // same model: the KV type differs
    auto r = f16.load_prefix(blob);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Contains("holds KV type KVCacheQ8, this cache is KVCacheF16"));
    auto missing = d.load_prefix_file(tmp.file("missing.kv"));
    REQUIRE_FALSE(missing);
    CHECK_THAT(missing.error().message, Contains(tmp.file("missing.kv")));
    // A corrupted file names the file and the problem; the state is unchanged.
    auto bytes = edgellm::test::read_file(path);
    bytes[bytes.size() / 2] ^= 0x01;
    edgellm::test::write_file(path, bytes);
    auto fresh = session<KVCacheQ8>(w);
    auto bad = fresh.load_prefix_file(path);
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().message, Contains(path + ": [KVCacheQ8::import_prefix] checksum mismatch"));
    CHECK(fresh.position() == 0);
  }
}

}  // namespace test_cache_quantized_kv_cache
