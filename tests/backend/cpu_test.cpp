// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/cpu.hpp: linear_forward(_multi) against the kernels they dispatch
// to, and the Cpu backend's ops against the kernels they wrap.
#include "edgellm/backend/cpu.hpp"

#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/kernels/reference.hpp"
#include "support/q4_fixtures.hpp"
#include "support/test_util.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace test_backend_cpu {

namespace {

using edgellm::ThreadPool;
using edgellm::backend::Cpu;
using edgellm::backend::linear_forward;
using edgellm::backend::linear_forward_multi;
using edgellm::backend::LinearOutput;
using edgellm::kernels::DenseMatrix;
using edgellm::kernels::Linear;
using edgellm::kernels::MatmulOptions;
using edgellm::kernels::MatmulPath;

static_assert(edgellm::backend::ComputeBackend<Cpu, edgellm::cache::KVCacheF32>);
static_assert(edgellm::backend::ComputeBackend<Cpu, edgellm::cache::KVCacheF16>);
static_assert(edgellm::backend::ComputeBackend<Cpu, edgellm::cache::KVCacheQ8>);

}  // namespace

TEST_CASE("linear_forward(_multi): the kernels' bits, grouped or not", "[backend]") {
  const MatmulPath path = GENERATE(MatmulPath::exact, MatmulPath::fast);
  const std::size_t m = GENERATE(std::size_t{1}, std::size_t{5});
  auto rng = edgellm::test::make_rng(41 + m);
  const std::size_t k = 256, G = 128;
  Linear a, b, c;
  a.q4 = edgellm::test::random_q4(rng, 48, k, G);
  a.bias = edgellm::test::random_floats(rng, 48);
  b.q4 = edgellm::test::random_q4(rng, 16, k, G);
  auto dense = DenseMatrix::from_f32(edgellm::test::random_floats(rng, 16 * k), 16, k);
  REQUIRE(dense);
  c.dense = std::move(*dense);
  const auto x = edgellm::test::random_floats(rng, m * k);
  edgellm::kernels::Workspace ws;
  MatmulOptions mo;
  mo.path = path;
  mo.workspace = &ws;

  // One int4 linear: what gemv (m = 1) or gemm computes.
  std::vector<float> ya(m * 48), want(m * 48);
  REQUIRE(linear_forward(a, x, m, ya, mo));
  if (m == 1) {
    REQUIRE(edgellm::kernels::gemv(a.q4, x, want, a.bias, mo));
  } else {
    REQUIRE(edgellm::kernels::gemm(a.q4, x, m, want, a.bias, mo));
  }
  CHECK(ya == want);
  // A dense one: kernels::dense_matmul.
  std::vector<float> yc(m * 16), wantc(m * 16);
  REQUIRE(linear_forward(c, x, m, yc, mo));
  REQUIRE(edgellm::kernels::dense_matmul(c.dense, x, m, wantc, {}, nullptr));
  CHECK(yc == wantc);

  // Grouped (all int4) and mixed (falls back to one call each): the same bits as separate calls.
  std::vector<float> ga(m * 48), gb(m * 16), gc(m * 16), yb(m * 16);
  REQUIRE(linear_forward(b, x, m, yb, mo));
  const LinearOutput grouped[] = {{&a, ga}, {&b, gb}};
  REQUIRE(linear_forward_multi(grouped, x, m, mo));
  CHECK(ga == ya);
  CHECK(gb == yb);
  std::fill(ga.begin(), ga.end(), 0.0f);
  const LinearOutput mixed[] = {{&a, ga}, {&c, gc}};
  REQUIRE(linear_forward_multi(mixed, x, m, mo));
  CHECK(ga == ya);
  CHECK(gc == yc);

  // An int8 linear: the int8 gemv / gemm, alone or next to an int4 one (one call each).
  Linear e;
  auto q8 = edgellm::kernels::quantize_q8(edgellm::test::random_floats(rng, 24 * k), 24, k, G);
  REQUIRE(q8);
  e.q8 = std::move(*q8);
  e.bias = edgellm::test::random_floats(rng, 24);
  REQUIRE(e.int8());
  std::vector<float> ye(m * 24), wante(m * 24), ge(m * 24);
  REQUIRE(linear_forward(e, x, m, ye, mo));
  if (m == 1) {
    REQUIRE(edgellm::kernels::gemv(e.q8, x, wante, e.bias, mo));
  } else {
    REQUIRE(edgellm::kernels::gemm(e.q8, x, m, wante, e.bias, mo));
  }
  CHECK(ye == wante);
  std::fill(ga.begin(), ga.end(), 0.0f);
  const LinearOutput with_int8[] = {{&a, ga}, {&e, ge}};
  REQUIRE(linear_forward_multi(with_int8, x, m, mo));
  CHECK(ga == ya);
  CHECK(ge == ye);
}

TEST_CASE("Cpu backend: ops are the kernels' on its own buffers", "[backend]") {
  edgellm::backend::ModelShape shape;
  shape.hidden = 16;
  shape.intermediate = 32;
  shape.heads = 2;
  shape.kv_heads = 1;
  shape.head_dim = 8;
  shape.vocab = 10;
  shape.max_batch = 3;
  shape.rms_norm_eps = 1e-5f;
  shape.rope_inv_freq = {1.0f, 0.1f, 0.01f, 0.001f};
  auto b = Cpu::create(shape, {});
  REQUIRE(b);
  auto x = b->activation(16);
  auto y = b->activation(16);
  REQUIRE(x);
  REQUIRE(y);
  CHECK(x->data.size() == 3 * 16);
  CHECK(b->bytes() >= (2 * 3 * 16 + 2 * 3 * 4) * sizeof(float));

  auto rng = edgellm::test::make_rng(7);
  const auto xs = edgellm::test::random_floats(rng, 3 * 16);
  const auto w = edgellm::test::random_floats(rng, 16);
  std::copy(xs.begin(), xs.end(), x->data.begin());
  b->rms_norm(*x, w, *y, 1, 3);
  std::vector<float> want(3 * 16, 0.0f);
  edgellm::kernels::rms_norm(xs.data(), w.data(), want.data(), 16, 1, 3, 1e-5f);
  CHECK(std::equal(want.begin() + 16, want.end(), y->data.begin() + 16));

  // RoPE of rows at positions 5, 6 on the q layout [rows][2 heads][8].
  auto q = b->activation(16);
  REQUIRE(q);
  std::copy(xs.begin(), xs.end(), q->data.begin());
  REQUIRE(b->begin(5, 2));
  b->rope(*q, 2);
  std::vector<float> cs(2 * 4), sn(2 * 4), r(xs.begin(), xs.begin() + 32);
  edgellm::kernels::rope_tables(shape.rope_inv_freq.data(), 4, 5, 2, cs.data(), sn.data());
  edgellm::kernels::rope(r.data(), 2, 2, 8, cs.data(), sn.data());
  CHECK(std::equal(r.begin(), r.end(), q->data.begin()));

  // Per-head RMSNorm (Qwen3's q_norm) in place on rows 0, 1 of [rows][2 heads][8]: each head is
  // normalised on its own, with the [head_dim] weight.
  std::copy(xs.begin(), xs.end(), q->data.begin());
  const auto hw = edgellm::test::random_floats(rng, 8);
  b->head_rms_norm(*q, hw, 2);
  std::vector<float> heads(xs.begin(), xs.begin() + 32);
  edgellm::kernels::rms_norm(heads.data(), hw.data(), heads.data(), 8, 0, 4, 1e-5f);
  CHECK(std::equal(heads.begin(), heads.end(), q->data.begin()));
  CHECK(std::equal(xs.begin() + 32, xs.end(), q->data.begin() + 32));  // row 2 untouched

  // Unsupported ISA on the fast path: refused at creation.
  for (auto isa : {edgellm::kernels::Isa::avx2, edgellm::kernels::Isa::avx512_vnni,
                   edgellm::kernels::Isa::neon_dotprod}) {
    if (edgellm::kernels::isa_supported(isa)) continue;
    edgellm::backend::Options o;
    o.isa = isa;
    CHECK_FALSE(Cpu::create(shape, o));
  }
  REQUIRE(b->finish());
}

TEST_CASE("Cpu backend: attention forks only when the work is worth it, with the same bits",
          "[backend]") {
  // heads 8 x head_dim 64: 1024 multiply-adds per position, so a decode step at position 12
  // stays on the caller and a 96-token prefill chunk (~4.7 M) forks.
  edgellm::backend::ModelShape shape;
  shape.hidden = 512;
  shape.intermediate = 64;
  shape.heads = 8;
  shape.kv_heads = 2;
  shape.head_dim = 64;
  shape.vocab = 4;
  shape.max_batch = 96;
  shape.rms_norm_eps = 1e-5f;
  shape.rope_inv_freq.assign(32, 0.5f);
  REQUIRE_FALSE(edgellm::kernels::attention_worth_forking(1, 12, 8, 64));
  REQUIRE(edgellm::kernels::attention_worth_forking(96, 0, 8, 64));
  auto pool = ThreadPool::create(2);
  REQUIRE(pool);
  edgellm::backend::Options with_pool;
  with_pool.pool = pool->get();
  auto rng = edgellm::test::make_rng(11);
  const auto qs = edgellm::test::random_floats(rng, 96 * 512);
  const auto ks = edgellm::test::random_floats(rng, 96 * 128);
  const auto vs = edgellm::test::random_floats(rng, 96 * 128);
  // Runs a 96-token chunk, then one decode token at 96, on a fresh cache; returns both outputs
  // and the pool's fork-joins in each call.
  const auto run = [&](const edgellm::backend::Options& options, std::vector<float>& out,
                       std::uint64_t& prefill_regions, std::uint64_t& decode_regions) {
    auto b = Cpu::create(shape, options);
    REQUIRE(b);
    auto cache = edgellm::cache::KVCacheQ8::create(1, 2, 64, 128);
    REQUIRE(cache);
    auto q = b->activation(512), k = b->activation(128), v = b->activation(128),
         o = b->activation(512);
    REQUIRE((q && k && v && o));
    std::copy(qs.begin(), qs.end(), q->data.begin());
    std::copy(ks.begin(), ks.end(), k->data.begin());
    std::copy(vs.begin(), vs.end(), v->data.begin());
    std::uint64_t r0 = (*pool)->regions();
    REQUIRE(b->attention(*cache, 0, 0, 96, *q, *k, *v, *o));
    prefill_regions = (*pool)->regions() - r0;
    out.assign(o->data.begin(), o->data.begin() + 96 * 512);
    r0 = (*pool)->regions();
    REQUIRE(b->attention(*cache, 0, 96, 1, *q, *k, *v, *o));
    decode_regions = (*pool)->regions() - r0;
    out.insert(out.end(), o->data.begin(), o->data.begin() + 512);
  };
  std::vector<float> serial, parallel;
  std::uint64_t sp = 0, sd = 0, pp = 0, pd = 0;
  run({}, serial, sp, sd);
  run(with_pool, parallel, pp, pd);
  CHECK(sp == 0);
  CHECK(sd == 0);
  CHECK(pp >= 1);  // the prefill chunk is split over the pool
  CHECK(pd == 0);  // the short decode step is not
  REQUIRE(parallel == serial);
}

}  // namespace test_backend_cpu
