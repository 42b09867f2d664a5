// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/elementwise.hpp: silu_mul and add on the device against their
// scalar twins (kernels/reference.hpp) at odd counts, with the validation layer on.
#include "edgellm/backend/vulkan/elementwise.hpp"

#include "backend/vulkan/op_fixtures.hpp"
#include "backend/vulkan/test_device.hpp"
#include "edgellm/kernels/reference.hpp"
#include "support/prelude.hpp"

#include <cmath>
#include <vector>

namespace test_backend_vulkan_elementwise {

namespace vk = edgellm::backend::vk;
namespace kernels = edgellm::kernels;

TEST_CASE("Vulkan silu_mul and add match their scalar twins", "[vulkan][elementwise]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto silu = vk::SiluMul::create(*dev);
    auto add = vk::Add::create(*dev);
    REQUIRE(silu);
    REQUIRE(add);
    auto rng = test::make_rng(41);
    // 1, a count below one workgroup, and counts that end mid-workgroup.
    for (const std::size_t count :
         {std::size_t{1}, std::size_t{37}, std::size_t{silu->workgroup_size()} * 3 + 5}) {
      INFO("count " << count);
      auto g = test::random_floats(rng, count, 4.0f);
      const auto u = test::random_floats(rng, count);
      g[0] = -100.0f;  // exp(100) overflows to +inf: the limit -0 * u
      if (count > 1) g[1] = 100.0f;
      auto gb = test::vk_buffer(*dev, g, "g");
      auto ub = test::vk_buffer(*dev, u, "u");
      test::vk_run(*dev, [&](vk::CommandSequence& s) { return silu->record(s, gb, ub, count); });
      const auto got = test::vk_read<float>(gb, count);
      auto want = g;
      kernels::reference::silu_mul(want.data(), u.data(), count);
      // Vulkan's exp: 3 + 2|x| ulp, division 2.5 ulp, three more roundings: (8 + 2|g|) ulp of
      // the result (ulp = 2^-23 relative, a factor 2 of margin over 2^-24).
      for (std::size_t i = 0; i < count; ++i) {
        INFO("i " << i << ", g " << g[i]);
        const double tol = (8.0 + 2.0 * std::min(std::fabs(double{g[i]}), 88.0)) *
                               std::ldexp(std::fabs(double{want[i]}), -23) +
                           1e-30;
        CHECK(std::fabs(double{got[i]} - double{want[i]}) <= tol);
      }
      // add: one fp32 addition per element, bit-exact.
      auto x = test::random_floats(rng, count);
      const auto y = test::random_floats(rng, count);
      auto xb = test::vk_buffer(*dev, x, "x");
      auto yb = test::vk_buffer(*dev, y, "y");
      test::vk_run(*dev, [&](vk::CommandSequence& s) { return add->record(s, xb, yb, count); });
      kernels::reference::add(x.data(), y.data(), count);
      CHECK(test::vk_read<float>(xb, count) == x);
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("Vulkan silu_mul and add name their bad arguments", "[vulkan][elementwise]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto silu = vk::SiluMul::create(*dev);
    auto add = vk::Add::create(*dev);
    REQUIRE(silu);
    REQUIRE(add);
    auto seq = vk::CommandSequence::create(*dev, "bad");
    REQUIRE(seq);
    auto big = test::vk_buffer(*dev, std::vector<float>(16), "big");
    auto small = test::vk_buffer(*dev, std::vector<float>(8), "small");
    auto st = silu->record(*seq, big, small, 16);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::shape_mismatch);
    CHECK_THAT(st.error().message, Contains("[vulkan silu_mul] u: buffer 'small' holds 32 bytes"));
    st = add->record(*seq, small, big, 16);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("[vulkan add] x:"));
    st = add->record(*seq, big, big, 0);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("count"));
    CHECK(seq->dispatches() == 0);
    REQUIRE(seq->submit());  // an empty sequence runs
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("Vulkan add_bias adds the bias to every row, exactly", "[vulkan][elementwise]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto op = vk::AddBias::create(*dev);
    REQUIRE(op);
    auto rng = test::make_rng(43);
    for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{1, 1}, {3, 37}, {5, 301}}) {
      INFO(rows << " x " << cols);
      const auto x = test::random_floats(rng, rows * cols);
      const auto b = test::random_floats(rng, cols);
      auto xb = test::vk_buffer(*dev, x, "x");
      auto bb = test::vk_buffer(*dev, b, "b");
      test::vk_run(*dev, [&](vk::CommandSequence& s) { return op->record(s, xb, bb, rows, cols); });
      const auto got = test::vk_read<float>(xb, rows * cols);
      for (std::size_t i = 0; i < rows * cols; ++i) REQUIRE(got[i] == x[i] + b[i % cols]);
    }
    auto xb = test::vk_buffer(*dev, std::vector<float>(8), "x");
    auto bb = test::vk_buffer(*dev, std::vector<float>(4), "bias");
    auto seq = vk::CommandSequence::create(*dev, "bad");
    REQUIRE(seq);
    auto st = op->record(*seq, xb, bb, 2, 5);  // x holds 8 floats, not 10
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("x: buffer 'x'"));
    st = op->record(*seq, xb, bb, 1, 8);  // the bias holds 4, not 8
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("b: buffer 'bias'"));
    CHECK_FALSE(op->record(*seq, xb, bb, 0, 4));
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_elementwise
