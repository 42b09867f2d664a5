// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/argmax.hpp: the greedy token on the device against a plain
// scalar loop, for n = 1, a Qwen2 vocabulary (151936), ties, signed zeros, -inf, NaN and +inf,
// several rows, with the validation layer on.
#include "edgellm/backend/vulkan/argmax.hpp"

#include "backend/vulkan/op_fixtures.hpp"
#include "backend/vulkan/test_device.hpp"
#include "support/prelude.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace test_backend_vulkan_argmax {

namespace vk = edgellm::backend::vk;

namespace {

// The scalar twin: the lowest index of the largest value, n when a value is NaN or +inf
// (decode::Sampler's greedy rule); -0 == +0 by the comparison.
std::uint32_t argmax_twin(const float* x, std::size_t n) {
  std::size_t best = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isnan(x[i]) || x[i] == std::numeric_limits<float>::infinity())
      return static_cast<std::uint32_t>(n);
    if (x[i] > x[best]) best = i;
  }
  return static_cast<std::uint32_t>(best);
}

// Runs the op on rows of x [rows][n]; returns out [rows].
std::vector<std::uint32_t> run(vk::Device& dev, const vk::Argmax& op, const std::vector<float>& x,
                               std::size_t n, std::size_t rows) {
  auto xb = test::vk_buffer(dev, x, "logits");
  auto ob = test::vk_buffer(dev, std::vector<std::uint32_t>(rows, 0xdeadbeefu), "token");
  test::vk_run(dev, [&](vk::CommandSequence& seq) { return op.record(seq, xb, ob, n, rows); });
  return test::vk_read<std::uint32_t>(ob, rows);
}

}  // namespace

TEST_CASE("Vulkan argmax matches the scalar twin", "[vulkan][argmax]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto op = vk::Argmax::create(*dev, 4);
    REQUIRE(op);
    constexpr float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto rng = test::make_rng(45);

    {  // n = 1
      for (const float v : {0.5f, -inf, -0.0f}) CHECK(run(*dev, *op, {v}, 1, 1)[0] == 0u);
      CHECK(run(*dev, *op, {nan}, 1, 1)[0] == 1u);
    }
    {  // a 151936-entry vocabulary, ties to the lowest index
      const std::size_t n = 151936, rows = 3;
      auto x = test::random_floats(rng, rows * n, 4.0f);
      x[0 * n + 140000] = x[0 * n + 100000] = 99.0f;  // tie in the middle
      x[1 * n + n - 1] = x[1 * n + 5] = 99.0f;        // tie between the first and last chunk
      x[2 * n + n - 1] = 99.0f;                       // the last element alone
      const auto got = run(*dev, *op, x, n, rows);
      for (std::size_t r = 0; r < rows; ++r) {
        INFO("row " << r);
        CHECK(got[r] == argmax_twin(x.data() + r * n, n));
      }
      CHECK(got == std::vector<std::uint32_t>{100000, 5, n - 1});
    }
    {  // odd n and special values
      const std::size_t n = 3 * op->workgroup_size() + 7, rows = 4;
      std::vector<float> x(rows * n, -1.0f);
      x[0 * n + 9] = -0.0f;  // -0 and +0 are equal: the lower index wins
      x[0 * n + 200 % n] = 0.0f;
      for (std::size_t i = 0; i < n; ++i) x[1 * n + i] = -inf;  // all -inf: index 0
      x[2 * n + n / 2] = nan;                                   // NaN: no answer
      x[3 * n + 1] = inf;                                       // +inf: no answer
      const auto got = run(*dev, *op, x, n, rows);
      for (std::size_t r = 0; r < rows; ++r) {
        INFO("row " << r);
        CHECK(got[r] == argmax_twin(x.data() + r * n, n));
      }
      CHECK(got == std::vector<std::uint32_t>{9, 0, static_cast<std::uint32_t>(n),
                                              static_cast<std::uint32_t>(n)});
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("Vulkan argmax names its bad arguments", "[vulkan][argmax]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    CHECK_FALSE(vk::Argmax::create(*dev, 0));
    auto op = vk::Argmax::create(*dev, 2);
    REQUIRE(op);
    auto seq = vk::CommandSequence::create(*dev, "bad");
    REQUIRE(seq);
    auto x = test::vk_buffer(*dev, std::vector<float>(2 * 50), "logits");
    auto out = test::vk_buffer(*dev, std::vector<std::uint32_t>(1), "token");
    auto st = op->record(*seq, x, out, 50, 2);  // out holds 1 of 2
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::shape_mismatch);
    CHECK_THAT(st.error().message, Contains("[vulkan argmax] out: buffer 'token' holds 4 bytes"));
    st = op->record(*seq, x, out, 101, 1);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("x: buffer 'logits'"));
    st = op->record(*seq, x, out, 10, 3);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("rows: 3"));
    st = op->record(*seq, x, out, 0, 1);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("n: must be positive"));
    CHECK(seq->dispatches() == 0);
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_argmax
