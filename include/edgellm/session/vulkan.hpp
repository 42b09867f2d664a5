// SPDX-License-Identifier: Apache-2.0
// A Session (session.hpp) whose models run on a Vulkan device (backend/vulkan/backend.hpp): the
// same generate(), streaming, stop strings, sampling, speculative decoding (a draft Engine, or
// prompt lookup) and prompt cache as on the CPU, with the weights, activations and KV cache in
// device memory and a decode step as one submission. Needs the edgellm::vulkan target.
//
//   auto engine = edgellm::Engine::load("models/kjv-target-awq");   // lm_head as stored
//   auto session = edgellm::create_vulkan_session(*engine, {.kv_type = edgellm::cache::KvType::f16});
//   if (!session) return fail(session.error());  // no loader, no device: "--backend cpu" then
//   auto out = session->generate("And God said", {.max_new_tokens = 64}, on_token);
//
// What the device runs: int4 linears and an fp16 (or as-stored dense fp16) lm_head; load the
// Engine with EngineOptions::load.lm_head = as_stored (its default). KV caches: int8 or f16.
// The int4 decode GEMVs run W4A8 where the device accelerates integer dot products, fp32
// elsewhere (VulkanSessionOptions::backend_options forces either; backend/vulkan/backend.hpp).
//
// make_vulkan_transformer is the one place a Transformer is built on a device (a cache, a
// backend, assemble): the Session, the CLI's --backend vulkan and edgellm-bench use it. It lives
// here, not in backend/vulkan/, because backend/ sits below model/ (tools/check_layers.py).
#pragma once

#include "edgellm/backend/vulkan/backend.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/kv_cache.hpp"
#include "edgellm/detail/guard_exceptions.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/result.hpp"
#include "edgellm/session.hpp"

#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace edgellm {

/// Where a Vulkan Session runs.
struct VulkanSessionOptions {
  /// The app's device (an Android app adopts its own VkDevice with vk::Device::adopt); it must
  /// outlive the Session. Null: the Session opens a device of its own with `device_options`
  /// (an index, or the rule discrete > integrated > CPU implementations) and closes it last.
  backend::vk::Device* device = nullptr;
  backend::vk::DeviceOptions device_options{};
  /// The backend's choices for the target and the draft: which build the int4 decode GEMVs run
  /// (automatic: W4A8 with hardware dot products where the device has them, else fp32).
  backend::vk::BackendOptions backend_options{};
};

/// The model type of a Vulkan Session.
using VulkanModel = model::Transformer<backend::vk::KVCache, backend::vk::Backend>;

/// A Transformer over `weights` on `device` (which must outlive it): a device KV cache of `kv`
/// for the context `options` give (VulkanModel::checked_context), a backend for
/// options.max_batch rows on options.path (its int4 GEMVs as `backend_options` choose), then
/// assemble. options.pool and options.profile do not reach the device. Errors: the options, out
/// of device memory, weights the shaders do not run (each says what is missing).
inline result<VulkanModel> make_vulkan_transformer(
    backend::vk::Device& device, std::shared_ptr<const model::TransformerWeights> weights,
    const model::TransformerOptions& options, backend::vk::KvFormat kv,
    const backend::vk::BackendOptions& backend_options = {}) {
  namespace vk = backend::vk;
  if (!weights) {
    return make_error(errc::invalid_argument, "make_vulkan_transformer", "weights: null");
  }
  auto ctx = VulkanModel::checked_context(*weights, options);
  if (!ctx) return ctx.error();
  const model::ModelConfig& c = weights->config;
  auto cache = vk::KVCache::create(device, kv, c.num_hidden_layers, c.num_key_value_heads,
                                   c.head_dim, *ctx);
  if (!cache) return cache.error();
  auto b = vk::Backend::create(device, VulkanModel::model_shape(c, options.max_batch),
                               backend::Options{nullptr, options.path, options.isa, nullptr},
                               backend_options);
  if (!b) return b.error();
  model::TransformerOptions o = options;
  o.context_size = *ctx;
  return VulkanModel::assemble(std::move(weights), o, std::move(*cache), std::move(*b));
}

/// A Session over `engine` on a Vulkan device. SessionOptions apply as on the CPU, except:
/// kv_type int8 or f16 (the device caches), pool (the device computes), memory_budget (it plans
/// host memory; the device's memory errors are reported when allocating). Errors: no loader, no
/// device, a missing feature, out of device memory, weights the shaders do not run (an int8
/// lm_head, bf16 linears): each names what is missing and says to fall back to the CPU.
inline result<Session> create_vulkan_session(std::shared_ptr<const Engine> engine,
                                             const SessionOptions& options = {},
                                             const VulkanSessionOptions& vulkan = {}) {
  namespace vk = backend::vk;
  constexpr std::string_view where = "create_vulkan_session";
  return edgellm::detail::guard_exceptions(where, [&]() -> result<Session> {
    if (!engine) return make_error(errc::invalid_argument, where, "engine: null");
    const auto format = vk::kv_format_of(options.kv_type, "kv_type", where);
    if (!format) return format.error();
    if (options.memory_budget.enabled()) {
      return make_error(errc::unsupported, where,
                        "memory_budget: plans host memory; a Vulkan Session's state is in device "
                        "memory (allocation failures are reported as errors)");
    }
    std::shared_ptr<vk::Device> owned;
    vk::Device* dev = vulkan.device;
    if (dev == nullptr) {
      auto d = vk::Device::create(vulkan.device_options);
      if (!d) return d.error();
      owned = std::move(*d);
      dev = owned.get();
    }
    model::TransformerOptions to = Session::model_options(*engine, options);
    to.pool = nullptr;
    const auto build = [&](const std::shared_ptr<const model::TransformerWeights>& w,
                           const model::TransformerOptions& o) {
      return make_vulkan_transformer(*dev, w, o, *format, vulkan.backend_options);
    };
    auto target = build(engine->weights(), to);
    if (!target) return target.error();
    std::optional<VulkanModel> draft;
    if (options.draft) {
      model::TransformerOptions draft_to = to;
      draft_to.profile = nullptr;  // SessionOptions::profile is the target's
      auto d = build(options.draft->weights(), draft_to);
      if (!d) return d.error();
      draft.emplace(std::move(*d));
    }
    // `owned` outlives target and draft here (declared first), and inside the Session.
    return Session::adopt(std::move(engine), options, std::move(*target), std::move(draft),
                          std::shared_ptr<const void>(owned), "vulkan");
  });
}

}  // namespace edgellm
