// SPDX-License-Identifier: Apache-2.0
// Causal GQA attention on a Vulkan device over the device KV cache (backend/vulkan/kv_cache.hpp),
// recorded into a CommandSequence: the math of cache::DenseKVCache::attend, in fp32, by online
// softmax (shaders/vulkan/attention.comp), so any cached length runs in fixed shared memory.
#pragma once

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/kv_cache.hpp"
#include "edgellm/backend/vulkan/pipeline.hpp"
#include "edgellm/backend/vulkan/spirv/attention.hpp"
#include "edgellm/backend/vulkan/spirv/attention_storage.hpp"
#include "edgellm/backend/vulkan/spirv/attention_subgroup.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace edgellm::backend::vk {

/// Which build of the attention shader runs (shaders/vulkan/attention*.comp).
enum class AttentionBuild {
  best,      ///< storage where the device has it, else subgroup, else portable
  portable,  ///< no subgroup operations; codes loaded as uint words
  subgroup,  ///< subgroupMax / subgroupAdd in the reductions (subgroup arithmetic)
  storage,   ///< subgroups, and codes loaded as i8vec4 / f16vec4 (8/16-bit storage, shaderInt8,
             ///< shaderFloat16: the conversions glslang emits need them)
};

inline const char* attention_build_name(AttentionBuild b) noexcept {
  switch (b) {
    case AttentionBuild::best: return "best";
    case AttentionBuild::portable: return "portable";
    case AttentionBuild::subgroup: return "subgroup";
    case AttentionBuild::storage: return "storage";
  }
  return "?";
}

/// How the attention shader's work is cut (attention.glsl's WG, P and C).
enum class AttentionTiling {
  device,  ///< cpu on a CPU implementation, else gpu
  cpu,     ///< 32 invocations x 16 positions a block, 4 vec4s of values per invocation
  gpu,     ///< 64 invocations x 4 positions a block, 2 vec4s of values per invocation
};

struct AttentionOptions {
  /// A build other than best fails with errc::unsupported where the device lacks its features
  /// (tests run every build the device has).
  AttentionBuild build = AttentionBuild::best;
  /// Tests run both tilings on one device; the shared-memory limit may shrink P below it.
  AttentionTiling tiling = AttentionTiling::device;
};

/// Attention of query rows at positions first_pos.. over one layer of a KVCache, recorded into
/// a CommandSequence:
///   q, out  fp32 [rows][heads][head_dim] device buffers (at least that size)
/// Row t (position p = first_pos + t), head h, kv head g = h / (heads / kv_heads):
///   s_j = dot(q * scale, k_j) [* ks_j]  (j = 0 .. p, scale = head_dim^-0.5 rounded to fp32 as
///   kernels::attention_scale does, ks_j the int8 key scale),
///   out = sum_j exp(s_j - M) [vs_j] v_j / sum_j exp(s_j - M).
/// Error against exact attention over the stored keys and values: the CPU bound of
/// cache::DenseKVCache (2E + (2S + 2L + 2nb + 18)u) max |v| with the device's exp error
/// (Vulkan: 3 + 2|x| ulp) and its sums in place of the CPU's: the denominator as each
/// invocation's running sum over its own positions (P a block of WG * P) and then a sum over
/// the invocations, the numerator as each set's running sum over every sets-th position and
/// then a sum over the sets (sets = WG / ceil(head_dim / 4 / C));
/// tests/backend/vulkan/attention_test.cpp states the bound.
/// One workgroup per (kv head, row) for all heads of the kv head's GQA group (up to kMaxGroup;
/// a larger group over equal workgroups), so each K/V row is read once per group, each over
/// every position it sees. Holds only the pipeline: one op serves every cache and buffer of
/// its Device. Move-only; the Device must outlive it.
class Attention {
 public:
  static result<Attention> create(Device& dev, const AttentionOptions& options = {}) {
    constexpr std::string_view where = "vulkan Attention::create";
    const auto& info = dev.info();
    const bool subgroups = info.subgroup_arithmetic;
    const bool storage = subgroups && info.storage_8bit && info.storage_16bit &&
                         info.shader_int8 && info.shader_float16;
    AttentionBuild build = options.build;
    if (build == AttentionBuild::best) {
      build = storage ? AttentionBuild::storage
                      : subgroups ? AttentionBuild::subgroup : AttentionBuild::portable;
    }
    if ((build == AttentionBuild::subgroup && !subgroups) ||
        (build == AttentionBuild::storage && !storage)) {
      return make_error(errc::unsupported, where,
                        std::string("options.build: the ") + attention_build_name(build) +
                            " build needs subgroup arithmetic in compute shaders" +
                            (build == AttentionBuild::storage
                                 ? ", storageBuffer8BitAccess, storageBuffer16BitAccess, "
                                   "shaderInt8 and shaderFloat16"
                                 : "") +
                            "; the device lacks one");
    }
    // Tiling: a CPU implementation loads storage and shared memory per invocation and
    // component, and its registers are cheap (spills land in L1), so there each invocation
    // scores 16 positions per query load and accumulates 4 vec4s of values per weight load;
    // a GPU keeps 4 and 2 (fewer registers, more invocations in flight).
    AttentionTiling tiling = options.tiling;
    if (tiling == AttentionTiling::device)
      tiling = info.type == VK_PHYSICAL_DEVICE_TYPE_CPU ? AttentionTiling::cpu : AttentionTiling::gpu;
    const bool cpu = tiling == AttentionTiling::cpu;
    const std::uint32_t chunks = cpu ? 4 : 2, preferred_wg = cpu ? 32 : 64;
    // Shared memory: the queries of kMaxGroup heads (kMaxGroup * kMaxHeadDim floats), plus per
    // invocation kMaxGroup weights per position (P of them) and kMaxGroup maxima. The most
    // positions per invocation that fits, with at least kMaxHeadDim / 4 / C invocations (a
    // value row of the widest head).
    const std::uint32_t fixed = kMaxGroup * KVCache::kMaxHeadDim * 4;
    const std::uint32_t min_wg = KVCache::kMaxHeadDim / 4 / chunks;
    DeviceInfo budget = info;
    budget.shared_memory_bytes = info.shared_memory_bytes > fixed ? info.shared_memory_bytes - fixed : 0;
    std::uint32_t wg = 0, p = 0;
    for (std::uint32_t per : {cpu ? 16u : 4u, 8u, 4u, 2u, 1u}) {
      if (per > (cpu ? 16u : 4u)) continue;
      const std::uint32_t bytes = kMaxGroup * 4 * (per + 1);
      const std::uint32_t w = choose_workgroup_size(budget, preferred_wg, bytes, 1);
      if (w >= min_wg && w * bytes <= budget.shared_memory_bytes) {
        wg = w;
        p = per;
        break;
      }
    }
    if (wg == 0 || wg > info.max_workgroup_invocations || wg > info.max_workgroup_size[0]) {
      return make_error(errc::unsupported, where,
                        "the device's compute limits (" + std::to_string(info.shared_memory_bytes) +
                            " bytes of shared memory, " +
                            std::to_string(info.max_workgroup_invocations) +
                            " invocations) are below the shader's " + std::to_string(min_wg) +
                            " invocations with " +
                            std::to_string(fixed + min_wg * kMaxGroup * 4 * 2) +
                            " bytes of shared memory");
    }
    Attention op;
    const std::uint32_t constants[] = {p, chunks};
    auto pipe = build == AttentionBuild::storage
                    ? ComputePipeline::create(dev, "attention_storage", spirv::kAttentionStorageSpv,
                                              6, sizeof(Push), wg, constants)
                : build == AttentionBuild::subgroup
                    ? ComputePipeline::create(dev, "attention_subgroup",
                                              spirv::kAttentionSubgroupSpv, 6, sizeof(Push), wg,
                                              constants)
                    : ComputePipeline::create(dev, "attention", spirv::kAttentionSpv, 6,
                                              sizeof(Push), wg, constants);
    if (!pipe) return pipe.error();
    op.pipeline_ = std::move(*pipe);
    op.build_ = build;
    op.per_invocation_ = p;
    op.chunks_ = chunks;
    return op;
  }

  /// Records attention of q rows [0, rows) at positions first_pos.. over `layer` into out rows
  /// [0, rows). heads: a positive multiple of the cache's kv_heads. Every attended position must
  /// be held: first_pos + rows <= cache.layer_length(layer) (record the KvAppend first). Errors
  /// name the argument; nothing is recorded on error.
  status record(CommandSequence& seq, const KVCache& cache, const Buffer& q, const Buffer& out,
                std::size_t heads, std::size_t layer, std::size_t first_pos,
                std::size_t rows) const {
    constexpr std::string_view where = "vulkan Attention::record";
    const auto& info = seq.device().info();
    if (heads == 0 || heads % cache.kv_heads() != 0) {
      return make_error(errc::invalid_argument, where,
                        "heads: " + std::to_string(heads) +
                            " is not a positive multiple of kv_heads " +
                            std::to_string(cache.kv_heads()));
    }
    if (layer >= cache.layers()) {
      return make_error(
          errc::out_of_range, where,
          "layer: " + std::to_string(layer) + " >= layers " + std::to_string(cache.layers()));
    }
    if (rows == 0) return make_error(errc::invalid_argument, where, "rows: must be positive");
    const std::size_t held = cache.layer_length(layer);
    if (first_pos > held || rows > held - first_pos) {
      return make_error(errc::out_of_range, where,
                        "first_pos + rows: queries at positions " + std::to_string(first_pos) +
                            ".." + std::to_string(first_pos + rows - 1) + " but layer " +
                            std::to_string(layer) + " holds " + std::to_string(held) +
                            " positions");
    }
    const std::size_t hd = cache.head_dim();
    const std::string shape = "[" + std::to_string(rows) + "][" + std::to_string(heads) + "][" +
                              std::to_string(hd) + "] fp32";
    const std::uint64_t bytes = std::uint64_t{rows} * heads * hd * 4;
    if (auto st = require_bytes(q, bytes, where, "q", shape, info); !st) return st;
    if (auto st = require_bytes(out, bytes, where, "out", shape, info); !st) return st;
    // One workgroup per (kv head, part of its group of query heads, row); as attention.glsl.
    const std::size_t group = heads / cache.kv_heads();
    const std::size_t parts = (group + kMaxGroup - 1) / kMaxGroup;
    if (cache.kv_heads() * parts > info.max_workgroup_count[0] ||
        rows > info.max_workgroup_count[1]) {
      return make_error(errc::unsupported, where,
                        "rows: " + std::to_string(rows) + " x heads " + std::to_string(heads) +
                            " workgroups exceed the device's dispatch limits");
    }
    const Push push{static_cast<std::uint32_t>(layer * cache.capacity()),
                    static_cast<std::uint32_t>(first_pos), static_cast<std::uint32_t>(heads),
                    static_cast<std::uint32_t>(cache.kv_heads()), static_cast<std::uint32_t>(hd),
                    cache.format() == KvFormat::int8 ? 1u : 0u,
                    // kernels::attention_scale (not included: it pulls in the CPU kernels)
                    static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))};
    const Buffer* bound[] = {
        &cache.k_codes(), &cache.v_codes(), &cache.k_scales(), &cache.v_scales(), &q, &out};
    return seq.dispatch(pipeline_, bound, &push,
                        static_cast<std::uint32_t>(cache.kv_heads() * parts),
                        static_cast<std::uint32_t>(rows));
  }

  std::uint32_t workgroup_size() const noexcept { return pipeline_.workgroup_size(); }
  /// Positions each invocation scores per block: a block is workgroup_size() * this.
  std::uint32_t positions_per_invocation() const noexcept { return per_invocation_; }
  /// vec4s of a value row each invocation accumulates (C in attention.glsl).
  std::uint32_t vec4s_per_invocation() const noexcept { return chunks_; }
  /// Which shader build runs: AttentionBuild::portable, subgroup or storage (never best).
  AttentionBuild build() const noexcept { return build_; }
  const char* variant() const noexcept { return attention_build_name(build_); }

  /// Query heads per workgroup: a larger GQA group is split over equal workgroups.
  static constexpr std::uint32_t kMaxGroup = 8;  // GMAX in attention.glsl

 private:
  struct Push {
    std::uint32_t pos0, first_pos, heads, kv_heads, head_dim, q8;  // see attention.comp
    float scale;
  };
  Attention() = default;

  ComputePipeline pipeline_;
  AttentionBuild build_ = AttentionBuild::portable;
  std::uint32_t per_invocation_ = 1, chunks_ = 1;
};

}  // namespace edgellm::backend::vk
