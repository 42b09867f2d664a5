// SPDX-License-Identifier: Apache-2.0
// The KV cache concepts the transformer is written against: KVStore (shape, length, rollback:
// all a model sequences), KVCache (a host cache that also stores keys and values and attends
// over them) and PrefixKVCache (save and restore a prefix as a blob). The caches:
// cache/dense_kv_cache.hpp (fp32, fp16), cache/quantized_kv_cache.hpp (int8, int4); the blob format:
// cache/prefix_blob.hpp; the attention math: kernels/attention.hpp (its scalar oracle and twin:
// kernels/reference_attention.hpp).
#pragma once

#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace edgellm::cache {

/// What a model needs of its KV state wherever it lives (host memory, or a device whose
/// backend appends and attends with its own ops): its shape, its length, rollback and size.
///   c.layers(), c.kv_heads(), c.head_dim(), c.capacity() -> std::size_t   (fixed at creation)
///   c.length() -> std::size_t      positions held by every layer
///   c.bytes()  -> std::size_t      bytes of K/V storage
///   c.truncate(n) -> status        keep positions [0, n) of every layer
template <class C>
concept KVStore = requires(C& c, const C& cc, std::size_t i) {
  { cc.layers() } -> std::same_as<std::size_t>;
  { cc.kv_heads() } -> std::same_as<std::size_t>;
  { cc.head_dim() } -> std::same_as<std::size_t>;
  { cc.capacity() } -> std::same_as<std::size_t>;
  { cc.length() } -> std::same_as<std::size_t>;
  { cc.bytes() } -> std::same_as<std::size_t>;
  { c.truncate(i) } -> std::same_as<status>;
};

/// A per-layer store of attention keys and values that also computes attention over them.
/// attend is the cache's so that a cache with a compressed layout (e.g. int8 K/V with per-group
/// scales) runs a kernel on its own representation (DenseKVCache: kernels::attend_layer on its
/// stored codes); the model only hands it fp32 keys/values after RoPE and fp32 queries.
/// Requirements:
///
///   C::create(layers, kv_heads, head_dim, capacity) -> result<C>
///   c.layers(), c.kv_heads(), c.head_dim(), c.capacity() -> std::size_t   (fixed at creation)
///   c.length() -> std::size_t      positions held by every layer
///   c.bytes()  -> std::size_t      bytes of K/V storage
///   c.truncate(n) -> status        keep positions [0, n) of every layer
///   c.append(layer, first_pos, n, k, v) -> status
///   c.attend(layer, q, n_q, first_pos, heads, out, pool) -> status
///
/// Semantics (see DenseKVCache for the reference wording): append stores positions
/// [first_pos, first_pos + n) of one layer, in order (first_pos must equal that layer's current
/// length); attend computes causal GQA softmax attention for n_q queries at positions
/// first_pos .. first_pos + n_q - 1, each over cached positions [0, its own position]. Errors
/// (capacity, out-of-order append, attending to positions not yet appended, bad sizes) leave the
/// cache unchanged. A cache is used by one thread at a time; attend may fan out over `pool`.
template <class C>
concept KVCache = KVStore<C> && requires(C& c, std::size_t i, std::span<const float> in,
                                         std::span<float> out, ThreadPool* pool) {
  { C::create(i, i, i, i) } -> std::same_as<result<C>>;
  { c.append(i, i, i, in, in) } -> std::same_as<status>;
  { c.attend(i, in, i, i, i, out, pool) } -> std::same_as<status>;
};

/// A cache whose KV state can be saved and restored as a prefix blob (a system prompt prefilled
/// once): export_prefix(n, model_fingerprint, out) writes positions [0, n) of every layer, and
/// import_prefix(blob, model_fingerprint) replaces the cache content by them. The blob carries
/// the KV type, shape, length and the caller's 64-bit model fingerprint, and a checksum; an
/// import from another model, another KV type or shape, or of a corrupted or truncated blob is
/// refused with an error that names what differs, and leaves the cache unchanged.
template <class C>
concept PrefixKVCache = KVStore<C> &&
    requires(C& c, const C& cc, std::size_t n, std::uint64_t fingerprint,
             std::vector<std::byte>& out, std::span<const std::byte> in) {
  { cc.export_prefix(n, fingerprint, out) } -> std::same_as<status>;
  { c.import_prefix(in, fingerprint) } -> std::same_as<status>;
};

}  // namespace edgellm::cache
