// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/config.hpp: the config types' helpers and the RoPE inverse frequencies
// (against an independent double-precision computation and transformers' own fp32 values).
#include "edgellm/model/config.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace test_model_config {

namespace {

using edgellm::model::AwqConfig;
using edgellm::model::AwqVersion;
using edgellm::model::ModelConfig;
using edgellm::model::ModelType;
using edgellm::model::RopeScalingType;

/// The fields rope_inv_freq reads, as Qwen2-7B's config.json sets them (theta 1e6, no scaling).
ModelConfig qwen2_7b() {
  ModelConfig c;
  c.model_type = ModelType::qwen2;
  c.head_dim = 128;
  c.rope_theta = 1e6;
  return c;
}

/// Llama-2-7B (theta 1e4) with linear RoPE scaling by `factor`.
ModelConfig llama2_linear(double factor) {
  ModelConfig c;
  c.head_dim = 128;
  c.rope_theta = 10000.0;
  c.rope_scaling.type = RopeScalingType::linear;
  c.rope_scaling.factor = factor;
  return c;
}

/// Llama-3.1-8B: theta 5e5, llama3 scaling with factor 8, low 1, high 4, original context 8192.
ModelConfig llama31_8b() {
  ModelConfig c;
  c.head_dim = 128;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeScalingType::llama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  return c;
}

/// HF's default inverse frequencies, computed independently in double.
std::vector<double> inv_freq_double(double theta, std::size_t dim) {
  std::vector<double> inv(dim / 2);
  for (std::size_t i = 0; i < dim / 2; ++i) {
    inv[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(dim));
  }
  return inv;
}

/// Relative difference, for comparing fp32 results against double references.
double rel(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

// Each fp32 step rounds with relative error <= 2^-24; the chains in rope_inv_freq have at most
// ~8 steps, so 8 × 2^-24 ≈ 4.8e-7 bounds the error against an exact reference. Allow 1e-6.
constexpr double kRopeTol = 1e-6;

// transformers' own computation, run in torch 1.13 on x86-64 (CPU) with the code of
// modeling_rope_utils (_compute_default_rope_parameters / _compute_llama3_parameters), as fp32
// bit patterns. Llama-3.1-8B (theta 5e5, head_dim 128, llama3 factor 8, low 1, high 4, ctx 8192):
constexpr std::uint32_t kLlama31InvFreqTorch[64] = {
    0x3f800000, 0x3f508ac1, 0x3f29e1c6, 0x3f0a6384, 0x3ee177bc, 0x3eb7ab7d, 0x3e959ee3, 0x3e73c461,
    0x3e4693b0, 0x3e21c3a0, 0x3e03c6a0, 0x3dd6b19c, 0x3daee4ad, 0x3d8e7898, 0x3d681e67, 0x3d3d1684,
    0x3d1a08c8, 0x3cfaf53f, 0x3ccc6f49, 0x3ca68939, 0x3c87a9c3, 0x3c5d06ec, 0x3c340d6d, 0x3c12ac7f,
    0x3beef74f, 0x3bc2aa76, 0x3b9e9402, 0x3b812e35, 0x3b527720, 0x3b0dfd06, 0x3ab3d11d, 0x3a60979e,
    0x3a0995d2, 0x39a3f108, 0x393b2dd2, 0x38c86886, 0x38a3418d, 0x3884fdbf, 0x3858ac81, 0x38308199,
    0x380fc8f8, 0x37ea426f, 0x37bed4f4, 0x379b7475, 0x377d45c3, 0x374e51f5, 0x3728126b, 0x3708ea0f,
    0x36df10c4, 0x36b5b687, 0x369406cb, 0x36712b80, 0x36447610, 0x36200a69, 0x36025f34, 0x35d46808,
    0x35ad07a7, 0x358cf400, 0x3565a54d, 0x353b12c7, 0x351864a7, 0x34f848c2, 0x34ca41b0, 0x34a4c2ff,
};
// Qwen2-7B (theta 1e6, head_dim 128, no scaling). Entry 37 is 0x39b229fb in torch, whose
// vectorised powf (Sleef, 1-ulp accurate) rounds 1e6^0.578125 down; the correctly rounded power,
// which rope_inv_freq computes, gives 0x39b229fa. Every other entry agrees bit for bit.
constexpr std::uint32_t kQwen2InvFreqTorch[64] = {
    0x3f800000, 0x3f4e4bad, 0x3f263de0, 0x3f05f6ef, 0x3ed7e89b, 0x3eadfcff, 0x3e8c3504, 0x3e61f835,
    0x3e361887, 0x3e12bd91, 0x3dec7fd6, 0x3dbe94c6, 0x3d99940d, 0x3d778513, 0x3d47763f, 0x3d20bc1d,
    0x3d0186e3, 0x3cd0c1a8, 0x3ca8398b, 0x3c879008, 0x3c5a7bf2, 0x3c301052, 0x3c0de12d, 0x3be4aa46,
    0x3bb8449c, 0x3b947dae, 0x3b6f520e, 0x3b40dac5, 0x3b1b690d, 0x3afa78f0, 0x3ac9d75c, 0x3aa2a6f7,
    0x3a83126f, 0x3a533f28, 0x3a2a3b44, 0x3a092e02, 0x39dd1725, 0x39b229fb, 0x398f9272, 0x39676492,
    0x393a7753, 0x39164324, 0x38f22ce2, 0x38c327b5, 0x389d43a4, 0x387d75d4, 0x384c3fbe, 0x382497ab,
    0x3804a2b2, 0x37d5c441, 0x37ac431d, 0x378ad0ed, 0x375fba4f, 0x37344a0e, 0x371148e3, 0x36ea2732,
    0x36bcb0c1, 0x36980e02, 0x36751070, 0x36457bab, 0x361f23e4, 0x36003dec, 0x35ceaf79, 0x35a68e4c,
};

std::uint32_t bits_of(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

TEST_CASE("config types: derived sizes, stop ids, names", "[model]") {
  ModelConfig c;
  c.num_attention_heads = 28;
  c.num_key_value_heads = 4;
  c.head_dim = 128;
  c.eos_token_ids = {151645, 151643};
  CHECK(c.q_dim() == 28 * 128);
  CHECK(c.kv_dim() == 4 * 128);
  CHECK(c.gqa_group() == 7);
  CHECK(c.is_eos(151643));
  CHECK(c.is_eos(151645));
  CHECK_FALSE(c.is_eos(0));

  AwqConfig awq;
  CHECK(awq.is_quantized("mlp.gate_proj"));
  awq.modules_to_not_convert = {"gate"};
  CHECK_FALSE(awq.is_quantized("mlp.gate_proj"));  // AutoAWQ's substring rule
  CHECK(awq.is_quantized("self_attn.q_proj"));

  CHECK(std::string(edgellm::model::to_string(ModelType::mistral)) == "mistral");
  CHECK(std::string(edgellm::model::to_string(AwqVersion::gemv)) == "gemv");
}

TEST_CASE("rope_inv_freq matches an independent computation", "[model]") {
  SECTION("default (Qwen2, theta 1e6, head_dim 128)") {
    const ModelConfig c = qwen2_7b();
    const std::vector<float> inv = edgellm::model::rope_inv_freq(c);
    const std::vector<double> ref = inv_freq_double(1e6, 128);
    REQUIRE(inv.size() == 64);
    CHECK(inv[0] == 1.0f);
    for (std::size_t i = 0; i < inv.size(); ++i) {
      INFO("i = " << i);
      CHECK(rel(inv[i], ref[i]) < kRopeTol);
    }
  }
  SECTION("linear scaling divides by the factor") {
    const ModelConfig c = llama2_linear(4.0);
    const std::vector<float> inv = edgellm::model::rope_inv_freq(c);
    const std::vector<double> ref = inv_freq_double(10000.0, 128);
    REQUIRE(inv.size() == 64);
    for (std::size_t i = 0; i < inv.size(); ++i) CHECK(rel(inv[i], ref[i] / 4.0) < kRopeTol);
  }
  SECTION("llama3 (Llama-3.1-8B)") {
    const ModelConfig c = llama31_8b();
    const std::vector<float> inv = edgellm::model::rope_inv_freq(c);
    const std::vector<double> base = inv_freq_double(500000.0, 128);
    REQUIRE(inv.size() == 64);
    const double factor = 8.0, low = 1.0, high = 4.0, old_ctx = 8192.0;
    const double pi = 3.14159265358979323846;
    int n_high = 0, n_low = 0, n_mid = 0;
    for (std::size_t i = 0; i < inv.size(); ++i) {
      const double wavelen = 2 * pi / base[i];
      double expect = 0;
      if (wavelen < old_ctx / high) {  // high frequency: unchanged
        expect = base[i];
        ++n_high;
      } else if (wavelen > old_ctx / low) {  // low frequency: divided by the factor
        expect = base[i] / factor;
        ++n_low;
      } else {  // in between: blended
        const double s = (old_ctx / wavelen - low) / (high - low);
        expect = (1 - s) * base[i] / factor + s * base[i];
        ++n_mid;
      }
      INFO("i = " << i << ", wavelen = " << wavelen);
      CHECK(rel(inv[i], expect) < kRopeTol);
    }
    // The test must cover all three bands. wavelen_i = 2π·θ^(i/64): below 2048 for i <= 28,
    // above 8192 for i >= 35, blended for i = 29..34.
    CHECK(n_high == 29);
    CHECK(n_low == 29);
    CHECK(n_mid == 6);
    CHECK(inv[0] == 1.0f);
    CHECK(inv[63] ==
          static_cast<float>(1.0f / static_cast<float>(std::pow(500000.0, 126.0 / 128.0))) / 8.0f);
  }
}

TEST_CASE("rope_inv_freq reproduces transformers' fp32 values", "[model]") {
  // Exact float equality is intended here: the function mirrors torch's rounding step by step.
  // (Built with -ffp-contract=fast and FMA, the llama3 blend could differ by an ulp; the
  // independent double-precision check above bounds the error in any case.)
  const std::vector<float> l3 = edgellm::model::rope_inv_freq(llama31_8b());
  REQUIRE(l3.size() == 64);
  int l3_mismatch = 0;
  for (std::size_t i = 0; i < 64; ++i) {
    if (bits_of(l3[i]) != kLlama31InvFreqTorch[i]) {
      ++l3_mismatch;
      CHECK(std::abs(static_cast<std::int64_t>(bits_of(l3[i])) -
                     static_cast<std::int64_t>(kLlama31InvFreqTorch[i])) <= 1);
    }
  }
  CHECK(l3_mismatch == 0);

  const std::vector<float> q = edgellm::model::rope_inv_freq(qwen2_7b());
  REQUIRE(q.size() == 64);
  for (std::size_t i = 0; i < 64; ++i) {
    INFO("i = " << i);
    if (i == 37) {
      CHECK(bits_of(q[i]) == 0x39b229fa);  // torch: 0x39b229fb, see kQwen2InvFreqTorch
    } else {
      CHECK(bits_of(q[i]) == kQwen2InvFreqTorch[i]);
    }
  }
}

}  // namespace test_model_config
