// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/gemm_q4.hpp: Y = X W^T for m activation rows on the device
// against the exact scalar twin (kernels::reference::gemm_q4) at groups 128, 64 and 32: m = 1, 5, 8 (one
// full workgroup tile), 13 (a partial last tile), odd n (a partial last weight tile), several k,
// extreme and all-zero groups, both weight upload paths, run() and record() into a
// CommandSequence (the same bits); bad arguments. Validation on.
#include "edgellm/backend/vulkan/gemm_q4.hpp"

#include "backend/vulkan/op_fixtures.hpp"
#include "backend/vulkan/test_device.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/gemv_q4.hpp"
#include "edgellm/kernels/reference.hpp"
#include "support/prelude.hpp"
#include "support/q4_fixtures.hpp"

#include <cmath>
#include <random>
#include <vector>

namespace test_backend_vulkan_gemm_q4 {

namespace vk = edgellm::backend::vk;
namespace kernels = edgellm::kernels;

TEST_CASE("the Vulkan int4 GEMM matches the scalar twin", "[vulkan][gemm_q4]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto rng = test::make_rng(21);
    struct Shape {
      std::size_t n, k;
      test::GroupKind kind;
      bool staged;
      std::size_t group = 128;
    };
    const Shape shapes[] = {{37, 384, test::GroupKind::random, false},
                            {45, 1152, test::GroupKind::extreme, true},
                            {17, 640, test::GroupKind::all_zero, false},
                            {16, 128, test::GroupKind::random, true},
                            {21, 192, test::GroupKind::random, false, 64},
                            {19, 96, test::GroupKind::extreme, false, 32}};
    for (const auto& s : shapes) {
      const auto w = test::random_q4(rng, s.n, s.k, s.group, s.kind);
      vk::BufferOptions upload;
      upload.force_staging = s.staged;
      auto op = vk::GemmQ4::create(*dev, w, 13, upload);
      INFO((op ? std::string() : op.error().message));
      REQUIRE(op);
      for (const std::size_t m : {1, 5, 8, 13}) {
        INFO("n " << s.n << ", k " << s.k << ", group " << s.group << ", m " << m);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::vector<float> x(m * s.k), want(m * s.n), got(m * s.n, -1.0f);
        for (auto& v : x) v = dist(rng);
        kernels::reference::gemm_q4(w, x.data(), s.k, want.data(), s.n, m, nullptr);
        REQUIRE(op->run(x, got, m));
        if (m == 13) {  // the same product recorded into a CommandSequence over caller buffers
          auto xb = vk::Buffer::create(*dev, x.size() * 4, "x", {vk::BufferKind::host_io});
          auto yb = vk::Buffer::create(*dev, want.size() * 4, "y", {vk::BufferKind::host_io});
          auto seq = vk::CommandSequence::create(*dev, "gemm");
          REQUIRE((xb && yb && seq));
          REQUIRE(xb->write(std::as_bytes(std::span(x))));
          REQUIRE(op->record(*seq, *xb, *yb, m));
          REQUIRE(seq->submit());
          std::vector<float> again(got.size());
          REQUIRE(yb->read(std::as_writable_bytes(std::span(again))));
          CHECK(again == got);
        }
        // The exact kernels' fp32 bound (support/q4_fixtures.hpp): the shader's sums are a
        // running sum of G terms per group, then fewer than n_groups + 4 over groups.
        for (std::size_t i = 0; i < m; ++i) {
          for (std::size_t r = 0; r < s.n; ++r) {
            const double err = std::fabs(double{got[i * s.n + r]} - double{want[i * s.n + r]});
            const double tol = test::exact_tolerance(w, x.data() + i * s.k, r, 0.0f);
            if (!(err <= tol)) {
              INFO("activation row " << i << ", output " << r << ": device " << got[i * s.n + r]
                                     << ", twin " << want[i * s.n + r]);
              REQUIRE(err <= tol);
            }
          }
        }
      }
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("the Vulkan int4 GEMM rejects what it cannot run", "[vulkan][gemm_q4]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto rng = test::make_rng(22);
    auto g16 = vk::GemmQ4::for_shape(*dev, 16, 128, 16, 4);
    REQUIRE_FALSE(g16);
    CHECK(g16.error().code == errc::unsupported);
    CHECK_THAT(g16.error().message, Contains("group size 16"));
    auto odd_k = vk::GemmQ4::for_shape(*dev, 16, 96, 64, 4);
    REQUIRE_FALSE(odd_k);
    CHECK_THAT(odd_k.error().message, Contains("multiple of the group size 64"));
    const auto w = test::random_q4(rng, 16, 128, 128);
    auto zero = vk::GemmQ4::create(*dev, w, 0);
    REQUIRE_FALSE(zero);
    CHECK_THAT(zero.error().message, Contains("max_m: must be positive"));
    auto op = vk::GemmQ4::create(*dev, w, 4);
    REQUIRE(op);
    std::vector<float> x(5 * 128), y(5 * 16);
    for (const std::size_t m : {0, 5}) {
      auto st = op->run(std::span(x).first(m * 128), std::span(y).first(m * 16), m);
      REQUIRE_FALSE(st);
      CHECK(st.error().code == errc::shape_mismatch);
      CHECK_THAT(st.error().message, Contains("m: " + std::to_string(m)));
    }
    auto st = op->run(std::span(x).first(2 * 128 - 1), std::span(y).first(2 * 16), 2);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("x: size 255"));
    auto small = vk::Buffer::create(*dev, 64, "small", {vk::BufferKind::host_io});
    auto seq = vk::CommandSequence::create(*dev, "gemm");
    REQUIRE((small && seq));
    st = op->record(*seq, *small, *small, 1);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::shape_mismatch);
    CHECK_THAT(st.error().message, Contains("x: buffer 'small' holds 64 bytes; [1][128] fp32"));
    CHECK(seq->dispatches() == 0);
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("the Vulkan int4 GEMM runs over a GEMV's weights", "[vulkan][gemm_q4]") {
  // A backend uploads each linear once: GemmQ4::for_shape records over GemvQ4's tiles.
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto rng = test::make_rng(22);
    const auto w = test::random_q4(rng, 29, 320, 64);
    auto gemv = vk::GemvQ4::create(*dev, w);
    auto gemm = vk::GemmQ4::for_shape(*dev, 29, 320, 64, 6);
    REQUIRE((gemv && gemm));
    const std::size_t m = 6;
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(m * 320), want(m * 29), got(m * 29);
    for (auto& v : x) v = dist(rng);
    kernels::reference::gemm_q4(w, x.data(), 320, want.data(), 29, m, nullptr);
    auto xb = test::vk_buffer(*dev, x, "x");
    auto yb = test::vk_buffer(*dev, got, "y");
    test::vk_run(*dev, [&](vk::CommandSequence& s) {
      return gemm->record(s, gemv->weights(), xb, yb, m);
    });
    got = test::vk_read<float>(yb, m * 29);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t r = 0; r < 29; ++r)
        CHECK(std::fabs(double{got[i * 29 + r]} - double{want[i * 29 + r]}) <=
              test::exact_tolerance(w, x.data() + i * 320, r, 0.0f));
    // Weights of another (smaller) shape are refused by name.
    const auto small = test::random_q4(rng, 16, 320, 64);
    auto other = vk::GemvQ4::create(*dev, small);
    REQUIRE(other);
    auto seq = vk::CommandSequence::create(*dev, "bad");
    REQUIRE(seq);
    auto st = gemm->record(*seq, other->weights(), xb, yb, m);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("w: buffer"));
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_gemm_q4
