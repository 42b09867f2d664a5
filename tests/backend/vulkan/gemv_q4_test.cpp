// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/gemv_q4.hpp: y = x W^T on the device against the scalar twin
// (kernels/reference.hpp) at group 128, odd n, several k, both weight upload paths, the
// subgroup and the portable shader builds, with the validation layer on and no message allowed.
#include "edgellm/backend/vulkan/gemv_q4.hpp"

#include "backend/vulkan/test_device.hpp"
#include "edgellm/kernels/reference.hpp"
#include "support/prelude.hpp"
#include "support/q4_fixtures.hpp"

#include <cmath>
#include <random>
#include <vector>

namespace test_backend_vulkan_gemv_q4 {

namespace vk = edgellm::backend::vk;
namespace kernels = edgellm::kernels;

TEST_CASE("the Vulkan int4 GEMV matches the scalar twin", "[vulkan][gemv_q4]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto rng = test::make_rng(18);
    struct Shape {
      std::size_t n, k;
      test::GroupKind kind;
      std::size_t group = 128;
    };
    // Odd n (a partial last tile), k = 128 m, m = 1 .. 9 (so k is not a multiple of the
    // workgroup's stride over code words), extreme and all-zero groups; groups of 64 and 32;
    // 65 and 70 groups (more than the 64 invocations of a workgroup, so some take two groups).
    const Shape shapes[] = {{1, 128, test::GroupKind::random},
                            {37, 384, test::GroupKind::random},
                            {45, 1152, test::GroupKind::extreme},
                            {17, 640, test::GroupKind::all_zero},
                            {301, 256, test::GroupKind::random},
                            {33, 192, test::GroupKind::random, 64},
                            {19, 96, test::GroupKind::extreme, 32},
                            {21, 128 * 65, test::GroupKind::random},
                            {35, 32 * 70, test::GroupKind::extreme, 32}};
    struct Run {
      bool staged, portable;
    };
    for (const auto& s : shapes) {
      for (const auto [staged, portable] : {Run{false, false}, Run{true, false}, Run{false, true}}) {
        INFO("n " << s.n << ", k " << s.k << ", group " << s.group
                  << (staged ? ", staged upload" : ", direct upload")
                  << (portable ? ", portable build" : ""));
        const auto w = test::random_q4(rng, s.n, s.k, s.group, s.kind);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::vector<float> x(s.k), want(s.n), got(s.n, -1.0f);
        for (auto& v : x) v = dist(rng);
        kernels::reference::gemv_q4(w, x.data(), want.data(), nullptr);
        vk::GemvQ4Options options;
        options.weights.force_staging = staged;
        options.weights.staging_chunk_bytes = 4096;  // several chunks
        // The staged runs also take the 2D grid (devices allow 65535 groups along x; this
        // takes the path that a >1M-row matrix would).
        if (staged) options.max_groups_x = 2;
        options.portable = portable;
        auto op = vk::GemvQ4::create(*dev, w, options);
        INFO((op ? std::string() : op.error().message));
        REQUIRE(op);
        CHECK(std::string(op->variant()) ==
              (dev->info().subgroup_arithmetic && !portable ? "subgroup" : "portable"));
        CHECK(op->weights_host_visible() == (!staged && dev->info().unified_memory()));
        const std::size_t workgroups =
            (w.n_tiles() + vk::GemvQ4::kTilesPerWorkgroup - 1) / vk::GemvQ4::kTilesPerWorkgroup;
        if (staged) CHECK(op->groups_y() == (workgroups + 1) / 2);
        REQUIRE(op->workgroup_size() >= 16);
        REQUIRE(op->run(x, got));
        // The fp32 bound of the CPU's exact kernels (support/q4_fixtures.hpp): the shader's
        // sums are shorter than k + 2 terms per output.
        for (std::size_t r = 0; r < s.n; ++r) {
          INFO("row " << r);
          CHECK(std::fabs(double{got[r]} - double{want[r]}) <=
                test::exact_tolerance(w, x.data(), r, 0.0f));
        }
        // The recorded command buffer runs again with another x.
        for (auto& v : x) v = -v;
        REQUIRE(op->run(x, got));
        kernels::reference::gemv_q4(w, x.data(), want.data(), nullptr);
        for (std::size_t r = 0; r < s.n; ++r)
          CHECK(std::fabs(double{got[r]} - double{want[r]}) <=
                test::exact_tolerance(w, x.data(), r, 0.0f));
      }
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("the Vulkan int4 GEMV rejects what it cannot run", "[vulkan][gemv_q4]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto rng = test::make_rng(19);
    auto empty = vk::GemvQ4::create(*dev, kernels::Q4Matrix{});
    REQUIRE_FALSE(empty);
    CHECK(empty.error().code == errc::unsupported);
    const auto w = test::random_q4(rng, 16, 128, 128);
    auto op = vk::GemvQ4::create(*dev, w);
    REQUIRE(op);
    std::vector<float> x(127), y(16);
    auto st = op->run(x, y);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::shape_mismatch);
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("the Vulkan int4 GEMV chains in a CommandSequence over the caller's buffers",
          "[vulkan][gemv_q4]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto rng = test::make_rng(20);
    // h = W2 (W1 x): two GEMVs, the second reading the first's output on the device.
    const auto w1 = test::random_q4(rng, 256, 384, 128);
    const auto w2 = test::random_q4(rng, 37, 256, 128);
    auto op1 = vk::GemvQ4::create(*dev, w1);
    auto op2 = vk::GemvQ4::create(*dev, w2);
    REQUIRE((op1 && op2));
    CHECK(op1->n() == 256);
    CHECK(op1->k() == 384);
    CHECK(op1->weight_bytes() >= w1.byte_size());
    CHECK(op1->group_size() == 128);
    // x is row 1 of a [2][384] buffer, the result row 2 of a [3][37] one.
    auto x = vk::Buffer::create(*dev, 2 * 384 * 4, "x", {vk::BufferKind::host_io});
    auto mid = vk::Buffer::create(*dev, 256 * 4, "mid");
    auto y = vk::Buffer::create(*dev, 3 * 37 * 4, "y", {vk::BufferKind::host_io});
    REQUIRE((x && mid && y));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> xs(384), want_mid(256), want(37), got(37);
    for (auto& v : xs) v = dist(rng);
    REQUIRE(x->write(std::as_bytes(std::span(xs)), 384 * 4));
    auto seq = vk::CommandSequence::create(*dev, "gemv chain");
    REQUIRE(seq);
    REQUIRE(op1->record(*seq, *x, *mid, 1, 0));
    REQUIRE(op2->record(*seq, *mid, *y, 0, 2));
    auto past = op2->record(*seq, *mid, *y, 0, 3);  // row 3 of a 3-row buffer
    REQUIRE_FALSE(past);
    CHECK_THAT(past.error().message, Contains("y: buffer 'y'"));
    // A buffer too small for the op is refused by name, and nothing is recorded.
    auto st = op2->record(*seq, *y, *mid);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::shape_mismatch);
    CHECK_THAT(st.error().message, Contains("x: buffer 'y'"));
    CHECK(seq->dispatches() == 2);
    REQUIRE(seq->submit());
    CHECK(seq->submits() == 1);
    REQUIRE(y->read(std::as_writable_bytes(std::span(got)), 2 * 37 * 4));
    // The device's intermediate differs from the CPU's by fp32 rounding only, so the second
    // product is checked against the twin on the device's own intermediate.
    std::vector<float> dev_mid(256);
    {
      auto readable = vk::Buffer::create(*dev, 256 * 4, "mid copy", {vk::BufferKind::host_io});
      REQUIRE(readable);
      auto again = vk::CommandSequence::create(*dev, "mid");
      REQUIRE(again);
      REQUIRE(op1->record(*again, *x, *readable, 1, 0));
      REQUIRE(again->submit());
      REQUIRE(readable->read(std::as_writable_bytes(std::span(dev_mid))));
    }
    kernels::reference::gemv_q4(w1, xs.data(), want_mid.data(), nullptr);
    for (std::size_t r = 0; r < 256; ++r)
      CHECK(std::fabs(double{dev_mid[r]} - double{want_mid[r]}) <=
            test::exact_tolerance(w1, xs.data(), r, 0.0f));
    kernels::reference::gemv_q4(w2, dev_mid.data(), want.data(), nullptr);
    for (std::size_t r = 0; r < 37; ++r)
      CHECK(std::fabs(double{got[r]} - double{want[r]}) <=
            test::exact_tolerance(w2, dev_mid.data(), r, 0.0f));
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_gemv_q4
