// SPDX-License-Identifier: Apache-2.0
// The compute-backend concept: the ops a decoder layer needs, on weights and activations the
// backend owns. model::Transformer<Cache, Backend> is written against it; backend/cpu.hpp is
// the CPU implementation, backend/scalar.hpp the scalar oracle.
#pragma once

#include "edgellm/backend/profile.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/linear.hpp"
#include "edgellm/kernels/matmul.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace edgellm::backend {

/// The sizes and constants of the decoder a backend instance runs (model::ModelConfig's, as
/// plain numbers: backends sit below model/).
struct ModelShape {
  std::size_t hidden = 0;        ///< hidden_size
  std::size_t intermediate = 0;  ///< intermediate_size
  std::size_t heads = 0;         ///< num_attention_heads
  std::size_t kv_heads = 0;      ///< num_key_value_heads
  std::size_t head_dim = 0;
  std::size_t vocab = 0;         ///< vocab_size
  std::size_t max_batch = 0;     ///< most rows (tokens) any op gets: activations hold this many
  float rms_norm_eps = 0.0f;
  std::vector<float> rope_inv_freq;  ///< [head_dim / 2], model::rope_inv_freq(config)
};

/// How a backend instance runs its ops. A backend ignores what does not apply to it (the scalar
/// backend runs on the calling thread; the ISA only picks CPU microkernels).
struct Options {
  ThreadPool* pool = nullptr;                            ///< the host's threads; null: caller
  kernels::MatmulPath path = kernels::MatmulPath::fast;  ///< int4 arithmetic (exact or W4A8)
  kernels::Isa isa = kernels::Isa::best;                 ///< CPU microkernel family
  /// Where to add each op's time, calls and fork-joins (backend/profile.hpp); null (the
  /// default): no timing. Must outlive the backend instance. A backend may ignore it.
  Profile* profile = nullptr;
};

/// One output of a grouped linear: y [rows][w.n()] = x w^T (+ bias).
template <class B>
struct LinearTarget {
  typename B::Matrix w;
  typename B::Tensor y;
};

/// A compute backend B for a KV cache type Cache: it owns the weights in the form it runs
/// (uploaded or wrapped once, at Transformer::create), the activation buffers, and the ops of a
/// decoder layer. The Transformer only sequences ops; it never touches activation memory.
///
/// Types:
///   B::Tensor   an activation [rows][cols] fp32 in backend memory, at most max_batch rows;
///               a cheap handle (CPU: a span of host scratch). Made by b.activation(cols).
///   B::Matrix   a linear's weights (+ bias) as uploaded by b.upload(const kernels::Linear&)
///   B::Vector   an fp32 vector (a norm weight), b.upload(std::span<const float>)
///   B::Table    an embedding table, b.upload(const kernels::DenseMatrix&)
///
/// Calls, in the order the Transformer makes them:
///   B::create(shape, options) -> result<B>        (Transformer::create; a device backend is
///                                                  made by its own factory, with its device,
///                                                  and handed to Transformer::assemble)
///   b.activation(cols) -> result<Tensor>          once per buffer, at creation
///   b.upload(linear | vector | table) -> result<Matrix | Vector | Table>   once per weight
///   per forward chunk of `rows` tokens at positions first_pos ..:
///     b.begin(first_pos, rows) -> status          start a chunk (RoPE angles of its positions)
///     b.embed(table, ids, x) -> status            x[t] = table[ids[t]]
///     b.rms_norm(x, w, out, r0, r1)               rows [r0, r1) of out = rmsnorm(x) * w
///     b.head_rms_norm(t, w, rows)                 in place, each head (head_dim values) of
///                                                 rows [0, rows) of t = rmsnorm(head) * w, w
///                                                 [head_dim] (Qwen3's q_norm / k_norm)
///     b.linear(m, x, y, rows) -> status           y = x m^T (+ bias)
///     b.linear_group(targets, x, rows) -> status  several linears of one x (q/k/v, gate/up)
///     b.rope(t, rows)                             RoPE on t's heads (t.cols / head_dim of them)
///     b.attention(cache, layer, first_pos, rows, q, k, v, out) -> status
///                                                 append k, v at first_pos.. to the layer's
///                                                 cache, then causal GQA attention of q
///     b.silu_mul(g, u, rows)                      g = silu(g) * u
///     b.add(x, y, rows)                           x += y (the residual)
///     b.logits(m, x, first_row, rows, out) -> status   out[rows][vocab] = rows
///                                                 [first_row, first_row + rows) of x times m^T,
///                                                 into host memory
///     b.finish() -> status                        every op issued since begin() is done and
///                                                 logits' host memory written
///   cb.bytes() -> std::size_t                     memory the instance owns (activations,
///                                                 scratch; not the weights, not the cache)
///
/// A op's status reports what the backend can tell at that point; a backend that defers work
/// reports failures of it at finish(). After an error the Transformer abandons the chunk and
/// rolls the cache back, so a deferred backend may drop what it recorded.
///
/// How a second backend plugs in (a GPU one, say Vulkan):
/// - Tensor is a handle to a device buffer (plus its cols): activation() allocates it once, with
///   max_batch rows, so a decode step allocates nothing.
/// - upload() copies each weight to device memory once (int4 in the backend's own tile layout if
///   it likes: the Q4Matrix is the source, not the format it must run). The host weights stay
///   alive behind the Transformer's shared_ptr<const TransformerWeights>; instances sharing one
///   weights object should share the device copies too (a device context keyed by the host
///   address, held by the backend objects through a shared_ptr).
/// - The KV cache type is the backend's choice through the constraint on attention(): a device
///   backend accepts only its own device-resident cache type (for example a
///   `vk::KVCache<element>` that satisfies cache::KVCache with device storage), so K/V never
///   leave the device.
/// - begin() starts recording a command buffer; every op records a dispatch and returns {};
///   logits() records the lm_head and a copy into a staging buffer; finish() submits once,
///   waits, and copies the staging buffer into the host span logits() was given (which the
///   Transformer keeps valid until finish() returns). So a whole decode step is one submission
///   and one read-back of vocab floats (or, with an argmax op, of one token).
/// - Ops must compute the math the CPU backend does (the comments in kernels/elementwise.hpp,
///   kernels/matmul.hpp and cache/kv_cache.hpp state it); bit equality with the CPU is not
///   required, closeness is: test it against backend::Scalar as tests/backend/scalar_test.cpp
///   does for the CPU backend.
/// Then `model::Transformer<vk::KVCache<...>, vk::Backend>` is the whole model on the device,
/// with the same forward/truncate/prefix API and the same decoders on top.
template <class B, class Cache>
concept ComputeBackend =
    std::movable<B> &&
    requires(B& b, const B& cb, const kernels::Linear& linear, std::span<const float> vector,
             const kernels::DenseMatrix& table, typename B::Tensor t, const typename B::Matrix& m,
             const typename B::Vector& v, const typename B::Table& e,
             std::span<const LinearTarget<B>> targets, std::span<const std::int32_t> ids,
             Cache& cache, std::size_t n, std::span<float> host) {
      { b.activation(n) } -> std::same_as<result<typename B::Tensor>>;
      { b.upload(linear) } -> std::same_as<result<typename B::Matrix>>;
      { b.upload(vector) } -> std::same_as<result<typename B::Vector>>;
      { b.upload(table) } -> std::same_as<result<typename B::Table>>;
      { b.begin(n, n) } -> std::same_as<status>;
      { b.embed(e, ids, t) } -> std::same_as<status>;
      { b.rms_norm(t, v, t, n, n) } -> std::same_as<void>;
      { b.head_rms_norm(t, v, n) } -> std::same_as<void>;
      { b.linear(m, t, t, n) } -> std::same_as<status>;
      { b.linear_group(targets, t, n) } -> std::same_as<status>;
      { b.rope(t, n) } -> std::same_as<void>;
      { b.attention(cache, n, n, n, t, t, t, t) } -> std::same_as<status>;
      { b.silu_mul(t, t, n) } -> std::same_as<void>;
      { b.add(t, t, n) } -> std::same_as<void>;
      { b.logits(m, t, n, n, host) } -> std::same_as<status>;
      { b.finish() } -> std::same_as<status>;
      { cb.bytes() } -> std::same_as<std::size_t>;
    };

/// A backend that needs nothing but the shape and options to be made (the CPU and scalar
/// backends): Transformer::create makes it itself.
template <class B, class Cache>
concept HostBackend = ComputeBackend<B, Cache> && requires(const ModelShape& shape,
                                                           const Options& options) {
  { B::create(shape, options) } -> std::same_as<result<B>>;
};

}  // namespace edgellm::backend
