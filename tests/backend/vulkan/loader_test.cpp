// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/loader.hpp: a missing loader is a clear error, a present one
// yields the global functions.
#include "edgellm/backend/vulkan/loader.hpp"

#include "edgellm/backend/vulkan/device.hpp"
#include "support/prelude.hpp"

namespace test_backend_vulkan_loader {

namespace vk = edgellm::backend::vk;

TEST_CASE("a missing Vulkan loader is a clear error naming the library and the fallback",
          "[vulkan][loader]") {
  auto l = vk::Loader::open("libedgellm-no-such-vulkan.so.1");
  REQUIRE_FALSE(l);
  CHECK(l.error().code == errc::unsupported);
  CHECK_THAT(l.error().message, Contains("Vulkan loader libedgellm-no-such-vulkan.so.1 not found"));
  CHECK_THAT(l.error().message, Contains("--backend cpu"));
  // Through the device, as --backend vulkan would see it.
  vk::DeviceOptions options;
  options.loader_library = "libedgellm-no-such-vulkan.so.1";
  auto d = vk::Device::create(options);
  REQUIRE_FALSE(d);
  CHECK_THAT(d.error().message, Contains("not found"));
  CHECK_THAT(d.error().message, Contains("--backend cpu"));
}

TEST_CASE("a library that is not a Vulkan loader is rejected", "[vulkan][loader]") {
  auto l = vk::Loader::open("libm.so.6");
  REQUIRE_FALSE(l);
  CHECK_THAT(l.error().message, Contains("no vkGetInstanceProcAddr"));
}

TEST_CASE("the default loader opens and reports its version", "[vulkan][loader]") {
  auto l = vk::Loader::open();
  if (!l) {
    WARN("SKIPPED: " << l.error().message);
    return;
  }
  CHECK(l->is_open());
  CHECK(l->library_name() == "libvulkan.so.1");
  CHECK(l->get_instance_proc_addr() != nullptr);
  CHECK(l->global().vkCreateInstance != nullptr);
  CHECK(l->instance_version() >= VK_API_VERSION_1_0);
  vk::Loader moved = std::move(*l);
  CHECK(moved.is_open());
  CHECK_FALSE(l->is_open());  // NOLINT(bugprone-use-after-move): moved-from is closed
}

TEST_CASE("to_string(VkResult) names the code", "[vulkan][loader]") {
  CHECK(vk::to_string(VK_ERROR_OUT_OF_DEVICE_MEMORY) == "VK_ERROR_OUT_OF_DEVICE_MEMORY (-2)");
  CHECK(vk::vk_error(VK_ERROR_OUT_OF_DEVICE_MEMORY, "w", "alloc").code == errc::out_of_memory);
  CHECK_THAT(vk::vk_error(VK_ERROR_DEVICE_LOST, "w", "submit").message,
             Contains("--backend cpu"));
}

}  // namespace test_backend_vulkan_loader
