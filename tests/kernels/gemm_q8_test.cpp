// SPDX-License-Identifier: Apache-2.0
#include "edgellm/kernels/gemm_q8.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "edgellm/kernels/reference.hpp"
#include "support/test_util.hpp"
#include "support/prelude.hpp"

namespace test_kernels_gemm_q8 {

using namespace edgellm::kernels;

namespace {
Q8Matrix random_q8(std::mt19937_64& rng, std::size_t n, std::size_t k, std::size_t G) {
  auto w = test::random_floats(rng, n * k, 0.1f);
  for (std::size_t c = 0; c < G && n > 1; ++c) w[k + c] = 0.0f;  // an all-zero group
  auto q = quantize_q8(w, n, k, G);
  REQUIRE(q);
  return std::move(*q);
}

struct Shape {
  std::size_t n, k, G, m;
};
// Odd n, k = 128 * j and k that only a group of 64 or 32 divides, m = 1 and m > 1; group counts
// below, at and past a multiple of the AVX-512 kernel's block of four groups.
const Shape kShapes[] = {{1, 128, 128, 1},  {17, 384, 128, 1}, {33, 256, 128, 3},
                         {7, 192, 64, 1},   {21, 192, 64, 5},  {19, 96, 32, 1},
                         {5, 160, 32, 9},   {40, 512, 128, 2}, {9, 1152, 128, 2},
                         {6, 640, 64, 1},   {11, 896, 128, 1}, {3, 448, 64, 2}};
}  // namespace

TEMPLATE_LIST_TEST_CASE("int8 exact gemv/gemm match the scalar twin", "[kernels][q8]",
                        test::TestArchs) {
  auto rng = test::make_rng(83);
  for (const Shape& s : kShapes) {
    INFO("n " << s.n << " k " << s.k << " G " << s.G << " m " << s.m);
    auto w = random_q8(rng, s.n, s.k, s.G);
    const std::size_t ldx = s.k + 1;  // unaligned rows of X
    auto x = test::random_floats(rng, s.m * ldx);
    auto bias = test::random_floats(rng, s.n);
    std::vector<float> y(s.m * s.n), yref(s.m * s.n);
    REQUIRE(gemm<TestType>(w, x, s.m, y, bias, {}, ldx));
    reference::gemm_q8(w, x.data(), ldx, yref.data(), s.n, s.m, bias.data());
    for (std::size_t i = 0; i < s.m; ++i) {
      for (std::size_t r = 0; r < s.n; ++r) {
        const double tol = static_cast<double>(s.k + 4) * std::ldexp(1.0, -24) *
                               (reference::abs_dot(w, x.data() + i * ldx, r) + std::fabs(bias[r])) +
                           1e-30;
        REQUIRE(std::fabs(static_cast<double>(y[i * s.n + r]) - yref[i * s.n + r]) <= tol);
      }
      // A row of gemm equals gemv on that row, bit for bit.
      std::vector<float> yv(s.n);
      REQUIRE(gemv<TestType>(w, std::span<const float>(x.data() + i * ldx, s.k), yv, bias));
      REQUIRE(std::memcmp(yv.data(), y.data() + i * s.n, s.n * 4) == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("int8 fast path equals its scalar twin bit for bit on every ISA",
                        "[kernels][q8]", test::TestArchs) {
  auto rng = test::make_rng(84);
  for (const Shape& s : kShapes) {
    INFO("n " << s.n << " k " << s.k << " G " << s.G << " m " << s.m);
    auto w = random_q8(rng, s.n, s.k, s.G);
    auto x = test::random_floats(rng, s.m * s.k);
    auto bias = test::random_floats(rng, s.n);
    std::vector<std::byte> abuf(q8_activation_bytes(s.m, s.k, s.G) + 64);
    auto* base = reinterpret_cast<std::byte*>(
        (reinterpret_cast<std::uintptr_t>(abuf.data()) + 63) / 64 * 64);
    const Q8ActivationsView a = make_q8_view(base, s.m, s.k, s.G);
    reference::quantize_activations_q8(x.data(), s.k, a);
    std::vector<float> yref(s.m * s.n), yexact(s.m * s.n);
    reference::gemm_q8_fast(w, a, bias.data(), yref.data(), s.n);
    reference::gemm_q8(w, x.data(), s.k, yexact.data(), s.n, s.m, bias.data());
    for (Isa isa : kAllIsas) {
      if (!isa_supported(isa)) continue;
      INFO("isa " << isa_name(isa));
      std::vector<float> y(s.m * s.n);
      REQUIRE(gemm<TestType>(w, x, s.m, y, bias, {nullptr, MatmulPath::fast, isa}));
      REQUIRE(std::memcmp(y.data(), yref.data(), y.size() * 4) == 0);
    }
    for (std::size_t i = 0; i < s.m; ++i)
      for (std::size_t r = 0; r < s.n; ++r)
        REQUIRE(std::fabs(static_cast<double>(yref[i * s.n + r]) - yexact[i * s.n + r]) <=
                reference::fast_error_bound(w, x.data() + i * s.k, r) +
                    1e-6 * std::fabs(bias[r]));
  }
}

TEST_CASE("int8 gemv/gemm are bit-identical for every thread count", "[kernels][q8]") {
  auto rng = test::make_rng(85);
  auto w = random_q8(rng, 16 * 9 + 3, 384, 128);
  auto x = test::random_floats(rng, 6 * 384);
  for (MatmulPath path : {MatmulPath::exact, MatmulPath::fast}) {
    std::vector<float> y1(6 * w.n());
    REQUIRE(gemm(w, x, 6, y1, {}, {nullptr, path}));
    for (std::size_t threads : {2, 3, 5}) {
      auto pool = ThreadPool::create(threads);
      REQUIRE(pool);
      std::vector<float> y(6 * w.n());
      REQUIRE(gemm(w, x, 6, y, {}, {pool->get(), path}));
      REQUIRE(std::memcmp(y.data(), y1.data(), y.size() * 4) == 0);
    }
  }
}

TEST_CASE("int8 fast path is exact at the extreme codes on every ISA", "[kernels][q8]") {
  // Codes +-127 against activations +-127 (each group's values of one magnitude): the largest
  // group dots any kernel must hold, with the signs that cancel and those that add up.
  const std::size_t n = 6, k = 1024, G = 128;
  std::vector<float> wf(n * k), x(k);
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t c = 0; c < k; ++c) wf[r * k + c] = (r % 2 == 0 || c % 3 == 0) ? 1.0f : -1.0f;
  for (std::size_t c = 0; c < k; ++c) x[c] = (c / G) % 2 == 0 ? 2.0f : (c % 2 ? -2.0f : 2.0f);
  auto w = quantize_q8(wf, n, k, G);
  REQUIRE(w);
  std::vector<std::byte> abuf(q8_activation_bytes(1, k, G) + 64);
  auto* base = reinterpret_cast<std::byte*>(
      (reinterpret_cast<std::uintptr_t>(abuf.data()) + 63) / 64 * 64);
  const Q8ActivationsView a = make_q8_view(base, 1, k, G);
  reference::quantize_activations_q8(x.data(), k, a);
  std::vector<float> yref(n);
  reference::gemm_q8_fast(*w, a, nullptr, yref.data(), n);
  for (std::size_t r = 0; r < n; ++r) {
    double expect = 0.0;
    for (std::size_t c = 0; c < k; ++c) expect += static_cast<double>(wf[r * k + c]) * x[c];
    REQUIRE(yref[r] == Approx(expect).margin(1e-3));
  }
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) continue;
    INFO("isa " << isa_name(isa));
    std::vector<float> y(n);
    REQUIRE(gemv(*w, x, y, {}, {nullptr, MatmulPath::fast, isa}));
    REQUIRE(std::memcmp(y.data(), yref.data(), n * 4) == 0);
  }
}

TEST_CASE("int8 gemv rejects bad arguments with named errors", "[kernels][q8]") {
  auto rng = test::make_rng(86);
  auto w = random_q8(rng, 4, 128, 128);
  std::vector<float> x(128), y(4), small(3);
  auto st = gemv(w, x, small);
  REQUIRE_FALSE(st);
  REQUIRE_THAT(st.error().message, Contains("y:"));
  auto sb = gemv(w, x, y, std::span<const float>(small));
  REQUIRE_FALSE(sb);
  REQUIRE_THAT(sb.error().message, Contains("bias"));
  REQUIRE_FALSE(gemv(Q8Matrix{}, x, y));
}

}  // namespace test_kernels_gemm_q8
