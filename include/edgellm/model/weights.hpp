// SPDX-License-Identifier: Apache-2.0
// Weights of a Llama / Qwen2 / Qwen3 / Mistral decoder loaded from a Hugging Face checkpoint
// directory (plain fp16/bf16/fp32 or AutoAWQ gemm/gemv), validated against config.json, in the form
// the transformer runs: packed int4 linears (or dense fp32 in reference mode), fp32 norms and
// biases, and embeddings / lm_head read in place from the memory-mapped files.
#pragma once

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/detail/guard_exceptions.hpp"
#include "edgellm/io/checkpoint.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/kernels/q8_matrix.hpp"
#include "edgellm/kernels/quantize.hpp"
#include "edgellm/model/config_json.hpp"
#include "edgellm/model/layer_layout.hpp"
#include "edgellm/model/lm_head_format.hpp"
#include "edgellm/model/load_options.hpp"
#include "edgellm/model/packed_cache.hpp"
#include "edgellm/model/tensor_reader.hpp"
#include "edgellm/model/transformer_weights.hpp"
#include "edgellm/model/weight_conversion.hpp"
#include "edgellm/model/weights_arena.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

namespace edgellm::model {

/// The tensors of `ckpt` that load_weights does not read for config `c`, sorted by name.
/// Read: model.embed_tokens.weight, model.norm.weight, lm_head.weight (unless the embeddings are
/// tied), and for each of the num_hidden_layers layers its two norms (four with
/// attention_qk_norm: self_attn.q_norm / k_norm) and seven linears (AWQ
/// qweight / qzeros / scales, or weight for unquantised and modules_to_not_convert linears), with
/// the biases the config asks for. Never counted: `*.rotary_emb.inv_freq` (a buffer old
/// transformers versions saved, recomputed from rope_theta) and a stored lm_head.weight of a
/// tied checkpoint (transformers ignores it as well).
inline std::vector<std::string> unused_tensors(const io::Checkpoint& ckpt, const ModelConfig& c) {
  std::vector<std::string> used = {"model.embed_tokens.weight", "model.norm.weight",
                                   "lm_head.weight"};
  for (std::size_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string pre = "model.layers." + std::to_string(i) + ".";
    for (const LayerNorm& n : kLayerNorms)
      if (n.present(c)) used.push_back(pre + std::string(n.name) + ".weight");
    for (const LayerLinear& l : kLayerLinears) {
      const std::string_view module = l.name;
      const bool bias = l.has_bias(c);
      const std::string m = pre + std::string(module);
      if (c.awq && c.awq->is_int8(module)) {
        for (const char* part : {".qweight", ".scales"}) used.push_back(m + part);
      } else if (c.awq && c.awq->is_quantized(module)) {
        for (const char* part : {".qweight", ".qzeros", ".scales"}) used.push_back(m + part);
      } else {
        used.push_back(m + ".weight");
      }
      if (bias) used.push_back(m + ".bias");
    }
  }
  std::sort(used.begin(), used.end());
  std::vector<std::string> unused;
  for (std::string& name : ckpt.names()) {
    if (std::binary_search(used.begin(), used.end(), name)) continue;
    if (name.ends_with(".rotary_emb.inv_freq")) continue;
    unused.push_back(std::move(name));
  }
  return unused;
}

/// Loads the decoder in checkpoint directory `dir`: config.json (see load_model_config; model types
/// llama, qwen2, qwen3, mistral), then every tensor, each checked for presence, dtype and shape
/// against the config (messages name the file and tensor, e.g. "[load_weights]
/// /m/model.safetensors: model.layers.3.mlp.down_proj.weight: shape [64, 100] but config says
/// [64, 192] ([hidden_size, intermediate_size])").
///
/// Per tensor:
/// - decoder linears of an AutoAWQ checkpoint (quantization_config; gemm or gemv; group size 32,
///   64 or 128): imported bit-exactly and repacked into kernels::Q4Matrix; linears matched by
///   modules_to_not_convert stay dense as stored. Unquantised checkpoints: RTN-quantised to int4
///   at load (options.rtn_group_size). With options.fp32_reference, all of them dense fp32.
/// - embed_tokens: kept as stored (F16/BF16/F32) in the mapping; rows converted on lookup, their
///   pages released afterwards (release_source_pages) unless the table is the as-stored lm_head.
/// - lm_head (embed_tokens when tie_word_embeddings): as stored, or int8 / int4 (options.lm_head).
/// - norms and biases: fp32 vectors.
/// Tensors the config does not use are an error naming the first few (unused_tensors), unless
/// options.allow_extra_tensors.
/// Memory: converted tensors' mapped pages are released as loading goes (see LoadOptions), so
/// peak resident memory is about the converted weights plus one AWQ tensor (source and unpacked
/// codes) or one block of a dense one (conversion_block_rows), plus the as-stored embedding /
/// lm_head pages that get touched; a tied embedding quantised as the lm_head is released too
/// and comes back a looked-up row at a time.
inline result<std::shared_ptr<const TransformerWeights>> load_weights_unguarded(
    const std::string& dir, const LoadOptions& options) {
  constexpr std::string_view where = detail::WeightLoader::kWhere;
  auto cfg = load_model_config(dir);
  if (!cfg) return cfg.error();
  auto ckpt = io::Checkpoint::open(dir);
  if (!ckpt) return ckpt.error();
  const ModelConfig& c = *cfg;

  auto w = std::make_shared<TransformerWeights>();
  w->dir = dir;
  w->config = c;
  w->options = options;
  w->options.progress = nullptr;  // it may point to the caller's stack
  const std::size_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const std::size_t q_dim = c.num_attention_heads * c.head_dim;

  if (c.awq && !kernels::is_supported_group_size(c.awq->group_size)) {
    return make_error(errc::unsupported, where,
                      dir + "/config.json: quantization_config.group_size " +
                          std::to_string(c.awq->group_size) +
                          " is not supported by the int4 kernels (32, 64 or 128)");
  }
  // RTN group size for linears that are quantised at load (unquantised checkpoints).
  if (!c.awq && !options.fp32_reference) {
    if (options.rtn_group_size == 0) {
      w->rtn_group_size = largest_group_dividing({H, I, q_dim});
      if (w->rtn_group_size == 0) {
        return make_error(errc::unsupported, where,
                          dir + ": no int4 group size (128, 64, 32) divides hidden_size " +
                              std::to_string(H) + ", intermediate_size " + std::to_string(I) +
                              " and heads * head_dim " + std::to_string(q_dim) +
                              "; load with fp32_reference");
      }
    } else {
      const std::size_t g = options.rtn_group_size;
      if (!kernels::is_supported_group_size(g)) {
        return make_error(errc::invalid_argument, where,
                          "options.rtn_group_size: " + std::to_string(g) +
                              " is not supported (32, 64, 128, or 0 for automatic)");
      }
      for (auto [k, name] : {std::pair{H, "hidden_size"}, std::pair{I, "intermediate_size"},
                             std::pair{q_dim, "num_attention_heads * head_dim"}}) {
        if (k % g != 0) {
          return make_error(errc::invalid_argument, where,
                            "options.rtn_group_size: " + std::to_string(g) + " does not divide " +
                                name + " = " + std::to_string(k) + " of " + dir);
        }
      }
      w->rtn_group_size = g;
    }
  }

  detail::WeightLoader ld(*ckpt, c, options, dir);
  // The packed cache, if asked for and valid for this checkpoint and these options.
  std::string packed_path;
  std::uint64_t packed_key = 0;
  std::optional<detail::PackedCacheReader> packed;
  bool packed_writable = true;  // false: the file there is not ours to replace
  if (!options.packed_cache.empty() && !options.fp32_reference) {
    packed_path =
        options.packed_cache == "auto" ? default_packed_cache_path(dir) : options.packed_cache;
    const std::string signature =
        // An int8 lm_head is an entry of its own beside the int4 matrices (written by the first
        // load that converts it), so it shares the as-stored signature.
        std::string("lm_head=") + (options.lm_head == LmHeadFormat::q4 ? "q4" : "as_stored") +
        ";rtn=" + std::to_string(w->rtn_group_size);
    // `auto` names a file of ours by construction; another path may hold someone else's.
    const bool ask_before_replacing =
        options.packed_cache != "auto" && !options.packed_cache_overwrite;
    auto key = detail::packed_source_key(dir, *ckpt, signature);
    if (!key) return key.error();
    packed_key = *key;
    if (::access(packed_path.c_str(), F_OK) != 0) {
      w->packed_cache_note = packed_path + " not found";
    } else if (auto r = detail::PackedCacheReader::open(packed_path, packed_key)) {
      packed.emplace(std::move(*r));
      ld.use_packed_cache(&*packed);
    } else if (auto mine = ask_before_replacing
                               ? detail::check_packed_cache_replaceable(packed_path, packed_key)
                               : io::check_output_path(packed_path, {}, "packed cache");
               !mine) {
      packed_writable = false;
      w->packed_cache_failed = true;
      // Forcing helps only where a regular file stands (io::OutputRule: never a device, FIFO
      // or directory); the refusal of those says so itself.
      const bool force_helps = ask_before_replacing &&
                               io::check_output_path(packed_path, {}, "packed cache").has_value();
      w->packed_cache_note = mine.error().message +
                             (force_helps ? "; not overwritten (LoadOptions::packed_cache_overwrite"
                                            ", or --force on the command line, replaces it)"
                                          : "");
    } else {
      w->packed_cache_note = r.error().message + "; rebuilding it";
    }
  }
  const std::string vec_why = "[hidden_size]";
  {
    auto e = ld.dense_view("model.embed_tokens.weight", V, H, "[vocab_size, hidden_size]");
    if (!e) return e.error();
    w->embed_tokens = std::move(*e);
  }
  {
    auto n = ld.vector_f32("model.norm.weight", H, vec_why);
    if (!n) return n.error();
    w->norm = std::move(*n);
  }

  // Never resized again: the pointers below stay valid. Sized by config.json's num_hidden_layers.
  if (auto st = edgellm::detail::try_resize(w->layers, c.num_hidden_layers, where,
                                            dir + ": layers (num_hidden_layers)");
      !st)
    return st.error();
  // Every int4 matrix with its cache name (the tensor prefix), for writing the packed cache.
  std::vector<std::pair<std::string, const kernels::Q4Matrix*>> int4;
  const bool q4_head = options.lm_head == LmHeadFormat::q4 && !options.fp32_reference;
  const bool q8_head = options.lm_head == LmHeadFormat::int8 && !options.fp32_reference;
  std::uint64_t layer_elements = 0;
  for (const LayerLinear& s : kLayerLinears) layer_elements += std::uint64_t{s.n(c)} * s.k(c);
  const std::uint64_t progress_total = std::uint64_t{c.num_hidden_layers} * layer_elements +
                                       (q4_head || q8_head ? std::uint64_t{V} * H : 0);
  const std::string_view stage = options.fp32_reference ? "loading fp32 reference"
                                 : packed                ? "reading packed cache"
                                 : c.awq                 ? "repacking int4"
                                                         : "quantizing to int4";
  std::uint64_t progress_done = 0;
  const auto advance = [&](std::uint64_t elements) {
    progress_done = std::min(progress_total, progress_done + elements);
    if (options.progress) options.progress(stage, progress_done, progress_total);
  };
  advance(0);
  for (std::size_t i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& L = w->layers[i];
    const std::string pre = "model.layers." + std::to_string(i) + ".";
    for (const LayerNorm& n : kLayerNorms) {
      if (!n.present(c)) continue;
      auto v = ld.vector_f32(pre + std::string(n.name) + ".weight", n.size(c),
                             "[" + std::string(n.dim.name) + "]");
      if (!v) return v.error();
      L.*n.member = std::move(*v);
    }
    for (const LayerLinear& s : kLayerLinears) {
      const std::size_t n = s.n(c), k = s.k(c);
      auto lin = ld.linear(i, s.name, n, k, s.out.name, s.in.name, s.has_bias(c),
                           w->rtn_group_size);
      if (!lin) return lin.error();
      Linear& out = L.*s.member;
      out = std::move(*lin);
      if (out.int4()) int4.emplace_back(pre + std::string(s.name), &out.q4);
      advance(std::uint64_t{n} * k);
    }
  }

  // lm_head: its own tensor, or the embedding when tied (HF ties even if lm_head.weight is
  // also stored).
  const std::string head_name =
      c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  const std::string head_why = "[vocab_size, hidden_size]";
  const std::size_t head_group = largest_group_dividing({H});
  if ((q4_head || q8_head) && head_group == 0) {
    return make_error(errc::unsupported, where,
                      dir + ": lm_head: no int4/int8 group size (128, 64, 32) divides "
                            "hidden_size " + std::to_string(H) + "; use LmHeadFormat::as_stored");
  }
  // Converted heads (not found in the packed cache) read the mapped tensor a block of rows at a
  // time and release the pages read (release_source_pages); a tied embedding's rows are looked
  // up from the mapping later, each lookup releasing what it read.
  if (q8_head) {
    if (auto cached = ld.q8_from_packed_cache("lm_head", V, H, head_group)) {
      w->lm_head.q8 = std::move(*cached);
    } else {
      auto q = ld.dense_q8(head_name, V, H, head_group, head_why);
      if (!q) return q.error();
      w->lm_head.q8 = std::move(*q);
    }
  } else if (q4_head) {
    if (auto cached = ld.from_packed_cache("lm_head", V, H, head_group)) {
      w->lm_head.q4 = std::move(*cached);
    } else {
      auto q = ld.dense_q4(head_name, V, H, head_group, head_why);
      if (!q) return q.error();
      w->lm_head.q4 = std::move(*q);
    }
  } else {
    auto d = options.packed_cache_copy ? ld.dense_copy(head_name, V, H, head_why)
                                       : ld.dense_view(head_name, V, H, head_why);
    if (!d) return d.error();
    w->lm_head.dense = std::move(*d);
  }
  advance(progress_total - progress_done);  // the lm_head's share; ends at done == total

  // Checked last, so that a missing or misshapen tensor is reported as such first.
  if (!options.allow_extra_tensors) {
    if (const std::vector<std::string> extra = unused_tensors(*ckpt, c); !extra.empty()) {
      std::string list;
      for (std::size_t i = 0; i < extra.size() && i < 5; ++i) list += (i ? ", " : "") + extra[i];
      if (extra.size() > 5) list += ", ...";
      return make_error(errc::format_error, where,
                        dir + ": " + std::to_string(extra.size()) +
                            " tensors of the checkpoint are not used by its config.json "
                            "(num_hidden_layers " +
                            std::to_string(c.num_hidden_layers) +
                            "; is it this checkpoint's config?): " + list +
                            " (LoadOptions::allow_extra_tensors or --allow-extra-tensors loads "
                            "it anyway)");
    }
  }
  // Each lookup releases the embedding pages it read, unless the table is the as-stored
  // lm_head too (read whole by every token).
  const bool head_reads_table =
      !w->lm_head.dense.empty() && w->lm_head.dense.data() == w->embed_tokens.data();
  w->embed_tokens.set_file_rows_read_once(options.release_source_pages && !head_reads_table);
  w->released_source_bytes = ld.released();
  detail::gather_int4_matrices(*w, options.int4_arena_min_bytes);
#if defined(__GLIBC__)
  // The conversions' freed buffers (unpacked codes, tens of MB) may sit in glibc's heap below
  // live allocations, resident although free; hand their pages back so the loaded model's
  // resident memory is what it holds (the memory plan, plan.hpp, counts no allocator slack).
  (void)::malloc_trim(0);
#endif
  if (!packed_path.empty() && packed_writable) {
    if (packed && ld.packed_misses() == 0) {
      w->packed_cache_note = std::string(options.packed_cache_copy ? "int4 weights copied from "
                                                                    : "int4 weights mapped from ") +
                             packed_path + (w->lm_head.int8() ? ", the int8 lm_head copied" : "");
    } else {
      std::vector<detail::PackedMatrix> matrices;
      matrices.reserve(int4.size() + 1);
      for (const auto& [name, m] : int4) matrices.push_back(detail::PackedMatrix::of(name, *m));
      if (w->lm_head.int4()) matrices.push_back(detail::PackedMatrix::of("lm_head", w->lm_head.q4));
      if (w->lm_head.int8())
        matrices.push_back(detail::PackedMatrix::of(std::string_view("lm_head"), w->lm_head.q8));
      const status st = detail::write_packed_cache(packed_path, packed_key, matrices);
      if (!w->packed_cache_note.empty()) w->packed_cache_note += "; ";
      w->packed_cache_note += st ? "wrote " + packed_path : st.error().message;
      w->packed_cache_failed = !st;
    }
    // Views into the old mapping (a partial hit) stay valid: keep it even after a rewrite.
    // Copies need no mapping.
    if (packed && !options.packed_cache_copy) w->packed_cache_file.emplace(packed->release_file());
  }
  w->checkpoint.emplace(std::move(*ckpt));
  return std::shared_ptr<const TransformerWeights>(std::move(w));
}

/// The loader above, as applications call it: with the last-resort guard that turns an exception
/// escaping it (an allocation the loader does not check itself) into an error, never an abort.
inline result<std::shared_ptr<const TransformerWeights>> load_weights(
    const std::string& dir, const LoadOptions& options = {}) {
  return edgellm::detail::guard_exceptions(
      detail::WeightLoader::kWhere, [&] { return load_weights_unguarded(dir, options); });
}

}  // namespace edgellm::model
