// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/device.hpp: the device rule, the queried features, index
// override, adoption of an app's handles, and a clean teardown under validation.
#include "edgellm/backend/vulkan/device.hpp"

#include "backend/vulkan/test_device.hpp"
#include "support/prelude.hpp"

#include <cstdlib>

namespace test_backend_vulkan_device {

namespace vk = edgellm::backend::vk;

TEST_CASE("the device rule: discrete > integrated > virtual > CPU, lowest index on ties",
          "[vulkan][device]") {
  const int cpu = vk::device_type_rank(VK_PHYSICAL_DEVICE_TYPE_CPU);
  const int igpu = vk::device_type_rank(VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU);
  const int dgpu = vk::device_type_rank(VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU);
  const int vgpu = vk::device_type_rank(VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU);
  CHECK(dgpu > igpu);
  CHECK(igpu > vgpu);
  CHECK(vgpu > cpu);
  CHECK(vk::pick_physical_device({cpu, igpu, dgpu, igpu}) == 2u);
  CHECK(vk::pick_physical_device({cpu, igpu, igpu}) == 1u);
  CHECK(vk::pick_physical_device({-1, cpu}) == 1u);  // -1: unusable (no 1.1, no compute)
  CHECK_FALSE(vk::pick_physical_device({-1, -1}).has_value());
  CHECK_FALSE(vk::pick_physical_device({}).has_value());
}

TEST_CASE("a device is created, reports its features and tears down cleanly", "[vulkan][device]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    const auto& i = dev->info();
    UNSCOPED_INFO("device: " << i.name << " (" << vk::to_string(i.type) << ")");
    CHECK_FALSE(i.name.empty());
    CHECK(i.api_version >= VK_API_VERSION_1_1);
    CHECK(i.subgroup_size >= 1);
    CHECK(i.max_workgroup_invocations >= 128);  // the spec's minimum
    CHECK(i.max_workgroup_size[0] >= 128);
    CHECK(i.shared_memory_bytes >= 16384);
    CHECK(i.memory.memoryTypeCount > 0);
    CHECK(dev->owns_handles());
    CHECK(dev->handle() != VK_NULL_HANDLE);
    CHECK(dev->queue() != VK_NULL_HANDLE);
    // An empty recording submits and completes.
    REQUIRE(dev->submit_and_wait([](VkCommandBuffer) {}, "empty"));
    WARN("Vulkan device: " << i.name << ", " << vk::to_string(i.type) << ", subgroup "
                           << i.subgroup_size << ", shaderInt8 " << i.shader_int8 << ", 8-bit "
                           << i.storage_8bit << ", 16-bit " << i.storage_16bit << ", int dot "
                           << i.integer_dot_product << " (accelerated "
                           << i.integer_dot_accelerated << "), shared " << i.shared_memory_bytes
                           << " B, max invocations " << i.max_workgroup_invocations
                           << ", validation " << dev->validation_enabled());
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("--device N picks by index; out of range is an error listing the devices",
          "[vulkan][device]") {
  auto probe = test::vulkan_test_device();
  if (!probe) return;
  const std::uint32_t index = probe->info().index;
  const std::string name = probe->info().name;
  probe.reset();
  vk::DeviceOptions options;
  options.device_index = index;
  auto same = vk::Device::create(options);
  REQUIRE(same);
  CHECK((*same)->info().name == name);
  options.device_index = 1000;
  auto bad = vk::Device::create(options);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == errc::out_of_range);
  CHECK_THAT(bad.error().message, Contains("--device 1000"));
  CHECK_THAT(bad.error().message, Contains(name));
}

TEST_CASE("a device adopts an application's handles and destroys none of them",
          "[vulkan][device]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto app = test::vulkan_test_device();  // stands in for the application's own device
    if (!app) return;
    log = app->validation_log();
    const vk::AdoptedHandles h = test::handles_of(*app);
    {
      auto adopted = vk::Device::adopt(h);
      REQUIRE(adopted);
      CHECK_FALSE((*adopted)->owns_handles());
      CHECK((*adopted)->info().name == app->info().name);
      CHECK_FALSE((*adopted)->info().shader_int8);  // not declared enabled by the app
      REQUIRE((*adopted)->submit_and_wait([](VkCommandBuffer) {}, "adopted"));
    }
    // The app's device still works after the adopter is gone.
    REQUIRE(app->submit_and_wait([](VkCommandBuffer) {}, "after adoption"));
    vk::AdoptedHandles missing;
    auto bad = vk::Device::adopt(missing);
    REQUIRE_FALSE(bad);
    CHECK(bad.error().code == errc::invalid_argument);
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("the validation log records a misuse (so the clean-teardown checks can fail)",
          "[vulkan][device]") {
  if (!test::vulkan_validation_available()) {
    WARN("SKIPPED: no Vulkan loader or no validation layer");
    return;
  }
  vk::DeviceOptions options;
  options.validation = true;
  auto dev = vk::Device::create(options);
  if (!dev) {
    WARN("SKIPPED: " << dev.error().message);
    return;
  }
  auto log = (*dev)->validation_log();
  CHECK(log->empty());
  // A zero-sized buffer breaks VUID-VkBufferCreateInfo-size-00912 (drivers accept it).
  VkBufferCreateInfo bci{};
  bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  bci.size = 0;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  VkBuffer b = VK_NULL_HANDLE;
  const auto r = (*dev)->fn().vkCreateBuffer((*dev)->handle(), &bci, nullptr, &b);
  if (r == VK_SUCCESS && b != VK_NULL_HANDLE)
    (*dev)->fn().vkDestroyBuffer((*dev)->handle(), b, nullptr);
  const auto messages = log->messages();
  REQUIRE_FALSE(messages.empty());
  CHECK_THAT(messages.front(), Contains("VUID-VkBufferCreateInfo-size"));
}

TEST_CASE("EDGELLM_VULKAN_VALIDATION=1 turns validation on", "[vulkan][device]") {
  if (!test::vulkan_validation_available()) {
    WARN("SKIPPED: no Vulkan loader or no validation layer");
    return;
  }
  const char* before = std::getenv("EDGELLM_VULKAN_VALIDATION");  // NOLINT(concurrency-mt-unsafe)
  const std::string saved = before ? before : "";
  ::setenv("EDGELLM_VULKAN_VALIDATION", "1", 1);  // NOLINT(concurrency-mt-unsafe): one thread
  auto dev = vk::Device::create();
  ::unsetenv("EDGELLM_VULKAN_VALIDATION");  // NOLINT(concurrency-mt-unsafe)
  if (!dev) {
    WARN("SKIPPED: " << dev.error().message);
    return;
  }
  CHECK((*dev)->validation_enabled());
  auto plain = vk::Device::create();
  REQUIRE(plain);
  CHECK_FALSE((*plain)->validation_enabled());
  CHECK((*plain)->validation_log()->empty());
  if (before) ::setenv("EDGELLM_VULKAN_VALIDATION", saved.c_str(), 1);  // NOLINT
}

}  // namespace test_backend_vulkan_device
