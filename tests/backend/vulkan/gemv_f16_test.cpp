// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/gemv_f16.hpp: y = x W^T for a dense fp16 W on the device
// against the scalar twin (kernels::reference::dense_matmul_rows) for odd k, n = 1, m above one
// dispatch's 8 rows, row offsets, subnormal weights, with the validation layer on.
#include "edgellm/backend/vulkan/gemv_f16.hpp"

#include "backend/vulkan/op_fixtures.hpp"
#include "backend/vulkan/test_device.hpp"
#include "edgellm/kernels/dense_matmul.hpp"
#include "edgellm/kernels/float16.hpp"
#include "support/prelude.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace test_backend_vulkan_gemv_f16 {

namespace vk = edgellm::backend::vk;
namespace kernels = edgellm::kernels;

namespace {

// A random fp16 matrix [n][k]; a few subnormal and signed-zero weights (decoded exactly by the
// shader: none may be flushed).
kernels::DenseMatrix random_f16(std::mt19937_64& rng, std::size_t n, std::size_t k) {
  std::vector<std::uint16_t> h(n * k);
  std::normal_distribution<float> d(0.0f, 0.5f);
  for (auto& v : h) v = kernels::f32_to_f16(d(rng));
  h[0] = 0x0001;                                   // the smallest subnormal, 2^-24
  if (h.size() > 2) h[1] = 0x83ff, h[2] = 0x8000;  // the largest negative subnormal, -0
  auto m = kernels::DenseMatrix::copy_of(kernels::DenseType::f16, n, k, std::as_bytes(std::span(h)),
                                         "w");
  REQUIRE(m);
  return std::move(*m);
}

}  // namespace

TEST_CASE("the Vulkan fp16 GEMV matches the scalar twin", "[vulkan][gemv_f16]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto op = vk::GemvF16::create(*dev);
    REQUIRE(op);
    auto rng = test::make_rng(44);
    // n = k = 1; odd k (rows not word-aligned: the elementwise path); k not a multiple of the
    // workgroup; m = 11 (two dispatches: 8 + 3) with x and y row offsets.
    const vk::GemvF16Shape shapes[] = {
        {1, 1, 1, 0, 0}, {37, 129, 1, 0, 0}, {300, 2 * 128 + 6, 3, 0, 0}, {53, 64, 11, 2, 1}};
    for (const auto& s : shapes) {
      INFO("n " << s.n << ", k " << s.k << ", m " << s.m << ", x_row " << s.x_row << ", y_row "
                << s.y_row);
      const auto w = random_f16(rng, s.n, s.k);
      const auto x = test::random_floats(rng, (s.x_row + s.m) * s.k);
      auto wb = vk::upload_dense(*dev, w, "w");
      REQUIRE(wb);
      auto xb = test::vk_buffer(*dev, x, "x");
      auto yb = test::vk_buffer(*dev, std::vector<float>((s.y_row + s.m) * s.n, -1.0f), "y");
      test::vk_run(*dev, [&](vk::CommandSequence& seq) { return op->record(seq, *wb, xb, yb, s); });
      const auto got = test::vk_read<float>(yb, (s.y_row + s.m) * s.n);
      for (std::size_t r = 0; r < s.y_row * s.n; ++r) CHECK(got[r] == -1.0f);  // untouched
      std::vector<float> want(s.m * s.n);
      kernels::reference::dense_matmul_rows(kernels::DenseType::f16, w.data(), s.k,
                                            x.data() + s.x_row * s.k, s.k, s.m, nullptr,
                                            want.data(), s.n, 0, s.n);
      // Both sums are fp32 in different orders: each within (k + 1) u sum |x w| of the exact
      // value, so they differ by at most 2 (k + 1) u sum |x w| (u = 2^-24).
      std::vector<float> row(s.k);
      for (std::size_t j = 0; j < s.m; ++j)
        for (std::size_t r = 0; r < s.n; ++r) {
          w.row(r, row.data());
          double mag = 0.0;
          for (std::size_t c = 0; c < s.k; ++c)
            mag += std::fabs(double{x[(s.x_row + j) * s.k + c]} * double{row[c]});
          const double tol = 2.0 * static_cast<double>(s.k + 1) * std::ldexp(mag, -24);
          INFO("row " << j << ", output " << r);
          CHECK(std::fabs(double{got[(s.y_row + j) * s.n + r]} - double{want[j * s.n + r]}) <= tol);
        }
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("the Vulkan fp16 GEMV names its bad arguments", "[vulkan][gemv_f16]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto op = vk::GemvF16::create(*dev);
    REQUIRE(op);
    auto seq = vk::CommandSequence::create(*dev, "bad");
    REQUIRE(seq);
    auto w = test::vk_buffer(*dev, std::vector<std::uint16_t>(10 * 7 + 1), "lm_head");
    auto x = test::vk_buffer(*dev, std::vector<float>(2 * 7), "x");
    auto y = test::vk_buffer(*dev, std::vector<float>(2 * 10), "logits");
    auto st = op->record(*seq, w, x, y, {11, 7, 1, 0, 0});  // W [11][7] in [10][7] + 1
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::shape_mismatch);
    CHECK_THAT(st.error().message, Contains("[vulkan gemv_f16] w: buffer 'lm_head' holds 142 "
                                            "bytes; [11][7] fp16 needs 156"));
    st = op->record(*seq, w, x, y, {10, 7, 2, 1, 0});  // x rows [1, 3) of 2
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("x: buffer 'x'"));
    st = op->record(*seq, w, x, y, {10, 7, 2, 0, 1});  // y rows [1, 3) of 2
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("y: buffer 'logits'"));
    st = op->record(*seq, w, x, y, {10, 7, 0, 0, 0});
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::invalid_argument);
    CHECK(seq->dispatches() == 0);
    REQUIRE(op->record(*seq, w, x, y, {10, 7, 2, 0, 0}));
    CHECK(seq->dispatches() == 1);
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_gemv_f16
