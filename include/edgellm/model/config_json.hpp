// SPDX-License-Identifier: Apache-2.0
// Reading a Hugging Face checkpoint's config.json (with generation_config.json and a legacy
// quant_config.json) into the ModelConfig / AwqConfig of model/config.hpp, with messages that
// name the file and the key.
#pragma once

#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/model/config.hpp"
#include "edgellm/result.hpp"

#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace edgellm::model {

namespace detail {

inline constexpr std::size_t kMaxDim =
    static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max());

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Reads keys of one JSON object, producing "[where] <source>: key 'k': ..." messages.
class Reader {
 public:
  Reader(const io::json::Value& obj, std::string_view where, std::string_view source,
         std::string_view prefix = {})
      : obj_(obj), where_(where), source_(source), prefix_(prefix) {}

  const io::json::Value* get(std::string_view key) const { return obj_.find(key); }
  /// Present and not null.
  const io::json::Value* get_non_null(std::string_view key) const {
    const io::json::Value* v = obj_.find(key);
    return v && !v->is_null() ? v : nullptr;
  }

  error fail(std::string_view key, std::string_view what, errc code = errc::format_error) const {
    std::string m(source_);
    m += ": key '";
    m += prefix_;
    m += key;
    m += "': ";
    m += what;
    return make_error(code, where_, m);
  }
  error fail_type(std::string_view key, std::string_view expected,
                  const io::json::Value& got) const {
    return fail(key, "expected " + std::string(expected) + ", got " + io::json::describe(got));
  }

  /// A positive integer in [1, max] (integral doubles such as 4096.0 are accepted too).
  result<std::size_t> positive(std::string_view key, std::size_t max = kMaxDim) const {
    const io::json::Value* v = get_non_null(key);
    if (v == nullptr) return fail(key, "missing (a positive integer is required)");
    return positive_value(key, *v, max);
  }
  result<std::size_t> positive_or(std::string_view key, std::size_t def,
                                  std::size_t max = kMaxDim) const {
    const io::json::Value* v = get_non_null(key);
    if (v == nullptr) return def;
    return positive_value(key, *v, max);
  }
  result<std::size_t> positive_value(std::string_view key, const io::json::Value& v,
                                     std::size_t max) const {
    const auto i = integer_of(v);
    if (!i) return fail_type(key, "a positive integer", v);
    if (*i <= 0 || static_cast<std::uint64_t>(*i) > max) {
      return fail(key, "must be in [1, " + std::to_string(max) + "], got " + std::to_string(*i));
    }
    return static_cast<std::size_t>(*i);
  }

  /// A finite number > 0.
  result<double> positive_double_or(std::string_view key, double def) const {
    const io::json::Value* v = get_non_null(key);
    if (v == nullptr) return def;
    return positive_double_value(key, *v);
  }
  result<double> positive_double(std::string_view key) const {
    const io::json::Value* v = get_non_null(key);
    if (v == nullptr) return fail(key, "missing (a positive number is required)");
    return positive_double_value(key, *v);
  }
  result<double> positive_double_value(std::string_view key, const io::json::Value& v) const {
    const auto d = v.get_double();
    if (!d) return fail_type(key, "a number", v);
    if (!(*d > 0.0) || !std::isfinite(*d)) {
      return fail(key, "must be a positive finite number, got " + io::json::describe(v));
    }
    return *d;
  }

  result<bool> boolean_or(std::string_view key, bool def) const {
    const io::json::Value* v = get_non_null(key);
    if (v == nullptr) return def;
    const auto b = v->get_bool();
    if (!b) return fail_type(key, "true or false", *v);
    return *b;
  }

  /// A string, or nullopt when absent or null.
  result<std::optional<std::string>> string_opt(std::string_view key) const {
    const io::json::Value* v = get_non_null(key);
    if (v == nullptr) return std::optional<std::string>();
    const std::string* s = v->get_string();
    if (s == nullptr) return fail_type(key, "a string", *v);
    return std::optional<std::string>(*s);
  }

  /// Integers, and doubles with an integral value that fits int64.
  static std::optional<std::int64_t> integer_of(const io::json::Value& v) noexcept {
    if (const auto i = v.get_int()) return i;
    const auto d = v.get_double();
    if (d && std::isfinite(*d) && std::trunc(*d) == *d && *d >= -9.2e18 && *d <= 9.2e18) {
      return static_cast<std::int64_t>(*d);
    }
    return std::nullopt;
  }

 private:
  const io::json::Value& obj_;
  std::string_view where_;
  std::string_view source_;
  std::string_view prefix_;
};

/// Token ids from an int, a list of ints, or null/absent (-> empty).
inline result<std::vector<std::int64_t>> token_ids(const Reader& r, std::string_view key) {
  std::vector<std::int64_t> out;
  const io::json::Value* v = r.get_non_null(key);
  if (v == nullptr) return out;
  if (const auto i = v->get_int()) {
    out.push_back(*i);
    return out;
  }
  const io::json::Array* a = v->get_array();
  if (a == nullptr) return r.fail_type(key, "a token id or a list of token ids", *v);
  for (const io::json::Value& e : *a) {
    const auto i = e.get_int();
    if (!i) return r.fail_type(key, "a list of integer token ids; an element", e);
    out.push_back(*i);
  }
  return out;
}

/// Parses a rope_scaling / rope_parameters object into `out`.
inline status parse_rope_scaling(const io::json::Value& obj, std::string_view where,
                                 std::string_view source, std::string_view prefix,
                                 RopeScaling& out) {
  const Reader r(obj, where, source, prefix);
  auto type = r.string_opt("rope_type");
  if (!type) return type.error();
  if (!*type) {
    type = r.string_opt("type");  // the older spelling
    if (!type) return type.error();
  }
  if (!*type) {
    return make_error(errc::format_error, where,
                      std::string(source) + ": key '" +
                          std::string(prefix.substr(0, prefix.size() - 1)) +
                          "' has no 'rope_type' (or 'type')");
  }
  const std::string& t = **type;
  if (t == "default") {
    out = RopeScaling{};
    return {};
  }
  if (t == "linear") {
    auto f = r.positive_double("factor");
    if (!f) return f.error();
    out = RopeScaling{};
    out.type = RopeScalingType::linear;
    out.factor = *f;
    return {};
  }
  if (t == "llama3") {
    auto f = r.positive_double("factor");
    if (!f) return f.error();
    auto lo = r.positive_double("low_freq_factor");
    if (!lo) return lo.error();
    auto hi = r.positive_double("high_freq_factor");
    if (!hi) return hi.error();
    auto ctx = r.positive("original_max_position_embeddings");
    if (!ctx) return ctx.error();
    if (!(*hi > *lo)) {
      return r.fail("high_freq_factor", "must be greater than low_freq_factor (" +
                                            std::to_string(*lo) + "), got " + std::to_string(*hi));
    }
    out.type = RopeScalingType::llama3;
    out.factor = *f;
    out.low_freq_factor = *lo;
    out.high_freq_factor = *hi;
    out.original_max_position_embeddings = *ctx;
    return {};
  }
  return r.fail(
      obj.find("rope_type") ? "rope_type" : "type",
      "RoPE scaling type \"" + t + "\" is not supported (supported: default, linear, llama3)",
      errc::unsupported);
}

}  // namespace detail

/// Parses an AutoAWQ quantization config: config.json's `quantization_config` object, or (with
/// `legacy` true) the object of an old `quant_config.json`, which has no quant_method and spells
/// the keys w_bit / q_group_size. Accepts quant_method "awq", bits 4, zero_point true (default),
/// version "gemm" (default) or "gemv" in any case, group_size > 0, modules_to_not_convert as
/// a list of strings or null, and edgellm's edgellm_int8_modules likewise (AwqConfig). Everything
/// else is refused with errc::unsupported naming the value.
inline result<AwqConfig> parse_awq_config(const io::json::Value& q, std::string_view source,
                                          bool legacy = false) {
  constexpr std::string_view where = "parse_awq_config";
  const std::string prefix = legacy ? "" : "quantization_config.";
  const detail::Reader r(q, where, source, prefix);
  if (!q.is_object()) {
    return make_error(errc::format_error, where,
                      std::string(source) + ": " +
                          (legacy ? "quant config" : "'quantization_config'") +
                          " must be an object, not " + io::json::describe(q));
  }
  AwqConfig c;

  auto method = r.string_opt("quant_method");
  if (!method) return method.error();
  if (*method) {
    if (detail::ascii_lower(**method) != "awq") {
      return r.fail("quant_method",
                    "quantization method \"" + **method +
                        "\" is not supported; edgellm reads AutoAWQ (\"awq\") checkpoints only",
                    errc::unsupported);
    }
  } else if (!legacy) {
    return r.fail("quant_method", "missing");
  }

  auto backend = r.string_opt("backend");
  if (!backend) return backend.error();
  if (*backend && detail::ascii_lower(**backend) != "autoawq") {
    return r.fail("backend",
                  "backend \"" + **backend +
                      "\" is not supported (llm-awq checkpoints use a different packing; only "
                      "AutoAWQ's is read)",
                  errc::unsupported);
  }

  auto version = r.string_opt("version");
  if (!version) return version.error();
  if (*version) {
    const std::string v = detail::ascii_lower(**version);
    if (v == "gemm") {
      c.version = AwqVersion::gemm;
    } else if (v == "gemv") {
      c.version = AwqVersion::gemv;
    } else {
      std::string why;
      if (v == "gemv_fast") {
        why = "a different layout (int16 qweight, 4-row interleave, premultiplied zeros)";
      } else if (v == "marlin") {
        why = "a symmetric Marlin tile layout without zero points";
      } else if (v == "exllama" || v == "exllamav2" || v == "ipex") {
        why = "an in-memory repacking that AutoAWQ never writes to disk";
      } else {
        why = "an unknown AWQ layout";
      }
      return r.fail(
          "version",
          "AWQ version \"" + **version + "\" is not supported (" + why + "; supported: gemm, gemv)",
          errc::unsupported);
    }
  }

  const std::string_view bits_key = q.find("bits") ? "bits" : (q.find("w_bit") ? "w_bit" : "bits");
  if (const io::json::Value* b = r.get_non_null(bits_key)) {
    const auto bi = detail::Reader::integer_of(*b);
    if (!bi) return r.fail_type(bits_key, "an integer", *b);
    if (*bi != 4) {
      return r.fail(
          bits_key,
          std::to_string(*bi) + "-bit AWQ is not supported (AutoAWQ checkpoints are 4-bit)",
          errc::unsupported);
    }
  }

  auto zp = r.boolean_or("zero_point", true);
  if (!zp) return zp.error();
  if (!*zp) {
    return r.fail("zero_point",
                  "false (symmetric quantisation without zero points) is not supported",
                  errc::unsupported);
  }

  const std::string_view gs_key = q.find("group_size")
                                      ? "group_size"
                                      : (q.find("q_group_size") ? "q_group_size" : "group_size");
  const io::json::Value* gs = r.get_non_null(gs_key);
  if (gs == nullptr) return r.fail(gs_key, "missing (the quantisation group size is required)");
  const auto gsi = detail::Reader::integer_of(*gs);
  if (!gsi) return r.fail_type(gs_key, "a positive integer", *gs);
  if (*gsi <= 0) {
    return r.fail(gs_key,
                  "group size " + std::to_string(*gsi) +
                      " is not supported (a positive group size is required; -1, one group per "
                      "row, is not)",
                  errc::unsupported);
  }
  if (static_cast<std::uint64_t>(*gsi) > detail::kMaxDim) {
    return r.fail(gs_key, "group size " + std::to_string(*gsi) + " is out of range");
  }
  c.group_size = static_cast<std::size_t>(*gsi);

  if (const io::json::Value* m = r.get_non_null("modules_to_not_convert")) {
    const io::json::Array* a = m->get_array();
    if (a == nullptr) return r.fail_type("modules_to_not_convert", "a list of strings or null", *m);
    for (const io::json::Value& e : *a) {
      const std::string* s = e.get_string();
      if (s == nullptr) {
        return r.fail_type("modules_to_not_convert", "a list of strings; an element", e);
      }
      if (s->empty()) {
        return r.fail("modules_to_not_convert",
                      "an empty string would exclude every module from quantisation");
      }
      c.modules_to_not_convert.push_back(*s);
    }
  }
  if (const io::json::Value* m = r.get_non_null("edgellm_int8_modules")) {
    const io::json::Array* a = m->get_array();
    if (a == nullptr) return r.fail_type("edgellm_int8_modules", "a list of strings or null", *m);
    for (const io::json::Value& e : *a) {
      const std::string* s = e.get_string();
      if (s == nullptr) return r.fail_type("edgellm_int8_modules", "a list of strings; an element", e);
      if (s->empty())
        return r.fail("edgellm_int8_modules", "an empty string would put every module in int8");
      c.int8_modules.push_back(*s);
    }
  }
  return c;
}

/// Parses a config.json object. `source` names it in messages. `generation_config`, if given
/// (`generation_source` names it), contributes bos_token_id when config.json lacks one and extra
/// eos ids. Refuses, with errc::unsupported, model types other than llama / qwen2 / qwen3 /
/// mistral / smollm3, hidden_act other than silu, partial rotary embeddings, Qwen2 / Qwen3 /
/// SmolLM3 sliding-window attention and RoPE scaling other than linear / llama3; other bad
/// values are errc::format_error naming the key.
inline result<ModelConfig> parse_model_config(const io::json::Value& config,
                                              std::string_view source,
                                              const io::json::Value* generation_config = nullptr,
                                              std::string_view generation_source = {}) {
  constexpr std::string_view where = "load_model_config";
  if (!config.is_object()) {
    return make_error(
        errc::format_error, where,
        std::string(source) + ": must be a JSON object, not " + io::json::describe(config));
  }
  const detail::Reader r(config, where, source);
  ModelConfig c;

  auto mt = r.string_opt("model_type");
  if (!mt) return mt.error();
  if (!*mt) {
    return r.fail("model_type",
                  "missing (expected \"llama\", \"qwen2\", \"qwen3\", \"mistral\" or \"smollm3\")");
  }
  if (**mt == "llama") {
    c.model_type = ModelType::llama;
  } else if (**mt == "qwen2") {
    c.model_type = ModelType::qwen2;
  } else if (**mt == "qwen3") {
    c.model_type = ModelType::qwen3;
  } else if (**mt == "mistral") {
    c.model_type = ModelType::mistral;
  } else if (**mt == "smollm3") {
    c.model_type = ModelType::smollm3;
  } else {
    return r.fail("model_type",
                  "model type \"" + **mt +
                      "\" is not supported (supported: llama, qwen2, qwen3, mistral, smollm3)",
                  errc::unsupported);
  }

  auto act = r.string_opt("hidden_act");
  if (!act) return act.error();
  if (*act && **act != "silu") {
    return r.fail("hidden_act", "activation \"" + **act + "\" is not supported (only silu)",
                  errc::unsupported);
  }

#define EDGELLM_CFG_TRY(var, expr) \
  auto var = (expr);               \
  if (!var) return var.error()

  EDGELLM_CFG_TRY(hidden, r.positive("hidden_size"));
  EDGELLM_CFG_TRY(inter, r.positive("intermediate_size"));
  EDGELLM_CFG_TRY(layers, r.positive("num_hidden_layers"));
  EDGELLM_CFG_TRY(heads, r.positive("num_attention_heads"));
  EDGELLM_CFG_TRY(kv, r.positive_or("num_key_value_heads", *heads));
  EDGELLM_CFG_TRY(vocab, r.positive("vocab_size"));
  // transformers' defaults of each config class.
  const std::size_t default_ctx = c.model_type == ModelType::llama     ? 2048
                                  : c.model_type == ModelType::mistral ? 131072
                                                                       : 32768;
  EDGELLM_CFG_TRY(ctx, r.positive_or("max_position_embeddings", default_ctx));
  c.hidden_size = *hidden;
  c.intermediate_size = *inter;
  c.num_hidden_layers = *layers;
  c.num_attention_heads = *heads;
  c.num_key_value_heads = *kv;
  c.vocab_size = *vocab;
  c.max_position_embeddings = *ctx;
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return r.fail("num_key_value_heads", std::to_string(c.num_key_value_heads) +
                                             " does not divide num_attention_heads " +
                                             std::to_string(c.num_attention_heads));
  }
  if (r.get_non_null("head_dim") != nullptr) {
    EDGELLM_CFG_TRY(hd, r.positive("head_dim"));
    c.head_dim = *hd;
  } else if (c.model_type == ModelType::qwen3) {
    c.head_dim = 128;  // Qwen3Config's default, not hidden_size / heads
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return r.fail("hidden_size",
                    std::to_string(c.hidden_size) + " is not divisible by num_attention_heads " +
                        std::to_string(c.num_attention_heads) + " and no head_dim is given");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) {
    return r.fail("head_dim",
                  "RoPE needs an even head dimension, got " + std::to_string(c.head_dim));
  }

  EDGELLM_CFG_TRY(eps, r.positive_double_or("rms_norm_eps", 1e-6));
  c.rms_norm_eps = *eps;

  // RoPE: v5 rope_parameters {rope_type, rope_theta, ...} wins over rope_theta / rope_scaling.
  EDGELLM_CFG_TRY(theta, r.positive_double_or("rope_theta", c.model_type == ModelType::smollm3
                                                                   ? 2000000.0
                                                                   : 10000.0));
  c.rope_theta = *theta;
  const io::json::Value* partial = r.get_non_null("partial_rotary_factor");
  if (const io::json::Value* rp = r.get_non_null("rope_parameters")) {
    if (!rp->is_object()) return r.fail_type("rope_parameters", "an object", *rp);
    const detail::Reader rr(*rp, where, source, "rope_parameters.");
    EDGELLM_CFG_TRY(t2, rr.positive_double_or("rope_theta", c.rope_theta));
    c.rope_theta = *t2;
    if (const io::json::Value* p2 = rr.get_non_null("partial_rotary_factor")) partial = p2;
    if (rp->find("rope_type") == nullptr && rp->find("type") == nullptr) {
      return r.fail("rope_parameters",
                    "has no 'rope_type' (per-layer-type RoPE parameters are not supported)",
                    errc::unsupported);
    }
    const auto st =
        detail::parse_rope_scaling(*rp, where, source, "rope_parameters.", c.rope_scaling);
    if (!st) return st.error();
  } else if (const io::json::Value* rs = r.get_non_null("rope_scaling")) {
    if (!rs->is_object()) return r.fail_type("rope_scaling", "an object or null", *rs);
    const auto st = detail::parse_rope_scaling(*rs, where, source, "rope_scaling.", c.rope_scaling);
    if (!st) return st.error();
  }
  if (partial != nullptr) {
    const auto f = partial->get_double();
    if (!f || *f != 1.0) {
      return r.fail("partial_rotary_factor",
                    "partial rotary embeddings are not supported (must be 1.0), got " +
                        io::json::describe(*partial),
                    errc::unsupported);
    }
  }

  EDGELLM_CFG_TRY(tie, r.boolean_or("tie_word_embeddings", c.model_type == ModelType::smollm3));
  c.tie_word_embeddings = *tie;
  switch (c.model_type) {
    case ModelType::llama: {
      EDGELLM_CFG_TRY(ab, r.boolean_or("attention_bias", false));
      EDGELLM_CFG_TRY(mb, r.boolean_or("mlp_bias", false));
      c.attention_qkv_bias = c.attention_out_bias = *ab;
      c.mlp_bias = *mb;
      break;
    }
    case ModelType::qwen2:
    case ModelType::qwen3: {
      const bool qwen2 = c.model_type == ModelType::qwen2;
      if (qwen2) {
        // Qwen2Attention: q/k/v with bias, o_proj without, fixed in code.
        c.attention_qkv_bias = true;
      } else {
        // Qwen3Attention: q/k/v/o biases iff attention_bias; q_norm / k_norm always.
        EDGELLM_CFG_TRY(ab, r.boolean_or("attention_bias", false));
        c.attention_qkv_bias = c.attention_out_bias = *ab;
        c.attention_qk_norm = true;
      }
      EDGELLM_CFG_TRY(sw, r.boolean_or("use_sliding_window", false));
      if (*sw) {
        return r.fail("use_sliding_window",
                      std::string(qwen2 ? "Qwen2" : "Qwen3") +
                          " sliding-window attention is not supported (released " +
                          (qwen2 ? "Qwen2" : "Qwen3") + " models set it to false)",
                      errc::unsupported);
      }
      break;
    }
    case ModelType::smollm3: {
      // SmolLM3Config: the Llama layout; no_rope_layers[l] == 0 makes layer l NoPE, else a NoPE
      // layer every no_rope_layer_interval layers (the 4th, 8th, ...).
      EDGELLM_CFG_TRY(ab, r.boolean_or("attention_bias", false));
      EDGELLM_CFG_TRY(mb, r.boolean_or("mlp_bias", false));
      c.attention_qkv_bias = c.attention_out_bias = *ab;
      c.mlp_bias = *mb;
      c.rope_layers.assign(c.num_hidden_layers, 1);
      if (const io::json::Value* nr = r.get_non_null("no_rope_layers")) {
        const io::json::Array* list = nr->get_array();
        if (list == nullptr || list->size() < c.num_hidden_layers)
          return r.fail_type("no_rope_layers",
                             "a list of 0/1 with an entry per layer (" +
                                 std::to_string(c.num_hidden_layers) + ")",
                             *nr);
        for (std::size_t l = 0; l < c.num_hidden_layers; ++l) {
          const auto v = (*list)[l].get_int();
          if (!v || (*v != 0 && *v != 1))
            return r.fail("no_rope_layers", "entry " + std::to_string(l) + " is " +
                                                io::json::describe((*list)[l]) +
                                                ", expected 0 (NoPE) or 1 (RoPE)");
          c.rope_layers[l] = static_cast<std::uint8_t>(*v);
        }
      } else {
        EDGELLM_CFG_TRY(every, r.positive_or("no_rope_layer_interval", std::size_t{4}));
        for (std::size_t l = 0; l < c.num_hidden_layers; ++l)
          c.rope_layers[l] = (l + 1) % *every != 0 ? 1 : 0;
      }
      EDGELLM_CFG_TRY(sw, r.boolean_or("use_sliding_window", false));
      if (*sw && r.get_non_null("sliding_window") != nullptr)
        return r.fail("use_sliding_window",
                      "SmolLM3 sliding-window attention is not supported (released SmolLM3 models "
                      "set it to false)",
                      errc::unsupported);
      break;
    }
    case ModelType::mistral: {
      if (r.get_non_null("sliding_window") != nullptr) {
        EDGELLM_CFG_TRY(win, r.positive("sliding_window"));
        c.sliding_window = *win;
      }
      break;
    }
  }

  auto dt = r.string_opt("torch_dtype");
  if (!dt) return dt.error();
  if (!*dt) {
    dt = r.string_opt("dtype");
    if (!dt) return dt.error();
  }
  if (*dt) c.torch_dtype = **dt;

  // Special tokens.
  const auto check_id = [&](const detail::Reader& rd, std::string_view key,
                            std::int64_t id) -> status {
    if (id < 0 || static_cast<std::uint64_t>(id) >= c.vocab_size) {
      return rd.fail(key, "token id " + std::to_string(id) +
                              " is outside [0, vocab_size = " + std::to_string(c.vocab_size) + ")");
    }
    return {};
  };
  if (const io::json::Value* b = r.get_non_null("bos_token_id")) {
    const auto bi = b->get_int();
    if (!bi) return r.fail_type("bos_token_id", "an integer token id or null", *b);
    if (auto st = check_id(r, "bos_token_id", *bi); !st) return st.error();
    c.bos_token_id = *bi;
  }
  EDGELLM_CFG_TRY(eos, detail::token_ids(r, "eos_token_id"));
  for (const std::int64_t id : *eos) {
    if (auto st = check_id(r, "eos_token_id", id); !st) return st.error();
    if (!c.is_eos(id)) c.eos_token_ids.push_back(id);
  }
  if (generation_config != nullptr && !generation_config->is_null()) {
    if (!generation_config->is_object()) {
      return make_error(errc::format_error, where,
                        std::string(generation_source) + ": must be a JSON object, not " +
                            io::json::describe(*generation_config));
    }
    const detail::Reader g(*generation_config, where, generation_source);
    if (!c.bos_token_id) {
      if (const io::json::Value* b = g.get_non_null("bos_token_id")) {
        const auto bi = b->get_int();
        if (!bi) return g.fail_type("bos_token_id", "an integer token id or null", *b);
        if (auto st = check_id(g, "bos_token_id", *bi); !st) return st.error();
        c.bos_token_id = *bi;
      }
    }
    EDGELLM_CFG_TRY(geos, detail::token_ids(g, "eos_token_id"));
    for (const std::int64_t id : *geos) {
      if (auto st = check_id(g, "eos_token_id", id); !st) return st.error();
      if (!c.is_eos(id)) c.eos_token_ids.push_back(id);
    }
  }

  if (const io::json::Value* q = r.get_non_null("quantization_config")) {
    EDGELLM_CFG_TRY(awq, parse_awq_config(*q, source, false));
    c.awq = std::move(*awq);
  }
#undef EDGELLM_CFG_TRY
  return c;
}

namespace detail {
inline result<io::json::Value> read_json_file(const std::string& path) {
  auto text = io::read_text_file(path, io::kMaxConfigJsonBytes);
  if (!text) return text.error();
  return io::json::parse(*text, path);
}
}  // namespace detail

/// Loads `dir`/config.json, plus `dir`/generation_config.json when present (extra eos ids), plus
/// a legacy `dir`/quant_config.json when config.json has no quantization_config. Messages name the
/// file and the key, e.g. "[load_model_config] /m/config.json: key 'num_key_value_heads': 3 does
/// not divide num_attention_heads 32".
inline result<ModelConfig> load_model_config(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  const std::string config_path = (d / "config.json").string();
  auto config = detail::read_json_file(config_path);
  if (!config) return config.error();

  std::error_code ec;
  const std::string gen_path = (d / "generation_config.json").string();
  std::optional<io::json::Value> gen;
  if (fs::exists(gen_path, ec)) {
    auto g = detail::read_json_file(gen_path);
    if (!g) return g.error();
    gen = std::move(*g);
  }

  auto c = parse_model_config(*config, config_path, gen ? &*gen : nullptr, gen_path);
  if (!c) return c;
  if (!c->awq) {
    const std::string legacy_path = (d / "quant_config.json").string();
    if (fs::exists(legacy_path, ec)) {
      auto q = detail::read_json_file(legacy_path);
      if (!q) return q.error();
      auto awq = parse_awq_config(*q, legacy_path, true);
      if (!awq) return awq.error();
      c->awq = std::move(*awq);
    }
  }
  return c;
}

}  // namespace edgellm::model
