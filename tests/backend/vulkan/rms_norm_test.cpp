// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/rms_norm.hpp: RMSNorm on the device against the scalar twin
// (kernels::reference::rms_norm, in double) for odd column counts, a row range, in place, with
// the validation layer on.
#include "edgellm/backend/vulkan/rms_norm.hpp"

#include "backend/vulkan/op_fixtures.hpp"
#include "backend/vulkan/test_device.hpp"
#include "edgellm/kernels/elementwise.hpp"
#include "edgellm/kernels/reference.hpp"
#include "support/prelude.hpp"

#include <bit>
#include <cmath>
#include <vector>

namespace test_backend_vulkan_rms_norm {

namespace vk = edgellm::backend::vk;
namespace kernels = edgellm::kernels;

TEST_CASE("Vulkan rms_norm matches the scalar twin", "[vulkan][rms_norm]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto op = vk::RmsNorm::create(*dev);
    REQUIRE(op);
    const std::size_t wg = op->workgroup_size();
    auto rng = test::make_rng(42);
    struct Shape {
      std::size_t rows, cols, r0, r1;
      bool in_place;
    };
    // 1 column; cols below, above and not a multiple of the workgroup; a row range [r0, r1).
    const Shape shapes[] = {{1, 1, 0, 1, false},
                            {3, 37, 0, 3, false},
                            {4, 3 * wg + 7, 1, 3, false},
                            {5, 896, 0, 5, true}};
    for (const auto& s : shapes) {
      INFO("rows " << s.rows << ", cols " << s.cols << ", [" << s.r0 << ", " << s.r1 << ")"
                   << (s.in_place ? ", in place" : ""));
      const auto x = test::random_floats(rng, s.rows * s.cols, 3.0f);
      const auto w = test::random_floats(rng, s.cols);
      const float eps = 1e-6f;
      std::vector<float> sentinel(s.rows * s.cols, 7.0f);
      auto xb = test::vk_buffer(*dev, x, "x");
      auto wb = test::vk_buffer(*dev, w, "w");
      auto ob = test::vk_buffer(*dev, sentinel, "out");
      vk::Buffer& out = s.in_place ? xb : ob;
      test::vk_run(*dev, [&](vk::CommandSequence& seq) {
        return op->record(seq, xb, wb, out, s.cols, s.r0, s.r1, eps);
      });
      const auto got = test::vk_read<float>(out, s.rows * s.cols);
      std::vector<float> want = s.in_place ? x : sentinel, fast = want;
      kernels::reference::rms_norm(x.data(), w.data(), want.data(), s.cols, s.r0, s.r1, eps);
      kernels::rms_norm(x.data(), w.data(), fast.data(), s.cols, s.r0, s.r1, eps);
      // fp32 sum of squares: cols / WG sequential terms per invocation, then a log2(WG) tree
      // (positive terms: relative error <= (cols / WG + log2 WG) u); half of it reaches inv,
      // plus ~10 ulp for the division, sqrt, reciprocal and two products. Counted in 2^-23
      // (twice u) for margin.
      const double ulps = static_cast<double>(s.cols / wg) + std::bit_width(wg) + 12.0;
      for (std::size_t i = 0; i < s.rows * s.cols; ++i) {
        INFO("element " << i);
        const double tol = ulps * std::ldexp(std::fabs(double{want[i]}), -23) + 1e-30;
        CHECK(std::fabs(double{got[i]} - double{want[i]}) <= tol);
        CHECK(std::fabs(double{fast[i]} - double{want[i]}) <= tol);  // the CPU kernel, too
      }
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("Vulkan rms_norm names its bad arguments", "[vulkan][rms_norm]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto op = vk::RmsNorm::create(*dev);
    REQUIRE(op);
    auto seq = vk::CommandSequence::create(*dev, "bad");
    REQUIRE(seq);
    auto x = test::vk_buffer(*dev, std::vector<float>(2 * 10), "act");
    auto w = test::vk_buffer(*dev, std::vector<float>(9), "norm");
    auto st = op->record(*seq, x, w, x, 10, 0, 2, 1e-6f);  // w holds 9 of 10
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::shape_mismatch);
    CHECK_THAT(st.error().message, Contains("[vulkan rms_norm] w: buffer 'norm' holds 36 bytes"));
    st = op->record(*seq, x, x, x, 10, 0, 3, 1e-6f);  // 3 rows of 10 in 20 floats
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("x: buffer 'act'"));
    st = op->record(*seq, x, x, x, 10, 2, 2, 1e-6f);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("rows: [2, 2) is empty"));
    st = op->record(*seq, x, x, x, 0, 0, 1, 1e-6f);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("cols"));
    CHECK(seq->dispatches() == 0);
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_rms_norm
