// SPDX-License-Identifier: Apache-2.0
#include "edgellm/kernels/matmul.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "support/q4_fixtures.hpp"
#include "support/test_util.hpp"
#include "support/prelude.hpp"

namespace test_kernels_matmul {

using namespace edgellm::kernels;

namespace {
struct Shape {
  std::size_t n, k, G;
};
std::vector<Shape> gemv_shapes() {
  std::vector<Shape> s;
  const std::vector<std::size_t> ns = test::small_scale() ? std::vector<std::size_t>{1, 17, 40}
                                                          : std::vector<std::size_t>{1, 3, 16, 17, 31, 64, 97};
  const std::vector<std::size_t> kmul = test::small_scale() ? std::vector<std::size_t>{1, 3}
                                                            : std::vector<std::size_t>{1, 3, 28};
  for (std::size_t G : {32, 64, 128})
    for (std::size_t n : ns)
      for (std::size_t km : kmul) s.push_back({n, 128 * km, G});
  return s;
}

template <class Arch>
void check_gemv(const Q4Matrix& w, const std::vector<float>& x_in, bool with_bias,
                std::mt19937_64& rng, std::size_t x_offset) {
  const std::size_t n = w.n(), k = w.k();
  // x at an odd float offset: kernels must not assume alignment.
  std::vector<float> xbuf(k + x_offset);
  std::copy(x_in.begin(), x_in.end(), xbuf.begin() + static_cast<std::ptrdiff_t>(x_offset));
  std::span<const float> x(xbuf.data() + x_offset, k);
  std::vector<float> bias = with_bias ? test::random_floats(rng, n) : std::vector<float>{};
  std::vector<float> y(n + 1, -1.0f), yref(n);
  REQUIRE(gemv<Arch>(w, x, std::span<float>(y.data() + 1, n), bias));
  reference::gemv_q4(w, x.data(), yref.data(), with_bias ? bias.data() : nullptr);
  REQUIRE(y[0] == -1.0f);  // nothing written outside y
  for (std::size_t r = 0; r < n; ++r) {
    const double tol = test::exact_tolerance(w, x.data(), r, with_bias ? bias[r] : 0.0f);
    INFO("row " << r << " n " << n << " k " << k << " G " << w.group_size());
    REQUIRE(std::fabs(static_cast<double>(y[r + 1]) - yref[r]) <= tol);
  }
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("gemv exact path matches the scalar twin", "[kernels][gemv]",
                        test::TestArchs) {
  auto rng = test::make_rng(21);
  for (const Shape& s : gemv_shapes()) {
    for (auto kind : {test::GroupKind::random, test::GroupKind::all_zero}) {
      auto w = test::random_q4(rng, s.n, s.k, s.G, kind);
      auto x = test::random_floats(rng, s.k);
      check_gemv<TestType>(w, x, (s.n % 2) == 1, rng, 1);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("gemv exact path with extreme values", "[kernels][gemv]",
                        test::TestArchs) {
  auto rng = test::make_rng(22);
  // Largest finite fp16 scales with codes at both ends, and activations spanning many
  // magnitudes; the bound is relative to sum |w x|, so it holds at any scale short of overflow.
  auto w = test::random_q4(rng, 33, 384, 128, test::GroupKind::extreme);
  auto x = test::random_floats(rng, 384);
  for (std::size_t i = 0; i < x.size(); i += 7) x[i] *= 1e-3f;
  for (std::size_t i = 3; i < x.size(); i += 11) x[i] *= 1e3f;
  check_gemv<TestType>(w, x, true, rng, 3);
}

TEMPLATE_LIST_TEST_CASE("gemv exact path with long inputs", "[kernels][gemv]",
                        test::TestArchs) {
  // k past 4096 (x no longer fits L1 on many cores; any future K blocking must keep this
  // exact): full and partial tiles, every group size.
  auto rng = test::make_rng(27);
  for (std::size_t G : {32, 64, 128}) {
    for (std::size_t n : {std::size_t{37}, std::size_t{48}}) {
      const std::size_t k = G == 64 ? 8192 + 64 * 5 : 4096 + G * 3;
      auto w = test::random_q4(rng, n, k, G);
      auto x = test::random_floats(rng, k);
      check_gemv<TestType>(w, x, n == 37, rng, 2);
    }
  }
}

TEST_CASE("gemv propagates NaN and Inf from x", "[kernels][gemv]") {
  auto rng = test::make_rng(23);
  auto w = test::random_q4(rng, 20, 256, 128);
  auto x = test::random_floats(rng, 256);
  std::vector<float> y(20);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  REQUIRE(gemv(w, x, y));
  for (float v : y) REQUIRE(std::isnan(v));
  // +Inf times weights of both signs gives NaN or +-Inf: never a finite number.
  x[5] = std::numeric_limits<float>::infinity();
  REQUIRE(gemv(w, x, y));
  for (float v : y) REQUIRE_FALSE(std::isfinite(v));
}

TEST_CASE("gemv and gemm are bit-identical for every thread count", "[kernels][gemv][gemm]") {
  auto rng = test::make_rng(24);
  auto w = test::random_q4(rng, 16 * 7 + 5, 512, 64);
  auto x = test::random_floats(rng, 9 * 512);
  auto bias = test::random_floats(rng, w.n());
  std::vector<float> y1(w.n()), g1(9 * w.n());
  REQUIRE(gemv(w, std::span<const float>(x.data(), 512), y1, bias));
  REQUIRE(gemm(w, x, 9, g1, bias));
  for (std::size_t threads : {2, 3, 4, 8}) {
    auto pool = ThreadPool::create(threads);
    REQUIRE(pool);
    std::vector<float> y(w.n()), g(9 * w.n());
    REQUIRE(gemv(w, std::span<const float>(x.data(), 512), y, bias, {pool->get()}));
    REQUIRE(gemm(w, x, 9, g, bias, {pool->get()}));
    REQUIRE(std::memcmp(y.data(), y1.data(), y.size() * 4) == 0);
    REQUIRE(std::memcmp(g.data(), g1.data(), g.size() * 4) == 0);
  }
}

TEMPLATE_LIST_TEST_CASE("gemm exact path matches the scalar twin", "[kernels][gemm]",
                        test::TestArchs) {
  auto rng = test::make_rng(25);
  const std::vector<std::size_t> ms = test::small_scale()
                                          ? std::vector<std::size_t>{1, 7, 65}
                                          : std::vector<std::size_t>{1, 2, 7, 8, 9, 64, 65, 130};
  for (std::size_t G : {32, 64, 128}) {
    for (std::size_t m : ms) {
      const std::size_t n = (m * 7) % 45 + 1, k = G * (1 + m % 3) + (m > 64 ? 256 : 0);
      auto w = test::random_q4(rng, n, k, G, m % 2 ? test::GroupKind::all_zero
                                                   : test::GroupKind::random);
      const std::size_t ldx = k + 3, ldy = n + 2;  // padded strides, unaligned rows
      auto x = test::random_floats(rng, m * ldx);
      auto bias = test::random_floats(rng, n);
      std::vector<float> y(m * ldy, 7.0f), yref(n);
      REQUIRE(gemm<TestType>(w, x, m, y, bias, {}, ldx, ldy));
      for (std::size_t i = 0; i < m; ++i) {
        reference::gemv_q4(w, x.data() + i * ldx, yref.data(), bias.data());
        for (std::size_t r = 0; r < n; ++r) {
          const double tol = test::exact_tolerance(w, x.data() + i * ldx, r, bias[r]);
          INFO("m " << m << " row " << i << " col " << r << " k " << k << " G " << G);
          REQUIRE(std::fabs(static_cast<double>(y[i * ldy + r]) - yref[r]) <= tol);
        }
        REQUIRE(y[i * ldy + n] == 7.0f);  // stride padding untouched
      }
    }
  }
}

TEST_CASE("matmul entry points reject bad arguments by name", "[kernels][gemv][gemm]") {
  auto rng = test::make_rng(26);
  auto w = test::random_q4(rng, 16, 256, 128);
  std::vector<float> x(256), y(16), small(10);
  SECTION("x too small") {
    auto st = gemv(w, std::span<const float>(x.data(), 100), y);
    REQUIRE_FALSE(st);
    REQUIRE_THAT(st.error().message, Catch::Contains("[gemv] x: size 100, need 256"));
  }
  SECTION("y too small") {
    auto st = gemv(w, x, small);
    REQUIRE_FALSE(st);
    REQUIRE_THAT(st.error().message, Catch::Contains("y: size 10"));
  }
  SECTION("null buffers") {
    auto st = gemv(w, std::span<const float>(), y);
    REQUIRE_FALSE(st);
    REQUIRE_THAT(st.error().message, Catch::Contains("x: null"));
    auto st2 = gemm(w, x, 1, std::span<float>());
    REQUIRE_FALSE(st2);
    REQUIRE_THAT(st2.error().message, Catch::Contains("y: null"));
  }
  SECTION("bias of the wrong size") {
    auto st = gemv(w, x, y, std::span<const float>(x.data(), 3));
    REQUIRE_FALSE(st);
    REQUIRE_THAT(st.error().message, Catch::Contains("bias: size 3"));
  }
  SECTION("gemm with m = 0 or a short stride") {
    auto st = gemm(w, x, 0, y);
    REQUIRE_FALSE(st);
    REQUIRE_THAT(st.error().message, Catch::Contains("m:"));
    auto st2 = gemm(w, x, 1, y, {}, {}, 100);
    REQUIRE_FALSE(st2);
    REQUIRE_THAT(st2.error().message, Catch::Contains("ldx: 100"));
    auto st3 = gemm(w, x, 2, y);
    REQUIRE_FALSE(st3);
    REQUIRE_THAT(st3.error().message, Catch::Contains("x: size 256, need 512"));
  }
  SECTION("overlapping x and y") {
    std::vector<float> buf(512);
    auto st = gemv(w, std::span<const float>(buf.data(), 256), std::span<float>(buf.data() + 250, 16));
    REQUIRE_FALSE(st);
    REQUIRE_THAT(st.error().message, Catch::Contains("overlaps"));
  }
  SECTION("empty matrix") {
    Q4Matrix empty;
    auto st = gemv(empty, x, y);
    REQUIRE_FALSE(st);
    REQUIRE_THAT(st.error().message, Catch::Contains("w: empty"));
  }
}

TEST_CASE("gemm_multi equals separate gemv/gemm calls bit for bit", "[kernels][gemm]") {
  auto rng = test::make_rng(27);
  // q/k/v-like outputs: different n (one not a multiple of 16), one shared k, with and
  // without bias.
  const std::size_t k = 384, G = 128;
  auto wq = test::random_q4(rng, 16 * 5, k, G);
  auto wk = test::random_q4(rng, 16 + 3, k, G);
  auto wv = test::random_q4(rng, 32, k, G);
  auto bq = test::random_floats(rng, wq.n());
  auto bv = test::random_floats(rng, wv.n());
  const Q4Matrix* ws[] = {&wq, &wk, &wv};
  const std::vector<float>* bs[] = {&bq, nullptr, &bv};
  for (std::size_t m : {1, 2, 9}) {
    auto x = test::random_floats(rng, m * k);
    for (MatmulPath path : {MatmulPath::exact, MatmulPath::fast}) {
      for (std::size_t threads : {1, 2, 3}) {
        CAPTURE(m, path == MatmulPath::fast, threads);
        auto pool = ThreadPool::create(threads);
        REQUIRE(pool);
        const MatmulOptions mo{pool->get(), path};
        std::vector<std::vector<float>> want(3), got(3);
        std::vector<MatmulOutput> outs;
        for (std::size_t i = 0; i < 3; ++i) {
          const std::span<const float> b = bs[i] ? std::span<const float>(*bs[i]) : std::span<const float>();
          want[i].assign(m * ws[i]->n(), -1.0f);
          got[i].assign(m * ws[i]->n(), -2.0f);
          if (m == 1) {
            REQUIRE(gemv(*ws[i], x, want[i], b, MatmulOptions{nullptr, path}));
          } else {
            REQUIRE(gemm(*ws[i], x, m, want[i], b, MatmulOptions{nullptr, path}));
          }
          outs.push_back({ws[i], got[i], b});
        }
        REQUIRE(gemm_multi(outs, x, m, mo));
        for (std::size_t i = 0; i < 3; ++i)
          REQUIRE(std::memcmp(got[i].data(), want[i].data(), want[i].size() * 4) == 0);
      }
    }
  }
}

TEST_CASE("gemm_multi rejects bad outputs by name", "[kernels][gemm]") {
  auto rng = test::make_rng(28);
  auto a = test::random_q4(rng, 16, 256, 128);
  auto b = test::random_q4(rng, 16, 384, 128);
  auto c = test::random_q4(rng, 16, 256, 64);
  std::vector<float> x(256), y0(16), y1(16), buf(40);
  SECTION("no outputs") {
    auto st = gemm_multi({}, x, 1);
    REQUIRE_FALSE(st);
    REQUIRE_THAT(st.error().message, Catch::Contains("outs: 0 outputs"));
  }
  SECTION("different k or group size") {
    const MatmulOutput outs[] = {{&a, y0}, {&b, y1}};
    auto st = gemm_multi(outs, x, 1);
    REQUIRE_FALSE(st);
    REQUIRE_THAT(st.error().message, Catch::Contains("outs[1]") && Catch::Contains("k = 384"));
    const MatmulOutput outs2[] = {{&a, y0}, {&c, y1}};
    auto st2 = gemm_multi(outs2, x, 1);
    REQUIRE_FALSE(st2);
    REQUIRE_THAT(st2.error().message, Catch::Contains("group 64"));
  }
  SECTION("null matrix, short output, overlapping outputs") {
    const MatmulOutput null_w[] = {{&a, y0}, {nullptr, y1}};
    REQUIRE_THAT(gemm_multi(null_w, x, 1).error().message, Catch::Contains("outs[1]] w: null"));
    const MatmulOutput short_y[] = {{&a, std::span<float>(y0.data(), 8)}};
    REQUIRE_THAT(gemm_multi(short_y, x, 1).error().message, Catch::Contains("y: size 8"));
    const MatmulOutput overlap[] = {{&a, std::span<float>(buf.data(), 16)},
                                    {&a, std::span<float>(buf.data() + 10, 16)}};
    auto st = gemm_multi(overlap, x, 1);
    REQUIRE_FALSE(st);
    REQUIRE_THAT(st.error().message, Catch::Contains("overlaps outs[0].y"));
    REQUIRE(buf == std::vector<float>(40, 0.0f));  // nothing written on error
  }
}

}  // namespace test_kernels_matmul
