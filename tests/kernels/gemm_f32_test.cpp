// SPDX-License-Identifier: Apache-2.0
#include "edgellm/kernels/gemm_f32.hpp"

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "support/test_util.hpp"
#include "support/prelude.hpp"

namespace test_kernels_gemm_f32 {

using namespace edgellm::kernels;

namespace {

using Packed = std::vector<float, xsimd::aligned_allocator<float, 64>>;

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

// Y = X W^T + bias through the fast path, panels split into `parts` ranges packed and run in
// turn (as threads would), Y's other entries left at `fill`.
std::vector<float> fast(const std::vector<float>& w, std::size_t n, std::size_t ldw, std::size_t k,
                        const std::vector<float>& x, std::size_t ldx, std::size_t m,
                        const float* bias, std::size_t ldy, std::size_t parts, float fill) {
  Packed packed(gemm_f32_packed_floats(n, k) + 1, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> y(m * ldy, fill);
  const std::size_t np = gemm_f32_panels(n);
  for (std::size_t t = 0; t < parts; ++t) {
    const std::size_t p0 = np * t / parts, p1 = np * (t + 1) / parts;
    gemm_f32_pack(w.data(), ldw, n, k, p0, p1, packed.data());
    gemm_f32_rows(packed.data(), n, k, x.data(), ldx, m, bias, y.data(), ldy, p0, p1);
  }
  return y;
}

}  // namespace

TEST_CASE("gemm_f32_rows: bit for bit its scalar twin, any shape, split and stride",
          "[kernels][gemm_f32]") {
  constexpr std::size_t NR = gemm_f32_panel_rows(), MR = gemm_f32_block_x_rows();
  // k: below, at and past the column block (256 / 512) and the vector width; n: a partial
  // panel, one row, whole panels and a partial one; m: one, past MR, past the row chunk (120 / 144).
  const std::size_t k = GENERATE(1, 3, 16, 17, 255, 256, 257, 513, 1100);
  const std::size_t n = GENERATE(std::size_t{1}, NR - 1, 2 * NR + 5);
  const std::size_t m = GENERATE(std::size_t{1}, MR + 1, std::size_t{150});
  const bool with_bias = GENERATE(false, true);
  CAPTURE(k, n, m, with_bias);
  auto rng = edgellm::test::make_rng(k * 131 + n * 7 + m);
  const std::size_t ldw = k + 3, ldx = k + 1, ldy = n + 2;  // strides past the used columns
  const auto w = edgellm::test::random_floats(rng, n * ldw);
  const auto x = edgellm::test::random_floats(rng, m * ldx, 2.0f);
  const auto b = edgellm::test::random_floats(rng, n);
  const float* bias = with_bias ? b.data() : nullptr;
  std::vector<float> y_ref(m * ldy, -7.0f);
  reference::gemm_f32(w.data(), ldw, k, x.data(), ldx, m, bias, y_ref.data(), ldy, 0, n);
  const std::size_t parts = GENERATE(1, 3);
  const auto y = fast(w, n, ldw, k, x, ldx, m, bias, ldy, parts, -7.0f);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < y.size(); ++i) differ += same_bits(y[i], y_ref[i]) ? 0 : 1;
  CHECK(differ == 0);  // the padding columns of Y (past n) keep -7 in both
}

TEST_CASE("gemm_f32_pack_transposed: the panels gemm_f32_pack makes of the transpose",
          "[kernels][gemm_f32]") {
  const std::size_t n = GENERATE(std::size_t{1}, gemm_f32_panel_rows() + 3), k = GENERATE(1, 37);
  const std::size_t ldwt = n + 2;
  auto rng = edgellm::test::make_rng(n * 100 + k);
  const auto wt = edgellm::test::random_floats(rng, k * ldwt);
  std::vector<float> w(n * k);
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t c = 0; c < k; ++c) w[r * k + c] = wt[c * ldwt + r];
  Packed a(gemm_f32_packed_floats(n, k), 1.0f), b(gemm_f32_packed_floats(n, k), 2.0f);
  gemm_f32_pack(w.data(), k, n, k, 0, gemm_f32_panels(n), a.data());
  gemm_f32_pack_transposed(wt.data(), ldwt, n, k, 0, gemm_f32_panels(n), b.data());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("gemm_f32 (the scalar twin): within its stated bound of the exact product",
          "[kernels][gemm_f32]") {
  const std::size_t k = GENERATE(1, 64, 4864), n = 9, m = 4;
  auto rng = edgellm::test::make_rng(k);
  const auto w = edgellm::test::random_floats(rng, n * k);
  const auto x = edgellm::test::random_floats(rng, m * k, 3.0f);
  std::vector<float> y(m * n);
  reference::gemm_f32(w.data(), k, k, x.data(), k, m, nullptr, y.data(), n, 0, n);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t r = 0; r < n; ++r) {
      long double exact = 0, mag = 0;
      for (std::size_t c = 0; c < k; ++c) {
        exact += (long double)x[i * k + c] * w[r * k + c];
        mag += std::fabs((long double)x[i * k + c] * w[r * k + c]);
      }
      CHECK(std::fabs((long double)y[i * n + r] - exact) <= double(k) * 0x1p-24 * mag + 1e-30);
    }
}

TEST_CASE("gemm_f32_rows: k = 0 gives the bias, NaN and Inf propagate", "[kernels][gemm_f32]") {
  const std::size_t n = 5, m = 3;
  const std::vector<float> b = {1.0f, -2.0f, 0.5f, 0.0f, 3.0f};
  const std::vector<float> none;
  const auto y0 = fast(none, n, 0, 0, none, 0, m, b.data(), n, 1, 99.0f);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t r = 0; r < n; ++r) CHECK(y0[i * n + r] == b[r]);

  const std::size_t k = 40;
  std::vector<float> w(n * k, 1.0f), x(m * k, 1.0f);
  w[1 * k + 7] = std::numeric_limits<float>::quiet_NaN();
  x[2 * k + 3] = std::numeric_limits<float>::infinity();
  const auto y = fast(w, n, k, k, x, k, m, nullptr, n, 1, 0.0f);
  std::vector<float> y_ref(m * n);
  reference::gemm_f32(w.data(), k, k, x.data(), k, m, nullptr, y_ref.data(), n, 0, n);
  CHECK(std::isnan(y[0 * n + 1]));
  CHECK(std::isinf(y[2 * n + 0]));
  CHECK(y[0 * n + 0] == 40.0f);
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(same_bits(y[i], y_ref[i]));
}

}  // namespace test_kernels_gemm_f32
