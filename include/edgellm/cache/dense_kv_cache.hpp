// SPDX-License-Identifier: Apache-2.0
// The dense KV caches: keys and values of every layer in one preallocated block, over a storage
// format (fp32 and fp16 here; int8 in quantized_kv_cache.hpp), with prefix blobs. Attention over
// the stored rows is kernels/attention.hpp's, on the view layer_view() gives.
#pragma once

#include "edgellm/cache/kv_cache.hpp"
#include "edgellm/cache/prefix_blob.hpp"
#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/detail/bytes.hpp"
#include "edgellm/kernels/attention.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::cache {

namespace detail {

// ---------------------------------------------------------------------------------------------
// Storage formats. A Store says what a stored row is: the element type and how many values one
// element packs (values_per_element), the scales per row (groups(head_dim): 0, 1 per row, or one
// per group of coordinates) and their type, the name used in errors and prefix blobs, the
// conversion of one fp32 row on append (store), where a key row goes in its transposed tile
// (put_key / get_key) and the view the kernels read (view_type).

/// Storage of one element per value, no scales: keys transposed within a tile, [head_dim][16].
template <class T>
struct PlainStore {
  using element = T;
  using scale_type = float;
  using view_type = kernels::KvLayerView<T>;
  static constexpr std::size_t values_per_element = 1;
  static constexpr std::size_t head_dim_multiple = 1;
  static constexpr bool scaled = false;
  static constexpr std::size_t groups(std::size_t) noexcept { return 0; }
  /// Row of head_dim values -> column `lane` of a key tile [head_dim][16].
  static void put_key(element* tile, std::size_t lane, const element* row, std::size_t hd) noexcept {
    for (std::size_t c = 0; c < hd; ++c) tile[c * kernels::kAttentionTile + lane] = row[c];
  }
  static void get_key(const element* tile, std::size_t lane, element* row, std::size_t hd) noexcept {
    for (std::size_t c = 0; c < hd; ++c) row[c] = tile[c * kernels::kAttentionTile + lane];
  }
};

/// fp32 storage: values are kept exactly.
struct StoreF32 : PlainStore<float> {
  static constexpr std::string_view name = "KVCacheF32";
  static void store(const float* in, element* out, std::size_t n, scale_type*) noexcept {
    std::copy(in, in + n, out);
  }
};

/// fp16 storage: each value rounded to the nearest fp16 (ties to even) on append, read back
/// exactly; values beyond ±65504 become ±inf (keys and values of real models are far smaller).
struct StoreF16 : PlainStore<std::uint16_t> {
  static constexpr std::string_view name = "KVCacheF16";
  static void store(const float* in, element* out, std::size_t n, scale_type*) noexcept {
    for (std::size_t i = 0; i < n; ++i) out[i] = kernels::f32_to_f16(in[i]);
  }
};

}  // namespace detail

/// A dense KV cache: keys and values of every layer in one preallocated block (as opposed to
/// paged), stored in a format `Store`: fp32 (KVCacheF32), fp16 (KVCacheF16), int8 with an fp32
/// scale per (position, kv head) (KVCacheQ8, cache/quantized_kv_cache.hpp) or int4 with an fp16
/// scale per (position, kv head, 32 coordinates) (KVCacheQ4, same file). Layout per layer and
/// kv head (kernels::KvLayerView; int4 packs 16 values in 8 bytes, kernels::KvLayerViewQ4):
/// keys in tiles of 16 positions stored transposed [slots / 16][head_dim][16], values row-major
/// [slots][head_dim], scales [slots] (int4: [slots / 16][groups][16] and [slots][groups]);
/// slots = capacity rounded up to 16. Every format runs the same attention kernel
/// (kernels::attend_layer, xsimd), so formats differ only in the bytes they read.
///
/// Numerics of attend(), per query at position p and head h (kv head h / (heads / kv_heads)),
/// all in fp32 (kernels/attention.hpp's chunk_partial and merge_partials list every operation):
///   s_j = dot(q * scale, k_j) [* ks_j]      j = 0 .. p, scale = attention_scale(head_dim),
///                                           ks_j: the key scale of int8 storage
///   positions in chunks b of 256: m_b = max s_j, e_j = exp(s_j - m_b), l_b = sum_j e_j,
///                                 o_b = sum_j e_j [* vs_j] v_j
///   out = sum_b exp(m_b - M) o_b / sum_b exp(m_b - M) l_b,  M = max_b m_b,  chunks in order.
/// Every sum has a fixed order, so results are bit-identical for every thread count and for the
/// same query whichever batch it arrives in. Error against exact attention over the stored
/// (dequantised) keys and values, derived to first order: with u = 2^-24, L = min(p + 1, 256),
/// nb = p / 256 + 1, E = max_j (head_dim + 2) u scale sum_c |q_c k_jc| and S = max_j s_j -
/// min_j s_j (exact scores),
///   |out_c - exact_c| <= (2E + (2S + 2L + 2nb + 18) u) max_j |v_jc|
/// (2E: score errors reweight the softmax; 2uS + 16u: exp, relative error <= 4u (tested), of an
/// fp32-rounded argument, in chunk and merge; 2(L + nb)u + 2u: the sums, the value scale, the
/// division). The tests check it against kernels::reference::attention.
///
/// Memory: bytes() (allocated by create(); pages are committed as positions are appended), plus
/// attention scratch grown on first use: per pool thread (16 head_dim + 2048 + (p / 256 + 1) *
/// group * (head_dim + 2)) floats, and for decode the partial results of every chunk.
/// Thread safety: one thread at a time; attend() splits work over `pool`.
template <class Store>
class DenseKVCache {
 public:
  using element = typename Store::element;
  using scale_type = typename Store::scale_type;
  /// Whether rows carry scales (int8: one fp32 per row; int4: one fp16 per group of 32).
  static constexpr bool scaled = Store::scaled;
  /// The name used in errors and prefix blobs ("KVCacheF32", "KVCacheF16", "KVCacheQ8",
  /// "KVCacheQ4").
  static constexpr std::string_view type_name = Store::name;

  /// A cache for `layers` layers of `kv_heads` heads of `head_dim` values, holding up to
  /// `capacity` positions. All four must be positive; errors name the argument.
  static result<DenseKVCache> create(std::size_t layers, std::size_t kv_heads, std::size_t head_dim,
                                     std::size_t capacity) {
    const auto positive = [&](std::size_t v, const char* what) -> status {
      if (v == 0)
        return fail("create", errc::invalid_argument, std::string(what) + ": must be positive");
      return {};
    };
    if (auto st = positive(layers, "layers"); !st) return st.error();
    if (auto st = positive(kv_heads, "kv_heads"); !st) return st.error();
    if (auto st = positive(head_dim, "head_dim"); !st) return st.error();
    if (auto st = positive(capacity, "capacity"); !st) return st.error();
    if (head_dim % Store::head_dim_multiple != 0) {
      return fail("create", errc::invalid_argument,
                  "head_dim: " + std::to_string(head_dim) + " is not a multiple of " +
                      std::to_string(Store::head_dim_multiple) + " (the format's scale groups)");
    }
    // Refuse sizes whose element count overflows or is absurd (> 2^40 elements per K or V).
    const std::size_t limit = std::size_t{1} << 40;
    std::size_t count = layers;
    for (std::size_t f : {kv_heads, head_dim, capacity}) {
      if (count > limit / f) {
        return fail("create", errc::capacity_exceeded,
                    "layers * kv_heads * head_dim * capacity = " + std::to_string(layers) + " * " +
                        std::to_string(kv_heads) + " * " + std::to_string(head_dim) + " * " +
                        std::to_string(capacity) + " is too large");
      }
      count *= f;
    }
    DenseKVCache c;
    c.layers_ = layers;
    c.kv_heads_ = kv_heads;
    c.head_dim_ = head_dim;
    c.capacity_ = capacity;
    c.slots_ = kernels::attention_slots(capacity);
    c.groups_ = Store::groups(head_dim);
    c.count_ = layers * kv_heads * c.slots_ * head_dim / Store::values_per_element;
    // Not zero-filled: pages are committed as positions are appended (a tile is zeroed when its
    // first position is written; only written tiles are read).
    c.k_ = edgellm::detail::allocate_aligned<element>(c.count_);
    c.v_ = edgellm::detail::allocate_aligned<element>(c.count_);
    bool ok = c.k_ && c.v_;
    if constexpr (scaled) {
      const std::size_t scales = layers * kv_heads * c.slots_ * c.groups_;
      c.k_scale_ = edgellm::detail::allocate_aligned<scale_type>(scales);
      c.v_scale_ = edgellm::detail::allocate_aligned<scale_type>(scales);
      ok = ok && c.k_scale_ && c.v_scale_;
    }
    const std::string where = std::string(Store::name) + "::create";
    if (!ok) return edgellm::detail::allocation_error(where, "K and V", c.bytes());
    if (auto st = edgellm::detail::try_assign(c.layer_length_, layers, 0, where, "layer lengths");
        !st)
      return st.error();
    if (auto st = edgellm::detail::try_resize(c.row_, head_dim / Store::values_per_element, where,
                                              "a row buffer");
        !st)
      return st.error();
    if (auto st = edgellm::detail::try_resize(c.row_scales_, c.groups_, where, "row scales"); !st)
      return st.error();
    return c;
  }

  std::size_t layers() const noexcept { return layers_; }
  std::size_t kv_heads() const noexcept { return kv_heads_; }
  std::size_t head_dim() const noexcept { return head_dim_; }
  /// Most positions a layer can hold.
  std::size_t capacity() const noexcept { return capacity_; }
  /// Positions held by every layer (layers are appended one after another during a forward, so
  /// in between, later layers may hold fewer).
  std::size_t length() const noexcept {
    std::size_t n = capacity_;
    for (std::size_t l : layer_length_) n = std::min(n, l);
    return layers_ ? n : 0;
  }
  /// Positions held by one layer.
  std::size_t layer_length(std::size_t layer) const noexcept {
    return layer < layers_ ? layer_length_[layer] : 0;
  }
  /// Bytes of key and value storage, scales included, allocated by create(): 2 * layers *
  /// kv_heads * slots * (row bytes + scales per row * scale bytes), slots = capacity rounded up
  /// to 16; a row is head_dim values (head_dim / 2 bytes for int4).
  std::size_t bytes() const noexcept { return bytes_for(layers_, kv_heads_, head_dim_, capacity_); }
  /// Bytes of one stored row (one position of one kv head, keys or values) with its scales.
  static constexpr std::size_t row_bytes(std::size_t head_dim) noexcept {
    return head_dim / Store::values_per_element * sizeof(element) +
           Store::groups(head_dim) * sizeof(scale_type);
  }
  /// Values one stored element packs (2 for int4) and scales per row (0, 1, head_dim / 32).
  static constexpr std::size_t values_per_element = Store::values_per_element;
  std::size_t scales_per_row() const noexcept { return groups_; }
  /// What bytes() will be for a cache create() makes with these arguments (memory plans).
  static constexpr std::size_t bytes_for(std::size_t layers, std::size_t kv_heads,
                                         std::size_t head_dim, std::size_t capacity) noexcept {
    const std::size_t rows = layers * kv_heads * kernels::attention_slots(capacity);
    return 2 * rows * row_bytes(head_dim);
  }

  /// The most bytes of attention scratch attend() grows to in a cache of `capacity` positions
  /// run in chunks of up to `max_batch` queries over a pool of `threads` (memory plans): the
  /// last chunk of a full context, or a decode step at its last position, whichever needs more.
  static std::size_t attend_scratch_bytes(std::size_t heads, std::size_t kv_heads,
                                          std::size_t head_dim, std::size_t capacity,
                                          std::size_t max_batch, std::size_t threads) noexcept {
    if (capacity == 0 || kv_heads == 0) return 0;
    const std::size_t n_q = std::min(capacity, max_batch), t = std::max<std::size_t>(threads, 1);
    using kernels::attend_scratch_floats;
    return sizeof(float) *
           std::max(attend_scratch_floats(n_q, capacity - n_q, heads, kv_heads, head_dim, t),
                    attend_scratch_floats(1, capacity - 1, heads, kv_heads, head_dim, t));
  }

  /// Keeps positions [0, n) of every layer (a no-op for layers holding fewer), in O(layers).
  /// Fails if n is greater than length(), i.e. the cache cannot "grow" by truncation.
  status truncate(std::size_t n) {
    if (n > length()) {
      return fail("truncate", errc::out_of_range,
                  "n: " + std::to_string(n) + " is greater than the cached length " +
                      std::to_string(length()));
    }
    for (std::size_t& l : layer_length_) l = std::min(l, n);
    return {};
  }

  /// Stores keys and values of positions [first_pos, first_pos + n) of `layer`.
  ///   k, v: [n][kv_heads][head_dim] fp32 (after RoPE), n * kv_heads * head_dim floats each.
  /// first_pos must equal layer_length(layer) (positions are appended in order; truncate first
  /// to overwrite) and first_pos + n must not exceed capacity(). Nothing is written on error.
  status append(std::size_t layer, std::size_t first_pos, std::size_t n, std::span<const float> k,
                std::span<const float> v) {
    if (layer >= layers_) {
      return fail("append", errc::out_of_range,
                  "layer " + std::to_string(layer) + " >= layers " + std::to_string(layers_));
    }
    if (n == 0) return fail("append", errc::invalid_argument, "n: must be positive");
    if (first_pos >= capacity_ || n > capacity_ - first_pos) {
      const std::size_t bad = first_pos >= capacity_ ? first_pos : capacity_;
      return fail("append", errc::capacity_exceeded,
                  "position " + std::to_string(bad) + " >= capacity " + std::to_string(capacity_));
    }
    if (first_pos != layer_length_[layer]) {
      return fail("append", errc::invalid_argument,
                  "layer " + std::to_string(layer) + ": position " + std::to_string(first_pos) +
                      " but the layer holds " + std::to_string(layer_length_[layer]) +
                      " positions (append in order; truncate first to overwrite)");
    }
    const std::size_t row = kv_heads_ * head_dim_;
    if (k.size() != n * row || v.size() != n * row) {
      return fail("append", errc::shape_mismatch,
                  "k/v: sizes " + std::to_string(k.size()) + "/" + std::to_string(v.size()) +
                      ", expected n * kv_heads * head_dim = " + std::to_string(n * row));
    }
    for (std::size_t t = 0; t < n; ++t) {
      for (std::size_t h = 0; h < kv_heads_; ++h) {
        const float* kin = k.data() + t * row + h * head_dim_;
        const float* vin = v.data() + t * row + h * head_dim_;
        const std::size_t head = layer * kv_heads_ + h, pos = first_pos + t;
        start_tile(head, pos);
        element* vrow = v_.get() + (head * slots_ + pos) * row_elements();
        Store::store(kin, row_.data(), head_dim_, row_scales_.data());
        put_key_row(head, pos, row_.data(), row_scales_.data());
        Store::store(vin, vrow, head_dim_, scaled ? v_scale_.get() + (head * slots_ + pos) * groups_
                                                  : nullptr);
      }
    }
    layer_length_[layer] = first_pos + n;
    return {};
  }

  /// Causal GQA attention of n_q queries of `layer` at positions first_pos .. first_pos + n_q - 1
  /// (see the class comment for the math).
  ///   q:   [n_q][heads][head_dim] fp32 (after RoPE)
  ///   out: [n_q][heads][head_dim] fp32, must not overlap q
  /// heads must be a positive multiple of kv_heads(); the keys of every attended position must
  /// have been appended (first_pos + n_q <= layer_length(layer)). Work is split over `pool`
  /// (null: the calling thread); the result is the same for any pool. Arch: the xsimd
  /// instruction set of the kernels (the build's best by default; tests run the others).
  template <class Arch = xsimd::default_arch>
  status attend(std::size_t layer, std::span<const float> q, std::size_t n_q, std::size_t first_pos,
                std::size_t heads, std::span<float> out, ThreadPool* pool) {
    if (layer >= layers_) {
      return fail("attend", errc::out_of_range,
                  "layer " + std::to_string(layer) + " >= layers " + std::to_string(layers_));
    }
    if (n_q == 0) return fail("attend", errc::invalid_argument, "n_q: must be positive");
    if (heads == 0 || heads % kv_heads_ != 0) {
      return fail("attend", errc::invalid_argument,
                  "heads: " + std::to_string(heads) + " is not a positive multiple of kv_heads " +
                      std::to_string(kv_heads_));
    }
    if (first_pos > layer_length_[layer] || n_q > layer_length_[layer] - first_pos) {
      return fail("attend", errc::out_of_range,
                  "layer " + std::to_string(layer) + ": queries at positions " +
                      std::to_string(first_pos) + ".." + std::to_string(first_pos + n_q - 1) +
                      " but only " + std::to_string(layer_length_[layer]) +
                      " positions are cached");
    }
    const std::size_t size = n_q * heads * head_dim_;
    if (q.size() != size || out.size() != size) {
      return fail("attend", errc::shape_mismatch,
                  "q/out: sizes " + std::to_string(q.size()) + "/" + std::to_string(out.size()) +
                      ", expected n_q * heads * head_dim = " + std::to_string(size));
    }
    kernels::attend_layer<Arch>(layer_view(layer), q.data(), n_q, first_pos, heads, out.data(),
                                pool, scratch_);
    return {};
  }

  /// Writes positions [0, n) of every layer as a prefix blob (format: cache/prefix_blob.hpp)
  /// tagged with `model_fingerprint` into `out` (resized). Errors: n > length().
  status export_prefix(std::size_t n, std::uint64_t model_fingerprint,
                       std::vector<std::byte>& out) const {
    if (n > length()) {
      return fail("export_prefix", errc::out_of_range,
                  "n: " + std::to_string(n) + " is greater than the cached length " +
                      std::to_string(length()));
    }
    const std::size_t payload = payload_bytes(n);
    out.assign(prefix_blob_bytes(payload), std::byte{0});
    store_prefix_header(out.data(),
                        {type_name, layers_, kv_heads_, head_dim_, n, model_fingerprint, payload});
    std::byte* p = out.data() + kPrefixHeaderBytes;
    // Per head: key rows [n][row], key scales [n][groups], values [n][row], value scales
    // [n][groups] (row: head_dim values as stored; the int8 layout of earlier blobs).
    const std::size_t re = row_elements();
    std::vector<element> row(re);
    std::vector<scale_type> scales(groups_);
    for (std::size_t head = 0; head < layers_ * kv_heads_; ++head) {
      std::byte* key_scales = p + n * re * sizeof(element);  // [n][groups], after the rows
      for (std::size_t j = 0; j < n; ++j) {
        get_key_row(head, j, row.data(), scales.data());
        p = edgellm::detail::store_le_array(p, row.data(), re);
        key_scales = edgellm::detail::store_le_array(key_scales, scales.data(), groups_);
      }
      p = key_scales;
      p = edgellm::detail::store_le_array(p, v_.get() + head * slots_ * re, n * re);
      if constexpr (scaled)
        p = edgellm::detail::store_le_array(p, v_scale_.get() + head * slots_ * groups_, n * groups_);
    }
    seal_prefix_blob(out);
    return {};
  }

  /// Replaces the content of every layer by the prefix in `blob` (from export_prefix of a cache
  /// of the same type and shape, tagged with the same `model_fingerprint`); length() becomes the
  /// prefix length. Checked first, in order, each a clear error that leaves the cache unchanged:
  /// the blob's framing (parse_prefix_blob: size, magic, version, checksum), KV type, model
  /// fingerprint, shape (invalid_argument), length > capacity (capacity_exceeded).
  status import_prefix(std::span<const std::byte> blob, std::uint64_t model_fingerprint) {
    std::string where(Store::name);
    where += "::import_prefix";
    auto parsed = parse_prefix_blob(blob, where);
    if (!parsed) return parsed.error();
    const PrefixBlobHeader& h = *parsed;
    if (h.type != type_name) {
      return fail("import_prefix", errc::invalid_argument,
                  "the prefix holds KV type " + std::string(h.type) + ", this cache is " +
                      std::string(type_name));
    }
    if (h.fingerprint != model_fingerprint) {
      return fail("import_prefix", errc::invalid_argument,
                  "the prefix was saved by another model: fingerprint " +
                      edgellm::detail::hex64(h.fingerprint) + ", this model's is " +
                      edgellm::detail::hex64(model_fingerprint));
    }
    if (h.layers != layers_ || h.kv_heads != kv_heads_ || h.head_dim != head_dim_) {
      return fail("import_prefix", errc::invalid_argument,
                  "the prefix has layers x kv_heads x head_dim = " + std::to_string(h.layers) +
                      " x " + std::to_string(h.kv_heads) + " x " + std::to_string(h.head_dim) +
                      ", this cache " + std::to_string(layers_) + " x " +
                      std::to_string(kv_heads_) + " x " + std::to_string(head_dim_));
    }
    const std::uint64_t n = h.length;
    if (n > capacity_) {
      return fail("import_prefix", errc::capacity_exceeded,
                  "the prefix holds " + std::to_string(n) + " positions, more than the capacity " +
                      std::to_string(capacity_));
    }
    if (h.payload_bytes != payload_bytes(n)) {
      return fail("import_prefix", errc::format_error,
                  "payload of " + std::to_string(h.payload_bytes) + " bytes, expected " +
                      std::to_string(payload_bytes(n)) + " for " + std::to_string(n) +
                      " positions");
    }
    const std::byte* p = blob.data() + kPrefixHeaderBytes;
    const std::size_t re = row_elements();
    for (std::size_t head = 0; head < layers_ * kv_heads_; ++head) {
      const std::byte* scales = p + n * re * sizeof(element);  // [n][groups] key scales
      for (std::size_t j = 0; j < n; ++j) {
        start_tile(head, j);
        p = edgellm::detail::load_le_array(p, row_.data(), re);
        if constexpr (scaled)
          scales = edgellm::detail::load_le_array(scales, row_scales_.data(), groups_);
        put_key_row(head, j, row_.data(), row_scales_.data());
      }
      p += n * groups_ * sizeof(scale_type);
      p = edgellm::detail::load_le_array(p, v_.get() + head * slots_ * re, n * re);
      if constexpr (scaled)
        p = edgellm::detail::load_le_array(p, v_scale_.get() + head * slots_ * groups_, n * groups_);
    }
    std::fill(layer_length_.begin(), layer_length_.end(), static_cast<std::size_t>(n));
    return {};
  }

  /// The storage of one layer as the kernels read it (attend, tests, the scalar twin
  /// kernels::reference::attention_stored). Valid until the cache is modified or destroyed.
  typename Store::view_type layer_view(std::size_t layer) const noexcept {
    typename Store::view_type v;
    const std::size_t head = layer * kv_heads_;
    v.k = k_.get() + head * slots_ * row_elements();
    v.v = v_.get() + head * slots_ * row_elements();
    if constexpr (scaled) {
      v.k_scale = k_scale_.get() + head * slots_ * groups_;
      v.v_scale = v_scale_.get() + head * slots_ * groups_;
    }
    v.kv_heads = kv_heads_;
    v.head_dim = head_dim_;
    v.slots = slots_;
    return v;
  }

 private:
  DenseKVCache() = default;

  // "[KVCacheF32::append] ...": the message is built only when there is an error.
  static error fail(std::string_view method, errc code, const std::string& what) {
    std::string where(Store::name);
    where += "::";
    where += method;
    return make_error(code, where, what);
  }

  std::size_t payload_bytes(std::size_t n) const noexcept {
    return layers_ * kv_heads_ * n * 2 * row_bytes(head_dim_);
  }
  /// Elements of one stored row.
  std::size_t row_elements() const noexcept { return head_dim_ / Store::values_per_element; }

  // Zeroes the key tile (and the scales) of position pos of head (layer * kv_heads + kv head)
  // when pos starts it, so that tiles the kernels read hold no uninitialised lanes.
  void start_tile(std::size_t head, std::size_t pos) noexcept {
    if (pos % kernels::kAttentionTile != 0) return;
    const std::size_t re = row_elements();
    element* tile = k_.get() + (head * slots_ + pos) * re;  // tile pos/16 starts at row pos
    std::fill(tile, tile + kernels::kAttentionTile * re, element{});
    if constexpr (scaled) {
      const std::size_t at = (head * slots_ + pos) * groups_, count = kernels::kAttentionTile * groups_;
      std::fill_n(k_scale_.get() + at, count, scale_type{});
      std::fill_n(v_scale_.get() + at, count, scale_type{});
    }
  }

  // Key scales of a tile: [groups][16] (one scale per position and group).
  scale_type* key_scales(std::size_t head, std::size_t pos) const noexcept {
    const std::size_t tile = pos / kernels::kAttentionTile;
    return k_scale_.get() + (head * slots_ + tile * kernels::kAttentionTile) * groups_ +
           pos % kernels::kAttentionTile;
  }

  void put_key_row(std::size_t head, std::size_t pos, const element* row,
                   const scale_type* scales) noexcept {
    const std::size_t tile = pos / kernels::kAttentionTile;
    Store::put_key(k_.get() + (head * slots_ + tile * kernels::kAttentionTile) * row_elements(),
                   pos % kernels::kAttentionTile, row, head_dim_);
    if constexpr (scaled) {
      scale_type* ks = key_scales(head, pos);
      for (std::size_t g = 0; g < groups_; ++g) ks[g * kernels::kAttentionTile] = scales[g];
    }
  }

  void get_key_row(std::size_t head, std::size_t pos, element* row, scale_type* scales) const noexcept {
    const std::size_t tile = pos / kernels::kAttentionTile;
    Store::get_key(k_.get() + (head * slots_ + tile * kernels::kAttentionTile) * row_elements(),
                   pos % kernels::kAttentionTile, row, head_dim_);
    if constexpr (scaled) {
      const scale_type* ks = key_scales(head, pos);
      for (std::size_t g = 0; g < groups_; ++g) scales[g] = ks[g * kernels::kAttentionTile];
    }
  }

  std::size_t layers_ = 0, kv_heads_ = 0, head_dim_ = 0, capacity_ = 0;
  std::size_t slots_ = 0;   // kernels::attention_slots(capacity)
  std::size_t groups_ = 0;  // scales per row: Store::groups(head_dim)
  std::size_t count_ = 0;   // elements of each of k_, v_
  // [layers][kv_heads][slots / 16][head_dim][16 values] keys, [layers][kv_heads][slots][head_dim
  // values] values (Store::view_type has the exact layout)
  edgellm::detail::AlignedArray<element> k_, v_;
  // keys [layers][kv_heads][slots / 16][groups][16], values [layers][kv_heads][slots][groups]
  // (scaled formats only)
  edgellm::detail::AlignedArray<scale_type> k_scale_, v_scale_;
  std::vector<std::size_t> layer_length_;  // [layers]
  std::vector<element> row_;               // [head_dim values] one converted key row
  std::vector<scale_type> row_scales_;     // [groups] its scales
  std::vector<float> scratch_;             // attention scratch: kernels::attend_scratch_floats
};

/// fp32 keys and values: attention equals the math of the class comment on the exact inputs.
using KVCacheF32 = DenseKVCache<detail::StoreF32>;
/// fp16 keys and values (half the memory): inputs rounded once to fp16 on append.
using KVCacheF16 = DenseKVCache<detail::StoreF16>;

static_assert(PrefixKVCache<KVCacheF32>);
static_assert(PrefixKVCache<KVCacheF16>);

}  // namespace edgellm::cache
