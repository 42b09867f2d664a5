// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/command_sequence.hpp: a chain of ops (embed -> add ->
// rms_norm -> add -> gemv_f16 -> argmax) recorded into one command buffer runs with ONE
// submission and gives what the ops give one by one; resubmission; the sequence's own errors.
#include "edgellm/backend/vulkan/command_sequence.hpp"

#include "backend/vulkan/op_fixtures.hpp"
#include "backend/vulkan/test_device.hpp"
#include "edgellm/backend/vulkan/argmax.hpp"
#include "edgellm/backend/vulkan/elementwise.hpp"
#include "edgellm/backend/vulkan/embed.hpp"
#include "edgellm/backend/vulkan/gemv_f16.hpp"
#include "edgellm/backend/vulkan/rms_norm.hpp"
#include "edgellm/kernels/dense_matmul.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/reference.hpp"
#include "support/prelude.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace test_backend_vulkan_command_sequence {

namespace vk = edgellm::backend::vk;
namespace kernels = edgellm::kernels;

namespace {

kernels::DenseMatrix random_f16(std::mt19937_64& rng, std::size_t n, std::size_t k) {
  const auto v = test::random_floats(rng, n * k, 0.5f);
  std::vector<std::uint16_t> h(n * k);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = kernels::f32_to_f16(v[i]);
  auto m = kernels::DenseMatrix::copy_of(kernels::DenseType::f16, n, k, std::as_bytes(std::span(h)),
                                         "w");
  REQUIRE(m);
  return std::move(*m);
}

struct Ops {
  vk::Embed embed;
  vk::Add add;
  vk::RmsNorm norm;
  vk::GemvF16 gemv;
  vk::Argmax argmax;
};

// The activations of the chain: x [rows][hidden], h [rows][hidden], logits [rows][vocab],
// tokens [rows].
struct Acts {
  vk::Buffer x, h, logits, tokens;
};

}  // namespace

TEST_CASE("a chain of ops is one submission and matches the ops run one by one",
          "[vulkan][command_sequence]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto rng = test::make_rng(48);
    // A toy decoder's ends: vocab 1000, hidden 72 (not a multiple of any workgroup), 3 tokens.
    const std::size_t vocab = 1000, hidden = 72, rows = 3;
    const float eps = 1e-6f;
    auto embed = vk::Embed::create(*dev);
    auto add = vk::Add::create(*dev);
    auto norm = vk::RmsNorm::create(*dev);
    auto gemv = vk::GemvF16::create(*dev);
    auto argmax = vk::Argmax::create(*dev, rows);
    REQUIRE((embed && add && norm && gemv && argmax));
    const Ops ops{std::move(*embed), std::move(*add), std::move(*norm), std::move(*gemv),
                  std::move(*argmax)};
    const auto table = random_f16(rng, vocab, hidden);
    const auto lm_head = random_f16(rng, vocab, hidden);
    const auto norm_w = test::random_floats(rng, hidden);
    const auto r1 = test::random_floats(rng, rows * hidden);  // stand-ins for layer outputs
    const auto r2 = test::random_floats(rng, rows * hidden);
    std::vector<std::int32_t> ids = {17, 999, 17};
    auto table_b = vk::upload_dense(*dev, table, "embed_tokens");
    auto head_b = vk::upload_dense(*dev, lm_head, "lm_head");
    REQUIRE((table_b && head_b));
    auto norm_b = test::vk_buffer(*dev, norm_w, "norm");
    auto r1_b = test::vk_buffer(*dev, r1, "r1");
    auto r2_b = test::vk_buffer(*dev, r2, "r2");
    auto ids_b = test::vk_buffer(*dev, ids, "ids");
    auto acts = [&](const char* tag) {
      const std::string t(tag);
      return Acts{test::vk_buffer(*dev, std::vector<float>(rows * hidden), t + " x"),
                  test::vk_buffer(*dev, std::vector<float>(rows * hidden), t + " h"),
                  test::vk_buffer(*dev, std::vector<float>(rows * vocab), t + " logits"),
                  test::vk_buffer(*dev, std::vector<std::uint32_t>(rows), t + " tokens")};
    };
    const vk::EmbedTable shape{kernels::DenseType::f16, vocab, hidden};
    const std::size_t count = rows * hidden;
    const vk::GemvF16Shape head_shape{vocab, hidden, rows, 0, 0};
    // Each step of the chain, recorded into `seq`.
    const auto steps = [&](Acts& a) {
      return std::vector<std::function<status(vk::CommandSequence&)>>{
          [&](vk::CommandSequence& s) {
            return ops.embed.record(s, *table_b, shape, ids_b, a.x, rows);
          },
          [&](vk::CommandSequence& s) { return ops.add.record(s, a.x, r1_b, count); },
          [&](vk::CommandSequence& s) {
            return ops.norm.record(s, a.x, norm_b, a.h, hidden, 0, rows, eps);
          },
          [&](vk::CommandSequence& s) { return ops.add.record(s, a.h, r2_b, count); },
          [&](vk::CommandSequence& s) {
            return ops.gemv.record(s, *head_b, a.h, a.logits, head_shape);
          },
          [&](vk::CommandSequence& s) {
            return ops.argmax.record(s, a.logits, a.tokens, vocab, rows);
          }};
    };

    Acts chained = acts("chained"), single = acts("single");
    auto seq = vk::CommandSequence::create(*dev, "step");
    REQUIRE(seq);
    for (auto& step : steps(chained)) REQUIRE(step(*seq));
    CHECK(seq->dispatches() == 7);  // argmax is two
    REQUIRE(seq->submit());
    CHECK(seq->submits() == 1);

    // The same ops one by one, each its own sequence and submission: the same bits.
    const auto compare = [&] {
      for (auto& step : steps(single)) test::vk_run(*dev, step);
      CHECK(test::vk_read<float>(chained.x, count) == test::vk_read<float>(single.x, count));
      CHECK(test::vk_read<float>(chained.h, count) == test::vk_read<float>(single.h, count));
      CHECK(test::vk_read<float>(chained.logits, rows * vocab) ==
            test::vk_read<float>(single.logits, rows * vocab));
      CHECK(test::vk_read<std::uint32_t>(chained.tokens, rows) ==
            test::vk_read<std::uint32_t>(single.tokens, rows));
    };
    compare();

    // And the CPU's chain, within the ops' tolerances: the logits (the bound of gemv_f16_test
    // plus the propagated rms_norm error, a few ulp of h: 1e-5 sum |h w| covers both) and the
    // tokens as the argmax of the device's own logits.
    const auto check_cpu = [&] {
      std::vector<float> x(count), h(count), logits(rows * vocab);
      for (std::size_t t = 0; t < rows; ++t)
        table.row(static_cast<std::size_t>(ids[t]), x.data() + t * hidden);
      kernels::reference::add(x.data(), r1.data(), count);
      kernels::reference::rms_norm(x.data(), norm_w.data(), h.data(), hidden, 0, rows, eps);
      kernels::reference::add(h.data(), r2.data(), count);
      kernels::reference::dense_matmul_rows(kernels::DenseType::f16, lm_head.data(), hidden,
                                            h.data(), hidden, rows, nullptr, logits.data(), vocab,
                                            0, vocab);
      const auto got = test::vk_read<float>(chained.logits, rows * vocab);
      const auto tokens = test::vk_read<std::uint32_t>(chained.tokens, rows);
      // The worst error over the bound, one CHECK (thousands of logits).
      std::vector<float> w(hidden);
      double worst = 0.0;
      for (std::size_t r = 0; r < vocab; ++r) {
        lm_head.row(r, w.data());
        for (std::size_t t = 0; t < rows; ++t) {
          double mag = 0.0;
          for (std::size_t c = 0; c < hidden; ++c)
            mag += std::fabs(double{h[t * hidden + c]} * double{w[c]});
          const double err = std::fabs(double{got[t * vocab + r]} - double{logits[t * vocab + r]});
          worst = std::max(worst, err / (1e-5 * mag));
        }
      }
      CHECK(worst <= 1.0);
      for (std::size_t t = 0; t < rows; ++t) {
        std::size_t best = 0;
        for (std::size_t r = 1; r < vocab; ++r)
          if (got[t * vocab + r] > got[t * vocab + best]) best = r;
        INFO("token " << t);
        CHECK(tokens[t] == best);
      }
    };
    check_cpu();

    // The recorded step runs again on new ids: one more submission, nothing re-recorded.
    ids = {0, 500, 3};
    REQUIRE(ids_b.write(std::as_bytes(std::span(ids))));
    REQUIRE(seq->submit());
    CHECK(seq->submits() == 2);
    CHECK(seq->dispatches() == 7);
    compare();
    check_cpu();
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("a command sequence reports its misuse", "[vulkan][command_sequence]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto add = vk::Add::create(*dev);
    REQUIRE(add);
    auto x = test::vk_buffer(*dev, std::vector<float>{1, 2, 3}, "x");
    auto y = test::vk_buffer(*dev, std::vector<float>{10, 20, 30}, "y");
    auto seq = vk::CommandSequence::create(*dev, "misuse");
    REQUIRE(seq);
    REQUIRE(add->record(*seq, x, y, 3));
    REQUIRE(add->record(*seq, x, y, 3));  // x += y twice, one pipeline, one set each
    REQUIRE(seq->submit());
    CHECK(test::vk_read<float>(x, 3) == std::vector<float>{21, 42, 63});
    auto st = add->record(*seq, x, y, 3);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::invalid_argument);
    CHECK_THAT(st.error().message, Contains("[vulkan sequence misuse] dispatch after submit()"));
    REQUIRE(seq->reset());  // a new recording: one add
    CHECK(seq->dispatches() == 0);
    REQUIRE(add->record(*seq, x, y, 3));
    REQUIRE(seq->submit());
    CHECK(seq->submits() == 2);
    CHECK(test::vk_read<float>(x, 3) == std::vector<float>{31, 62, 93});
    // A recording dropped before its submit (an op failed mid-chunk) is reset cleanly.
    REQUIRE(seq->reset());
    REQUIRE(add->record(*seq, x, y, 3));
    REQUIRE(seq->reset());
    REQUIRE(add->record(*seq, x, y, 3));
    REQUIRE(seq->submit());
    CHECK(test::vk_read<float>(x, 3) == std::vector<float>{41, 82, 123});

    // Straight to dispatch(): wrong buffer count, a grid beyond limits, an empty pipeline.
    REQUIRE(seq->reset());
    vk::ComputePipeline empty;
    const vk::Buffer* one[] = {&x};
    st = seq->dispatch(empty, one, nullptr, 1);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("pipeline: empty"));
    auto pipe = vk::ComputePipeline::create(*dev, "add", vk::spirv::kAddSpv, 2, 4, 64);
    REQUIRE(pipe);
    const std::uint32_t n = 3;
    st = seq->dispatch(*pipe, one, nullptr, 1);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("push: null for 4 bytes"));
    st = seq->dispatch(*pipe, one, &n, 1);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("make_set: 1 buffers for 2 bindings"));
    const vk::Buffer* two[] = {&x, &y};
    st = seq->dispatch(*pipe, two, &n, 0);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("grid: 0 x 1"));
    CHECK(seq->dispatches() == 0);
    REQUIRE(seq->dispatch(*pipe, two, &n, 1));
    REQUIRE(seq->submit());
    CHECK(test::vk_read<float>(x, 3) == std::vector<float>{51, 102, 153});
    vk::CommandSequence moved = std::move(*seq);
    CHECK(moved.submits() == 4);

    vk::DeviceInfo info;
    info.max_workgroup_count[0] = 10;
    info.max_workgroup_count[1] = 3;
    auto g = vk::grid_for(info, 25, "w", "rows");
    REQUIRE(g);
    CHECK((g->x == 10 && g->y == 3));
    auto too_many = vk::grid_for(info, 31, "w", "rows");
    REQUIRE_FALSE(too_many);
    CHECK_THAT(too_many.error().message, Contains("[w] rows: 31 workgroups"));
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_command_sequence
