// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/gemv_q4.hpp: y = x W^T on the device against the scalar twin
// (kernels/reference.hpp) at group 128, odd n, several k, both weight upload paths, with the
// validation layer on and no message allowed.
#include "edgellm/backend/vulkan/gemv_q4.hpp"

#include "backend/vulkan/test_device.hpp"
#include "edgellm/kernels/reference.hpp"
#include "support/prelude.hpp"
#include "support/q4_fixtures.hpp"

#include <cmath>
#include <random>
#include <vector>

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
    };
    // Odd n (a partial last tile), k = 128 m, m = 1 .. 9 (so k is not a multiple of the
    // workgroup's stride over code words), extreme and all-zero groups.
    const Shape shapes[] = {{1, 128, test::GroupKind::random},
                            {37, 384, test::GroupKind::random},
                            {45, 1152, test::GroupKind::extreme},
                            {17, 640, test::GroupKind::all_zero},
                            {301, 256, test::GroupKind::random}};
    for (const auto& s : shapes) {
      for (const bool staged : {false, true}) {
        INFO("n " << s.n << ", k " << s.k << (staged ? ", staged upload" : ", direct upload"));
        const auto w = test::random_q4(rng, s.n, s.k, 128, s.kind);
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
        auto op = vk::GemvQ4::create(*dev, w, options);
        INFO((op ? std::string() : op.error().message));
        REQUIRE(op);
        CHECK(op->weights_host_visible() == (!staged && dev->info().unified_memory()));
        if (staged) CHECK(op->groups_y() == (w.n_tiles() + 1) / 2);
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
    const auto g64 = test::random_q4(rng, 16, 128, 64);
    auto op64 = vk::GemvQ4::create(*dev, g64);
    REQUIRE_FALSE(op64);
    CHECK(op64.error().code == errc::unsupported);
    CHECK_THAT(op64.error().message, Contains("group size 64"));
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
