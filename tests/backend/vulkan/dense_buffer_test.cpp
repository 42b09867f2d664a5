// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/dense_buffer.hpp: a DenseMatrix lands in a device buffer byte
// for byte, padded with zeros to whole words, through both upload paths.
#include "edgellm/backend/vulkan/dense_buffer.hpp"

#include "backend/vulkan/test_device.hpp"
#include "support/prelude.hpp"

#include <cstdint>
#include <cstring>
#include <vector>

namespace test_backend_vulkan_dense_buffer {

namespace vk = edgellm::backend::vk;
namespace kernels = edgellm::kernels;

TEST_CASE("dense matrices are uploaded byte for byte, padded to words", "[vulkan][dense_buffer]") {
  STATIC_REQUIRE(vk::dense_buffer_bytes(kernels::DenseType::f16, 3, 3) == 20);  // 18 + 2
  STATIC_REQUIRE(vk::dense_buffer_bytes(kernels::DenseType::bf16, 2, 4) == 16);
  STATIC_REQUIRE(vk::dense_buffer_bytes(kernels::DenseType::f32, 1, 1) == 4);
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    std::vector<std::uint16_t> h(3 * 3);
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<std::uint16_t>(0x3c00 + i);
    auto m = kernels::DenseMatrix::copy_of(kernels::DenseType::f16, 3, 3,
                                           std::as_bytes(std::span(h)), "w");
    REQUIRE(m);
    for (const bool staged : {false, true}) {
      INFO((staged ? "staged" : "direct"));
      vk::BufferOptions options;
      options.force_staging = staged;
      auto b = vk::upload_dense(*dev, *m, "w", options);
      REQUIRE(b);
      REQUIRE(b->size() == 20);
      std::vector<std::byte> got(20, std::byte{0xff});
      REQUIRE(b->read(got));
      CHECK(std::memcmp(got.data(), h.data(), 18) == 0);
      CHECK(got[18] == std::byte{0});
      CHECK(got[19] == std::byte{0});
    }
    auto empty = vk::upload_dense(*dev, kernels::DenseMatrix{}, "nothing");
    REQUIRE_FALSE(empty);
    CHECK_THAT(empty.error().message, Contains("nothing: an empty matrix"));
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_dense_buffer
