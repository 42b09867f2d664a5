// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/rope.hpp: RoPE on the device against the scalar twin
// (kernels::rope_tables + kernels::reference::rope), at small and large positions, with the
// validation layer on.
#include "edgellm/backend/vulkan/rope.hpp"

#include "backend/vulkan/op_fixtures.hpp"
#include "backend/vulkan/test_device.hpp"
#include "edgellm/kernels/elementwise.hpp"
#include "edgellm/kernels/reference.hpp"
#include "support/prelude.hpp"

#include <cmath>
#include <vector>

namespace test_backend_vulkan_rope {

namespace vk = edgellm::backend::vk;
namespace kernels = edgellm::kernels;

namespace {

// inv_freq[i] = theta^(-2i / head_dim), as model::rope_inv_freq without scaling.
std::vector<float> inv_freq(std::size_t head_dim, double theta) {
  std::vector<float> f(head_dim / 2);
  for (std::size_t i = 0; i < f.size(); ++i)
    f[i] = static_cast<float>(
        std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim)));
  return f;
}

}  // namespace

TEST_CASE("Vulkan rope matches the scalar twin", "[vulkan][rope]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto op = vk::Rope::create(*dev);
    REQUIRE(op);
    auto rng = test::make_rng(43);
    struct Shape {
      std::size_t rows, heads, head_dim, first_pos;
    };
    // head_dim 2 (one pair), an odd number of pairs, a Qwen2-like head; position 0, mid-size,
    // and up to 131071 (angles up to 1.3e5 rad at inv_freq[0] = 1: the reduction's far end).
    const Shape shapes[] = {{1, 1, 2, 0}, {3, 2, 10, 17}, {2, 3, 64, 31990}, {2, 2, 128, 131070}};
    for (const auto& s : shapes) {
      INFO("rows " << s.rows << ", heads " << s.heads << ", head_dim " << s.head_dim
                   << ", first_pos " << s.first_pos);
      const std::size_t half = s.head_dim / 2;
      const auto freq = inv_freq(s.head_dim, 1e6);
      const auto v = test::random_floats(rng, s.rows * s.heads * s.head_dim);
      auto vb = test::vk_buffer(*dev, v, "v");
      auto fb = test::vk_buffer(*dev, freq, "inv_freq");
      test::vk_run(*dev, [&](vk::CommandSequence& seq) {
        return op->record(seq, vb, fb, s.rows, s.heads, s.head_dim, s.first_pos);
      });
      const auto got = test::vk_read<float>(vb, v.size());
      std::vector<float> cos(s.rows * half), sin(s.rows * half), want = v;
      kernels::rope_tables(freq.data(), half, s.first_pos, s.rows, cos.data(), sin.data());
      kernels::reference::rope(want.data(), s.rows, s.heads, s.head_dim, cos.data(), sin.data());
      // The shader's sin / cos: Taylor remainders < 2e-9, reduction error < 1e-9 at these
      // angles, ~3 roundings of values <= 1 (2e-7); then two products and a sum in fp32. So
      // |err| <= ~4e-7 (|a| + |b|); 1e-6 leaves room for the spec's multiply-add freedom.
      for (std::size_t t = 0; t < s.rows; ++t)
        for (std::size_t h = 0; h < s.heads; ++h)
          for (std::size_t i = 0; i < half; ++i) {
            const std::size_t p = (t * s.heads + h) * s.head_dim + i;
            const double scale = std::fabs(double{v[p]}) + std::fabs(double{v[p + half]});
            INFO("t " << t << ", h " << h << ", i " << i);
            CHECK(std::fabs(double{got[p]} - double{want[p]}) <= 1e-6 * scale);
            CHECK(std::fabs(double{got[p + half]} - double{want[p + half]}) <= 1e-6 * scale);
          }
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("Vulkan rope names its bad arguments", "[vulkan][rope]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto op = vk::Rope::create(*dev);
    REQUIRE(op);
    auto seq = vk::CommandSequence::create(*dev, "bad");
    REQUIRE(seq);
    auto v = test::vk_buffer(*dev, std::vector<float>(2 * 2 * 8), "q");
    auto f = test::vk_buffer(*dev, std::vector<float>(3), "freq");
    auto st = op->record(*seq, v, f, 2, 2, 8, 0);  // inv_freq holds 3 of 4
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::shape_mismatch);
    CHECK_THAT(st.error().message, Contains("[vulkan rope] inv_freq: buffer 'freq' holds 12"));
    st = op->record(*seq, v, f, 3, 2, 6, 0);  // 36 floats in 32
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("v: buffer 'q'"));
    st = op->record(*seq, v, f, 2, 2, 7, 0);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("head_dim: 7"));
    st = op->record(*seq, v, f, 1, 1, 6, std::size_t{1} << 24);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::out_of_range);
    CHECK(seq->dispatches() == 0);
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_rope
