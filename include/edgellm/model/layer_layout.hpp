// SPDX-License-Identifier: Apache-2.0
// One decoder layer of the Llama / Qwen2 / Qwen3 / Mistral family, described once: its seven
// linears and its RMSNorm weights, each with its name in a Hugging Face checkpoint, its member
// of LayerWeights, its shape from config.json and whether the config gives it a bias or makes
// it present. The loader (weights.hpp), the memory plan (plan.hpp), the quantiser
// (quant/awq_model.hpp, quant/awq_output.hpp) and the Transformer iterate these tables, so a
// new family or format adds rows here rather than code in each of them.
#pragma once

#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/linear.hpp"
#include "edgellm/model/config.hpp"

#include <array>
#include <cstddef>
#include <string_view>
#include <vector>

namespace edgellm::model {

// The weight formats live in kernels/ (backends run them); these names stay for users.
using kernels::DenseMatrix;
using kernels::DenseType;
using kernels::Linear;
using kernels::to_string;

/// The weights of one decoder layer (names as in the HF state dict, without the prefix).
struct LayerWeights {
  std::vector<float> input_layernorm;           ///< [hidden]
  std::vector<float> post_attention_layernorm;  ///< [hidden]
  /// self_attn.q_norm / k_norm, [head_dim] each; empty unless config.attention_qk_norm.
  std::vector<float> q_norm, k_norm;
  kernels::Linear q_proj, k_proj, v_proj, o_proj;  ///< self_attn.*
  kernels::Linear gate_proj, up_proj, down_proj;   ///< mlp.*

  /// The seven linears in the order a decode step reads them (kLayerLinears' order).
  std::array<kernels::Linear*, 7> linears() noexcept;
  std::array<const kernels::Linear*, 7> linears() const noexcept;

 private:
  template <class Self>  // LayerWeights or const LayerWeights
  static auto linears_of(Self& self) noexcept;
};

/// A width of a layer's tensors: the config.json field(s) it comes from, as messages name
/// them, and its value for a config.
struct LayerDim {
  std::string_view name;
  std::size_t (*of)(const ModelConfig&) noexcept;
};

/// The widths a layer's tensors have.
namespace layer_dim {
inline constexpr LayerDim hidden{"hidden_size",
                                 [](const ModelConfig& c) noexcept { return c.hidden_size; }};
inline constexpr LayerDim intermediate{
    "intermediate_size", [](const ModelConfig& c) noexcept { return c.intermediate_size; }};
inline constexpr LayerDim q{"num_attention_heads * head_dim",
                            [](const ModelConfig& c) noexcept { return c.q_dim(); }};
inline constexpr LayerDim kv{"num_key_value_heads * head_dim",
                             [](const ModelConfig& c) noexcept { return c.kv_dim(); }};
inline constexpr LayerDim head{"head_dim",
                               [](const ModelConfig& c) noexcept { return c.head_dim; }};
}  // namespace layer_dim

/// What a linear multiplies (the quantiser calibrates each on the activations it reads).
enum class LinearInput {
  attention_norm,  ///< rmsnorm(x) * input_layernorm (q, k, v)
  attention,       ///< the attention output (o)
  mlp_norm,        ///< rmsnorm(x) * post_attention_layernorm (gate, up)
  mlp_product,     ///< SiLU(gate) * up (down)
};

/// One linear of a layer: W [out][in] (nn.Linear's layout), plus a bias [out] when the config
/// flag `bias` is set.
struct LayerLinear {
  std::string_view name;                 ///< "self_attn.q_proj": after "model.layers.<i>."
  kernels::Linear LayerWeights::*member;
  LayerDim out, in;
  bool ModelConfig::*bias;
  LinearInput input;

  std::size_t n(const ModelConfig& c) const noexcept { return out.of(c); }
  std::size_t k(const ModelConfig& c) const noexcept { return in.of(c); }
  bool has_bias(const ModelConfig& c) const noexcept { return c.*bias; }
};

/// A layer's linears in the order a decode step reads them.
inline constexpr std::array<LayerLinear, 7> kLayerLinears{{
    {"self_attn.q_proj", &LayerWeights::q_proj, layer_dim::q, layer_dim::hidden,
     &ModelConfig::attention_qkv_bias, LinearInput::attention_norm},
    {"self_attn.k_proj", &LayerWeights::k_proj, layer_dim::kv, layer_dim::hidden,
     &ModelConfig::attention_qkv_bias, LinearInput::attention_norm},
    {"self_attn.v_proj", &LayerWeights::v_proj, layer_dim::kv, layer_dim::hidden,
     &ModelConfig::attention_qkv_bias, LinearInput::attention_norm},
    {"self_attn.o_proj", &LayerWeights::o_proj, layer_dim::hidden, layer_dim::q,
     &ModelConfig::attention_out_bias, LinearInput::attention},
    {"mlp.gate_proj", &LayerWeights::gate_proj, layer_dim::intermediate, layer_dim::hidden,
     &ModelConfig::mlp_bias, LinearInput::mlp_norm},
    {"mlp.up_proj", &LayerWeights::up_proj, layer_dim::intermediate, layer_dim::hidden,
     &ModelConfig::mlp_bias, LinearInput::mlp_norm},
    {"mlp.down_proj", &LayerWeights::down_proj, layer_dim::hidden, layer_dim::intermediate,
     &ModelConfig::mlp_bias, LinearInput::mlp_product},
}};

/// Positions in kLayerLinears, for code that names one linear.
namespace linear_index {
inline constexpr std::size_t q_proj = 0, k_proj = 1, v_proj = 2, o_proj = 3, gate_proj = 4,
                             up_proj = 5, down_proj = 6;
}  // namespace linear_index

/// One RMSNorm weight of a layer: "<name>.weight" of shape [dim], present always (`when` null)
/// or when the config flag `when` is set.
struct LayerNorm {
  std::string_view name;  ///< "input_layernorm": after "model.layers.<i>."
  std::vector<float> LayerWeights::*member;
  LayerDim dim;
  bool ModelConfig::*when;

  std::size_t size(const ModelConfig& c) const noexcept { return dim.of(c); }
  bool present(const ModelConfig& c) const noexcept { return when == nullptr || c.*when; }
};

/// A layer's norms in the order they are read and declared.
inline constexpr std::array<LayerNorm, 4> kLayerNorms{{
    {"input_layernorm", &LayerWeights::input_layernorm, layer_dim::hidden, nullptr},
    {"post_attention_layernorm", &LayerWeights::post_attention_layernorm, layer_dim::hidden,
     nullptr},
    {"self_attn.q_norm", &LayerWeights::q_norm, layer_dim::head, &ModelConfig::attention_qk_norm},
    {"self_attn.k_norm", &LayerWeights::k_norm, layer_dim::head, &ModelConfig::attention_qk_norm},
}};

/// Positions in kLayerNorms.
namespace norm_index {
inline constexpr std::size_t input_layernorm = 0, post_attention_layernorm = 1, q_norm = 2,
                             k_norm = 3;
}  // namespace norm_index

static_assert(kLayerLinears[linear_index::q_proj].name == "self_attn.q_proj" &&
              kLayerLinears[linear_index::o_proj].name == "self_attn.o_proj" &&
              kLayerLinears[linear_index::down_proj].name == "mlp.down_proj");
static_assert(kLayerNorms[norm_index::post_attention_layernorm].name ==
                  "post_attention_layernorm" &&
              kLayerNorms[norm_index::k_norm].name == "self_attn.k_norm");

template <class Self>
auto LayerWeights::linears_of(Self& self) noexcept {
  std::array<decltype(&self.q_proj), 7> r{};
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = &(self.*kLayerLinears[i].member);
  return r;
}
inline std::array<kernels::Linear*, 7> LayerWeights::linears() noexcept {
  return linears_of(*this);
}
inline std::array<const kernels::Linear*, 7> LayerWeights::linears() const noexcept {
  return linears_of(*this);
}

}  // namespace edgellm::model
