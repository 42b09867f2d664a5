// SPDX-License-Identifier: Apache-2.0
// The model description edgellm runs: decoder family and shapes of a Llama / Qwen2 / Qwen3 /
// Mistral / SmolLM3 model, its AutoAWQ quantization settings, and the RoPE inverse frequencies they imply.
// Reading them from a checkpoint's config.json is model/config_json.hpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::model {

/// The decoder families edgellm runs (config.json `model_type`).
enum class ModelType { llama, qwen2, mistral, qwen3, smollm3 };

inline const char* to_string(ModelType t) noexcept {
  switch (t) {
    case ModelType::llama:
      return "llama";
    case ModelType::qwen2:
      return "qwen2";
    case ModelType::mistral:
      return "mistral";
    case ModelType::qwen3:
      return "qwen3";
    case ModelType::smollm3:
      return "smollm3";
  }
  return "?";
}

/// RoPE frequency scaling (config `rope_scaling`, or v5 `rope_parameters`).
enum class RopeScalingType {
  none,    ///< plain RoPE (null, absent, or rope_type "default")
  linear,  ///< inv_freq / factor
  llama3,  ///< Llama 3.1 wavelength-dependent blend
};

struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 1.0;                               ///< linear, llama3
  double low_freq_factor = 1.0;                      ///< llama3
  double high_freq_factor = 4.0;                     ///< llama3
  std::size_t original_max_position_embeddings = 0;  ///< llama3
};

/// The on-disk packing of an AutoAWQ checkpoint (docs/formats.md §1.3–1.4).
enum class AwqVersion { gemm, gemv };

inline const char* to_string(AwqVersion v) noexcept {
  return v == AwqVersion::gemm ? "gemm" : "gemv";
}

/// AutoAWQ settings. Only what edgellm runs is representable: 4-bit, asymmetric (zero points),
/// gemm or gemv layout, a positive group size.
struct AwqConfig {
  int bits = 4;
  std::size_t group_size = 128;
  bool zero_point = true;
  AwqVersion version = AwqVersion::gemm;
  /// Linears whose layer-relative name (e.g. "mlp.gate_proj") contains one of these substrings
  /// were left unquantised.
  std::vector<std::string> modules_to_not_convert;
  /// edgellm's extension (quantization_config.edgellm_int8_modules): quantised linears whose
  /// layer-relative name contains one of these substrings are stored in int8 (qweight I8
  /// [n][k], scales F32 [n][k / group_size]; quant/awq_output.hpp) instead of AutoAWQ int4.
  std::vector<std::string> int8_modules;

  /// Whether the linear `module_name` (layer-relative, e.g. "self_attn.q_proj") is quantised,
  /// i.e. contains none of modules_to_not_convert (AutoAWQ's substring rule).
  bool is_quantized(std::string_view module_name) const noexcept {
    for (const std::string& m : modules_to_not_convert) {
      if (module_name.find(m) != std::string_view::npos) return false;
    }
    return true;
  }
  /// Whether the linear is quantised and stored in edgellm's int8 layout.
  bool is_int8(std::string_view module_name) const noexcept {
    if (!is_quantized(module_name)) return false;
    for (const std::string& m : int8_modules) {
      if (module_name.find(m) != std::string_view::npos) return true;
    }
    return false;
  }
};

/// The parts of a Hugging Face config.json that define a Llama / Qwen2 / Qwen3 / Mistral /
/// SmolLM3 decoder.
/// All dimensions are validated positive (and at most 2^31 − 1).
struct ModelConfig {
  ModelType model_type = ModelType::llama;
  std::size_t hidden_size = 0;
  std::size_t intermediate_size = 0;
  std::size_t num_hidden_layers = 0;
  std::size_t num_attention_heads = 0;
  std::size_t num_key_value_heads = 0;  ///< divides num_attention_heads (GQA group = heads / kv)
  std::size_t head_dim = 0;             ///< explicit, or hidden_size / num_attention_heads; even
  std::size_t vocab_size = 0;           ///< embedding rows; may exceed the tokenizer's size
  std::size_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;  ///< lm_head shares model.embed_tokens.weight
  bool attention_qkv_bias = false;   ///< q/k/v_proj have biases (Qwen2 always; Llama, Qwen3
                                     ///< attention_bias)
  bool attention_out_bias = false;   ///< o_proj has a bias (Llama, Qwen3 attention_bias)
  /// Each head of q and of k is RMS-normalised (weights self_attn.q_norm / k_norm, [head_dim],
  /// eps rms_norm_eps) after its projection and before RoPE (Qwen3 always).
  bool attention_qk_norm = false;
  bool mlp_bias = false;            ///< gate/up/down_proj have biases (Llama mlp_bias)
  /// Mistral's sliding attention window (e.g. 4096 in Mistral-7B-v0.1); nullopt for full
  /// attention. Attention must be limited to this many past positions when set.
  std::optional<std::size_t> sliding_window;
  /// Per layer, whether RoPE rotates its q and k (SmolLM3's no_rope_layers: 1 RoPE, 0 NoPE,
  /// attention on content alone); empty: every layer (the other families).
  std::vector<std::uint8_t> rope_layers;
  std::optional<std::int64_t> bos_token_id;
  /// Stop tokens: config.json's eos_token_id (int or list), then generation_config.json's
  /// ids that are not already present. Each is in [0, vocab_size).
  std::vector<std::int64_t> eos_token_ids;
  /// config `torch_dtype` (v5: `dtype`), e.g. "bfloat16"; informative only — trust each tensor's
  /// own dtype.
  std::string torch_dtype;
  /// Set for AutoAWQ checkpoints (config `quantization_config` or a legacy quant_config.json).
  std::optional<AwqConfig> awq;

  /// Rows of q_proj (num_attention_heads × head_dim) and of k_proj / v_proj (kv heads × head_dim).
  std::size_t q_dim() const noexcept { return num_attention_heads * head_dim; }
  std::size_t kv_dim() const noexcept { return num_key_value_heads * head_dim; }
  /// Query heads per KV head.
  std::size_t gqa_group() const noexcept { return num_attention_heads / num_key_value_heads; }
  bool uses_rope(std::size_t layer) const noexcept {
    return layer >= rope_layers.size() || rope_layers[layer] != 0;
  }
  bool is_eos(std::int64_t token) const noexcept {
    for (const std::int64_t e : eos_token_ids) {
      if (e == token) return true;
    }
    return false;
  }
};

namespace detail {

/// `x`, forced through memory so that the operation producing it cannot be fused with the next
/// one into an FMA (GCC's default -ffp-contract=fast does that across statements). Used where
/// rope_inv_freq must round each step to fp32 as torch does.
inline float fp32_rounded(float x) noexcept {
  volatile float v = x;
  return v;
}

}  // namespace detail

/// The RoPE inverse frequencies inv_freq[i], i in [0, head_dim / 2), as transformers computes them
/// in fp32 (modeling_rope_utils): inv_freq[i] = 1 / theta^(float(2i) / float(head_dim)), then
///   linear: inv_freq / factor;
///   llama3: with wavelen = 2π / inv_freq, low_wl = old_ctx / low_freq_factor and
///           high_wl = old_ctx / high_freq_factor: wavelen > low_wl -> inv / factor;
///           wavelen < high_wl -> inv; otherwise (1 − s)·inv/factor + s·inv with
///           s = (old_ctx / wavelen − low_freq_factor) / (high_freq_factor − low_freq_factor).
/// Every step is rounded to fp32 in torch's order (x / y on a tensor is reciprocal then multiply
/// when x is a Python scalar). The power is computed in double and rounded once, i.e. correctly
/// rounded; torch's vectorised powf is accurate to 1 ulp, so individual entries may differ from
/// torch by 1 ulp.
inline std::vector<float> rope_inv_freq(const ModelConfig& cfg) {
  const std::size_t half = cfg.head_dim / 2;
  std::vector<float> inv(half);
  const auto base = static_cast<float>(cfg.rope_theta);  // torch casts the Python float to fp32
  const auto dim = static_cast<float>(cfg.head_dim);
  for (std::size_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / dim;
    const auto p = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(e)));
    inv[i] = 1.0f / p;
  }
  const RopeScaling& s = cfg.rope_scaling;
  switch (s.type) {
    case RopeScalingType::none:
      break;
    case RopeScalingType::linear: {
      const auto factor = static_cast<float>(s.factor);
      for (float& f : inv) f = f / factor;
      break;
    }
    case RopeScalingType::llama3: {
      const auto factor = static_cast<float>(s.factor);
      const auto old_ctx_d = static_cast<double>(s.original_max_position_embeddings);
      // Python-level scalars (double) that torch casts to fp32 when they meet the fp32 tensor.
      const auto low_wl = static_cast<float>(old_ctx_d / s.low_freq_factor);
      const auto high_wl = static_cast<float>(old_ctx_d / s.high_freq_factor);
      const auto old_ctx = static_cast<float>(old_ctx_d);
      const auto low_ff = static_cast<float>(s.low_freq_factor);
      const auto ff_range = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
      const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
      for (float& f : inv) {
        const float wavelen = (1.0f / f) * two_pi;  // 2π / inv == inv.reciprocal() * 2π
        const float scaled = wavelen > low_wl ? f / factor : f;
        const bool medium = !(wavelen < high_wl) && !(wavelen > low_wl);
        if (medium) {
          const float ratio =
              detail::fp32_rounded((1.0f / wavelen) * old_ctx);  // old_ctx / wavelen
          const float smooth = (ratio - low_ff) / ff_range;
          const float a = ((1.0f - smooth) * scaled) / factor;
          const float b = detail::fp32_rounded(smooth * scaled);
          f = a + b;
        } else {
          f = scaled;
        }
      }
      break;
    }
  }
  return inv;
}

}  // namespace edgellm::model
