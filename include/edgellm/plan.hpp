// SPDX-License-Identifier: Apache-2.0
// The memory plan before load: what loading a checkpoint and running sessions over it will
// take (weights mapped and resident, the transient peak of loading, KV cache, scratch), from
// config.json and the safetensors headers alone, and a budget that a load can be held to.
//
//   auto plan = edgellm::plan_memory("models/kjv-target-awq", {.context_size = 2048});
//   if (plan) std::printf("%s\n", edgellm::plan_summary(*plan).c_str());
//
// Every figure comes from the size functions the allocating code itself uses
// (kernels::q4_matrix_bytes, UnpackedQ4::bytes_for, the caches' bytes_for and
// attend_scratch_bytes, Transformer::activation_columns, backend::HostState::rope_table_floats,
// kernels::q8_activation_bytes), walked in the order load_weights() converts tensors. Not
// counted: the process's own baseline (code, libc, thread stacks), allocator overhead, and a
// packed cache assumed valid when its file exists; embedding pages touched by lookups are
// counted apart (embedding_touched). Session::create()'s and Engine::load()'s memory budgets
// (session.hpp) use it.
#pragma once

#include "edgellm/backend/cpu.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/io/checkpoint.hpp"
#include "edgellm/io/meminfo.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/kernels/matmul.hpp"
#include "edgellm/kernels/q4_arena.hpp"
#include "edgellm/kernels/q8_activations.hpp"
#include "edgellm/kernels/q8_matrix.hpp"
#include "edgellm/kernels/quantize.hpp"
#include "edgellm/model/config_json.hpp"
#include "edgellm/model/layer_layout.hpp"
#include "edgellm/model/packed_cache.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/model/weights.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace edgellm {

/// A memory budget: a number of bytes, a fraction of the memory the device has available when
/// it is checked (MemAvailable of /proc/meminfo), or both (the smaller). Neither set: no budget.
struct MemoryBudget {
  std::uint64_t bytes = 0;          ///< > 0: at most this many bytes
  double available_fraction = 0.0;  ///< in (0, 1]: at most this fraction of MemAvailable
  std::string meminfo_path = "/proc/meminfo";  ///< where the available memory is read

  bool enabled() const noexcept { return bytes > 0 || available_fraction > 0.0; }

  /// The on-device default ("phone" on the command lines): 3.8 GiB, what Android leaves one app
  /// of a 6 GB device before its low-memory killer ends it (the mission's Qwen2-7B target), or
  /// 90 % of the memory available now when that is less.
  static MemoryBudget phone() {
    MemoryBudget b;
    b.bytes = std::uint64_t{38} * (std::uint64_t{1} << 30) / 10;
    b.available_fraction = 0.9;
    return b;
  }
};

/// The budget in bytes (0 when none is set). Errors: a fraction outside (0, 1], an unreadable
/// meminfo file.
inline result<std::uint64_t> resolve_budget(const MemoryBudget& b) {
  if (b.available_fraction == 0.0) return b.bytes;
  if (!(b.available_fraction > 0.0 && b.available_fraction <= 1.0)) {
    return make_error(errc::invalid_argument, "resolve_budget",
                      "available_fraction: " + std::to_string(b.available_fraction) +
                          " is not in (0, 1]");
  }
  auto m = io::read_meminfo(b.meminfo_path);
  if (!m) return m.error();
  const auto share =
      static_cast<std::uint64_t>(static_cast<double>(m->available) * b.available_fraction);
  return b.bytes > 0 ? std::min(b.bytes, share) : share;
}

/// Parses a budget as a command line gives it: "BYTES", "NNKiB|MiB|GiB" (also K, M, G: powers
/// of 1024), "NN%" (of the available memory) or "phone" (MemoryBudget::phone()). Errors name
/// the text.
inline result<MemoryBudget> parse_budget(std::string_view s) {
  const auto bad = [&] {
    return make_error(errc::invalid_argument, "parse_budget",
                      "budget '" + std::string(s) + "': expected BYTES, NN[KMG]iB, NN% or phone");
  };
  if (s == "phone") return MemoryBudget::phone();
  std::size_t digits = 0;
  double value = 0.0;
  bool dot = false;
  double scale = 1.0;
  for (; digits < s.size(); ++digits) {
    const char c = s[digits];
    if (c == '.' && !dot) {
      dot = true;
    } else if (c >= '0' && c <= '9') {
      if (dot) scale /= 10.0;
      value = dot ? value + (c - '0') * scale : value * 10.0 + (c - '0');
    } else {
      break;
    }
  }
  if (digits == 0 || (dot && digits == 1)) return bad();
  const std::string_view unit = s.substr(digits);
  MemoryBudget b;
  if (unit == "%") {
    if (!(value > 0.0 && value <= 100.0)) return bad();
    b.available_fraction = value / 100.0;
    return b;
  }
  double mult = 0.0;
  if (unit.empty() || unit == "B") mult = 1.0;
  else if (unit == "K" || unit == "KiB") mult = 1024.0;
  else if (unit == "M" || unit == "MiB") mult = 1024.0 * 1024.0;
  else if (unit == "G" || unit == "GiB") mult = 1024.0 * 1024.0 * 1024.0;
  if (mult == 0.0 || !(value * mult >= 1.0) || value * mult > 1.8e19) return bad();
  b.bytes = static_cast<std::uint64_t>(value * mult);
  return b;
}

/// What a plan is asked about: a load (model::LoadOptions, tokenizer) and `sessions` sessions
/// over it with one KV type, context and batch. session.hpp's plan_memory(dir, EngineOptions,
/// SessionOptions) fills it from the options an app passes to Engine::load / Session::create.
struct PlanOptions {
  model::LoadOptions load{};
  bool lm_head_fallback = true;  ///< as EngineOptions::lm_head_fallback
  bool load_tokenizer = true;    ///< DIR/tokenizer.json is loaded
  /// Threads of the pool the sessions compute on (attention scratch is per thread).
  std::size_t threads = 1;
  cache::KvType kv_type = cache::KvType::int8;
  /// Tokens per session; 0: Session's default (max_position_embeddings, at most 4096, capped at
  /// a sliding_window).
  std::size_t context_size = 0;
  std::size_t max_batch = 64;
  kernels::MatmulPath path = kernels::MatmulPath::fast;
  std::size_t sessions = 1;
  /// Speculative decoding: a draft checkpoint (loaded with draft_load, one draft Transformer per
  /// session), or prompt lookup; draft_tokens: the most drafted tokens per step (k or k_max).
  std::string draft_dir;
  model::LoadOptions draft_load{};
  bool prompt_lookup = false;
  std::size_t draft_tokens = 0;
};

/// The weights of one checkpoint as load_weights() will leave them (bytes).
struct WeightsPlan {
  std::string dir;
  model::ModelConfig config;
  std::string lm_head = "as_stored";  ///< "q4", "int8" or "as_stored" (after lm_head_fallback)
  std::string int4_source;   ///< "checkpoint", "packed cache (mapped)", "packed cache (copied)"
  std::uint64_t files_bytes = 0;    ///< every safetensors file (+ a packed cache) mapped
  /// Owned memory: packed int4 and dense copies, norms, biases (TransformerWeights::owned_bytes).
  std::uint64_t owned_bytes = 0;
  /// Mapped pages resident once decoding runs: an as-stored lm_head (read whole every token),
  /// int4 matrices used in place from a packed cache, a tied embedding quantised for a q4
  /// lm_head (its pages are kept for lookups), dense modules_to_not_convert.
  std::uint64_t mapped_resident_bytes = 0;
  /// Resident at the worst moment of loading: what is converted so far, plus the tensor being
  /// converted (its source pages, the unpacked codes, the new packed copy).
  std::uint64_t load_peak_bytes = 0;
  std::string load_peak_tensor;  ///< the tensor at that moment
  std::uint64_t embedding_bytes = 0;   ///< the stored embedding [vocab][hidden]
  bool embedding_resident = false;     ///< already counted resident (tied lm_head, a copy)
  bool embedding_rows_released = false;  ///< each lookup releases the rows it read
  std::uint64_t resident_bytes() const noexcept { return owned_bytes + mapped_resident_bytes; }
};

/// One session's memory over a model (bytes).
struct SessionPlan {
  std::size_t context_size = 0;
  std::uint64_t kv_cache_bytes = 0;   ///< K and V for the whole context (committed as it fills)
  std::uint64_t activation_bytes = 0;  ///< one chunk's activations and RoPE tables
  std::uint64_t workspace_bytes = 0;   ///< the fast path's quantised activations
  /// Session::bytes() once the context has filled: KV + activations + workspace.
  std::uint64_t model_bytes = 0;
  std::uint64_t attention_scratch_bytes = 0;  ///< grown by attention over a full context
  std::uint64_t logits_bytes = 0;     ///< decoder logits and the sampler's per-token arrays
  std::uint64_t total_bytes() const noexcept {
    return model_bytes + attention_scratch_bytes + logits_bytes;
  }
  std::uint64_t scratch_bytes() const noexcept { return total_bytes() - kv_cache_bytes; }
};

/// The plan: weights (and a draft's), tokenizer, sessions, and the peak.
struct MemoryPlan {
  PlanOptions options;
  WeightsPlan weights;
  bool has_draft = false;
  WeightsPlan draft;
  /// The tokenizer: resident after loading, and the peak while parsing tokenizer.json (the text
  /// and its parsed form, on top of the loaded weights).
  std::uint64_t tokenizer_bytes = 0;
  std::uint64_t tokenizer_load_peak_bytes = 0;
  /// Pages of a mapped embedding that the sessions' tokens touch at most (each distinct token
  /// reads its row); 0 when the embedding is resident anyway (tied to an as-stored lm_head).
  std::uint64_t embedding_touched_bytes = 0;
  SessionPlan session;  ///< one session (its draft Transformer included)
  /// Engine::load: weights (and tokenizer) resident afterwards, and its peak.
  std::uint64_t engine_bytes() const noexcept {
    return weights.resident_bytes() + (has_draft ? draft.resident_bytes() : 0) + tokenizer_bytes;
  }
  std::uint64_t engine_peak_bytes() const noexcept {
    const std::uint64_t draft_b = has_draft ? draft.resident_bytes() : 0;
    return std::max({weights.load_peak_bytes,
                     weights.resident_bytes() + tokenizer_load_peak_bytes,
                     has_draft ? engine_bytes() - draft_b + draft.load_peak_bytes : 0});
  }
  /// Everything resident while every session runs with a full context.
  std::uint64_t steady_bytes() const noexcept {
    return engine_bytes() + embedding_touched_bytes + options.sessions * session.total_bytes();
  }
  /// The most resident memory at any moment: loading, or the sessions at full context.
  std::uint64_t peak_bytes() const noexcept { return std::max(engine_peak_bytes(), steady_bytes()); }
};

namespace plan_detail {

/// Bytes per byte of tokenizer.json for the loaded tokenizer and for its load: the text is read
/// whole (1x) and parsed into vocabulary and merge tables whose strings, hash nodes and vectors
/// take about 4x the text (measured with mallinfo2 on the test tokenizers, tests/plan_test.cpp,
/// which checks the estimate).
inline constexpr std::uint64_t kTokenizerPerFileByte = 5;
inline constexpr std::uint64_t kTokenizerLoadPerFileByte = 6;

// Walks the tensors in load_weights()'s order, keeping the resident total and its peak.
struct LoadWalk {
  std::uint64_t resident = 0, peak = 0;
  std::string peak_tensor;
  void step(std::uint64_t transient, const std::string& tensor) {
    if (resident + transient > peak) {
      peak = resident + transient;
      peak_tensor = tensor;
    }
  }
};

}  // namespace plan_detail

/// Plans load_weights(dir, load) (with Engine's lm_head_fallback): reads config.json and the
/// safetensors headers (the files are mapped for that, and only their header pages read).
/// Errors: those of load_model_config and io::Checkpoint::open, and a missing tensor.
inline result<WeightsPlan> plan_weights(const std::string& dir, const model::LoadOptions& load,
                                        bool lm_head_fallback = true) {
  constexpr std::string_view where = "plan_weights";
  auto cfg = model::load_model_config(dir);
  if (!cfg) return cfg.error();
  auto ckpt = io::Checkpoint::open(dir);
  if (!ckpt) return ckpt.error();
  const model::ModelConfig& c = *cfg;
  WeightsPlan w;
  w.dir = dir;
  w.config = c;
  for (const io::SafetensorsFile& f : ckpt->files()) w.files_bytes += f.mapping().size();
  const auto tensor = [&](const std::string& name) -> result<io::TensorView> {
    auto t = ckpt->find(name);
    if (!t) return make_error(errc::format_error, where, dir + ": missing tensor '" + name + "'");
    return t;
  };
  const bool ref = load.fp32_reference;
  const std::size_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const std::size_t qd = c.q_dim();
  std::size_t rtn = 0;
  if (!c.awq && !ref) {
    rtn = load.rtn_group_size ? load.rtn_group_size
                              : model::largest_group_dividing({H, I, qd});
    if (rtn == 0) {
      return make_error(errc::unsupported, where,
                        dir + ": no int4 group size divides the linears' widths");
    }
  }
  // The packed cache is assumed valid when its file exists (the load checks it).
  bool packed = false;
  std::uint64_t packed_file = 0;
  if (!load.packed_cache.empty() && !ref) {
    const std::string p = load.packed_cache == "auto" ? model::default_packed_cache_path(dir)
                                                      : load.packed_cache;
    std::error_code ec;
    const auto size = std::filesystem::file_size(p, ec);
    if (!ec) {
      packed = true;
      packed_file = size;
    }
  }
  const bool copy = packed && load.packed_cache_copy;
  if (packed && !copy) w.files_bytes += packed_file;
  w.int4_source = !packed ? "checkpoint" : copy ? "packed cache (copied)" : "packed cache (mapped)";

  plan_detail::LoadWalk walk;
  const auto owned = [&](std::uint64_t b) {
    w.owned_bytes += b;
    walk.resident += b;
  };
  const auto mapped = [&](std::uint64_t b) {
    w.mapped_resident_bytes += b;
    walk.resident += b;
  };
  // A stored tensor used in place: an owned copy if it is misaligned (DenseMatrix::view).
  const auto view = [&](const io::TensorView& t, bool resident) {
    if (!t.is_aligned()) owned(t.bytes.size());
    else if (resident) mapped(t.bytes.size());
  };
  // Owned int4 matrices, for the arena they are gathered into (model::detail::
  // gather_int4_matrices): their padded total, count and largest.
  std::uint64_t int4_owned = 0, int4_largest = 0, int4_count = 0;
  // A dense tensor [n][k] of `source` bytes converted a block of rows at a time
  // (model::conversion_block_rows): the source pages of one block resident at once (two
  // partial pages at its ends), the rest released.
  const auto source_block = [&](std::uint64_t source, std::size_t n) -> std::uint64_t {
    if (!load.release_source_pages) return source;
    const std::uint64_t row = source / n;
    const std::uint64_t rows = std::min<std::uint64_t>(n, model::conversion_block_rows(row));
    return std::min(source, rows * row + 2 * io::page_size());
  };
  // An int4 matrix [n][k]: from the packed cache, or converted: an AWQ import holds its source
  // pages, the unpacked codes and the packed copy at once; a dense tensor quantised by RTN
  // (`dense`) one block of source and codes beside the packed copy. The source is released
  // afterwards (release_source_pages). `layer`: a decoder layer's linear, which the arena
  // gathers (model::detail::gather_int4_matrices), unlike the lm_head.
  const auto int4 = [&](const std::string& name, std::uint64_t source, std::size_t n,
                        std::size_t k, std::size_t g, bool dense, bool layer) {
    const std::uint64_t p = kernels::q4_matrix_bytes(n, k, g);
    if ((!packed || copy) && layer) {
      int4_owned += kernels::q4_arena_padded(p);
      int4_largest = std::max(int4_largest, p);
      ++int4_count;
    }
    if (packed) {
      if (copy) {
        walk.step(p, name);
        owned(p);
      } else {
        mapped(p);
        walk.step(0, name);
      }
      return;
    }
    if (dense) {
      const std::size_t rows = std::min(n, model::conversion_block_rows(source / n));
      walk.step(source_block(source, n) + kernels::UnpackedQ4::bytes_for(rows, k, g) + p, name);
    } else {
      walk.step(source + kernels::UnpackedQ4::bytes_for(n, k, g) + p, name);
    }
    owned(p);
    if (!load.release_source_pages) mapped(source);
  };

  {
    auto e = tensor("model.embed_tokens.weight");
    if (!e) return e.error();
    view(*e, false);
    w.embedding_bytes = e->bytes.size();
    w.embedding_resident = !e->is_aligned();
    w.embedding_rows_released = load.release_source_pages;
  }
  owned(H * sizeof(float));  // model.norm.weight
  for (std::size_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string pre = "model.layers." + std::to_string(i) + ".";
    for (const model::LayerNorm& n : model::kLayerNorms)
      if (n.present(c)) owned(n.size(c) * sizeof(float));
    struct Spec {
      std::string_view module;
      std::size_t n, k;
      bool bias;
    };
    for (const model::LayerLinear& row : model::kLayerLinears) {
      const Spec s{row.name, row.n(c), row.k(c), row.has_bias(c)};
      const std::string name = pre + std::string(s.module);
      const bool awq_module = c.awq && c.awq->is_quantized(s.module);
      if (c.awq && c.awq->is_int8(s.module)) {
        // edgellm's int8 extension: copied into a Q8Matrix (or dequantised in reference mode)
        std::uint64_t source = 0;
        for (const char* part : {".qweight", ".scales"}) {
          auto t = tensor(name + part);
          if (!t) return t.error();
          source += t->bytes.size();
        }
        const std::uint64_t dense = std::uint64_t{s.n} * s.k * sizeof(float);
        const std::uint64_t q = ref ? 2 * dense : kernels::q8_matrix_bytes(s.n, s.k, c.awq->group_size);
        walk.step(source + q, name);
        owned(ref ? dense : q);
        if (!load.release_source_pages) mapped(source);
      } else if (awq_module) {
        std::uint64_t source = 0;
        for (const char* part : {".qweight", ".qzeros", ".scales"}) {
          auto t = tensor(name + part);
          if (!t) return t.error();
          source += t->bytes.size();
        }
        const std::size_t g = c.awq->group_size;
        if (ref) {
          const std::uint64_t dense = std::uint64_t{s.n} * s.k * sizeof(float);
          // unpacked codes, the fp32 values and the DenseMatrix copy of them
          walk.step(source + kernels::UnpackedQ4::bytes_for(s.n, s.k, g) + 2 * dense, name);
          owned(dense);
          if (!load.release_source_pages) mapped(source);
        } else {
          int4(name, source, s.n, s.k, g, false, true);
        }
      } else {
        auto t = tensor(name + ".weight");
        if (!t) return t.error();
        const std::uint64_t source = t->bytes.size();
        if (ref) {
          const std::uint64_t dense = std::uint64_t{s.n} * s.k * sizeof(float);
          walk.step(source + 2 * dense, name);
          owned(dense);
          if (!load.release_source_pages) mapped(source);
        } else if (c.awq) {
          view(*t, true);  // modules_to_not_convert: dense, as stored
        } else {
          int4(name, source, s.n, s.k, rtn, true, true);
        }
      }
      if (s.bias) owned(s.n * sizeof(float));
    }
  }
  const std::string head_name =
      c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  auto head = tensor(head_name);
  if (!head) return head.error();
  std::size_t head_group = 0;
  const bool head_int8 = load.lm_head == model::LmHeadFormat::int8;
  if (load.lm_head != model::LmHeadFormat::as_stored && !ref) {
    head_group = model::largest_group_dividing({H});
    if (head_group == 0 && !lm_head_fallback) {
      return make_error(errc::unsupported, where,
                        dir + ": lm_head: no int4/int8 group size divides hidden_size " +
                            std::to_string(H));
    }
  }
  // A tied as-stored lm_head is the embedding, read whole by every token; a converted one
  // releases the pages it read, unless release_source_pages is off.
  const bool head_copy = head_group == 0 && load.packed_cache_copy && !load.packed_cache.empty() && !ref;
  const bool head_converted = head_group != 0 && !packed;
  if (c.tie_word_embeddings)
    w.embedding_resident = w.embedding_resident ||
                           (head_group == 0 ? !head_copy
                                            : head_converted && !load.release_source_pages);
  if (head_group != 0 && head_int8) {
    // Copied from the packed cache (a 1 MiB piece of it mapped at a time), or quantised from
    // the mapped tensor a block of rows at a time.
    w.lm_head = "int8";
    const std::uint64_t q = kernels::q8_matrix_bytes(V, H, head_group);
    if (packed) {
      walk.step(q + (std::uint64_t{1} << 20), "lm_head");
    } else {
      walk.step(source_block(head->bytes.size(), V) + q, "lm_head");
      if (!load.release_source_pages) mapped(head->bytes.size());
    }
    owned(q);
  } else if (head_group != 0) {
    w.lm_head = "q4";
    int4("lm_head", head->bytes.size(), V, H, head_group, true, false);
  } else if (head_copy) {
    walk.step(2 * head->bytes.size(), head_name);  // the copy while its source is resident
    owned(head->bytes.size());
  } else {
    view(*head, true);  // read whole by every token's logits
  }
  // The gather copies one matrix at a time into the arena and frees it; 2 MiB pages fault in
  // whole, so up to one more page is resident than the copied bytes.
  if (kernels::q4_arena_gathers(int4_count, int4_owned, load.int4_arena_min_bytes))
    walk.step(int4_largest + (std::uint64_t{2} << 20), "(int4 arena)");
  walk.step(0, "(loaded)");
  w.load_peak_bytes = walk.peak;
  w.load_peak_tensor = walk.peak_tensor;
  return w;
}

/// Plans one session over weights planned by plan_weights (the draft's too, or null), with the
/// context resolved as Session::create resolves it. Pure arithmetic: no I/O.
inline SessionPlan plan_session(const WeightsPlan& w, const WeightsPlan* draft,
                                const PlanOptions& o) {
  const model::ModelConfig& c = w.config;
  std::size_t ctx = o.context_size;
  if (ctx == 0) {
    ctx = std::min<std::size_t>(c.max_position_embeddings, 4096);
    if (c.sliding_window) ctx = std::min(ctx, *c.sliding_window);
  }
  SessionPlan s;
  s.context_size = ctx;
  const std::size_t threads = std::max<std::size_t>(o.threads, 1);
  const auto one = [&](const WeightsPlan& wp) {
    const model::ModelConfig& m = wp.config;
    const std::uint64_t kv = cache::with_kv_type(o.kv_type, [&](auto tag) {
      using Cache = typename decltype(tag)::type;
      return static_cast<std::uint64_t>(
          Cache::bytes_for(m.num_hidden_layers, m.num_key_value_heads, m.head_dim, ctx));
    });
    s.kv_cache_bytes += kv;
    std::uint64_t cols = 0;
    for (std::size_t w_ : model::Transformer<>::activation_columns(m)) cols += w_;
    backend::ModelShape shape;
    shape.head_dim = m.head_dim;
    shape.max_batch = o.max_batch;
    const std::uint64_t act =
        (cols * o.max_batch + backend::HostState::rope_table_floats(shape)) * sizeof(float);
    s.activation_bytes += act;
    // The fast path quantises a linear's input rows: the widest int4 input sizes the workspace.
    std::uint64_t ws = 0;
    if (o.path == kernels::MatmulPath::fast && !o.load.fp32_reference) {
      const std::size_t g = m.awq ? m.awq->group_size
                                  : (o.load.rtn_group_size ? o.load.rtn_group_size
                                                           : model::largest_group_dividing(
                                                                 {m.hidden_size,
                                                                  m.intermediate_size, m.q_dim()}));
      for (std::size_t k : {m.hidden_size, m.q_dim(), m.intermediate_size})
        if (g != 0) ws = std::max<std::uint64_t>(ws, kernels::q8_activation_bytes(o.max_batch, k, g));
      if (wp.lm_head == "q4" || wp.lm_head == "int8") {
        const std::size_t hg = model::largest_group_dividing({m.hidden_size});
        ws = std::max<std::uint64_t>(ws, kernels::q8_activation_bytes(o.max_batch, m.hidden_size, hg));
      }
    }
    s.workspace_bytes += ws;
    s.model_bytes += kv + act + ws;
    s.attention_scratch_bytes += cache::KVCacheF32::attend_scratch_bytes(
        m.num_attention_heads, m.num_key_value_heads, m.head_dim, ctx, o.max_batch, threads);
  };
  one(w);
  if (draft != nullptr) one(*draft);
  // Logits: the decoder's [V] row (a speculative decoder's (k + 1) target rows, a draft row and
  // a [V] double scratch); the sampler's [V] scores, candidate ids, penalty marks and the kept
  // distribution (ids and double probabilities).
  const std::uint64_t V = c.vocab_size;
  const bool spec = draft != nullptr || o.prompt_lookup;
  const std::uint64_t rows = spec ? o.draft_tokens + 2 : 1;
  s.logits_bytes = rows * V * sizeof(float) + (spec ? V * sizeof(double) : 0) +
                   V * (sizeof(float) + 2 * sizeof(std::int32_t) + 1 + sizeof(double));
  return s;
}

/// Bytes of embedding pages that p's sessions may touch: one row per token held, each row
/// over row_bytes / page + 1 pages at most, up to the whole embedding (draft's included); when
/// each lookup releases what it read, the fault-around windows of one row per session.
inline std::uint64_t embedding_touched(const MemoryPlan& p) {
  const std::uint64_t page = io::page_size();
  const auto one = [&](const WeightsPlan& w) -> std::uint64_t {
    if (w.embedding_resident || w.config.vocab_size == 0) return 0;
    const std::uint64_t row = w.embedding_bytes / w.config.vocab_size;
    if (w.embedding_rows_released) {
      const std::uint64_t window = io::kFaultAroundBytes;
      return std::min(w.embedding_bytes,
                      p.options.sessions * ((row + window - 1) / window + 1) * window);
    }
    const std::uint64_t rows =
        std::min<std::uint64_t>(w.config.vocab_size, p.options.sessions * p.session.context_size);
    return std::min(w.embedding_bytes, rows * (row / page + 1) * page);
  };
  return one(p.weights) + (p.has_draft ? one(p.draft) : 0);
}

/// `p` replanned for other session options (KV type, context, batch): the weights as planned,
/// so pure arithmetic, the same figures plan_memory(dir, o) gives when o's load is p's.
inline MemoryPlan with_session_options(MemoryPlan p, const PlanOptions& o) {
  p.options = o;
  p.session = plan_session(p.weights, p.has_draft ? &p.draft : nullptr, o);
  p.embedding_touched_bytes = embedding_touched(p);
  return p;
}

/// The plan for `dir` with `o`: weights (plan_weights), a draft's, the tokenizer (from the size
/// of tokenizer.json), and o.sessions sessions (plan_session). Nothing large is allocated and
/// no weight is read. Errors: plan_weights's, a missing tokenizer.json when it is to be loaded,
/// sessions == 0 or max_batch == 0.
inline result<MemoryPlan> plan_memory(const std::string& dir, const PlanOptions& o = {}) {
  constexpr std::string_view where = "plan_memory";
  if (o.sessions == 0) return make_error(errc::invalid_argument, where, "sessions: must be positive");
  if (o.max_batch == 0) return make_error(errc::invalid_argument, where, "max_batch: must be positive");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return make_error(errc::io_error, where, "'" + dir + "' is not a directory");
  MemoryPlan p;
  p.options = o;
  auto w = plan_weights(dir, o.load, o.lm_head_fallback);
  if (!w) return w.error();
  p.weights = std::move(*w);
  if (!o.draft_dir.empty()) {
    auto d = plan_weights(o.draft_dir, o.draft_load, true);
    if (!d) return d.error();
    p.draft = std::move(*d);
    p.has_draft = true;
  }
  if (o.load_tokenizer) {
    const std::string tok = (std::filesystem::path(dir) / "tokenizer.json").string();
    const auto size = std::filesystem::file_size(tok, ec);
    if (ec) {
      return make_error(errc::io_error, where,
                        "'" + tok + "': " + ec.message() + " (plan with load_tokenizer = false)");
    }
    p.tokenizer_bytes = size * plan_detail::kTokenizerPerFileByte;
    p.tokenizer_load_peak_bytes = size * plan_detail::kTokenizerLoadPerFileByte;
  }
  return with_session_options(std::move(p), o);
}

/// "1234.5 MiB"
inline std::string mib(std::uint64_t bytes) {
  const auto tenths = (bytes * 10 + (std::uint64_t{1} << 19)) >> 20;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " MiB";
}

/// "needs X MiB (weights A, KV B for N tokens int8, scratch C)": one line for messages.
inline std::string plan_summary(const MemoryPlan& p) {
  const std::uint64_t weights = p.weights.resident_bytes() + (p.has_draft ? p.draft.resident_bytes() : 0);
  const std::uint64_t n = p.options.sessions;
  std::string s = "needs " + mib(p.peak_bytes()) + " (weights " + mib(weights);
  if (p.tokenizer_bytes) s += ", tokenizer " + mib(p.tokenizer_bytes);
  s += ", KV " + mib(n * p.session.kv_cache_bytes) + " for " +
       std::to_string(p.session.context_size) + " tokens " + cache::kv_type_name(p.options.kv_type);
  if (n > 1) s += " x " + std::to_string(n) + " sessions";
  s += ", scratch " + mib(n * p.session.scratch_bytes());
  if (p.engine_peak_bytes() > p.steady_bytes())
    s += "; loading peaks at " + mib(p.engine_peak_bytes()) + " at " + p.weights.load_peak_tensor;
  return s + ")";
}

/// The decision under a budget: fits, fits with a smaller context, or does not fit.
struct BudgetDecision {
  std::uint64_t budget_bytes = 0;  ///< 0: no budget
  bool fits = true;
  std::size_t context_size = 0;  ///< the planned context, or the largest that fits when shrunk
  bool shrunk = false;
  std::string message;  ///< why it does not fit, or that the context was shrunk
};

/// The largest context in [1, most] for which fits(context) holds (memory grows with the
/// context, so fits is monotone); 0 when even one token does not fit.
template <class Fits>
std::size_t largest_context_where(std::size_t most, const Fits& fits) {
  if (most == 0 || fits(most)) return most;
  std::size_t lo = 0, hi = most;  // fits(lo) or lo == 0; !fits(hi)
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

/// The largest context in [1, p.session.context_size] whose plan (p's weights, tokenizer and
/// sessions) peaks at most `budget`; 0 when even one token does not fit.
inline std::size_t largest_context_within(const MemoryPlan& p, std::uint64_t budget) {
  PlanOptions o = p.options;
  return largest_context_where(p.session.context_size, [&](std::size_t ctx) {
    o.context_size = ctx;
    return with_session_options(p, o).peak_bytes() <= budget;
  });
}

/// Checks plan `p` against `budget` bytes (0: none): fits, or with `shrink_context` the largest
/// context that fits, or a refusal whose message says what is needed and the budget.
inline BudgetDecision decide_budget(const MemoryPlan& p, std::uint64_t budget, bool shrink_context) {
  BudgetDecision d;
  d.budget_bytes = budget;
  d.context_size = p.session.context_size;
  if (budget == 0 || p.peak_bytes() <= budget) return d;
  if (shrink_context) {
    if (const std::size_t ctx = largest_context_within(p, budget); ctx > 0) {
      d.context_size = ctx;
      d.shrunk = true;
      d.message = "context shrunk from " + std::to_string(p.session.context_size) + " to " +
                  std::to_string(ctx) + " tokens to fit the budget of " + mib(budget);
      return d;
    }
  }
  d.fits = false;
  d.message = plan_summary(p) + ", budget " + mib(budget);
  return d;
}

/// What choose_within_budget may change: what the app (or the user's flags) left open.
struct BudgetFreedom {
  bool lm_head = true;   ///< the lm_head's format
  bool kv_type = true;   ///< the KV cache's type, only ever narrower
  bool context = true;   ///< the context, only ever shorter
  std::size_t min_context = 256;  ///< the shortest context it settles for (or the asked one)
};

/// Settings chosen to fit a budget: the options to load and create sessions with, their plan,
/// and what was changed and why.
struct BudgetChoice {
  PlanOptions options;
  MemoryPlan plan;
  std::string note;  ///< "" when the settings fit as given
};

/// Chooses settings for `dir` whose plan peaks at most `budget` bytes, starting from `o` and
/// changing only what `may` leaves open, in this order, each step only when the ones before it
/// do not fit:
///   1. the lm_head: int8 (near-lossless), then f16 as stored (exact, mapped, read every
///      token), then int4 (the smallest, with quantisation error): the first that fits; when
///      none fits alone, the first (the one asked included, before the others) with which the
///      steps below reach the budget, or else the one with the lowest peak;
///   2. the KV cache: f16, then int8, then int4, never wider than asked: the first that fits,
///      or the narrowest (int4 costs +0.07 % perplexity on the bundled model at 2048-token
///      windows, int8 +0.01 %: docs/performance.md);
///   3. the context: the longest that fits, at least may.min_context (or the context asked,
///      when shorter).
/// Errors: plan_memory's; errc::out_of_memory when nothing fits, with the smallest plan it
/// found and the budget.
inline result<BudgetChoice> choose_within_budget(const std::string& dir, const PlanOptions& o,
                                                 std::uint64_t budget,
                                                 const BudgetFreedom& may = {}) {
  constexpr std::string_view where = "choose_within_budget";
  if (budget == 0) return make_error(errc::invalid_argument, where, "budget: 0 bytes");
  const auto fits = [&](const MemoryPlan& p) { return p.peak_bytes() <= budget; };
  // One change made: what, and the peak before and after.
  const auto step = [](std::string& steps, const std::string& what, const MemoryPlan& from,
                       const MemoryPlan& to) {
    if (!steps.empty()) steps += "; ";
    steps += what + " (peak " + mib(from.peak_bytes()) + " -> " + mib(to.peak_bytes()) + ")";
  };
  // Steps 2 and 3 applied to c, the weights as planned there (pure arithmetic).
  const auto narrow = [&](BudgetChoice& c, std::string& steps) {
    if (!fits(c.plan) && may.kv_type) {
      // Bits per stored value, the order of narrowing.
      const auto bits = [](cache::KvType t) {
        return t == cache::KvType::f32 ? 32 : t == cache::KvType::f16 ? 16 : t == cache::KvType::int8 ? 8 : 4;
      };
      std::optional<std::pair<PlanOptions, MemoryPlan>> best;
      for (const auto t : {cache::KvType::f16, cache::KvType::int8, cache::KvType::int4}) {
        if (bits(t) >= bits(o.kv_type)) continue;
        PlanOptions x = c.options;
        x.kv_type = t;
        MemoryPlan p = with_session_options(c.plan, x);
        const bool good = fits(p);
        if (good || !best || p.peak_bytes() < best->second.peak_bytes())
          best.emplace(std::move(x), std::move(p));
        if (good) break;
      }
      if (best && best->second.peak_bytes() < c.plan.peak_bytes()) {
        step(steps, std::string("KV ") + cache::kv_type_name(c.options.kv_type) + " -> " +
                        cache::kv_type_name(best->first.kv_type),
             c.plan, best->second);
        c.options = std::move(best->first);
        c.plan = std::move(best->second);
      }
    }
    if (!fits(c.plan) && may.context) {
      const std::size_t asked = c.plan.session.context_size;
      const std::size_t ctx = largest_context_within(c.plan, budget);
      if (ctx > 0 && ctx >= std::min(may.min_context, asked)) {
        PlanOptions x = c.options;
        x.context_size = ctx;
        MemoryPlan p = with_session_options(c.plan, x);
        step(steps, "context " + std::to_string(asked) + " -> " + std::to_string(ctx) + " tokens",
             c.plan, p);
        c.options = std::move(x);
        c.plan = std::move(p);
      }
    }
  };
  BudgetChoice c;
  c.options = o;
  auto first = plan_memory(dir, o);
  if (!first) return first.error();
  c.plan = std::move(*first);
  std::string steps;
  if (!fits(c.plan) && may.lm_head) {
    // The asked lm_head first, then the others in the order of step 1, each planned.
    std::vector<BudgetChoice> heads;
    heads.push_back(c);
    for (const auto f : {model::LmHeadFormat::int8, model::LmHeadFormat::as_stored,
                         model::LmHeadFormat::q4}) {
      if (f == o.load.lm_head) continue;
      BudgetChoice h;
      h.options = o;
      h.options.load.lm_head = f;
      auto p = plan_memory(dir, h.options);
      if (!p) return p.error();
      h.plan = std::move(*p);
      heads.push_back(std::move(h));
    }
    // The first that fits alone; else the first that fits after steps 2 and 3; else the
    // lowest peak.
    std::size_t pick = heads.size();
    for (std::size_t i = 1; i < heads.size() && pick == heads.size(); ++i)
      if (fits(heads[i].plan)) pick = i;
    for (std::size_t i = 0; i < heads.size() && pick == heads.size(); ++i) {
      BudgetChoice t = heads[i];
      std::string ignored;
      narrow(t, ignored);
      if (fits(t.plan)) pick = i;
    }
    if (pick == heads.size()) {
      pick = 0;
      for (std::size_t i = 1; i < heads.size(); ++i)
        if (heads[i].plan.peak_bytes() < heads[pick].plan.peak_bytes()) pick = i;
    }
    if (pick != 0) {
      step(steps,
           std::string("lm_head ") + model::lm_head_format_name(o.load.lm_head) + " -> " +
               model::lm_head_format_name(heads[pick].options.load.lm_head),
           c.plan, heads[pick].plan);
      c = std::move(heads[pick]);
    }
  }
  narrow(c, steps);
  if (!fits(c.plan)) {
    const std::string floor =
        may.context ? " (the context no shorter than " +
                          std::to_string(std::min(may.min_context, c.plan.session.context_size)) +
                          " tokens)"
                    : "";
    return make_error(errc::out_of_memory, where,
                      dir + ": nothing fits the budget of " + mib(budget) + floor +
                          "; the least found " + plan_summary(c.plan) +
                          (steps.empty() ? "" : " after " + steps));
  }
  if (!steps.empty()) c.note = "to fit the budget of " + mib(budget) + ": " + steps;
  return c;
}

}  // namespace edgellm
