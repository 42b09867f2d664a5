// SPDX-License-Identifier: Apache-2.0
// The CLI's `--backend vulkan`: a model::Transformer whose ops and KV cache live on a Vulkan
// device (backend/vulkan/backend.hpp), together with the device it runs on, or a Session on
// one (session/vulkan.hpp). Only in builds with
// the Vulkan backend (EDGELLM_TOOLS_VULKAN); the others say how to get one. --backend and
// --vk-gemv parse in every build (gemv_choice.hpp needs no Vulkan header).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "../cli/flags.hpp"
#include "edgellm/backend/vulkan/gemv_choice.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/result.hpp"

#if EDGELLM_TOOLS_VULKAN
#include "edgellm/backend/vulkan/backend.hpp"
#include "edgellm/session/vulkan.hpp"
#endif

namespace edgellm::tools {

/// What --backend names.
enum class BackendKind { cpu, vulkan };

/// --backend cpu|vulkan.
inline cli::flag backend_flag(std::string help, BackendKind& target) {
  return cli::flag::choice({"--backend"}, std::move(help), target,
                           {{"cpu", BackendKind::cpu}, {"vulkan", BackendKind::vulkan}});
}

/// --vk-gemv G: auto, fp32, int8 or int8-dot (backend::vk::parse_gemv_choice); empty until
/// given.
inline cli::flag vk_gemv_flag(std::string help, std::optional<backend::vk::GemvChoice>& target) {
  return cli::flag::custom({"--vk-gemv"}, "G", std::move(help), [&target](std::string_view v) {
    const auto c = backend::vk::parse_gemv_choice(v);
    if (!c) return "'" + std::string(v) + "' is not auto, fp32, int8 or int8-dot";
    target = *c;
    return std::string();
  });
}

/// Why --backend vulkan cannot run in this build, or "" when it can.
inline std::string vulkan_unavailable() {
#if EDGELLM_TOOLS_VULKAN
  return {};
#else
  return "--backend vulkan: this build has no Vulkan backend (configure with "
         "-DEDGELLM_VULKAN=ON where vulkan/vulkan.h is installed); use --backend cpu";
#endif
}

/// The Vulkan device a tool opened: what it says about it on stderr (vulkan_device_lines).
struct VulkanDeviceNote {
  std::uint32_t index = 0;
  std::string name;                ///< VkPhysicalDeviceProperties::deviceName
  std::string type;                ///< "discrete GPU", "CPU", ...
  bool cpu_implementation = false; ///< lavapipe, llvmpipe, SwiftShader: slower than the CPU path
};

/// "Vulkan device N: NAME (TYPE)" (unless `quiet`), then for a CPU implementation the warning
/// that --backend cpu is faster (even when `quiet`: it is a warning).
inline void print_vulkan_device(const char* prog, const VulkanDeviceNote& d, bool quiet) {
  if (!quiet)
    std::fprintf(stderr, "Vulkan device %u: %s (%s)\n", d.index, d.name.c_str(), d.type.c_str());
  if (d.cpu_implementation) {
    std::fprintf(stderr,
                 "%s: warning: Vulkan device '%s' is a CPU implementation; --backend cpu is "
                 "faster\n",
                 prog, d.name.c_str());
  }
}

#if EDGELLM_TOOLS_VULKAN
/// `e` with the CLI's way out appended, unless it already names it.
inline error with_cpu_fallback(error e) {
  if (e.message.find("--backend cpu") == std::string::npos) e.message += " (run with --backend cpu)";
  return e;
}

/// The note on a device this tool opened.
inline VulkanDeviceNote vulkan_device_note(const backend::vk::Device& device) {
  const backend::vk::DeviceInfo& i = device.info();
  return {i.index, i.name, backend::vk::to_string(i.type), i.type == VK_PHYSICAL_DEVICE_TYPE_CPU};
}

/// A Session (edgellm-generate) over `engine` on the Vulkan device `device_index` (or the
/// backend's rule), its int4 decode GEMVs the `gemv` build (--vk-gemv); errors say how to fall
/// back to --backend cpu. The device is opened here so that the tool can name it: `device`
/// receives it and must outlive the Session (declare it first); `note` describes it.
inline result<Session> make_vulkan_session(
    std::shared_ptr<const Engine> engine, const SessionOptions& options,
    std::optional<std::uint32_t> device_index, backend::vk::GemvChoice gemv,
    std::shared_ptr<void>& device, VulkanDeviceNote& note) {
  backend::vk::DeviceOptions dopts;
  dopts.device_index = device_index;
  auto dev = backend::vk::Device::create(dopts);
  if (!dev) return with_cpu_fallback(dev.error());
  note = vulkan_device_note(**dev);
  std::shared_ptr<backend::vk::Device> owned = std::move(*dev);
  VulkanSessionOptions vo;
  vo.device = owned.get();
  vo.backend_options.gemv = gemv;
  device = owned;
  auto s = create_vulkan_session(std::move(engine), options, vo);
  if (!s) return with_cpu_fallback(s.error());
  return s;
}

/// A device and the model on it; the model is destroyed first (it holds device objects).
struct VulkanModel {
  using Model = edgellm::VulkanModel;
  std::unique_ptr<backend::vk::Device> device;
  std::optional<Model> model;
};

/// Opens the Vulkan device (`device_index`, or the backend's rule) and builds `weights` on it
/// (make_vulkan_transformer) with a KV cache of `kv` (int8 or f16; fp32 has no device format)
/// for options.context_size positions, the int4 decode GEMVs the `gemv` build (automatic reads
/// options.path). Errors say what is missing and how to fall back to --backend cpu.
inline result<VulkanModel> make_vulkan_model(
    std::shared_ptr<const model::TransformerWeights> weights,
    const model::TransformerOptions& options, cache::KvType kv,
    std::optional<std::uint32_t> device_index,
    backend::vk::GemvChoice gemv = backend::vk::GemvChoice::automatic) {
  namespace vk = backend::vk;
  const auto format = vk::kv_format_of(kv, "--kv-type", "--backend vulkan");
  if (!format) return format.error();
  // The context is checked before the device opens: a bad --ctx is a usage error, not a
  // reason to fall back to the CPU.
  auto ctx = VulkanModel::Model::checked_context(*weights, options);
  if (!ctx) return ctx.error();
  vk::DeviceOptions dopts;
  dopts.device_index = device_index;
  auto dev = vk::Device::create(dopts);
  if (!dev) return with_cpu_fallback(dev.error());
  vk::BackendOptions bo;
  bo.gemv = gemv;
  auto t = make_vulkan_transformer(**dev, std::move(weights), options, *format, bo);
  if (!t) return with_cpu_fallback(t.error());
  VulkanModel out;
  out.device = std::move(*dev);
  out.model.emplace(std::move(*t));
  return out;
}
#endif

}  // namespace edgellm::tools
