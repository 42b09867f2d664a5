// SPDX-License-Identifier: Apache-2.0
#include "edgellm/kernels/gemm_q4_fast.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "edgellm/kernels/matmul.hpp"
#include "edgellm/kernels/reference.hpp"
#include "support/q4_fixtures.hpp"
#include "support/test_util.hpp"
#include "support/prelude.hpp"

namespace test_kernels_gemm_q4_fast {

using namespace edgellm::kernels;

namespace {
// Runs the fast path through the public entry point and checks it (a) equals the scalar fast
// twin bit for bit and (b) stays within the derived bound of the exact double-precision result.
void check_fast(const Q4Matrix& w, const std::vector<float>& x, std::size_t m, Isa isa,
                ThreadPool* pool = nullptr) {
  const std::size_t n = w.n(), k = w.k(), G = w.group_size();
  std::vector<float> y(m * n), yref(m * n), yexact(n);
  MatmulOptions o;
  o.path = MatmulPath::fast;
  o.isa = isa;
  o.pool = pool;
  if (m == 1) {
    REQUIRE(gemv(w, std::span<const float>(x.data(), k), y, {}, o));
  } else {
    REQUIRE(gemm(w, x, m, y, {}, o));
  }
  std::vector<std::byte> raw(q8_activation_bytes(m, k, G) + 64);
  auto* p = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(raw.data()) + 63) &
                                         ~std::uintptr_t{63});
  auto a = make_q8_view(p, m, k, G);
  reference::quantize_activations_q8(x.data(), k, a);
  reference::gemm_q4_fast(w, a, nullptr, yref.data(), n);
  INFO("isa " << isa_name(isa) << " m " << m << " n " << n << " k " << k << " G " << G);
  REQUIRE(std::memcmp(y.data(), yref.data(), y.size() * 4) == 0);
  for (std::size_t i = 0; i < m; ++i) {
    reference::gemv_q4(w, x.data() + i * k, yexact.data(), nullptr);
    for (std::size_t r = 0; r < n; ++r) {
      const double bound = reference::fast_error_bound(w, x.data() + i * k, r);
      REQUIRE(std::fabs(static_cast<double>(yref[i * n + r]) - yexact[r]) <= bound);
    }
  }
}
}  // namespace

TEST_CASE("fast path: every ISA level equals the scalar twin and stays within the bound",
          "[kernels][fast]") {
  auto rng = test::make_rng(41);
  const bool small = test::small_scale();
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) {
      WARN("skipping " << isa_name(isa) << ": not supported by this CPU/build");
      continue;
    }
    // Printed in the log, so a CI run on several CPU models shows which kernels it checked.
    WARN("checking microkernel " << isa_name(isa) << " against the scalar twin (best here: "
                                 << isa_name(best_isa()) << ")");
    for (std::size_t G : {32, 64, 128}) {
      for (std::size_t m : small ? std::vector<std::size_t>{1, 2, 3, 6, 9, 16}
                                 : std::vector<std::size_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 14, 16,
                                                            17, 130}) {
        const std::size_t n = small ? 21 : (m * 13) % 70 + 5;
        const std::size_t k = G * (m % 2 ? 3 : 1) + (small ? 0 : G * (m > 8 ? 28 : 0));
        auto w = test::random_q4(rng, n, k, G,
                                 m % 3 == 0 ? test::GroupKind::all_zero : test::GroupKind::random);
        auto x = test::random_floats(rng, m * k);
        // Outliers: one huge activation per row inflates its group's step (the bound grows
        // with it); tiny activations in another group.
        for (std::size_t i = 0; i < m; ++i) {
          x[i * k + (i * 7) % k] = 60.0f;
          for (std::size_t c = 0; c < std::min<std::size_t>(G, k); ++c)
            if (k >= 2 * G) x[i * k + G + c] *= 1e-4f;
        }
        check_fast(w, x, m, isa);
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("fast path generic microkernel on each xsimd architecture",
                        "[kernels][fast]", test::TestArchs) {
  auto rng = test::make_rng(42);
  auto w = test::random_q4(rng, 37, 384, 128);
  auto x = test::random_floats(rng, 5 * 384);
  std::vector<float> y(5 * 37), yref(5 * 37);
  MatmulOptions o;
  o.path = MatmulPath::fast;
  o.isa = Isa::generic;
  REQUIRE(gemm<TestType>(w, x, 5, y, {}, o));
  o.isa = best_isa();
  REQUIRE(gemm(w, x, 5, yref, {}, o));
  REQUIRE(std::memcmp(y.data(), yref.data(), y.size() * 4) == 0);
}

TEST_CASE("fast path is bit-identical for every thread count and keeps bias", "[kernels][fast]") {
  auto rng = test::make_rng(43);
  auto w = test::random_q4(rng, 16 * 9 + 3, 512, 64);
  auto x = test::random_floats(rng, 11 * 512);
  auto bias = test::random_floats(rng, w.n());
  MatmulOptions o;
  o.path = MatmulPath::fast;
  Workspace ws;
  o.workspace = &ws;
  std::vector<float> y1(11 * w.n()), v1(w.n());
  REQUIRE(gemm(w, x, 11, y1, bias, o));
  REQUIRE(gemv(w, std::span<const float>(x.data(), 512), v1, bias, o));
  for (std::size_t i = 0; i < w.n(); ++i) REQUIRE(v1[i] == y1[i]);  // gemv == row 0 of gemm
  for (std::size_t threads : {2, 3, 5}) {
    auto pool = ThreadPool::create(threads);
    REQUIRE(pool);
    o.pool = pool->get();
    std::vector<float> y(11 * w.n());
    REQUIRE(gemm(w, x, 11, y, bias, o));
    REQUIRE(std::memcmp(y.data(), y1.data(), y.size() * 4) == 0);
  }
}

TEST_CASE("fast path: non-finite activations make the outputs NaN", "[kernels][fast]") {
  auto rng = test::make_rng(44);
  auto w = test::random_q4(rng, 20, 256, 128);
  auto x = test::random_floats(rng, 256);
  x[200] = std::numeric_limits<float>::infinity();
  std::vector<float> y(20);
  MatmulOptions o;
  o.path = MatmulPath::fast;
  REQUIRE(gemv(w, x, y, {}, o));
  for (float v : y) REQUIRE(std::isnan(v));
}

TEST_CASE("runtime dispatch picks the microkernel the CPU calls for", "[kernels][fast]") {
  WARN("best microkernel on this CPU: " << isa_name(best_isa()));
  // Set by ctest where it knows the CPU (the arm64 suite under QEMU's CPU models).
  if (const char* want = std::getenv("EDGELLM_EXPECT_BEST_ISA"); want && *want)
    REQUIRE(std::string(isa_name(best_isa())) == want);
}

TEST_CASE("runtime dispatch falls back and refuses unsupported levels", "[kernels][fast]") {
  const Isa best = best_isa();
  REQUIRE(isa_supported(best));
  REQUIRE(isa_supported(Isa::generic));
  INFO("best isa here: " << isa_name(best));
  auto rng = test::make_rng(45);
  auto w = test::random_q4(rng, 16, 128, 128);
  std::vector<float> x(128, 1.0f), y(16);
  for (Isa isa : kAllIsas) {
    MatmulOptions o;
    o.path = MatmulPath::fast;
    o.isa = isa;
    auto st = gemv(w, x, y, {}, o);
    if (isa_supported(isa)) {
      REQUIRE(st);
    } else {
      REQUIRE_FALSE(st);
      REQUIRE_THAT(st.error().message, Catch::Contains(std::string("isa: ") + isa_name(isa)));
    }
  }
}

}  // namespace test_kernels_gemm_q4_fast
