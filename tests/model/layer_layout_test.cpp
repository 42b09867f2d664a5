// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/layer_layout.hpp: the table of a decoder layer's linears and norms
// (names, members, shapes from the config, biases, presence).
#include "edgellm/model/layer_layout.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <set>
#include <string>
#include <string_view>

namespace test_model_layer_layout {

namespace {

using edgellm::model::kLayerLinears;
using edgellm::model::kLayerNorms;
using edgellm::model::LayerWeights;
using edgellm::model::ModelConfig;

/// A GQA shape whose widths all differ, so a swapped dimension shows.
ModelConfig shape() {
  ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  return c;
}

}  // namespace

TEST_CASE("layer_layout: the linears' names, shapes and biases as HF Llama / Qwen2 has them",
          "[model]") {
  ModelConfig c = shape();
  struct Row {
    std::string_view name;
    std::size_t n, k;
  };
  const Row want[] = {{"self_attn.q_proj", 96, 64},   {"self_attn.k_proj", 32, 64},
                      {"self_attn.v_proj", 32, 64},   {"self_attn.o_proj", 64, 96},
                      {"mlp.gate_proj", 160, 64},     {"mlp.up_proj", 160, 64},
                      {"mlp.down_proj", 64, 160}};
  REQUIRE(std::size(want) == kLayerLinears.size());
  for (std::size_t i = 0; i < kLayerLinears.size(); ++i) {
    CHECK(kLayerLinears[i].name == want[i].name);
    CHECK(kLayerLinears[i].n(c) == want[i].n);
    CHECK(kLayerLinears[i].k(c) == want[i].k);
    CHECK_FALSE(kLayerLinears[i].has_bias(c));
  }
  // Messages name the config fields a width comes from.
  CHECK(kLayerLinears[3].in.name == "num_attention_heads * head_dim");
  CHECK(kLayerLinears[1].out.name == "num_key_value_heads * head_dim");
  CHECK(kLayerLinears[6].in.name == "intermediate_size");
  CHECK(kLayerNorms[2].dim.name == "head_dim");
  c.attention_qkv_bias = true;  // Qwen2
  for (std::size_t i = 0; i < kLayerLinears.size(); ++i)
    CHECK(kLayerLinears[i].has_bias(c) == (i < 3));
  c.attention_out_bias = true;
  c.mlp_bias = true;
  for (const auto& l : kLayerLinears) CHECK(l.has_bias(c));
}

TEST_CASE("layer_layout: members are distinct and linears() follows the table", "[model]") {
  LayerWeights w;
  const auto ptrs = w.linears();
  std::set<const void*> seen;
  for (std::size_t i = 0; i < kLayerLinears.size(); ++i) {
    CHECK(ptrs[i] == &(w.*kLayerLinears[i].member));
    seen.insert(ptrs[i]);
  }
  CHECK(seen.size() == kLayerLinears.size());
  CHECK(&(w.*kLayerLinears[0].member) == &w.q_proj);
  CHECK(&(w.*kLayerLinears[6].member) == &w.down_proj);
  std::set<const void*> norms;
  for (const auto& n : kLayerNorms) norms.insert(&(w.*n.member));
  CHECK(norms.size() == kLayerNorms.size());
}

TEST_CASE("layer_layout: norms, q/k_norm only with attention_qk_norm (Qwen3)", "[model]") {
  ModelConfig c = shape();
  std::string present;
  for (const auto& n : kLayerNorms)
    if (n.present(c)) present += std::string(n.name) + ":" + std::to_string(n.size(c)) + " ";
  CHECK(present == "input_layernorm:64 post_attention_layernorm:64 ");
  c.attention_qk_norm = true;
  present.clear();
  for (const auto& n : kLayerNorms)
    if (n.present(c)) present += std::string(n.name) + ":" + std::to_string(n.size(c)) + " ";
  CHECK(present ==
        "input_layernorm:64 post_attention_layernorm:64 self_attn.q_norm:16 self_attn.k_norm:16 ");
}

}  // namespace test_model_layer_layout
