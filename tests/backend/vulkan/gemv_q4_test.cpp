// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/gemv_q4.hpp: y = x W^T on the device against the scalar twin
// (kernels/reference.hpp) at group 128, odd n, several k, both weight upload paths, the
// subgroup and the portable shader builds, with the validation layer on and no message allowed;
// with int8 activations (W4A8): the quantised row bit for bit against
// reference::quantize_activations_q8, the output against reference::gemm_q4_fast, for the
// integer-dot and the plain int builds, and the refusal where integer dot products are missing.
#include "edgellm/backend/vulkan/gemv_q4.hpp"

#include "backend/vulkan/test_device.hpp"
#include "edgellm/kernels/reference.hpp"
#include "support/prelude.hpp"
#include "support/q4_fixtures.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

namespace test_backend_vulkan_gemv_q4 {

namespace vk = edgellm::backend::vk;
namespace kernels = edgellm::kernels;

struct Shape {
  std::size_t n, k;
  test::GroupKind kind;
  std::size_t group = 128;
};
// Odd n (a partial last tile), k = 128 m, m = 1 .. 9 (so k is not a multiple of the workgroup's
// stride over code words), extreme and all-zero groups; groups of 64 and 32; 65 and 70 groups
// (more than the 64 invocations of a workgroup, so some take two groups).
const Shape kShapes[] = {{1, 128, test::GroupKind::random},
                         {37, 384, test::GroupKind::random},
                         {45, 1152, test::GroupKind::extreme},
                         {17, 640, test::GroupKind::all_zero},
                         {301, 256, test::GroupKind::random},
                         {33, 192, test::GroupKind::random, 64},
                         {19, 96, test::GroupKind::extreme, 32},
                         {21, 128 * 65, test::GroupKind::random},
                         {35, 32 * 70, test::GroupKind::extreme, 32}};

TEST_CASE("the Vulkan int4 GEMV matches the scalar twin", "[vulkan][gemv_q4]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto rng = test::make_rng(18);
    const auto& shapes = kShapes;
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

// The CPU's quantised row (reference::quantize_activations_q8) of one activation row.
struct CpuQ8 {
  std::vector<std::int8_t> q;
  std::vector<float> scale;
  std::vector<std::int32_t> sum;
  kernels::Q8ActivationsView view(std::size_t k, std::size_t group) {
    q.assign(k, 0);
    scale.assign(k / group, 0.0f);
    sum.assign(k / group, 0);
    return {q.data(), scale.data(), sum.data(), 1, k, group};
  }
};

// The int8 builds this device runs: the plain int build always, the integer-dot one where the
// device has shaderIntegerDotProduct.
std::vector<bool> int8_builds(const vk::Device& dev) {
  if (dev.info().integer_dot_product) return {true, false};
  WARN("no shaderIntegerDotProduct on '" << dev.info().name
                                         << "': only the plain int W4A8 build is tested");
  return {false};
}

vk::GemvQ4Options int8_options(bool dot) {
  vk::GemvQ4Options options;
  options.activations = dot ? vk::GemvActivations::int8_dot : vk::GemvActivations::int8;
  options.portable = !dot;
  return options;
}

// x [k] normal with a few outliers (x 40), as LLM activations have.
std::vector<float> outlier_activations(std::mt19937_64& rng, std::size_t k) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 49);
  std::vector<float> x(k);
  for (auto& v : x) v = dist(rng) * (pick(rng) == 0 ? 40.0f : 1.0f);
  return x;
}

TEST_CASE("the Vulkan int8 activations equal the CPU's quantisation bit for bit",
          "[vulkan][gemv_q4][int8]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto rng = test::make_rng(21);
    for (const bool dot : int8_builds(*dev)) {
      for (const std::size_t group : {32, 64, 128}) {
        INFO("group " << group << (dot ? ", int8-dot" : ", int8-portable"));
        const std::size_t ng = 12, k = ng * group;
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
        std::uniform_int_distribution<int> code(-127, 127);
        std::vector<float> x(k);
        for (std::size_t g = 0; g < ng; ++g) {
          float* xg = x.data() + g * group;
          for (std::size_t c = 0; c < group; ++c) {
            switch (g) {
              case 0: xg[c] = 0.0f; break;  // amax 0: inv 0, scale 0
              // amax 127 (inv = 1 exactly): halves are ties, rounded to even.
              case 1: xg[c] = c == 0 ? 127.0f : static_cast<float>(code(rng)) + 0.5f; break;
              case 2: xg[c] = c == 3 ? std::numeric_limits<float>::quiet_NaN() : dist(rng); break;
              case 3: xg[c] = c == 5 ? -std::numeric_limits<float>::infinity() : dist(rng); break;
              // amax ~1e-36: amax / 127 is denormal; |x| >= 2e-37 stays normal (a device
              // may flush denormal x in x * inv, which the CPU does not).
              case 4: xg[c] = (c % 2 ? 1.0f : -1.0f) * (2e-37f + std::fabs(uni(rng)) * 1e-36f); break;
              case 5: xg[c] = dist(rng) * 1e30f; break;
              case 6: xg[c] = c == 7 ? -3.0f : 0.0f; break;  // one value: q = -127
              // amax 1.27 (inv ~ 100): x = (m + 0.5) / 100 lands near ties after rounding.
              case 7: xg[c] = c == 0 ? 1.27f : (static_cast<float>(code(rng)) + 0.5f) / 100.0f; break;
              default: xg[c] = dist(rng) * (c == 9 ? 30.0f : 1.0f); break;
            }
          }
        }
        vk::GemvQ4Options options = int8_options(dot);
        const auto w = test::random_q4(rng, 5, k, group);
        auto op = vk::GemvQ4::create(*dev, w, options);
        INFO((op ? std::string() : op.error().message));
        REQUIRE(op);
        CHECK(std::string(op->variant()) == (dot ? "int8-dot" : "int8-portable"));
        std::vector<float> y(5);
        REQUIRE(op->run(x, y));
        CpuQ8 cpu;
        kernels::reference::quantize_activations_q8(x.data(), k, cpu.view(k, group));
        std::vector<std::int8_t> q(k);
        std::vector<std::uint32_t> scale(ng);
        std::vector<std::int32_t> sum(ng);
        const auto& a = op->quantized_activations();
        REQUIRE(a.read(std::as_writable_bytes(std::span(q))));
        REQUIRE(a.read(std::as_writable_bytes(std::span(scale)), k));
        REQUIRE(a.read(std::as_writable_bytes(std::span(sum)), k + ng * 4));
        for (std::size_t g = 0; g < ng; ++g) {
          INFO("group index " << g);
          CHECK(scale[g] == std::bit_cast<std::uint32_t>(cpu.scale[g]));
          CHECK(sum[g] == cpu.sum[g]);
          for (std::size_t c = g * group; c < (g + 1) * group; ++c) {
            INFO("input " << c << " = " << x[c]);
            CHECK(int{q[c]} == int{cpu.q[c]});
          }
        }
        // Random groups at every scale, against the CPU again.
        for (int rep = 0; rep < 3; ++rep) {
          const float mag = std::ldexp(1.0f, 20 * rep - 20);
          for (auto& v : x) v = dist(rng) * mag;
          REQUIRE(op->run(x, y));
          kernels::reference::quantize_activations_q8(x.data(), k, cpu.view(k, group));
          REQUIRE(a.read(std::as_writable_bytes(std::span(q))));
          REQUIRE(a.read(std::as_writable_bytes(std::span(scale)), k));
          REQUIRE(a.read(std::as_writable_bytes(std::span(sum)), k + ng * 4));
          CHECK(std::memcmp(q.data(), cpu.q.data(), k) == 0);
          for (std::size_t g = 0; g < ng; ++g) {
            CHECK(scale[g] == std::bit_cast<std::uint32_t>(cpu.scale[g]));
            CHECK(sum[g] == cpu.sum[g]);
          }
        }
      }
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("the Vulkan W4A8 GEMV matches the CPU fast path", "[vulkan][gemv_q4][int8]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto rng = test::make_rng(22);
    // kShapes, and k = G (one group) at G = 64 and 32.
    std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
    shapes.push_back({29, 64, test::GroupKind::random, 64});
    shapes.push_back({13, 32, test::GroupKind::extreme, 32});
    for (const bool dot : int8_builds(*dev)) {
      for (const auto& s : shapes) {
        INFO("n " << s.n << ", k " << s.k << ", group " << s.group
                  << (dot ? ", int8-dot" : ", int8-portable"));
        const auto w = test::random_q4(rng, s.n, s.k, s.group, s.kind);
        auto op = vk::GemvQ4::create(*dev, w, int8_options(dot));
        INFO((op ? std::string() : op.error().message));
        REQUIRE(op);
        const std::size_t ng = s.k / s.group;
        for (const float sign : {1.0f, -1.0f}) {  // the recorded command buffer runs again
          auto x = outlier_activations(rng, s.k);
          for (auto& v : x) v *= sign;
          std::vector<float> got(s.n, -1.0f), want(s.n), exact(s.n);
          REQUIRE(op->run(x, got));
          CpuQ8 cpu;
          const auto view = cpu.view(s.k, s.group);
          kernels::reference::quantize_activations_q8(x.data(), s.k, view);
          kernels::reference::gemm_q4_fast(w, view, nullptr, want.data(), s.n);
          kernels::reference::gemv_q4(w, x.data(), exact.data(), nullptr);
          for (std::size_t r = 0; r < s.n; ++r) {
            INFO("row " << r);
            // Both sums add the same ng exact terms float(t) * (s dx) in other orders (the
            // device: per invocation, then over <= 64 partials): each is within
            // (ng + 64 + 2) 2^-24 sum |terms| of the exact sum, with a rounding per term
            // where the device does not fuse its fma.
            double mag = 0.0;
            for (std::size_t g = 0; g < ng; ++g) {
              std::int64_t dotv = 0;
              for (std::size_t c = g * s.group; c < (g + 1) * s.group; ++c)
                dotv += std::int64_t{w.code(r, c)} * cpu.q[c];
              const auto t = dotv - std::int64_t{w.zero(r, g)} * cpu.sum[g];
              mag += std::fabs(static_cast<double>(t) *
                               (kernels::f16_to_f32(w.scale_bits(r, g)) * cpu.scale[g]));
            }
            const double sum_tol =
                2.0 * static_cast<double>(2 * ng + 64 + 2) * std::ldexp(1.0, -24) * mag + 1e-30;
            CHECK(std::fabs(double{got[r]} - double{want[r]}) <= sum_tol);
            CHECK(std::fabs(double{got[r]} - double{exact[r]}) <=
                  kernels::reference::fast_error_bound(w, x.data(), r) + sum_tol +
                      test::exact_tolerance(w, x.data(), r, 0.0f));
          }
        }
      }
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("the Vulkan W4A8 GEMV chains in a CommandSequence over the caller's buffers",
          "[vulkan][gemv_q4][int8]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto rng = test::make_rng(23);
    for (const bool dot : int8_builds(*dev)) {
      INFO((dot ? "int8-dot" : "int8-portable"));
      const std::size_t n = 37, k = 384;
      const auto w = test::random_q4(rng, n, k, 128);
      auto op = vk::GemvQ4::create(*dev, w, int8_options(dot));
      REQUIRE(op);
      // Rows 0 and 1 of a [2][384] x (two recordings of the op in one sequence, reusing its
      // scratch row), into rows 2 and 0 of a [3][37] y; then the op's own run() on each row
      // gives the same bits.
      const auto x0 = outlier_activations(rng, k), x1 = outlier_activations(rng, k);
      auto x = vk::Buffer::create(*dev, 2 * k * 4, "x", {vk::BufferKind::host_io});
      auto y = vk::Buffer::create(*dev, 3 * n * 4, "y", {vk::BufferKind::host_io});
      REQUIRE((x && y));
      REQUIRE(x->write(std::as_bytes(std::span(x0))));
      REQUIRE(x->write(std::as_bytes(std::span(x1)), k * 4));
      auto seq = vk::CommandSequence::create(*dev, "w4a8 chain");
      REQUIRE(seq);
      REQUIRE(op->record(*seq, *x, *y, 0, 2));
      REQUIRE(op->record(*seq, *x, *y, 1, 0));
      auto past = op->record(*seq, *x, *y, 2, 0);  // row 2 of a 2-row x
      REQUIRE_FALSE(past);
      CHECK_THAT(past.error().message, Contains("x: buffer 'x'"));
      CHECK(seq->dispatches() == 4);  // quantize + GEMV, twice
      REQUIRE(seq->submit());
      std::vector<float> got0(n), got1(n), want(n);
      REQUIRE(y->read(std::as_writable_bytes(std::span(got0)), 2 * n * 4));
      REQUIRE(y->read(std::as_writable_bytes(std::span(got1))));
      REQUIRE(op->run(x0, want));
      CHECK(std::memcmp(got0.data(), want.data(), n * 4) == 0);
      REQUIRE(op->run(x1, want));
      CHECK(std::memcmp(got1.data(), want.data(), n * 4) == 0);
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("the Vulkan W4A8 GEMV names the missing integer dot product feature",
          "[vulkan][gemv_q4][int8]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto rng = test::make_rng(24);
    const auto w = test::random_q4(rng, 16, 256, 128);
    // The device's own answer to int8_dot: the dot build, or the refusal.
    auto op = vk::GemvQ4::create(*dev, w, int8_options(true));
    if (dev->info().integer_dot_product) {
      REQUIRE(op);
      CHECK(std::string(op->variant()) == "int8-dot");
    } else {
      REQUIRE_FALSE(op);
      CHECK(op.error().code == errc::unsupported);
      CHECK_THAT(op.error().message, Contains("shaderIntegerDotProduct"));
    }
    // create() decides by supports(): the same device without the feature is refused by name,
    // and still offered the plain int build.
    vk::DeviceInfo without = dev->info();
    without.integer_dot_product = false;
    without.integer_dot_accelerated = false;
    auto st = vk::GemvQ4::supports(without, int8_options(true));
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::unsupported);
    CHECK_THAT(st.error().message, Contains("shaderIntegerDotProduct"));
    CHECK_THAT(st.error().message, Contains(without.name));
    vk::GemvQ4Options plain;
    plain.activations = vk::GemvActivations::int8;
    CHECK(vk::GemvQ4::supports(without, plain));
    // int8_dot with portable set contradicts itself.
    auto both = int8_options(true);
    both.portable = true;
    auto contradiction = vk::GemvQ4::create(*dev, w, both);
    REQUIRE_FALSE(contradiction);
    CHECK(contradiction.error().code == errc::unsupported);
    // Plain int8 (no portable flag) takes the dot build exactly where the device has it.
    plain.portable = false;
    auto chosen = vk::GemvQ4::create(*dev, w, plain);
    REQUIRE(chosen);
    CHECK(std::string(chosen->variant()) ==
          (dev->info().integer_dot_product ? "int8-dot" : "int8-portable"));
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_gemv_q4
