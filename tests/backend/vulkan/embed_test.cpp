// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/embed.hpp: the embedding lookup on the device against
// kernels::DenseMatrix::row, bit for bit, for fp16 (subnormals, signed zeros, infinities),
// bf16 and fp32 tables of odd widths, out-of-range ids, with the validation layer on.
#include "edgellm/backend/vulkan/embed.hpp"

#include "backend/vulkan/op_fixtures.hpp"
#include "backend/vulkan/test_device.hpp"
#include "edgellm/kernels/float16.hpp"
#include "support/prelude.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace test_backend_vulkan_embed {

namespace vk = edgellm::backend::vk;
namespace kernels = edgellm::kernels;

namespace {

kernels::DenseMatrix random_table(std::mt19937_64& rng, kernels::DenseType type, std::size_t n,
                                  std::size_t k) {
  const auto v = test::random_floats(rng, n * k);
  std::vector<std::byte> bytes(n * k * kernels::dense_element_size(type));
  for (std::size_t i = 0; i < n * k; ++i) {
    if (type == kernels::DenseType::f32) {
      std::memcpy(bytes.data() + 4 * i, &v[i], 4);
    } else {
      std::uint16_t h =
          type == kernels::DenseType::f16 ? kernels::f32_to_f16(v[i]) : kernels::f32_to_bf16(v[i]);
      // fp16 specials: every decode branch (subnormals, -0, +-inf, the largest normal).
      if (type == kernels::DenseType::f16 && i < 6) {
        const std::uint16_t special[] = {0x0001, 0x83ff, 0x8000, 0x7c00, 0xfc00, 0x7bff};
        h = special[i];
      }
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  auto m = kernels::DenseMatrix::copy_of(type, n, k, bytes, "table");
  REQUIRE(m);
  return std::move(*m);
}

}  // namespace

TEST_CASE("Vulkan embed matches DenseMatrix::row bit for bit", "[vulkan][embed]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto op = vk::Embed::create(*dev);
    REQUIRE(op);
    auto rng = test::make_rng(46);
    struct Case {
      kernels::DenseType type;
      std::size_t n_rows, cols;
    };
    // Odd widths: fp16 / bf16 rows start mid-word, and 13 * 7 halves end mid-word (padding).
    const Case cases[] = {{kernels::DenseType::f16, 13, 7},
                          {kernels::DenseType::bf16, 5, 33},
                          {kernels::DenseType::f32, 4, 5},
                          {kernels::DenseType::f16, 1, 1}};
    for (const auto& c : cases) {
      INFO(kernels::to_string(c.type) << " [" << c.n_rows << "][" << c.cols << "]");
      const auto table = random_table(rng, c.type, c.n_rows, c.cols);
      auto tb = vk::upload_dense(*dev, table, "embed_tokens");
      REQUIRE(tb);
      const auto last = static_cast<std::int32_t>(c.n_rows - 1);
      const std::vector<std::int32_t> ids = {0, last, last, 0, last / 2};
      auto ib = test::vk_buffer(*dev, ids, "ids");
      auto ob = test::vk_buffer(*dev, std::vector<float>(ids.size() * c.cols), "x");
      const vk::EmbedTable shape{c.type, c.n_rows, c.cols};
      test::vk_run(*dev, [&](vk::CommandSequence& seq) {
        return op->record(seq, *tb, shape, ib, ob, ids.size());
      });
      const auto got = test::vk_read<float>(ob, ids.size() * c.cols);
      std::vector<float> want(c.cols);
      for (std::size_t t = 0; t < ids.size(); ++t) {
        table.row(static_cast<std::size_t>(ids[t]), want.data());
        INFO("t " << t);
        for (std::size_t i = 0; i < c.cols; ++i)
          CHECK(std::bit_cast<std::uint32_t>(got[t * c.cols + i]) ==
                std::bit_cast<std::uint32_t>(want[i]));
      }
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("Vulkan embed: bad ids give NaN rows, bad arguments a named error", "[vulkan][embed]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto op = vk::Embed::create(*dev);
    REQUIRE(op);
    auto rng = test::make_rng(47);
    const auto table = random_table(rng, kernels::DenseType::f16, 6, 4);
    auto tb = vk::upload_dense(*dev, table, "embed_tokens");
    REQUIRE(tb);
    const std::vector<std::int32_t> ids = {-1, 6, 2};
    auto st = vk::Embed::check_ids(ids, 6);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::out_of_range);
    CHECK_THAT(st.error().message, Contains("ids[0]: -1 outside the table's 6 rows"));
    CHECK(vk::Embed::check_ids(std::vector<std::int32_t>{0, 5}, 6));
    auto ib = test::vk_buffer(*dev, ids, "ids");
    auto ob = test::vk_buffer(*dev, std::vector<float>(3 * 4), "x");
    const vk::EmbedTable shape{kernels::DenseType::f16, 6, 4};
    test::vk_run(*dev,
                 [&](vk::CommandSequence& seq) { return op->record(seq, *tb, shape, ib, ob, 3); });
    const auto got = test::vk_read<float>(ob, 12);
    for (std::size_t i = 0; i < 8; ++i) CHECK(std::isnan(got[i]));  // ids -1 and 6
    std::vector<float> row(4);
    table.row(2, row.data());
    CHECK(std::vector<float>(got.begin() + 8, got.end()) == row);

    auto seq = vk::CommandSequence::create(*dev, "bad");
    REQUIRE(seq);
    auto r = op->record(*seq, *tb, {kernels::DenseType::f16, 7, 4}, ib, ob, 3);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == errc::shape_mismatch);
    CHECK_THAT(r.error().message, Contains("[vulkan embed] table: buffer 'embed_tokens' holds 48 "
                                           "bytes; [7][4] F16 needs 56"));
    r = op->record(*seq, *tb, shape, ib, ob, 4);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Contains("ids: buffer 'ids'"));
    r = op->record(*seq, *tb, {kernels::DenseType::f16, 6, 5}, ib, ob, 3);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Contains("table:"));
    r = op->record(*seq, *tb, {kernels::DenseType::f16, 3, 8}, ib, ob, 3);  // out: 3 x 8 > 12
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Contains("out: buffer 'x'"));
    CHECK(seq->dispatches() == 0);
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_embed
