// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/config_json.hpp: HF config.json for Llama / Qwen2 / Qwen3 / Mistral,
// AutoAWQ settings, generation_config.json stop ids, RoPE scaling keys, and reading a checkpoint
// directory.
#include "edgellm/model/config_json.hpp"

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace test_model_config_json {

namespace {

namespace fs = std::filesystem;
namespace json = edgellm::io::json;
using Catch::Matchers::Contains;
using edgellm::errc;
using edgellm::model::AwqVersion;
using edgellm::model::ModelConfig;
using edgellm::model::ModelType;
using edgellm::model::RopeScalingType;

using edgellm::test::TempDir;

// Configs as published on the hub (trimmed of keys edgellm ignores only where noted).
const char* kLlama2 = R"({
  "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "tie_word_embeddings": false, "torch_dtype": "float16", "transformers_version": "4.31.0.dev0",
  "use_cache": true, "vocab_size": 32000
})";

const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256
})";

// The same model as transformers v5 writes it.
const char* kLlama31V5 = R"({
  "architectures": ["LlamaForCausalLM"], "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 14336, "max_position_embeddings": 131072, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "dtype": "bfloat16", "vocab_size": 128256,
  "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192}
})";

const char* kQwen2 = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
  "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28,
  "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
  "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "float16",
  "transformers_version": "4.41.2", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 152064,
  "quantization_config": {"bits": 4, "group_size": 128, "modules_to_not_convert": null,
                          "quant_method": "awq", "version": "gemm", "zero_point": true}
})";

const char* kQwen2Generation = R"({
  "bos_token_id": 151643, "pad_token_id": 151643, "do_sample": true,
  "eos_token_id": [151645, 151643], "repetition_penalty": 1.05, "temperature": 0.7,
  "top_p": 0.8, "top_k": 20, "transformers_version": "4.41.2"
})";

const char* kMistral = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32000
})";

// Qwen/Qwen3-0.6B's config.json.
const char* kQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936
})";

json::Value parse_json(std::string_view text) {
  auto v = json::parse(text, "inline");
  if (!v) FAIL(v.error().message);
  return std::move(*v);
}

/// `base` with top-level `key` replaced by `value_json` (removed when value_json is empty).
// SmolLM3-3B's shape and keys (tie_word_embeddings left out: SmolLM3Config's default, true).
const char* kSmolLM3 = R"({
  "architectures": ["SmolLM3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": null, "eos_token_id": 128012, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 65536,
  "mlp_bias": false, "model_type": "smollm3", "no_rope_layer_interval": 4,
  "no_rope_layers": [1,1,1,0,1,1,1,0,1,1,1,0,1,1,1,0,1,1,1,0,1,1,1,0,1,1,1,0,1,1,1,0,1,1,1,0],
  "num_attention_heads": 16, "num_hidden_layers": 36, "num_key_value_heads": 4,
  "pad_token_id": 128004, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 5000000.0,
  "sliding_window": null, "torch_dtype": "bfloat16", "use_cache": false,
  "use_sliding_window": false, "vocab_size": 128256
})";

json::Value with(std::string_view base, std::string_view key, std::string_view value_json) {
  const json::Value b = parse_json(base);
  json::Object o;
  for (const json::Member& m : b.as_object()) {
    if (m.key != key) o.append(m.key, m.value);
  }
  if (!value_json.empty()) o.append(std::string(key), parse_json(value_json));
  return json::Value(std::move(o));
}

ModelConfig parse_ok(const json::Value& v, const json::Value* gen = nullptr) {
  auto c = edgellm::model::parse_model_config(v, "config.json", gen, "generation_config.json");
  if (!c) FAIL(c.error().message);
  return std::move(*c);
}

std::string parse_err(const json::Value& v, errc code) {
  auto c = edgellm::model::parse_model_config(v, "config.json");
  if (c) FAIL("expected an error for " << json::dump(v));
  CHECK(c.error().code == code);
  // "[load_model_config] config.json: ..." or, for quantization_config, "[parse_awq_config] ...".
  CHECK_THAT(c.error().message,
             Contains("] config.json: key '") || Contains("] config.json: must"));
  return c.error().message;
}

}  // namespace

TEST_CASE("config: Llama-2 with defaults", "[model]") {
  const ModelConfig c = parse_ok(parse_json(kLlama2));
  CHECK(c.model_type == ModelType::llama);
  CHECK(c.hidden_size == 4096);
  CHECK(c.intermediate_size == 11008);
  CHECK(c.num_hidden_layers == 32);
  CHECK(c.num_attention_heads == 32);
  CHECK(c.num_key_value_heads == 32);
  CHECK(c.gqa_group() == 1);
  CHECK(c.head_dim == 128);
  CHECK(c.vocab_size == 32000);
  CHECK(c.max_position_embeddings == 4096);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK(c.rope_theta == 10000.0);  // absent: default
  CHECK(c.rope_scaling.type == RopeScalingType::none);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK_FALSE(c.attention_qkv_bias);
  CHECK_FALSE(c.attention_out_bias);
  CHECK_FALSE(c.mlp_bias);
  CHECK_FALSE(c.sliding_window.has_value());
  CHECK(c.bos_token_id == 1);
  CHECK(c.eos_token_ids == std::vector<std::int64_t>{2});
  CHECK(c.torch_dtype == "float16");
  CHECK_FALSE(c.awq.has_value());

  // Missing num_key_value_heads / head_dim / rms_norm_eps fall back as HF does.
  json::Value v = with(kLlama2, "num_key_value_heads", "");
  v = with(json::dump(v), "rms_norm_eps", "");
  const ModelConfig d = parse_ok(v);
  CHECK(d.num_key_value_heads == 32);
  CHECK(d.rms_norm_eps == 1e-6);
  CHECK(parse_ok(with(kLlama2, "num_key_value_heads", "null")).num_key_value_heads == 32);
  CHECK(parse_ok(with(kLlama2, "max_position_embeddings", "")).max_position_embeddings == 2048);

  // Llama attention_bias / mlp_bias switch all four attention biases / the MLP biases.
  const ModelConfig b =
      parse_ok(with(json::dump(with(kLlama2, "attention_bias", "true")), "mlp_bias", "true"));
  CHECK(b.attention_qkv_bias);
  CHECK(b.attention_out_bias);
  CHECK(b.mlp_bias);
}

TEST_CASE("config: Qwen2 with AWQ and generation_config stop ids", "[model]") {
  const json::Value gen = parse_json(kQwen2Generation);
  const ModelConfig c = parse_ok(parse_json(kQwen2), &gen);
  CHECK(c.model_type == ModelType::qwen2);
  CHECK(c.hidden_size == 3584);
  CHECK(c.num_attention_heads == 28);
  CHECK(c.num_key_value_heads == 4);
  CHECK(c.gqa_group() == 7);
  CHECK(c.q_dim() == 3584);
  CHECK(c.kv_dim() == 512);
  CHECK(c.head_dim == 128);
  CHECK(c.vocab_size == 152064);
  CHECK(c.rope_theta == 1e6);
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.attention_qkv_bias);  // fixed in Qwen2's code
  CHECK_FALSE(c.attention_out_bias);
  CHECK_FALSE(c.mlp_bias);
  CHECK_FALSE(c.sliding_window.has_value());  // use_sliding_window false: ignored
  CHECK(c.bos_token_id == 151643);
  // config's 151645 first, then generation_config's new id 151643.
  CHECK(c.eos_token_ids == std::vector<std::int64_t>{151645, 151643});
  CHECK(c.is_eos(151643));
  CHECK_FALSE(c.is_eos(0));

  REQUIRE(c.awq.has_value());
  CHECK(c.awq->bits == 4);
  CHECK(c.awq->group_size == 128);
  CHECK(c.awq->zero_point);
  CHECK(c.awq->version == AwqVersion::gemm);
  CHECK(c.awq->modules_to_not_convert.empty());
  CHECK(c.awq->is_quantized("mlp.gate_proj"));

  // Without generation_config only config.json's id.
  CHECK(parse_ok(parse_json(kQwen2)).eos_token_ids == std::vector<std::int64_t>{151645});
  // Qwen2 sliding-window attention is refused.
  CHECK_THAT(parse_err(with(kQwen2, "use_sliding_window", "true"), errc::unsupported),
             Contains("key 'use_sliding_window': Qwen2 sliding-window attention is not supported"));
}

TEST_CASE("config: Qwen3 has q/k norms, an explicit head_dim and optional biases", "[model]") {
  const ModelConfig c = parse_ok(parse_json(kQwen3));
  CHECK(c.model_type == ModelType::qwen3);
  CHECK(std::string(edgellm::model::to_string(c.model_type)) == "qwen3");
  CHECK(c.hidden_size == 1024);
  CHECK(c.num_attention_heads == 16);
  CHECK(c.num_key_value_heads == 8);
  CHECK(c.head_dim == 128);  // not hidden / heads = 64
  CHECK(c.q_dim() == 2048);
  CHECK(c.kv_dim() == 1024);
  CHECK(c.intermediate_size == 3072);
  CHECK(c.vocab_size == 151936);
  CHECK(c.max_position_embeddings == 40960);
  CHECK(c.rope_theta == 1e6);
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.tie_word_embeddings);
  CHECK(c.attention_qk_norm);
  CHECK_FALSE(c.attention_qkv_bias);  // unlike Qwen2
  CHECK_FALSE(c.attention_out_bias);
  CHECK_FALSE(c.mlp_bias);
  CHECK_FALSE(c.sliding_window.has_value());
  CHECK(c.eos_token_ids == std::vector<std::int64_t>{151645});
  // attention_bias switches q/k/v and o biases (Qwen3Attention), never the MLP's.
  const ModelConfig b = parse_ok(with(kQwen3, "attention_bias", "true"));
  CHECK(b.attention_qkv_bias);
  CHECK(b.attention_out_bias);
  CHECK_FALSE(b.mlp_bias);
  // Qwen3Config's defaults: head_dim 128 (not hidden / heads), 32768 positions.
  CHECK(parse_ok(with(kQwen3, "head_dim", "")).head_dim == 128);
  CHECK(parse_ok(with(kQwen3, "max_position_embeddings", "")).max_position_embeddings == 32768);
  // Sliding-window attention is refused, like Qwen2's.
  CHECK_THAT(parse_err(with(kQwen3, "use_sliding_window", "true"), errc::unsupported),
             Contains("key 'use_sliding_window': Qwen3 sliding-window attention is not supported"));
  // The other families have no q/k norm.
  CHECK_FALSE(parse_ok(parse_json(kQwen2)).attention_qk_norm);
  CHECK_FALSE(parse_ok(parse_json(kLlama2)).attention_qk_norm);
  CHECK_FALSE(parse_ok(parse_json(kMistral)).attention_qk_norm);
}

TEST_CASE("config: SmolLM3 is the Llama layout with NoPE layers", "[model]") {
  const ModelConfig c = parse_ok(parse_json(kSmolLM3));
  CHECK(c.model_type == ModelType::smollm3);
  CHECK(std::string(edgellm::model::to_string(c.model_type)) == "smollm3");
  CHECK(c.head_dim == 128);
  CHECK(c.gqa_group() == 4);
  CHECK(c.rope_theta == 5e6);
  CHECK(c.tie_word_embeddings);  // SmolLM3Config's default
  CHECK_FALSE(c.attention_qk_norm);
  CHECK_FALSE(c.attention_qkv_bias);
  CHECK_FALSE(c.mlp_bias);
  REQUIRE(c.rope_layers.size() == 36);
  for (std::size_t l = 0; l < 36; ++l) {
    CAPTURE(l);
    CHECK(c.uses_rope(l) == ((l + 1) % 4 != 0));  // layers 3, 7, ..., 35 are NoPE
  }
  // Without the list, a NoPE layer every no_rope_layer_interval layers (default 4).
  const ModelConfig every3 = parse_ok(with(json::dump(with(kSmolLM3, "no_rope_layers", "")),
                                           "no_rope_layer_interval", "3"));
  CHECK_FALSE(every3.uses_rope(2));
  CHECK(every3.uses_rope(3));
  CHECK_FALSE(every3.uses_rope(5));
  const ModelConfig dflt = parse_ok(with(json::dump(with(kSmolLM3, "no_rope_layers", "")),
                                         "no_rope_layer_interval", ""));
  CHECK(dflt.rope_layers == c.rope_layers);
  // SmolLM3Config's defaults: rope_theta 2e6, 32768 positions.
  CHECK(parse_ok(with(kSmolLM3, "rope_theta", "")).rope_theta == 2e6);
  CHECK(parse_ok(with(kSmolLM3, "max_position_embeddings", "")).max_position_embeddings == 32768);
  CHECK_FALSE(parse_ok(with(kSmolLM3, "tie_word_embeddings", "false")).tie_word_embeddings);
  // Bad lists name the key and the entry.
  CHECK_THAT(parse_err(with(kSmolLM3, "no_rope_layers", "[1, 0]"), errc::format_error),
             Contains("no_rope_layers"));
  CHECK_THAT(parse_err(with(kSmolLM3, "no_rope_layers", "[1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"), errc::format_error),
             Contains("entry 1 is 2, expected 0 (NoPE) or 1 (RoPE)"));
  CHECK_THAT(parse_err(with(json::dump(with(kSmolLM3, "no_rope_layers", "")),
                            "no_rope_layer_interval", "0"),
                       errc::format_error),
             Contains("key 'no_rope_layer_interval': must be in [1, "));
  CHECK_THAT(parse_err(with(json::dump(with(kSmolLM3, "use_sliding_window", "true")),
                            "sliding_window", "4096"),
                       errc::unsupported),
             Contains("SmolLM3 sliding-window attention is not supported"));
  // The other families rotate every layer.
  CHECK(parse_ok(parse_json(kLlama2)).rope_layers.empty());
  CHECK(parse_ok(parse_json(kLlama2)).uses_rope(0));
}

TEST_CASE("config: Mistral records its sliding window", "[model]") {
  const ModelConfig c = parse_ok(parse_json(kMistral));
  CHECK(c.model_type == ModelType::mistral);
  REQUIRE(c.sliding_window.has_value());
  CHECK(*c.sliding_window == 4096);
  CHECK_FALSE(c.attention_qkv_bias);
  CHECK(c.num_key_value_heads == 8);
  CHECK_FALSE(parse_ok(with(kMistral, "sliding_window", "null")).sliding_window.has_value());
  // Mistral-Nemo style explicit head_dim that differs from hidden / heads.
  const ModelConfig nemo =
      parse_ok(with(json::dump(with(kMistral, "hidden_size", "5120")), "head_dim", "128"));
  CHECK(nemo.hidden_size == 5120);
  CHECK(nemo.head_dim == 128);
  CHECK(nemo.num_attention_heads * nemo.head_dim == 4096);
}

TEST_CASE("config: eos_token_id forms", "[model]") {
  CHECK(parse_ok(parse_json(kLlama31)).eos_token_ids ==
        std::vector<std::int64_t>{128001, 128008, 128009});
  CHECK(parse_ok(with(kLlama2, "eos_token_id", "null")).eos_token_ids.empty());
  CHECK(parse_ok(with(kLlama2, "eos_token_id", "[2, 2, 3]")).eos_token_ids ==
        std::vector<std::int64_t>{2, 3});  // duplicates dropped
  CHECK_FALSE(parse_ok(with(kLlama2, "bos_token_id", "null")).bos_token_id.has_value());

  // generation_config supplies bos when config.json has none; a list merges as a union.
  const json::Value gen = parse_json(R"({"bos_token_id": 5, "eos_token_id": [3, 2, 4]})");
  const ModelConfig c = parse_ok(with(kLlama2, "bos_token_id", ""), &gen);
  CHECK(c.bos_token_id == 5);
  CHECK(c.eos_token_ids == std::vector<std::int64_t>{2, 3, 4});

  CHECK_THAT(parse_err(with(kLlama2, "eos_token_id", "32000"), errc::format_error),
             Contains("key 'eos_token_id': token id 32000 is outside [0, vocab_size = 32000)"));
  CHECK_THAT(parse_err(with(kLlama2, "eos_token_id", "-1"), errc::format_error),
             Contains("token id -1 is outside"));
  CHECK_THAT(parse_err(with(kLlama2, "eos_token_id", "\"2\""), errc::format_error),
             Contains("key 'eos_token_id': expected a token id or a list of token ids, got \"2\""));
  CHECK_THAT(parse_err(with(kLlama2, "eos_token_id", "[2, 2.5]"), errc::format_error),
             Contains("an element, got 2.5"));
  CHECK_THAT(parse_err(with(kLlama2, "bos_token_id", "true"), errc::format_error),
             Contains("key 'bos_token_id': expected an integer token id or null, got true"));

  const json::Value bad_gen = parse_json(R"({"eos_token_id": [99999]})");
  auto r = edgellm::model::parse_model_config(parse_json(kLlama2), "config.json", &bad_gen,
                                              "generation_config.json");
  REQUIRE_FALSE(r.has_value());
  CHECK_THAT(r.error().message,
             Contains("generation_config.json: key 'eos_token_id': token id 99999 is outside"));
}

TEST_CASE("config: dimension validation names the key", "[model]") {
  CHECK_THAT(parse_err(with(kLlama2, "hidden_size", ""), errc::format_error),
             Contains("key 'hidden_size': missing (a positive integer is required)"));
  CHECK_THAT(parse_err(with(kLlama2, "hidden_size", "-4096"), errc::format_error),
             Contains("key 'hidden_size': must be in [1, 2147483647], got -4096"));
  CHECK_THAT(parse_err(with(kLlama2, "num_hidden_layers", "0"), errc::format_error),
             Contains("key 'num_hidden_layers': must be in [1, 2147483647], got 0"));
  CHECK_THAT(parse_err(with(kLlama2, "vocab_size", "\"32000\""), errc::format_error),
             Contains("key 'vocab_size': expected a positive integer, got \"32000\""));
  CHECK_THAT(parse_err(with(kLlama2, "intermediate_size", "1.5"), errc::format_error),
             Contains("key 'intermediate_size': expected a positive integer, got 1.5"));
  CHECK_THAT(parse_err(with(kLlama2, "intermediate_size", "1e30"), errc::format_error),
             Contains("key 'intermediate_size'"));
  CHECK(parse_ok(with(kLlama2, "intermediate_size", "11008.0")).intermediate_size == 11008);
  CHECK_THAT(parse_err(with(kLlama2, "num_key_value_heads", "5"), errc::format_error),
             Contains("key 'num_key_value_heads': 5 does not divide num_attention_heads 32"));
  CHECK_THAT(parse_err(with(kLlama2, "hidden_size", "4100"), errc::format_error),
             Contains("key 'hidden_size': 4100 is not divisible by num_attention_heads 32 and no "
                      "head_dim is given"));
  CHECK_THAT(parse_err(with(kLlama2, "head_dim", "127"), errc::format_error),
             Contains("key 'head_dim': RoPE needs an even head dimension, got 127"));
  CHECK_THAT(parse_err(with(kLlama2, "rms_norm_eps", "0"), errc::format_error),
             Contains("key 'rms_norm_eps': must be a positive finite number, got 0"));
  CHECK_THAT(parse_err(with(kLlama2, "rope_theta", "-1.0"), errc::format_error),
             Contains("key 'rope_theta'"));
  CHECK_THAT(parse_err(with(kLlama2, "tie_word_embeddings", "1"), errc::format_error),
             Contains("key 'tie_word_embeddings': expected true or false, got 1"));
  CHECK(parse_ok(with(kLlama2, "tie_word_embeddings", "true")).tie_word_embeddings);
  CHECK_THAT(parse_err(parse_json("[]"), errc::format_error), Contains("must be a JSON object"));
}

TEST_CASE("config: unsupported models are refused by name", "[model]") {
  CHECK_THAT(parse_err(with(kLlama2, "model_type", "\"gpt2\""), errc::unsupported),
             Contains("key 'model_type': model type \"gpt2\" is not supported (supported: llama, "
                      "qwen2, qwen3, mistral, smollm3)"));
  CHECK_THAT(parse_err(with(kLlama2, "model_type", ""), errc::format_error),
             Contains("key 'model_type': missing"));
  CHECK_THAT(parse_err(with(kLlama2, "hidden_act", "\"gelu\""), errc::unsupported),
             Contains("key 'hidden_act': activation \"gelu\" is not supported (only silu)"));
  CHECK(parse_ok(with(kLlama2, "hidden_act", "")).model_type == ModelType::llama);
  CHECK_THAT(parse_err(with(kLlama2, "partial_rotary_factor", "0.5"), errc::unsupported),
             Contains("key 'partial_rotary_factor': partial rotary embeddings are not supported"));
  CHECK(parse_ok(with(kLlama2, "partial_rotary_factor", "1.0")).head_dim == 128);
}

TEST_CASE("config: RoPE scaling variants", "[model]") {
  const ModelConfig l3 = parse_ok(parse_json(kLlama31));
  CHECK(l3.rope_theta == 500000.0);
  CHECK(l3.rope_scaling.type == RopeScalingType::llama3);
  CHECK(l3.rope_scaling.factor == 8.0);
  CHECK(l3.rope_scaling.low_freq_factor == 1.0);
  CHECK(l3.rope_scaling.high_freq_factor == 4.0);
  CHECK(l3.rope_scaling.original_max_position_embeddings == 8192);

  // v5 rope_parameters carries the same information.
  const ModelConfig v5 = parse_ok(parse_json(kLlama31V5));
  CHECK(v5.rope_theta == 500000.0);
  CHECK(v5.rope_scaling.type == RopeScalingType::llama3);
  CHECK(v5.rope_scaling.original_max_position_embeddings == 8192);
  CHECK(v5.torch_dtype == "bfloat16");
  CHECK(edgellm::model::rope_inv_freq(v5) == edgellm::model::rope_inv_freq(l3));

  const ModelConfig v5_default = parse_ok(
      with(kQwen2, "rope_parameters", R"({"rope_type": "default", "rope_theta": 123456.0})"));
  CHECK(v5_default.rope_theta == 123456.0);
  CHECK(v5_default.rope_scaling.type == RopeScalingType::none);
  // rope_parameters without its own theta keeps the top-level one.
  CHECK(parse_ok(with(kQwen2, "rope_parameters", R"({"rope_type": "default"})")).rope_theta == 1e6);

  const ModelConfig lin =
      parse_ok(with(kLlama2, "rope_scaling", R"({"type": "linear", "factor": 4})"));
  CHECK(lin.rope_scaling.type == RopeScalingType::linear);
  CHECK(lin.rope_scaling.factor == 4.0);

  CHECK_THAT(parse_err(with(kLlama2, "rope_scaling", R"({"rope_type": "yarn", "factor": 4.0})"),
                       errc::unsupported),
             Contains("key 'rope_scaling.rope_type': RoPE scaling type \"yarn\" is not supported "
                      "(supported: default, linear, llama3)"));
  CHECK_THAT(parse_err(with(kLlama2, "rope_scaling", R"({"type": "dynamic", "factor": 2.0})"),
                       errc::unsupported),
             Contains("key 'rope_scaling.type': RoPE scaling type \"dynamic\""));
  CHECK_THAT(parse_err(with(kLlama2, "rope_parameters", R"({"rope_type": "longrope"})"),
                       errc::unsupported),
             Contains("key 'rope_parameters.rope_type': RoPE scaling type \"longrope\""));
  CHECK_THAT(parse_err(with(kLlama2, "rope_scaling", R"({"factor": 2.0})"), errc::format_error),
             Contains("key 'rope_scaling' has no 'rope_type' (or 'type')"));
  CHECK_THAT(parse_err(with(kLlama2, "rope_scaling", R"({"type": "linear"})"), errc::format_error),
             Contains("key 'rope_scaling.factor': missing"));
  CHECK_THAT(parse_err(with(kLlama2, "rope_scaling", "\"linear\""), errc::format_error),
             Contains("key 'rope_scaling': expected an object or null"));
  CHECK_THAT(parse_err(with(kLlama2, "rope_scaling",
                            R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                                "high_freq_factor": 1.0, "original_max_position_embeddings": 8192})"),
                       errc::format_error),
             Contains("key 'rope_scaling.high_freq_factor': must be greater than low_freq_factor"));
  CHECK_THAT(parse_err(with(kLlama2, "rope_scaling",
                            R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0})"),
                       errc::format_error),
             Contains("key 'rope_scaling.original_max_position_embeddings': missing"));
  CHECK_THAT(
      parse_err(with(kLlama2, "rope_parameters", R"({"full_attention": {"rope_type": "default"}})"),
                errc::unsupported),
      Contains("key 'rope_parameters': has no 'rope_type'"));
}

TEST_CASE("AWQ quantization_config: accepted forms", "[model]") {
  const auto awq = [](std::string_view q) {
    auto r = edgellm::model::parse_awq_config(parse_json(q), "config.json");
    if (!r) FAIL(r.error().message);
    return std::move(*r);
  };
  CHECK(awq(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true,
               "version": "gemm", "modules_to_not_convert": null})")
            .version == AwqVersion::gemm);
  const auto gemv = awq(R"({"quant_method": "awq", "bits": 4, "group_size": 64,
                            "zero_point": true, "version": "GEMV"})");
  CHECK(gemv.version == AwqVersion::gemv);
  CHECK(gemv.group_size == 64);
  CHECK(awq(R"({"quant_method": "AWQ", "group_size": 32})").version == AwqVersion::gemm);
  CHECK(awq(R"({"quant_method": "awq", "group_size": 128, "backend": "autoawq",
               "do_fuse": false, "fuse_max_seq_len": null})")
            .bits == 4);
  const auto skip = awq(R"({"quant_method": "awq", "bits": 4, "group_size": 128,
                            "version": "gemm", "modules_to_not_convert": ["visual", "mlp.down_proj"]})");
  REQUIRE(skip.modules_to_not_convert.size() == 2);
  CHECK_FALSE(skip.is_quantized("mlp.down_proj"));
  CHECK_FALSE(skip.is_quantized("visual.blocks.0"));
  CHECK(skip.is_quantized("mlp.up_proj"));
  CHECK(skip.is_quantized("self_attn.q_proj"));
  CHECK_FALSE(skip.is_int8("self_attn.q_proj"));
  // edgellm's int8 extension: quantised linears named there are int8; not_convert wins.
  const auto mixed = awq(R"({"quant_method": "awq", "group_size": 128,
                             "modules_to_not_convert": ["down_proj"],
                             "edgellm_int8_modules": ["self_attn", "mlp.down_proj"]})");
  CHECK(mixed.is_int8("self_attn.o_proj"));
  CHECK_FALSE(mixed.is_int8("mlp.up_proj"));
  CHECK_FALSE(mixed.is_int8("mlp.down_proj"));
  CHECK_FALSE(mixed.is_quantized("mlp.down_proj"));

  // Legacy quant_config.json spelling.
  auto legacy = edgellm::model::parse_awq_config(
      parse_json(R"({"zero_point": true, "q_group_size": 128, "w_bit": 4, "version": "GEMM"})"),
      "quant_config.json", true);
  REQUIRE(legacy.has_value());
  CHECK(legacy->group_size == 128);
  CHECK(legacy->version == AwqVersion::gemm);
}

TEST_CASE("AWQ quantization_config: refused forms name the value", "[model]") {
  const auto refused = [](std::string_view q, errc code = errc::unsupported) {
    auto r = edgellm::model::parse_awq_config(parse_json(q), "config.json");
    if (r) FAIL("expected a refusal for " << q);
    CHECK(r.error().code == code);
    CHECK_THAT(r.error().message,
               Contains("[parse_awq_config] config.json: key 'quantization_config."));
    return r.error().message;
  };
  const std::string base =
      R"("quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true)";
  CHECK_THAT(refused("{" + base + R"(, "version": "gemv_fast"})"),
             Contains("version': AWQ version \"gemv_fast\" is not supported"));
  CHECK_THAT(refused("{" + base + R"(, "version": "Marlin"})"),
             Contains("AWQ version \"Marlin\" is not supported (a symmetric Marlin tile layout"));
  CHECK_THAT(refused("{" + base + R"(, "version": "exllama"})"),
             Contains("\"exllama\" is not supported (an in-memory repacking"));
  CHECK_THAT(refused("{" + base + R"(, "version": "exllamav2"})"), Contains("\"exllamav2\""));
  CHECK_THAT(refused("{" + base + R"(, "version": "ipex"})"), Contains("\"ipex\""));
  CHECK_THAT(refused("{" + base + R"(, "version": "gemm2"})"), Contains("an unknown AWQ layout"));
  CHECK_THAT(refused("{" + base + R"(, "version": "gemm", "backend": "llm-awq"})"),
             Contains("backend': backend \"llm-awq\" is not supported"));
  CHECK_THAT(refused(R"({"quant_method": "awq", "bits": 8, "group_size": 128})"),
             Contains("bits': 8-bit AWQ is not supported"));
  CHECK_THAT(
      refused(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": false})"),
      Contains("zero_point': false (symmetric quantisation without zero points) is not supported"));
  CHECK_THAT(refused(R"({"quant_method": "gptq", "bits": 4, "group_size": 128})"),
             Contains("quant_method': quantization method \"gptq\" is not supported"));
  CHECK_THAT(refused(R"({"quant_method": "bitsandbytes"})"), Contains("\"bitsandbytes\""));
  CHECK_THAT(refused(R"({"quant_method": "awq", "bits": 4, "group_size": -1})"),
             Contains("group_size': group size -1 is not supported"));
  CHECK_THAT(refused(R"({"quant_method": "awq", "bits": 4, "group_size": 0})"),
             Contains("group size 0 is not supported"));
  CHECK_THAT(refused(R"({"quant_method": "awq", "bits": 4})", errc::format_error),
             Contains("group_size': missing"));
  CHECK_THAT(refused(R"({"bits": 4, "group_size": 128})", errc::format_error),
             Contains("quant_method': missing"));
  CHECK_THAT(refused(R"({"quant_method": "awq", "group_size": "128"})", errc::format_error),
             Contains("expected a positive integer, got \"128\""));
  CHECK_THAT(refused(R"({"quant_method": "awq", "group_size": 128, "zero_point": "yes"})",
                     errc::format_error),
             Contains("zero_point': expected true or false"));
  CHECK_THAT(
      refused(R"({"quant_method": "awq", "group_size": 128, "modules_to_not_convert": "lm_head"})",
              errc::format_error),
      Contains("modules_to_not_convert': expected a list of strings or null"));
  CHECK_THAT(refused(R"({"quant_method": "awq", "group_size": 128, "modules_to_not_convert": [1]})",
                     errc::format_error),
             Contains("a list of strings; an element, got 1"));
  CHECK_THAT(refused(R"({"quant_method": "awq", "group_size": 128, "edgellm_int8_modules": "mlp"})",
                     errc::format_error),
             Contains("edgellm_int8_modules': expected a list of strings or null"));
  CHECK_THAT(refused(R"({"quant_method": "awq", "group_size": 128, "edgellm_int8_modules": [""]})",
                     errc::format_error),
             Contains("every module in int8"));

  // Through config.json the refusal names config.json and the nested key.
  CHECK_THAT(
      parse_err(
          with(kQwen2, "quantization_config",
               R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "marlin"})"),
          errc::unsupported),
      Contains("config.json: key 'quantization_config.version': AWQ version \"marlin\""));
}

TEST_CASE("load_model_config reads a checkpoint directory", "[model]") {
  TempDir dir;
  dir.write("config.json", kQwen2);
  dir.write("generation_config.json", kQwen2Generation);
  auto c = edgellm::model::load_model_config(dir.str());
  REQUIRE(c.has_value());
  CHECK(c->eos_token_ids == std::vector<std::int64_t>{151645, 151643});
  REQUIRE(c->awq.has_value());
  CHECK(c->awq->group_size == 128);

  // Errors name the file (and the byte for JSON errors).
  dir.write("generation_config.json", "{\"eos_token_id\": [1,]}");
  auto g = edgellm::model::load_model_config(dir.str());
  REQUIRE_FALSE(g.has_value());
  CHECK_THAT(g.error().message, Contains(dir.file("generation_config.json") + ": at byte 20"));
  CHECK_THAT(g.error().message, Contains("trailing comma"));
  fs::remove(dir.file("generation_config.json"));

  dir.write("config.json", std::string(kQwen2).substr(0, 100));
  auto t = edgellm::model::load_model_config(dir.str());
  REQUIRE_FALSE(t.has_value());
  CHECK_THAT(t.error().message, Contains(dir.file("config.json") + ": at byte 95 (line 3"));
  CHECK_THAT(t.error().message, Contains("unterminated string"));

  dir.write("config.json", R"({"model_type": "llama", "hidden_size": 64})");
  auto k = edgellm::model::load_model_config(dir.str());
  REQUIRE_FALSE(k.has_value());
  CHECK_THAT(k.error().message,
             Contains(dir.file("config.json") + ": key 'intermediate_size': missing"));

  fs::remove(dir.file("config.json"));
  auto m = edgellm::model::load_model_config(dir.str());
  REQUIRE_FALSE(m.has_value());
  CHECK(m.error().code == errc::io_error);
  CHECK_THAT(m.error().message, Contains(dir.file("config.json")));
}

TEST_CASE("load_model_config reads a legacy quant_config.json", "[model]") {
  TempDir dir;
  dir.write("config.json", kLlama2);
  dir.write("quant_config.json",
            R"({"zero_point": true, "q_group_size": 64, "w_bit": 4, "version": "GEMV"})");
  auto c = edgellm::model::load_model_config(dir.str());
  REQUIRE(c.has_value());
  REQUIRE(c->awq.has_value());
  CHECK(c->awq->group_size == 64);
  CHECK(c->awq->version == AwqVersion::gemv);

  dir.write("quant_config.json",
            R"({"zero_point": true, "q_group_size": 128, "w_bit": 3, "version": "GEMM"})");
  auto bad = edgellm::model::load_model_config(dir.str());
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code == errc::unsupported);
  CHECK_THAT(bad.error().message,
             Contains(dir.file("quant_config.json") + ": key 'w_bit': 3-bit AWQ is not supported"));
}

}  // namespace test_model_config_json
