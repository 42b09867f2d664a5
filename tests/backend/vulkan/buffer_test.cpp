// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/buffer.hpp: round trips through the direct and the staged
// paths (chunks smaller than the data, odd sizes and offsets), range errors, out of memory.
#include "edgellm/backend/vulkan/buffer.hpp"

#include "backend/vulkan/test_device.hpp"
#include "support/prelude.hpp"

#include <cstddef>
#include <vector>

namespace test_backend_vulkan_buffer {

namespace vk = edgellm::backend::vk;

TEST_CASE("buffers round-trip bytes on every path", "[vulkan][buffer]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    const std::size_t size = 10007;  // odd, several staging chunks
    std::vector<std::byte> data(size);
    for (std::size_t i = 0; i < size; ++i) data[i] = static_cast<std::byte>((i * 131 + 7) & 0xFF);
    struct Case {
      const char* name;
      vk::BufferOptions options;
    };
    const Case cases[] = {
        {"device, direct where possible", {vk::BufferKind::device, false, std::size_t{16} << 20}},
        {"device, staged in 1000-byte chunks", {vk::BufferKind::device, true, 1000}},
        {"host io", {vk::BufferKind::host_io, false, 1000}},
    };
    for (const auto& c : cases) {
      INFO(c.name);
      auto b = vk::Buffer::create(*dev, size, "test", c.options);
      REQUIRE(b);
      if (c.options.force_staging) CHECK_FALSE(b->host_visible());
      if (c.options.kind == vk::BufferKind::host_io) CHECK(b->host_visible());
      REQUIRE(b->write(data));
      std::vector<std::byte> back(size);
      REQUIRE(b->read(back));
      CHECK(back == data);
      // A partial write at an odd offset leaves the rest alone.
      std::vector<std::byte> patch(333, std::byte{0x5A});
      REQUIRE(b->write(patch, 4001));
      REQUIRE(b->read(back));
      for (std::size_t i = 0; i < 333; ++i) data[4001 + i] = std::byte{0x5A};
      CHECK(back == data);
      std::vector<std::byte> tail(7);
      REQUIRE(b->read(tail, size - 7));
      CHECK(std::equal(tail.begin(), tail.end(), data.end() - 7));
      // Past the end: an error naming the buffer.
      auto past = b->write(patch, size - 10);
      REQUIRE_FALSE(past);
      CHECK(past.error().code == errc::out_of_range);
      CHECK_THAT(past.error().message, Contains("vulkan buffer test"));
      // Moved-from is empty, the moved-to still works.
      vk::Buffer moved = std::move(*b);
      REQUIRE(moved.read(tail, 0));
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("a buffer larger than device memory is a clear out-of-memory error",
          "[vulkan][buffer]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    VkDeviceSize largest = 0;
    const auto& mem = dev->info().memory;
    for (std::uint32_t h = 0; h < mem.memoryHeapCount; ++h)
      largest = std::max(largest, mem.memoryHeaps[h].size);
    auto huge = vk::Buffer::create(*dev, static_cast<std::size_t>(largest) * 2, "weights");
    REQUIRE_FALSE(huge);
    CHECK(huge.error().code == errc::out_of_memory);
    CHECK_THAT(huge.error().message, Contains("vulkan buffer weights"));
    CHECK_THAT(huge.error().message, Contains("--backend cpu"));
    auto zero = vk::Buffer::create(*dev, 0, "empty");
    REQUIRE_FALSE(zero);
    CHECK(zero.error().code == errc::invalid_argument);
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_buffer
