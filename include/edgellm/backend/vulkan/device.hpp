// SPDX-License-Identifier: Apache-2.0
// A Vulkan compute device: instance (optionally with the Khronos validation layer), the physical
// device picked by a documented rule, one compute queue, the features the shaders may use, and a
// one-shot command buffer for uploads. Either owns everything it creates or adopts an
// application's instance/device/queue without owning them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "edgellm/backend/vulkan/loader.hpp"
#include "edgellm/result.hpp"

namespace edgellm::backend::vk {

/// Validation-layer messages (warnings and errors) recorded by the debug messenger. Shared with
/// the Device so that a test can read the messages emitted while the device is destroyed
/// (leaked objects are reported at vkDestroyDevice / vkDestroyInstance).
class ValidationLog {
 public:
  void add(std::string message) {
    std::lock_guard lock(mutex_);
    messages_.push_back(std::move(message));
  }
  std::vector<std::string> messages() const {
    std::lock_guard lock(mutex_);
    return messages_;
  }
  bool empty() const {
    std::lock_guard lock(mutex_);
    return messages_.empty();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
};

struct DeviceOptions {
  /// Enable VK_LAYER_KHRONOS_validation (also when the environment has
  /// EDGELLM_VULKAN_VALIDATION=1). An error when the layer is not installed.
  bool validation = false;
  /// Index into vkEnumeratePhysicalDevices; empty: the rule of pick_physical_device().
  std::optional<std::uint32_t> device_index;
  /// The loader library to dlopen; empty: libvulkan.so.1, then libvulkan.so.
  std::string loader_library;
};

/// What the device offers the shaders; queried once, read by the ops to pick their variants.
struct DeviceInfo {
  std::string name;                       ///< VkPhysicalDeviceProperties::deviceName
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  std::uint32_t api_version = 0;          ///< the device's, VK_MAKE_API_VERSION
  std::uint32_t index = 0;                ///< in vkEnumeratePhysicalDevices
  std::uint32_t queue_family = 0;         ///< the compute queue's family
  std::uint32_t subgroup_size = 1;        ///< lanes per subgroup (1 when unknown)
  bool subgroup_arithmetic = false;       ///< subgroupAdd etc. in compute shaders
  bool shader_int8 = false;               ///< shaderInt8 (enabled when present)
  bool shader_float16 = false;            ///< shaderFloat16 (enabled when present)
  bool storage_8bit = false;              ///< storageBuffer8BitAccess (enabled when present)
  bool storage_16bit = false;             ///< storageBuffer16BitAccess (enabled when present)
  bool integer_dot_product = false;       ///< shaderIntegerDotProduct (enabled when present)
  bool integer_dot_accelerated = false;   ///< 4x8-bit packed dot products run in hardware
  std::uint32_t max_workgroup_size[3] = {1, 1, 1};   ///< maxComputeWorkGroupSize
  std::uint32_t max_workgroup_invocations = 1;       ///< maxComputeWorkGroupInvocations
  std::uint32_t max_workgroup_count[3] = {1, 1, 1};  ///< maxComputeWorkGroupCount
  std::uint32_t shared_memory_bytes = 0;             ///< maxComputeSharedMemorySize
  std::uint32_t max_push_constants_bytes = 0;
  VkDeviceSize max_storage_buffer_range = 0;         ///< bytes one storage binding may cover
  VkDeviceSize non_coherent_atom_size = 1;
  VkPhysicalDeviceMemoryProperties memory{};

  bool unified_memory() const noexcept {  ///< integrated GPU or CPU: host and device share RAM
    return type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU || type == VK_PHYSICAL_DEVICE_TYPE_CPU;
  }
};

/// "discrete GPU", "integrated GPU", ...
inline const char* to_string(VkPhysicalDeviceType t) noexcept {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
  }
}

/// The device rule: discrete GPU > integrated GPU > virtual GPU > CPU implementation > other;
/// among equals, the lowest index. Devices below Vulkan 1.1 or without a compute queue are
/// skipped (score -1). Returns the chosen index, or none when no device qualifies.
inline int device_type_rank(VkPhysicalDeviceType t) noexcept {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 1;
    default: return 0;
  }
}
inline std::optional<std::uint32_t> pick_physical_device(const std::vector<int>& scores) {
  std::optional<std::uint32_t> best;
  for (std::uint32_t i = 0; i < scores.size(); ++i)
    if (scores[i] >= 0 && (!best || scores[i] > scores[*best])) best = i;
  return best;
}

/// Handles an application already has (adopt: the Device uses them and destroys none).
struct AdoptedHandles {
  PFN_vkGetInstanceProcAddr get_instance_proc_addr = nullptr;  ///< null: dlopen the loader
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical_device = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;  ///< a queue of queue_family that supports compute
  std::uint32_t queue_family = 0;
  /// What the app enabled at vkCreateDevice; the ops use only these (all off: portable paths).
  bool shader_int8 = false, storage_8bit = false, storage_16bit = false,
       integer_dot_product = false;
};

/// A compute device. Not movable (the validation callback and the ops point at it): create()
/// returns it in a unique_ptr. Destroys what it owns in reverse order of creation.
class Device {
 public:
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() { destroy(); }

  /// Creates an instance, picks a physical device (options.device_index or the rule), creates a
  /// VkDevice with one compute queue and the optional features it has.
  static result<std::unique_ptr<Device>> create(const DeviceOptions& options = {}) {
    std::unique_ptr<Device> d(new Device());
    auto loader = Loader::open(options.loader_library);
    if (!loader) return loader.error();
    d->loader_ = std::move(*loader);
    d->gipa_ = d->loader_.get_instance_proc_addr();
    if (auto st = d->create_instance(options); !st) return st.error();
    if (auto st = d->choose_physical_device(options); !st) return st.error();
    if (auto st = d->create_logical_device(); !st) return st.error();
    if (auto st = d->create_command_objects(); !st) return st.error();
    return d;
  }

  /// Adopts an application's handles. The application keeps them alive until this Device is
  /// destroyed, and destroys them itself afterwards. The instance must be Vulkan 1.1 or later,
  /// and the application must not use the queue from another thread while this Device submits
  /// (Vulkan requires queue access to be externally synchronised).
  static result<std::unique_ptr<Device>> adopt(const AdoptedHandles& h) {
    if (!h.instance || !h.physical_device || !h.device || !h.queue) {
      return make_error(errc::invalid_argument, "vulkan::Device::adopt",
                        "instance, physical_device, device and queue must all be set");
    }
    std::unique_ptr<Device> d(new Device());
    d->gipa_ = h.get_instance_proc_addr;
    if (!d->gipa_) {
      auto loader = Loader::open();
      if (!loader) return loader.error();
      d->loader_ = std::move(*loader);
      d->gipa_ = d->loader_.get_instance_proc_addr();
    }
    d->instance_ = h.instance;
    d->physical_ = h.physical_device;
    d->device_ = h.device;
    d->queue_ = h.queue;
    auto fi = load_instance_functions(d->gipa_, d->instance_);
    if (!fi) return fi.error();
    d->fi_ = *fi;
    VkPhysicalDeviceProperties props;
    d->fi_.vkGetPhysicalDeviceProperties(h.physical_device, &props);
    if (props.apiVersion < VK_API_VERSION_1_1) {
      return make_error(errc::unsupported, "vulkan::Device::adopt",
                        std::string(props.deviceName) + " is a Vulkan 1.0 device; 1.1 is needed");
    }
    d->query_info(h.physical_device);
    d->info_.queue_family = h.queue_family;
    d->info_.shader_int8 = d->info_.shader_int8 && h.shader_int8;
    d->info_.storage_8bit = d->info_.storage_8bit && h.storage_8bit;
    d->info_.storage_16bit = d->info_.storage_16bit && h.storage_16bit;
    d->info_.integer_dot_product = d->info_.integer_dot_product && h.integer_dot_product;
    d->info_.shader_float16 = false;
    auto fd = load_device_functions(d->fi_.vkGetDeviceProcAddr, d->device_);
    if (!fd) return fd.error();
    d->fd_ = *fd;
    if (auto st = d->create_command_objects(); !st) return st.error();
    return d;
  }

  const DeviceInfo& info() const noexcept { return info_; }
  const DeviceFunctions& fn() const noexcept { return fd_; }
  VkDevice handle() const noexcept { return device_; }
  VkPhysicalDevice physical_device() const noexcept { return physical_; }
  VkInstance instance() const noexcept { return instance_; }
  VkQueue queue() const noexcept { return queue_; }
  bool owns_handles() const noexcept { return owns_; }
  bool validation_enabled() const noexcept { return validation_ != nullptr; }
  /// The validation messages (empty, never null, without validation); outlives the Device.
  std::shared_ptr<const ValidationLog> validation_log() const {
    return validation_ ? std::shared_ptr<const ValidationLog>(validation_)
                       : std::make_shared<const ValidationLog>();
  }

  /// Records commands with `record(cmd)` into the device's one-shot command buffer, submits it
  /// and waits. Not thread-safe (one upload at a time per Device).
  template <class F>
  status submit_and_wait(F&& record, std::string_view what) {
    VkCommandBufferBeginInfo begin{};
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    if (auto r = fd_.vkBeginCommandBuffer(one_shot_, &begin); r != VK_SUCCESS)
      return vk_error(r, "vulkan", std::string(what) + ": vkBeginCommandBuffer");
    record(one_shot_);
    if (auto r = fd_.vkEndCommandBuffer(one_shot_); r != VK_SUCCESS)
      return vk_error(r, "vulkan", std::string(what) + ": vkEndCommandBuffer");
    return submit(one_shot_, what);
  }

  /// Submits a recorded command buffer and waits for it (the fence is the Device's).
  status submit(VkCommandBuffer cmd, std::string_view what) {
    if (auto r = fd_.vkResetFences(device_, 1, &fence_); r != VK_SUCCESS)
      return vk_error(r, "vulkan", std::string(what) + ": vkResetFences");
    VkSubmitInfo si{};
    si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cmd;
    if (auto r = fd_.vkQueueSubmit(queue_, 1, &si, fence_); r != VK_SUCCESS)
      return vk_error(r, "vulkan", std::string(what) + ": vkQueueSubmit");
    if (auto r = fd_.vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX); r != VK_SUCCESS)
      return vk_error(r, "vulkan", std::string(what) + ": vkWaitForFences");
    return {};
  }

  VkCommandPool command_pool() const noexcept { return pool_; }

 private:
  Device() = default;

  static bool env_validation() {
    const char* v = std::getenv("EDGELLM_VULKAN_VALIDATION");  // NOLINT(concurrency-mt-unsafe)
    return v && std::string_view(v) == "1";
  }

  static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(
      VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT,
      const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
    auto* log = static_cast<ValidationLog*>(user);
    const char* level =
        (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ? "error" : "warning";
    log->add(std::string(level) + ": " + (data && data->pMessage ? data->pMessage : "?"));
    return VK_FALSE;
  }

  status create_instance(const DeviceOptions& options) {
    const std::uint32_t loader_version = loader_.instance_version();
    if (loader_version < VK_API_VERSION_1_1) {
      return make_error(errc::unsupported, "vulkan",
                        "the Vulkan loader supports only Vulkan 1.0; 1.1 is needed "
                        "(use --backend cpu)");
    }
    const bool validation = options.validation || env_validation();
    std::vector<const char*> layers, extensions;
    constexpr const char* kValidation = "VK_LAYER_KHRONOS_validation";
    if (validation) {
      if (!loader_.has_layer(kValidation)) {
        return make_error(errc::unsupported, "vulkan",
                          "validation requested but VK_LAYER_KHRONOS_validation is not "
                          "installed (Debian: vulkan-validationlayers)");
      }
      layers.push_back(kValidation);
      if (loader_.has_instance_extension(VK_EXT_DEBUG_UTILS_EXTENSION_NAME) ||
          loader_.has_instance_extension(VK_EXT_DEBUG_UTILS_EXTENSION_NAME, kValidation))
        extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    }
    VkApplicationInfo app{};
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "edgellm";
    app.pEngineName = "edgellm";
    app.apiVersion = std::min<std::uint32_t>(loader_version, VK_API_VERSION_1_3);
    VkInstanceCreateInfo ci{};
    ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    ci.pApplicationInfo = &app;
    ci.enabledLayerCount = static_cast<std::uint32_t>(layers.size());
    ci.ppEnabledLayerNames = layers.data();
    ci.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
    ci.ppEnabledExtensionNames = extensions.data();
    // Also chained into instance creation so that messages of vkCreate/DestroyInstance count.
    auto log = std::make_shared<ValidationLog>();
    VkDebugUtilsMessengerCreateInfoEXT mci{};
    mci.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
    mci.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mci.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                      VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                      VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    mci.pfnUserCallback = &Device::on_message;
    mci.pUserData = log.get();
    const bool debug_utils = !extensions.empty();
    if (debug_utils) ci.pNext = &mci;
    if (auto r = loader_.global().vkCreateInstance(&ci, nullptr, &instance_); r != VK_SUCCESS) {
      instance_ = VK_NULL_HANDLE;
      if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
        return make_error(errc::unsupported, "vulkan",
                          "no Vulkan driver found (vkCreateInstance: " + to_string(r) +
                              "); install one (e.g. mesa-vulkan-drivers) or use --backend cpu");
      }
      return vk_error(r, "vulkan", "vkCreateInstance", errc::unsupported);
    }
    owns_ = true;
    auto fi = load_instance_functions(gipa_, instance_);
    if (!fi) return fi.error();
    fi_ = *fi;
    if (validation) validation_ = log;
    if (debug_utils && fi_.vkCreateDebugUtilsMessengerEXT) {
      if (auto r = fi_.vkCreateDebugUtilsMessengerEXT(instance_, &mci, nullptr, &messenger_);
          r != VK_SUCCESS) {
        return vk_error(r, "vulkan", "vkCreateDebugUtilsMessengerEXT");
      }
    }
    return {};
  }

  // The compute queue family: one without graphics when there is one (a dedicated compute
  // queue does not share time with rendering), else any with compute.
  std::optional<std::uint32_t> compute_family(VkPhysicalDevice pd) const {
    std::uint32_t n = 0;
    fi_.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
    std::vector<VkQueueFamilyProperties> q(n);
    fi_.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q.data());
    std::optional<std::uint32_t> any;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!(q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || q[i].queueCount == 0) continue;
      if (!(q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) return i;
      if (!any) any = i;
    }
    return any;
  }

  status choose_physical_device(const DeviceOptions& options) {
    std::uint32_t n = 0;
    if (auto r = fi_.vkEnumeratePhysicalDevices(instance_, &n, nullptr); r != VK_SUCCESS)
      return vk_error(r, "vulkan", "vkEnumeratePhysicalDevices", errc::unsupported);
    std::vector<VkPhysicalDevice> pds(n);
    if (n) fi_.vkEnumeratePhysicalDevices(instance_, &n, pds.data());
    if (n == 0) {
      return make_error(errc::unsupported, "vulkan",
                        "no Vulkan device found (no driver installed?); use --backend cpu");
    }
    std::vector<int> scores(n, -1);
    std::string seen;
    for (std::uint32_t i = 0; i < n; ++i) {
      VkPhysicalDeviceProperties p;
      fi_.vkGetPhysicalDeviceProperties(pds[i], &p);
      seen += (seen.empty() ? "" : ", ") + std::to_string(i) + ": " + p.deviceName + " (" +
              to_string(p.deviceType) + ")";
      if (p.apiVersion >= VK_API_VERSION_1_1 && compute_family(pds[i]))
        scores[i] = device_type_rank(p.deviceType);
    }
    std::optional<std::uint32_t> pick;
    if (options.device_index) {
      if (*options.device_index >= n) {
        return make_error(errc::out_of_range, "vulkan",
                          "--device " + std::to_string(*options.device_index) + ": only " +
                              std::to_string(n) + " Vulkan device(s): " + seen);
      }
      if (scores[*options.device_index] < 0) {
        return make_error(errc::unsupported, "vulkan",
                          "--device " + std::to_string(*options.device_index) +
                              ": needs Vulkan 1.1 and a compute queue (devices: " + seen + ")");
      }
      pick = options.device_index;
    } else {
      pick = pick_physical_device(scores);
      if (!pick) {
        return make_error(errc::unsupported, "vulkan",
                          "no Vulkan 1.1 device with a compute queue (devices: " + seen +
                              "); use --backend cpu");
      }
    }
    physical_ = pds[*pick];
    query_info(physical_);
    info_.index = *pick;
    info_.queue_family = *compute_family(physical_);
    return {};
  }

  bool has_device_extension(VkPhysicalDevice pd, std::string_view name) const {
    std::uint32_t n = 0;
    if (fi_.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr) != VK_SUCCESS) return false;
    std::vector<VkExtensionProperties> ext(n);
    if (fi_.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, ext.data()) != VK_SUCCESS) return false;
    for (const auto& e : ext)
      if (name == e.extensionName) return true;
    return false;
  }

  // Properties, limits and optional features of `pd` into info_.
  void query_info(VkPhysicalDevice pd) {
    VkPhysicalDeviceSubgroupProperties sub{};
    sub.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
    VkPhysicalDeviceShaderIntegerDotProductProperties dotp{};
    dotp.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES;
    VkPhysicalDeviceProperties2 p2{};
    p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    VkPhysicalDeviceProperties base;
    fi_.vkGetPhysicalDeviceProperties(pd, &base);
    dot_extension_ = base.apiVersion < VK_API_VERSION_1_3 &&
                     has_device_extension(pd, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    const bool dot_available = base.apiVersion >= VK_API_VERSION_1_3 || dot_extension_;
    p2.pNext = &sub;
    if (dot_available) sub.pNext = &dotp;
    fi_.vkGetPhysicalDeviceProperties2(pd, &p2);
    const VkPhysicalDeviceProperties& p = p2.properties;
    info_.name = p.deviceName;
    info_.type = p.deviceType;
    info_.api_version = p.apiVersion;
    info_.subgroup_size = std::max<std::uint32_t>(sub.subgroupSize, 1);
    info_.subgroup_arithmetic =
        (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
        (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    info_.integer_dot_accelerated =
        dot_available && dotp.integerDotProduct4x8BitPackedUnsignedAccelerated;
    for (int i = 0; i < 3; ++i) {
      info_.max_workgroup_size[i] = p.limits.maxComputeWorkGroupSize[i];
      info_.max_workgroup_count[i] = p.limits.maxComputeWorkGroupCount[i];
    }
    info_.max_workgroup_invocations = p.limits.maxComputeWorkGroupInvocations;
    info_.shared_memory_bytes = p.limits.maxComputeSharedMemorySize;
    info_.max_push_constants_bytes = p.limits.maxPushConstantsSize;
    info_.max_storage_buffer_range = p.limits.maxStorageBufferRange;
    info_.non_coherent_atom_size = std::max<VkDeviceSize>(p.limits.nonCoherentAtomSize, 1);
    fi_.vkGetPhysicalDeviceMemoryProperties(pd, &info_.memory);

    // Features (Vulkan 1.2 structs need a 1.2 device; a 1.1 device gets the portable paths).
    if (p.apiVersion >= VK_API_VERSION_1_2) {
      VkPhysicalDeviceVulkan11Features f11{};
      f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
      VkPhysicalDeviceVulkan12Features f12{};
      f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
      VkPhysicalDeviceShaderIntegerDotProductFeatures fdot{};
      fdot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
      VkPhysicalDeviceFeatures2 f2{};
      f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
      f2.pNext = &f11;
      f11.pNext = &f12;
      if (dot_available) f12.pNext = &fdot;
      fi_.vkGetPhysicalDeviceFeatures2(pd, &f2);
      info_.storage_16bit = f11.storageBuffer16BitAccess;
      info_.storage_8bit = f12.storageBuffer8BitAccess;
      info_.shader_int8 = f12.shaderInt8;
      info_.shader_float16 = f12.shaderFloat16;
      info_.integer_dot_product = dot_available && fdot.shaderIntegerDotProduct;
    }
  }

  status create_logical_device() {
    const float priority = 1.0f;
    VkDeviceQueueCreateInfo qci{};
    qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qci.queueFamilyIndex = info_.queue_family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &priority;
    // Enable exactly the optional features found (nothing else: robustness and the like cost).
    VkPhysicalDeviceVulkan11Features f11{};
    f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
    VkPhysicalDeviceVulkan12Features f12{};
    f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    VkPhysicalDeviceShaderIntegerDotProductFeatures fdot{};
    fdot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
    VkPhysicalDeviceFeatures2 f2{};
    f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    std::vector<const char*> extensions;
    if (info_.api_version >= VK_API_VERSION_1_2) {
      f11.storageBuffer16BitAccess = info_.storage_16bit;
      f12.storageBuffer8BitAccess = info_.storage_8bit;
      f12.shaderInt8 = info_.shader_int8;
      f12.shaderFloat16 = info_.shader_float16;
      f2.pNext = &f11;
      f11.pNext = &f12;
      if (info_.integer_dot_product) {
        fdot.shaderIntegerDotProduct = VK_TRUE;
        f12.pNext = &fdot;
        if (dot_extension_) extensions.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
      }
    }
    VkDeviceCreateInfo ci{};
    ci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    ci.pNext = info_.api_version >= VK_API_VERSION_1_2 ? &f2 : nullptr;
    ci.queueCreateInfoCount = 1;
    ci.pQueueCreateInfos = &qci;
    ci.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
    ci.ppEnabledExtensionNames = extensions.data();
    if (auto r = fi_.vkCreateDevice(physical_, &ci, nullptr, &device_); r != VK_SUCCESS) {
      device_ = VK_NULL_HANDLE;
      return vk_error(r, "vulkan", "vkCreateDevice on " + info_.name, errc::unsupported);
    }
    auto fd = load_device_functions(fi_.vkGetDeviceProcAddr, device_);
    if (!fd) return fd.error();
    fd_ = *fd;
    fd_.vkGetDeviceQueue(device_, info_.queue_family, 0, &queue_);
    return {};
  }

  status create_command_objects() {
    VkCommandPoolCreateInfo pci{};
    pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pci.queueFamilyIndex = info_.queue_family;
    if (auto r = fd_.vkCreateCommandPool(device_, &pci, nullptr, &pool_); r != VK_SUCCESS) {
      pool_ = VK_NULL_HANDLE;
      return vk_error(r, "vulkan", "vkCreateCommandPool");
    }
    VkCommandBufferAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    if (auto r = fd_.vkAllocateCommandBuffers(device_, &ai, &one_shot_); r != VK_SUCCESS)
      return vk_error(r, "vulkan", "vkAllocateCommandBuffers");
    VkFenceCreateInfo fci{};
    fci.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    if (auto r = fd_.vkCreateFence(device_, &fci, nullptr, &fence_); r != VK_SUCCESS) {
      fence_ = VK_NULL_HANDLE;
      return vk_error(r, "vulkan", "vkCreateFence");
    }
    return {};
  }

  void destroy() noexcept {
    if (device_) {
      // Every submission of ours was waited for; an adopted device may be busy with the app's.
      if (owns_) fd_.vkDeviceWaitIdle(device_);
      if (fence_) fd_.vkDestroyFence(device_, fence_, nullptr);
      if (pool_) fd_.vkDestroyCommandPool(device_, pool_, nullptr);  // frees one_shot_
      if (owns_) fd_.vkDestroyDevice(device_, nullptr);
    }
    if (owns_ && instance_) {
      if (messenger_) fi_.vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
      fi_.vkDestroyInstance(instance_, nullptr);
    }
    device_ = VK_NULL_HANDLE;
    instance_ = VK_NULL_HANDLE;
  }

  Loader loader_;  // declared first: closed last
  PFN_vkGetInstanceProcAddr gipa_ = nullptr;
  InstanceFunctions fi_{};
  DeviceFunctions fd_{};
  DeviceInfo info_{};
  bool owns_ = false;
  bool dot_extension_ = false;  // VK_KHR_shader_integer_dot_product enabled as an extension
  std::shared_ptr<ValidationLog> validation_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer one_shot_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
};

}  // namespace edgellm::backend::vk
