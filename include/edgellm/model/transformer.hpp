// SPDX-License-Identifier: Apache-2.0
// The Llama / Qwen2 / Qwen3 / Mistral decoder forward pass over shared, read-only weights and a
// per-instance KV cache, computed by a backend (backend/backend.hpp); satisfies decode::Model.
#pragma once

#include "edgellm/backend/backend.hpp"
#include "edgellm/backend/cpu.hpp"
#include "edgellm/backend/profile.hpp"
#include "edgellm/cache/kv_cache.hpp"
#include "edgellm/cache/prefix_blob.hpp"
#include "edgellm/config.hpp"
#include "edgellm/detail/bytes.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/kernels/matmul.hpp"
#include "edgellm/model/config.hpp"
#include "edgellm/model/layer_layout.hpp"
#include "edgellm/model/logits_mode.hpp"
#include "edgellm/model/weights.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace edgellm::model {

/// Options of Transformer::create().
struct TransformerOptions {
  /// Most tokens the instance holds (its KV cache capacity). 0: max_position_embeddings, capped
  /// at Mistral's sliding_window. Larger than sliding_window is refused (edgellm does not
  /// implement windowed attention; within the window it is the same as full attention).
  std::size_t context_size = 0;
  /// Most tokens run through the layers at once; sizes the scratch buffers. Longer forward()
  /// calls are processed in consecutive chunks of this many tokens (same result up to rounding).
  std::size_t max_batch = 64;
  /// Threads for matmuls and attention (the host's pool, may be shared); null: calling thread.
  ThreadPool* pool = nullptr;
  /// Arithmetic of the int4 matmuls: fast (W4A8, the default) or exact (fp32 dequantise + FMA).
  /// Dense matrices (fp32 reference mode, modules_to_not_convert, as-stored lm_head) are always
  /// multiplied in fp32.
  kernels::MatmulPath path = kernels::MatmulPath::fast;
  /// Microkernel family for the fast path (best: chosen from the running CPU).
  kernels::Isa isa = kernels::Isa::best;
  /// Per-op time, calls and fork-joins of every chunk this instance runs are added here
  /// (backend::Options::profile); null (the default): no timing. Must outlive the instance.
  backend::Profile* profile = nullptr;
};

/// A decoder-only transformer (HF LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM /
/// MistralForCausalLM semantics, docs/formats.md 3.3) over weights shared with other instances,
/// with its own KV cache of type Cache (any cache::KVCache: KVCacheF32 by default, KVCacheF16,
/// KVCacheQ8).
///
/// forward() per chunk of T tokens at positions p0 .. p0 + T - 1 (all fp32):
///   x = embed_tokens[ids]                                                  [T][hidden]
///   per layer: n = rmsnorm(x) * input_layernorm
///              q, k, v = n Wq^T (+bq), n Wk^T (+bk), n Wv^T (+bv)          gemv if T == 1
///              (Qwen3: each head of q and k = rmsnorm(head) * q_norm / k_norm)
///              q, k = rope(q), rope(k)   (rotate_half pairs (i, i + d/2); angle = pos *
///                                         inv_freq[i] in fp32, inv_freq = rope_inv_freq(cfg))
///              cache.append(k, v); a = cache.attend(q)   (causal GQA softmax attention)
///              x += a Wo^T (+bo)
///              n = rmsnorm(x) * post_attention_layernorm
///              x += (silu(n Wg^T) * (n Wu^T)) Wd^T
///   logits = (rmsnorm(x) * norm) lm_head^T, for the rows the LogitsMode asks for
/// rmsnorm(x) = x / sqrt(mean(x^2) + eps) (mean of squares accumulated in double, in 8 partial
/// sums, then fp32).
///
/// Thread safety: an instance is used by one thread at a time; any number of instances may share
/// one TransformerWeights and run concurrently on different threads (weights are read-only;
/// each instance owns its cache, scratch and matmul workspace). Instances sharing a ThreadPool
/// take turns on it (its run() serialises callers).
/// Memory per instance: the cache (cache.bytes(); KVCacheF32/F16 commit pages as positions are
/// appended) plus max_batch * (3 hidden + 2 (heads + kv_heads) head_dim + 2 intermediate +
/// head_dim) floats of scratch and the fast path's quantised activations.
///
/// Backend: where the ops run (backend::ComputeBackend; backend::Cpu by default, backend::Scalar
/// for the scalar oracle). The Transformer only sequences the ops of a chunk between
/// backend.begin() and backend.finish(); a backend that records them submits once per chunk.
template <cache::KVStore Cache = cache::KVCacheF32, class Backend = backend::Cpu>
  requires backend::ComputeBackend<Backend, Cache>
class Transformer {
 public:
  using cache_type = Cache;
  using backend_type = Backend;

  /// An instance over `weights` with an empty cache, both made here (a host cache and a host
  /// backend). Errors: null weights, context_size or max_batch out of range (context_size above
  /// Mistral's sliding_window included).
  static result<Transformer> create(std::shared_ptr<const TransformerWeights> weights,
                                    const TransformerOptions& options = {})
    requires cache::KVCache<Cache> && backend::HostBackend<Backend, Cache>
  {
    auto ctx = check_options("Transformer::create", weights.get(), options);
    if (!ctx) return ctx.error();
    const ModelConfig& c = weights->config;
    auto cache = Cache::create(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, *ctx);
    if (!cache) return cache.error();
    auto b = Backend::create(
        model_shape(c, options.max_batch),
        backend::Options{options.pool, options.path, options.isa, options.profile});
    if (!b) return b.error();
    return assemble(std::move(weights), options, std::move(*cache), std::move(*b));
  }

  /// An instance over `weights` with a cache and a backend the caller made: a device backend
  /// and its device-resident cache (made with model_shape() and checked_context()). The cache
  /// must be empty and of the model's shape, with capacity for the context (options'
  /// context_size, or the cache's capacity when it is 0). Errors name what does not match.
  static result<Transformer> assemble(std::shared_ptr<const TransformerWeights> weights,
                                      const TransformerOptions& options, Cache cache,
                                      Backend backend) {
    constexpr std::string_view where = "Transformer::assemble";
    TransformerOptions resolved = options;
    if (resolved.context_size == 0 && weights) resolved.context_size = cache.capacity();
    auto ctx = check_options(where, weights.get(), resolved);
    if (!ctx) return ctx.error();
    const ModelConfig& c = weights->config;
    if (cache.layers() != c.num_hidden_layers || cache.kv_heads() != c.num_key_value_heads ||
        cache.head_dim() != c.head_dim) {
      return make_error(errc::shape_mismatch, where,
                        "cache: " + std::to_string(cache.layers()) + " layers x " +
                            std::to_string(cache.kv_heads()) + " kv heads x " +
                            std::to_string(cache.head_dim()) + " for a model of " +
                            std::to_string(c.num_hidden_layers) + " x " +
                            std::to_string(c.num_key_value_heads) + " x " +
                            std::to_string(c.head_dim));
    }
    if (cache.capacity() < *ctx || cache.length() != 0) {
      return make_error(errc::invalid_argument, where,
                        "cache: capacity " + std::to_string(cache.capacity()) + ", length " +
                            std::to_string(cache.length()) +
                            "; need an empty cache of at least the context size " +
                            std::to_string(*ctx));
    }
    Transformer t(std::move(weights), options, std::move(cache), std::move(backend));
    t.options_.context_size = *ctx;
    if (auto st = t.upload(); !st) return st.error();
    t.fingerprint_ = fingerprint(*t.weights_, options.path);
    return t;
  }

  /// The sizes a backend instance for `c` needs (backend::ModelShape), max_batch rows a chunk.
  static backend::ModelShape model_shape(const ModelConfig& c, std::size_t max_batch) {
    backend::ModelShape shape;
    shape.hidden = c.hidden_size;
    shape.intermediate = c.intermediate_size;
    shape.heads = c.num_attention_heads;
    shape.kv_heads = c.num_key_value_heads;
    shape.head_dim = c.head_dim;
    shape.vocab = c.vocab_size;
    shape.max_batch = max_batch;
    shape.rms_norm_eps = static_cast<float>(c.rms_norm_eps);
    shape.rope_inv_freq = rope_inv_freq(c);
    return shape;
  }

  /// The context size `options` give for `weights` (0: the model's maximum, capped by a sliding
  /// window), after the checks create() makes: what a caller sizes its own cache with.
  static result<std::size_t> checked_context(const TransformerWeights& weights,
                                             const TransformerOptions& options) {
    return check_options("Transformer::checked_context", &weights, options);
  }

 private:
  static result<std::size_t> check_options(std::string_view where,
                                           const TransformerWeights* weights,
                                           const TransformerOptions& options) {
    if (!weights) return make_error(errc::invalid_argument, where, "weights: null");
    const ModelConfig& c = weights->config;
    std::size_t ctx = options.context_size;
    if (ctx == 0) {
      ctx = c.max_position_embeddings;
      if (c.sliding_window) ctx = std::min(ctx, *c.sliding_window);
    }
    if (c.sliding_window && ctx > *c.sliding_window) {
      return make_error(errc::unsupported, where,
                        "context_size: " + std::to_string(ctx) + " exceeds the sliding_window " +
                            std::to_string(*c.sliding_window) + " of " + weights->dir +
                            " (sliding-window attention is not implemented)");
    }
    if (ctx > (std::size_t{1} << 24)) {
      // Positions are converted to fp32 for RoPE, exactly only up to 2^24.
      return make_error(errc::invalid_argument, where,
                        "context_size: " + std::to_string(ctx) + " is larger than 2^24");
    }
    if (options.max_batch == 0 || options.max_batch > 65536) {
      return make_error(
          errc::invalid_argument, where,
          "max_batch: " + std::to_string(options.max_batch) + " is not in [1, 65536]");
    }
    if (options.path == kernels::MatmulPath::fast && !kernels::isa_supported(options.isa)) {
      return make_error(errc::unsupported, where,
                        std::string("isa: ") + kernels::isa_name(options.isa) +
                            " is not supported by this CPU/build");
    }
    return ctx;
  }

 public:
  Transformer(Transformer&&) noexcept = default;
  Transformer& operator=(Transformer&&) noexcept = default;

  /// decode::Model: rows of the output distribution (config vocab_size).
  std::size_t vocab_size() const noexcept { return weights_->config.vocab_size; }
  /// decode::Model: tokens consumed so far.
  std::size_t position() const noexcept { return cache_.length(); }
  /// decode::Model: most tokens this instance can hold.
  std::size_t context_size() const noexcept { return options_.context_size; }

  /// decode::Model::forward (see decode::Model for the contract). Errors, checked before any
  /// work: empty `tokens`, a token id outside [0, vocab_size()) (the message names the index and
  /// the id), position() + tokens.size() > context_size(), `logits` shorter than
  /// logits_count(mode, tokens.size(), vocab_size()). On any error the state is
  /// unchanged.
  status forward(std::span<const std::int32_t> tokens, LogitsMode mode,
                 std::span<float> logits) {
    constexpr std::string_view where = "Transformer::forward";
    const std::size_t V = vocab_size();
    if (tokens.empty()) return make_error(errc::invalid_argument, where, "tokens: empty");
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= V) {
        return make_error(errc::out_of_range, where,
                          "tokens[" + std::to_string(i) + "]: id " + std::to_string(tokens[i]) +
                              " is outside the vocabulary [0, " + std::to_string(V) + ")");
      }
    }
    const std::size_t p0 = position();
    if (tokens.size() > context_size() - p0) {
      return make_error(errc::capacity_exceeded, where,
                        "position " + std::to_string(p0) + " + " + std::to_string(tokens.size()) +
                            " tokens exceeds the context size " + std::to_string(context_size()));
    }
    const std::size_t need = logits_count(mode, tokens.size(), V);
    if (logits.size() < need) {
      return make_error(
          errc::invalid_argument, where,
          "logits: size " + std::to_string(logits.size()) + ", need " + std::to_string(need) +
              (mode == LogitsMode::all ? " (tokens * vocab_size)" : " (vocab_size)"));
    }
    const std::size_t B = options_.max_batch;
    for (std::size_t off = 0; off < tokens.size(); off += B) {
      const std::size_t T = std::min(B, tokens.size() - off);
      const bool last_chunk = off + T == tokens.size();
      float* out = nullptr;
      std::size_t first_row = 0, rows = 0;
      if (mode == LogitsMode::all) {
        out = logits.data() + off * V;
        rows = T;
      } else if (last_chunk) {
        out = logits.data();
        first_row = T - 1;
        rows = 1;
      }
      if (auto st = run_chunk(tokens.subspan(off, T), first_row, rows, out); !st) {
        // Only an internal failure gets here (arguments were checked): roll back.
        (void)cache_.truncate(p0);
        return st;
      }
    }
    return {};
  }

  /// decode::Model::truncate: forget every token after the first n (n <= position()).
  status truncate(std::size_t n) {
    if (n > position()) {
      return make_error(
          errc::out_of_range, "Transformer::truncate",
          "n: " + std::to_string(n) + " is greater than position " + std::to_string(position()));
    }
    return cache_.truncate(n);
  }

  /// Prefix cache: writes the KV state of the first n tokens (n <= position()) into `out` as a
  /// blob tagged with model_fingerprint() (format: cache/prefix_blob.hpp).
  status save_prefix(std::size_t n, std::vector<std::byte>& out) const
    requires cache::PrefixKVCache<Cache>
  {
    return cache_.export_prefix(n, fingerprint_, out);
  }

  /// Restores a blob from save_prefix() of an instance with the same model_fingerprint() and
  /// KV type: position() becomes its length n, and forwarding the tokens that followed gives
  /// the same logits, bit for bit, as in the instance that saved it. A blob from another model
  /// or settings, another KV type, or a corrupted or truncated one is refused with an error
  /// naming what differs (cache::PrefixKVCache); the state is then unchanged.
  status load_prefix(std::span<const std::byte> blob)
    requires cache::PrefixKVCache<Cache>
  {
    return cache_.import_prefix(blob, fingerprint_);
  }

  /// save_prefix() to a file (written to path.tmp, then renamed). Errors name the file.
  status save_prefix_file(std::size_t n, const std::string& path) const
    requires cache::PrefixKVCache<Cache>
  {
    std::vector<std::byte> blob;
    if (auto st = save_prefix(n, blob); !st) return st;
    return cache::write_prefix_file(path, blob);
  }

  /// load_prefix() from a file written by save_prefix_file(). Errors name the file.
  status load_prefix_file(const std::string& path)
    requires cache::PrefixKVCache<Cache>
  {
    auto blob = cache::read_prefix_file(path);
    if (!blob) return blob.error();
    if (auto st = load_prefix(*blob); !st) {
      return make_error(st.error().code, "Transformer::load_prefix_file",
                        path + ": " + st.error().message);
    }
    return {};
  }

  /// 64 bits identifying what determines the keys and values this instance computes, so that a
  /// saved prefix is only loaded where it is valid: config.json's architecture fields (model
  /// type, sizes, heads, vocabulary, RoPE, norm epsilon, biases, AWQ settings), how the weights
  /// were loaded (fp32 reference, RTN group size), the matmul path (exact and fast give other
  /// bits), and samples of the weights: every RMSNorm weight (Qwen3's q/k_norm too), the k/v_proj
  /// biases, the first and last embedding rows and the first 4 KiB of k_proj and v_proj of the
  /// first and last layer.
  /// Not the thread count or ISA (results do not depend on them). A guard against mix-ups, not
  /// a cryptographic identity: checkpoints equal in all of these would share a fingerprint.
  std::uint64_t model_fingerprint() const noexcept { return fingerprint_; }

  const TransformerWeights& weights() const noexcept { return *weights_; }
  const std::shared_ptr<const TransformerWeights>& shared_weights() const noexcept {
    return weights_;
  }
  const Cache& cache() const noexcept { return cache_; }
  /// The options in effect (context_size resolved).
  const TransformerOptions& options() const noexcept { return options_; }
  /// The backend instance (its activations, scratch and uploaded weights).
  const Backend& backend() const noexcept { return backend_; }
  /// Bytes owned by this instance: KV cache plus the backend's buffers (not the shared weights).
  std::size_t bytes() const noexcept { return cache_.bytes() + backend_.bytes(); }

  /// Widths of the activations of one chunk, each [max_batch][width] in backend memory, in the
  /// order x, xn, tmp (hidden), q, attn (heads * head_dim), k, v (kv_heads * head_dim), gate, up
  /// (intermediate). Memory plans size the scratch from it.
  static std::array<std::size_t, 9> activation_columns(const ModelConfig& c) noexcept {
    const std::size_t H = c.hidden_size, I = c.intermediate_size;
    const std::size_t qd = c.num_attention_heads * c.head_dim;
    const std::size_t kvd = c.num_key_value_heads * c.head_dim;
    return {H, H, H, qd, qd, kvd, kvd, I, I};
  }

 private:
  using Tensor = typename Backend::Tensor;
  using Matrix = typename Backend::Matrix;
  using Vector = typename Backend::Vector;
  using Target = backend::LinearTarget<Backend>;

  // A layer's weights as the backend holds them.
  struct LayerHandles {
    std::array<Vector, kLayerNorms.size()> norms;      // kLayerNorms' order; absent ones empty
    std::array<Matrix, kLayerLinears.size()> linears;  // kLayerLinears' order
  };

  Transformer(std::shared_ptr<const TransformerWeights> w, const TransformerOptions& o, Cache c,
              Backend b)
      : weights_(std::move(w)), options_(o), cache_(std::move(c)), backend_(std::move(b)) {}

  // Hands every weight to the backend and allocates the activations of one chunk.
  status upload() {
    const TransformerWeights& w = *weights_;
    const ModelConfig& c = w.config;
    const auto tensor = [&](Tensor& out, std::size_t cols) -> status {
      auto t = backend_.activation(cols);
      if (!t) return t.error();
      out = std::move(*t);
      return {};
    };
    const auto cols = activation_columns(c);
    Tensor* outs[] = {&x_, &xn_, &tmp_, &q_, &attn_, &k_, &v_, &gate_, &up_};
    static_assert(std::size(outs) == std::tuple_size_v<decltype(cols)>);
    for (std::size_t i = 0; i < cols.size(); ++i)
      if (auto st = tensor(*outs[i], cols[i]); !st) return st;
    const auto matrix = [&](Matrix& out, const Linear& lin) -> status {
      auto m = backend_.upload(lin);
      if (!m) return m.error();
      out = std::move(*m);
      return {};
    };
    const auto vector = [&](Vector& out, const std::vector<float>& v) -> status {
      auto h = backend_.upload(std::span<const float>(v));
      if (!h) return h.error();
      out = std::move(*h);
      return {};
    };
    auto e = backend_.upload(w.embed_tokens);
    if (!e) return e.error();
    embed_tokens_ = std::move(*e);
    if (auto st = matrix(lm_head_, w.lm_head); !st) return st;
    if (auto st = vector(norm_, w.norm); !st) return st;
    layers_.resize(w.layers.size());
    for (std::size_t l = 0; l < w.layers.size(); ++l) {
      const LayerWeights& L = w.layers[l];
      LayerHandles& h = layers_[l];
      for (std::size_t i = 0; i < kLayerNorms.size(); ++i)
        if (kLayerNorms[i].present(c))
          if (auto st = vector(h.norms[i], L.*kLayerNorms[i].member); !st) return st;
      for (std::size_t i = 0; i < kLayerLinears.size(); ++i)
        if (auto st = matrix(h.linears[i], L.*kLayerLinears[i].member); !st) return st;
    }
    return {};
  }

  static std::uint64_t fingerprint(const TransformerWeights& w, kernels::MatmulPath path) {
    const ModelConfig& c = w.config;
    std::vector<std::byte> b;
    const auto u64 = [&](std::uint64_t v) {
      for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFF));
    };
    const auto f64 = [&](double v) { u64(std::bit_cast<std::uint64_t>(v)); };
    const auto floats = [&](const float* p, std::size_t n) {
      u64(n);
      for (std::size_t i = 0; i < n; ++i) u64(std::bit_cast<std::uint32_t>(p[i]));
    };
    const auto bytes = [&](const std::byte* p, std::size_t n) {
      u64(n);
      b.insert(b.end(), p, p + n);
    };
    u64(0x65646765'6c6c6d31ull);  // "edgellm1": bump when the inputs change
    for (std::size_t v : {static_cast<std::size_t>(c.model_type), c.hidden_size,
                          c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
                          c.num_key_value_heads, c.head_dim, c.vocab_size,
                          c.max_position_embeddings, c.sliding_window.value_or(0)})
      u64(v);
    f64(c.rms_norm_eps);
    f64(c.rope_theta);
    u64(static_cast<std::uint64_t>(c.rope_scaling.type));
    f64(c.rope_scaling.factor);
    f64(c.rope_scaling.low_freq_factor);
    f64(c.rope_scaling.high_freq_factor);
    u64(c.rope_scaling.original_max_position_embeddings);
    u64((c.tie_word_embeddings ? 1u : 0u) | (c.attention_qkv_bias ? 2u : 0u) |
        (c.attention_out_bias ? 4u : 0u) | (c.mlp_bias ? 8u : 0u) |
        (c.attention_qk_norm ? 16u : 0u));
    if (!c.rope_layers.empty()) {  // only then: the other families' fingerprints are unchanged
      u64(c.rope_layers.size());
      for (const std::uint8_t r : c.rope_layers) u64(r);
    }
    u64(c.awq ? 1 : 0);
    if (c.awq) {
      u64(static_cast<std::uint64_t>(c.awq->bits));
      u64(c.awq->group_size);
      u64(c.awq->zero_point ? 1 : 0);
      u64(static_cast<std::uint64_t>(c.awq->version));
      for (const std::string& m : c.awq->modules_to_not_convert)
        bytes(reinterpret_cast<const std::byte*>(m.data()), m.size());
      for (const std::string& m : c.awq->int8_modules)  // only when present: others unchanged
        bytes(reinterpret_cast<const std::byte*>(m.data()), m.size());
    }
    u64(w.options.fp32_reference ? 1 : 0);
    u64(w.rtn_group_size);
    u64(static_cast<std::uint64_t>(path));
    floats(w.norm.data(), w.norm.size());
    for (const LayerWeights& l : w.layers) {
      // Absent norms (q/k_norm without attention_qk_norm) add nothing, so that other models'
      // fingerprints stay as they were.
      for (const LayerNorm& n : kLayerNorms)
        if (n.present(c)) floats((l.*n.member).data(), (l.*n.member).size());
      floats(l.k_proj.bias.data(), l.k_proj.bias.size());
      floats(l.v_proj.bias.data(), l.v_proj.bias.size());
    }
    std::vector<float> row(c.hidden_size);
    for (std::size_t r : {std::size_t{0}, c.vocab_size - 1}) {
      w.embed_tokens.row(r, row.data());
      floats(row.data(), row.size());
    }
    for (const LayerWeights* l : {&w.layers.front(), &w.layers.back()}) {
      for (const Linear* lin : {&l->k_proj, &l->v_proj}) {
        if (lin->int4()) {
          bytes(lin->q4.data(), std::min<std::size_t>(4096, lin->q4.byte_size()));
        } else if (lin->int8()) {
          bytes(lin->q8.data(), std::min<std::size_t>(4096, lin->q8.byte_size()));
        } else {
          std::vector<float> r0(lin->k());
          lin->dense.row(0, r0.data());
          floats(r0.data(), std::min<std::size_t>(1024, r0.size()));
        }
      }
    }
    return edgellm::detail::checksum64(b);
  }

  // Runs T tokens at position() through the model; writes lm_head logits of rows
  // [first_row, first_row + rows) to out (rows may be 0).
  status run_chunk(std::span<const std::int32_t> ids, std::size_t first_row, std::size_t rows,
                   float* out) {
    const std::size_t T = ids.size(), p0 = position();
    Backend& b = backend_;
    if (auto st = b.begin(p0, T); !st) return st;
    if (auto st = b.embed(embed_tokens_, ids, x_); !st) return st;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const auto& N = layers_[l].norms;
      const auto& W = layers_[l].linears;
      namespace li = linear_index;
      namespace ni = norm_index;
      b.rms_norm(x_, N[ni::input_layernorm], xn_, 0, T);
      const Target qkv[] = {{W[li::q_proj], q_}, {W[li::k_proj], k_}, {W[li::v_proj], v_}};
      if (auto st = b.linear_group(std::span<const Target>(qkv), xn_, T); !st) return st;
      if (weights_->config.attention_qk_norm) {
        b.head_rms_norm(q_, N[ni::q_norm], T);
        b.head_rms_norm(k_, N[ni::k_norm], T);
      }
      if (weights_->config.uses_rope(l)) {  // SmolLM3's NoPE layers attend on content alone
        b.rope(q_, T);
        b.rope(k_, T);
      }
      if (auto st = b.attention(cache_, l, p0, T, q_, k_, v_, attn_); !st) return st;
      if (auto st = b.linear(W[li::o_proj], attn_, tmp_, T); !st) return st;
      b.add(x_, tmp_, T);

      b.rms_norm(x_, N[ni::post_attention_layernorm], xn_, 0, T);
      const Target gate_up[] = {{W[li::gate_proj], gate_}, {W[li::up_proj], up_}};
      if (auto st = b.linear_group(std::span<const Target>(gate_up), xn_, T); !st) return st;
      b.silu_mul(gate_, up_, T);
      if (auto st = b.linear(W[li::down_proj], gate_, tmp_, T); !st) return st;
      b.add(x_, tmp_, T);
    }
    if (rows > 0) {
      b.rms_norm(x_, norm_, xn_, first_row, first_row + rows);
      const std::size_t V = weights_->config.vocab_size;
      if (auto st = b.logits(lm_head_, xn_, first_row, rows, std::span<float>(out, rows * V)); !st)
        return st;
    }
    return b.finish();
  }

  std::shared_ptr<const TransformerWeights> weights_;
  TransformerOptions options_;
  Cache cache_;
  Backend backend_;
  std::uint64_t fingerprint_ = 0;  // model_fingerprint()
  // The weights as the backend holds them.
  typename Backend::Table embed_tokens_{};
  Matrix lm_head_{};
  Vector norm_{};
  std::vector<LayerHandles> layers_;
  // Activations of one chunk of up to B = max_batch tokens, in backend memory.
  Tensor x_{}, xn_{}, tmp_{};  // [B][hidden]: residual stream, normed, projection out
  Tensor q_{}, attn_{};        // [B][heads * head_dim]
  Tensor k_{}, v_{};           // [B][kv_heads * head_dim]
  Tensor gate_{}, up_{};       // [B][intermediate]
};

}  // namespace edgellm::model
