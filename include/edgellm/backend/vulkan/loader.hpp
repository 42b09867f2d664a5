// SPDX-License-Identifier: Apache-2.0
// The Vulkan loader opened at run time: dlopen("libvulkan.so.1") and vkGetInstanceProcAddr, and
// the tables of the Vulkan functions the backend calls, loaded by name. No Vulkan symbol is
// linked (VK_NO_PROTOTYPES), so a binary built with Vulkan support runs where no loader exists
// and says so through a result error.
#pragma once

#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>

#include <dlfcn.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "edgellm/backend/vulkan/handle.hpp"
#include "edgellm/result.hpp"

namespace edgellm::backend::vk {

/// "VK_ERROR_OUT_OF_DEVICE_MEMORY (-2)" and the like, for messages.
inline std::string to_string(VkResult r) {
  const char* name = "VkResult";
  switch (r) {
    case VK_SUCCESS: name = "VK_SUCCESS"; break;
    case VK_NOT_READY: name = "VK_NOT_READY"; break;
    case VK_TIMEOUT: name = "VK_TIMEOUT"; break;
    case VK_INCOMPLETE: name = "VK_INCOMPLETE"; break;
    case VK_ERROR_OUT_OF_HOST_MEMORY: name = "VK_ERROR_OUT_OF_HOST_MEMORY"; break;
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: name = "VK_ERROR_OUT_OF_DEVICE_MEMORY"; break;
    case VK_ERROR_INITIALIZATION_FAILED: name = "VK_ERROR_INITIALIZATION_FAILED"; break;
    case VK_ERROR_DEVICE_LOST: name = "VK_ERROR_DEVICE_LOST"; break;
    case VK_ERROR_MEMORY_MAP_FAILED: name = "VK_ERROR_MEMORY_MAP_FAILED"; break;
    case VK_ERROR_LAYER_NOT_PRESENT: name = "VK_ERROR_LAYER_NOT_PRESENT"; break;
    case VK_ERROR_EXTENSION_NOT_PRESENT: name = "VK_ERROR_EXTENSION_NOT_PRESENT"; break;
    case VK_ERROR_FEATURE_NOT_PRESENT: name = "VK_ERROR_FEATURE_NOT_PRESENT"; break;
    case VK_ERROR_INCOMPATIBLE_DRIVER: name = "VK_ERROR_INCOMPATIBLE_DRIVER"; break;
    case VK_ERROR_TOO_MANY_OBJECTS: name = "VK_ERROR_TOO_MANY_OBJECTS"; break;
    default: break;
  }
  return std::string(name) + " (" + std::to_string(static_cast<int>(r)) + ")";
}

/// The error for a failed Vulkan call: errc::out_of_memory for the two out-of-memory codes
/// (the message says which memory), otherwise `fallback`.
inline error vk_error(VkResult r, std::string_view where, std::string_view what,
                      errc fallback = errc::internal) {
  const bool oom = r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY;
  return make_error(oom ? errc::out_of_memory : fallback, where,
                    std::string(what) + " failed: " + to_string(r) +
                        (r == VK_ERROR_DEVICE_LOST ? " (the device was lost; use --backend cpu)"
                                                   : ""));
}

// The functions each table loads; X(name) per entry. Instance-level functions come from
// vkGetInstanceProcAddr(instance, ...), device-level ones from vkGetDeviceProcAddr(device, ...).
#define EDGELLM_VK_GLOBAL_FUNCTIONS(X)  \
  X(vkCreateInstance)                   \
  X(vkEnumerateInstanceLayerProperties) \
  X(vkEnumerateInstanceExtensionProperties)

#define EDGELLM_VK_INSTANCE_FUNCTIONS(X)         \
  X(vkDestroyInstance)                           \
  X(vkEnumeratePhysicalDevices)                  \
  X(vkGetPhysicalDeviceProperties)               \
  X(vkGetPhysicalDeviceProperties2)              \
  X(vkGetPhysicalDeviceFeatures2)                \
  X(vkGetPhysicalDeviceQueueFamilyProperties)    \
  X(vkGetPhysicalDeviceMemoryProperties)         \
  X(vkEnumerateDeviceExtensionProperties)        \
  X(vkCreateDevice)                              \
  X(vkGetDeviceProcAddr)

// Optional (VK_EXT_debug_utils, only with validation): may stay null.
#define EDGELLM_VK_DEBUG_FUNCTIONS(X) \
  X(vkCreateDebugUtilsMessengerEXT)   \
  X(vkDestroyDebugUtilsMessengerEXT)

#define EDGELLM_VK_DEVICE_FUNCTIONS(X)  \
  X(vkDestroyDevice)                    \
  X(vkGetDeviceQueue)                   \
  X(vkDeviceWaitIdle)                   \
  X(vkQueueSubmit)                      \
  X(vkCreateBuffer)                     \
  X(vkDestroyBuffer)                    \
  X(vkGetBufferMemoryRequirements)      \
  X(vkAllocateMemory)                   \
  X(vkFreeMemory)                       \
  X(vkBindBufferMemory)                 \
  X(vkMapMemory)                        \
  X(vkUnmapMemory)                      \
  X(vkFlushMappedMemoryRanges)          \
  X(vkInvalidateMappedMemoryRanges)     \
  X(vkCreateShaderModule)               \
  X(vkDestroyShaderModule)              \
  X(vkCreateDescriptorSetLayout)        \
  X(vkDestroyDescriptorSetLayout)       \
  X(vkCreatePipelineLayout)             \
  X(vkDestroyPipelineLayout)            \
  X(vkCreateComputePipelines)           \
  X(vkDestroyPipeline)                  \
  X(vkCreateDescriptorPool)             \
  X(vkDestroyDescriptorPool)            \
  X(vkAllocateDescriptorSets)           \
  X(vkUpdateDescriptorSets)             \
  X(vkCreateCommandPool)                \
  X(vkDestroyCommandPool)               \
  X(vkAllocateCommandBuffers)           \
  X(vkFreeCommandBuffers)               \
  X(vkBeginCommandBuffer)               \
  X(vkEndCommandBuffer)                 \
  X(vkCmdBindPipeline)                  \
  X(vkCmdBindDescriptorSets)            \
  X(vkCmdPushConstants)                 \
  X(vkCmdDispatch)                      \
  X(vkCmdPipelineBarrier)               \
  X(vkCmdCopyBuffer)                    \
  X(vkCreateFence)                      \
  X(vkDestroyFence)                     \
  X(vkResetFences)                      \
  X(vkWaitForFences)

#define EDGELLM_VK_MEMBER(name) PFN_##name name = nullptr;

/// Functions of the loader itself (no instance yet).
struct GlobalFunctions {
  EDGELLM_VK_GLOBAL_FUNCTIONS(EDGELLM_VK_MEMBER)
  PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion = nullptr;  ///< null on 1.0 loaders
};

/// Functions of one VkInstance (and its physical devices).
struct InstanceFunctions {
  EDGELLM_VK_INSTANCE_FUNCTIONS(EDGELLM_VK_MEMBER)
  EDGELLM_VK_DEBUG_FUNCTIONS(EDGELLM_VK_MEMBER)
};

/// Functions of one VkDevice (and its queues and command buffers).
struct DeviceFunctions {
  EDGELLM_VK_DEVICE_FUNCTIONS(EDGELLM_VK_MEMBER)
};
#undef EDGELLM_VK_MEMBER

/// Loads every instance-level function of `instance`; an error names the first one missing.
inline result<InstanceFunctions> load_instance_functions(PFN_vkGetInstanceProcAddr gipa,
                                                         VkInstance instance) {
  InstanceFunctions f;
#define EDGELLM_VK_LOAD(name)                                                                \
  f.name = reinterpret_cast<PFN_##name>(gipa(instance, #name));                              \
  if (!f.name) {                                                                             \
    return make_error(errc::unsupported, "vulkan", "instance function " #name " not found"); \
  }
  EDGELLM_VK_INSTANCE_FUNCTIONS(EDGELLM_VK_LOAD)
#undef EDGELLM_VK_LOAD
#define EDGELLM_VK_LOAD_OPTIONAL(name) f.name = reinterpret_cast<PFN_##name>(gipa(instance, #name));
  EDGELLM_VK_DEBUG_FUNCTIONS(EDGELLM_VK_LOAD_OPTIONAL)
#undef EDGELLM_VK_LOAD_OPTIONAL
  return f;
}

/// Loads every device-level function of `device` through the instance's vkGetDeviceProcAddr.
inline result<DeviceFunctions> load_device_functions(PFN_vkGetDeviceProcAddr gdpa,
                                                     VkDevice device) {
  DeviceFunctions f;
#define EDGELLM_VK_LOAD(name)                                                              \
  f.name = reinterpret_cast<PFN_##name>(gdpa(device, #name));                              \
  if (!f.name) {                                                                           \
    return make_error(errc::unsupported, "vulkan", "device function " #name " not found"); \
  }
  EDGELLM_VK_DEVICE_FUNCTIONS(EDGELLM_VK_LOAD)
#undef EDGELLM_VK_LOAD
  return f;
}

/// The library names tried in order when LoaderOptions::library is empty.
inline constexpr const char* kDefaultLoaderNames[] = {"libvulkan.so.1", "libvulkan.so"};

/// The Vulkan loader library, open for the object's lifetime (dlclose on destruction).
/// Move-only; everything created through it must be destroyed before it.
class Loader {
 public:
  Loader() = default;
  Loader(Loader&&) noexcept = default;
  Loader& operator=(Loader&& o) noexcept { return move_assign(*this, std::move(o)); }
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;
  ~Loader() { close(); }

  /// Opens `library` (empty: libvulkan.so.1, then libvulkan.so) and loads the global functions.
  static result<Loader> open(std::string_view library = {}) {
    std::vector<std::string> names;
    if (library.empty()) {
      for (const char* n : kDefaultLoaderNames) names.emplace_back(n);
    } else {
      names.emplace_back(library);
    }
    Loader l;
    std::string why;
    for (const auto& n : names) {
      l.handle_ = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (l.handle_) {
        l.name_ = n;
        break;
      }
      const char* e = ::dlerror();
      if (!why.empty()) why += "; ";
      why += e ? e : n + ": dlopen failed";
    }
    if (!l.handle_) {
      return make_error(errc::unsupported, "vulkan",
                        "Vulkan loader " + names.front() + " not found: " + why +
                            " (install the Vulkan loader and a driver, e.g. Debian's libvulkan1 "
                            "and mesa-vulkan-drivers, or use --backend cpu)");
    }
    l.gipa_ = reinterpret_cast<PFN_vkGetInstanceProcAddr>(::dlsym(l.handle_, "vkGetInstanceProcAddr"));
    if (!l.gipa_) {
      return make_error(errc::unsupported, "vulkan",
                        l.name_ + " has no vkGetInstanceProcAddr: not a Vulkan loader "
                                  "(use --backend cpu)");
    }
#define EDGELLM_VK_LOAD(name)                                                             \
  l.global_->name = reinterpret_cast<PFN_##name>(l.gipa_(VK_NULL_HANDLE, #name));         \
  if (!l.global_->name) {                                                                 \
    return make_error(errc::unsupported, "vulkan",                                        \
                      l.name_ + ": global function " #name " not found (use --backend cpu)"); \
  }
    EDGELLM_VK_GLOBAL_FUNCTIONS(EDGELLM_VK_LOAD)
#undef EDGELLM_VK_LOAD
    l.global_->vkEnumerateInstanceVersion = reinterpret_cast<PFN_vkEnumerateInstanceVersion>(
        l.gipa_(VK_NULL_HANDLE, "vkEnumerateInstanceVersion"));
    return l;
  }

  /// The instance API version the loader supports (1.0 when it predates the query).
  std::uint32_t instance_version() const {
    std::uint32_t v = VK_API_VERSION_1_0;
    if (global_->vkEnumerateInstanceVersion) global_->vkEnumerateInstanceVersion(&v);
    return v;
  }

  /// Whether an instance layer (e.g. "VK_LAYER_KHRONOS_validation") is installed.
  bool has_layer(std::string_view name) const {
    std::uint32_t count = 0;
    if (global_->vkEnumerateInstanceLayerProperties(&count, nullptr) != VK_SUCCESS) return false;
    std::vector<VkLayerProperties> layers(count);
    if (global_->vkEnumerateInstanceLayerProperties(&count, layers.data()) != VK_SUCCESS) return false;
    for (std::uint32_t i = 0; i < count; ++i)
      if (name == layers[i].layerName) return true;
    return false;
  }

  /// Whether an instance extension is offered (by the loader, a driver or `layer`).
  bool has_instance_extension(std::string_view name, const char* layer = nullptr) const {
    std::uint32_t count = 0;
    if (global_->vkEnumerateInstanceExtensionProperties(layer, &count, nullptr) != VK_SUCCESS)
      return false;
    std::vector<VkExtensionProperties> ext(count);
    if (global_->vkEnumerateInstanceExtensionProperties(layer, &count, ext.data()) != VK_SUCCESS)
      return false;
    for (std::uint32_t i = 0; i < count; ++i)
      if (name == ext[i].extensionName) return true;
    return false;
  }

  PFN_vkGetInstanceProcAddr get_instance_proc_addr() const noexcept { return gipa_; }
  const GlobalFunctions& global() const noexcept { return global_.value(); }
  const std::string& library_name() const noexcept { return name_; }  ///< the name that opened
  bool is_open() const noexcept { return handle_ != nullptr; }

 private:
  void close() noexcept {
    if (handle_) ::dlclose(handle_);
    handle_ = nullptr;
    gipa_ = nullptr;
  }

  Handle<void*> handle_;
  Handle<PFN_vkGetInstanceProcAddr> gipa_;
  Handle<GlobalFunctions> global_;
  std::string name_;
};

}  // namespace edgellm::backend::vk
