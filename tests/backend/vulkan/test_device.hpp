// SPDX-License-Identifier: Apache-2.0
// The Vulkan device the [vulkan] tests run on: validation on whenever the Khronos layer is
// installed; a visible skip (Catch2 WARN, null) where there is no loader or no device.
#pragma once

#include "edgellm/backend/vulkan/device.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <string>

namespace edgellm::test {

inline bool vulkan_validation_available() {
  auto loader = backend::vk::Loader::open();
  return loader && loader->has_layer("VK_LAYER_KHRONOS_validation");
}

/// A device with validation when available, or null after WARN when none can be created
/// because no loader, no driver or no device exists. Any other failure fails the test.
inline std::unique_ptr<backend::vk::Device> vulkan_test_device() {
  auto loader = backend::vk::Loader::open();
  if (!loader) {
    WARN("SKIPPED: no Vulkan loader: " << loader.error().message);
    return nullptr;
  }
  backend::vk::DeviceOptions options;
  options.validation = loader->has_layer("VK_LAYER_KHRONOS_validation");
  if (!options.validation) WARN("Vulkan validation layer not installed: validation not checked");
  auto dev = backend::vk::Device::create(options);
  if (!dev && dev.error().message.find("no Vulkan") != std::string::npos) {
    WARN("SKIPPED: " << dev.error().message);
    return nullptr;
  }
  INFO((dev ? std::string() : dev.error().message));
  REQUIRE(dev);
  return std::move(*dev);
}

/// The handles of `app` as an application hands them to vk::Device::adopt (no optional feature
/// declared enabled).
inline backend::vk::AdoptedHandles handles_of(const backend::vk::Device& app) {
  backend::vk::AdoptedHandles h;
  h.instance = app.instance();
  h.physical_device = app.physical_device();
  h.device = app.handle();
  h.queue = app.queue();
  h.queue_family = app.info().queue_family;
  return h;
}

/// Fails the test on any recorded validation message (call after the device is destroyed, so
/// that leaks reported at teardown count).
inline void require_no_validation_messages(const backend::vk::ValidationLog& log) {
  const auto messages = log.messages();
  for (const auto& m : messages) UNSCOPED_INFO(m);
  REQUIRE(messages.empty());
}

}  // namespace edgellm::test
