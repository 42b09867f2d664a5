// SPDX-License-Identifier: Apache-2.0
// Key/value caches for causal self-attention: the KVCache concept the transformer is written
// against, fp32 and fp16 implementations, and the scalar attention oracle.
#pragma once

#include "edgellm/kernels/float16.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace edgellm::cache {

/// A per-layer store of attention keys and values that also computes attention over them.
/// The cache owns the attention math so that a cache with a compressed layout (e.g. int8 K/V
/// with per-group scales) can compute scores directly on its own representation; the model only
/// hands it fp32 keys/values after RoPE and fp32 queries. Requirements:
///
///   C::create(layers, kv_heads, head_dim, capacity) -> result<C>
///   c.layers(), c.kv_heads(), c.head_dim(), c.capacity() -> std::size_t   (fixed at creation)
///   c.length() -> std::size_t      positions held by every layer
///   c.bytes()  -> std::size_t      bytes of K/V storage
///   c.truncate(n) -> status        keep positions [0, n) of every layer
///   c.append(layer, first_pos, n, k, v) -> status
///   c.attend(layer, q, n_q, first_pos, heads, out, pool) -> status
///
/// Semantics (see KVCacheF32 for the reference wording): append stores positions
/// [first_pos, first_pos + n) of one layer, in order (first_pos must equal that layer's current
/// length); attend computes causal GQA softmax attention for n_q queries at positions
/// first_pos .. first_pos + n_q - 1, each over cached positions [0, its own position]. Errors
/// (capacity, out-of-order append, attending to positions not yet appended, bad sizes) leave the
/// cache unchanged. A cache is used by one thread at a time; attend may fan out over `pool`.
template <class C>
concept KVCache = requires(C& c, const C& cc, std::size_t i, std::span<const float> in,
                           std::span<float> out, ThreadPool* pool) {
  { C::create(i, i, i, i) } -> std::same_as<result<C>>;
  { cc.layers() } -> std::same_as<std::size_t>;
  { cc.kv_heads() } -> std::same_as<std::size_t>;
  { cc.head_dim() } -> std::same_as<std::size_t>;
  { cc.capacity() } -> std::same_as<std::size_t>;
  { cc.length() } -> std::same_as<std::size_t>;
  { cc.bytes() } -> std::same_as<std::size_t>;
  { c.truncate(i) } -> std::same_as<status>;
  { c.append(i, i, i, in, in) } -> std::same_as<status>;
  { c.attend(i, in, i, i, i, out, pool) } -> std::same_as<status>;
};

/// The attention scale HF uses: head_dim^-0.5 computed in double, applied as an fp32 multiply.
inline float attention_scale(std::size_t head_dim) noexcept {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

namespace reference {

/// Scalar oracle for causal GQA attention, in double precision.
///   q   [n_q][heads][head_dim]          queries (after RoPE)
///   k,v [kv_heads][length][head_dim]    all cached keys / values (after RoPE), length >=
///                                        first_pos + n_q
///   out [n_q][heads][head_dim]
/// Query i (position p = first_pos + i), head h, uses kv head h / (heads / kv_heads):
///   s_j = (q . k_j) * head_dim^-0.5 for j <= p;  out = sum_j softmax(s)_j * v_j.
inline void attention(const float* q, std::size_t n_q, std::size_t first_pos, std::size_t heads,
                      std::size_t kv_heads, std::size_t head_dim, std::size_t length,
                      const float* k, const float* v, float* out) {
  const std::size_t group = heads / kv_heads;
  const double scale = static_cast<double>(attention_scale(head_dim));
  std::vector<double> s, acc(head_dim);
  for (std::size_t i = 0; i < n_q; ++i) {
    const std::size_t pos = first_pos + i;
    for (std::size_t h = 0; h < heads; ++h) {
      const float* qh = q + (i * heads + h) * head_dim;
      const float* kh = k + (h / group) * length * head_dim;
      const float* vh = v + (h / group) * length * head_dim;
      s.assign(pos + 1, 0.0);
      double mx = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j <= pos; ++j) {
        double d = 0.0;
        for (std::size_t c = 0; c < head_dim; ++c)
          d += static_cast<double>(qh[c]) * static_cast<double>(kh[j * head_dim + c]);
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0.0;
      for (std::size_t j = 0; j <= pos; ++j) sum += (s[j] = std::exp(s[j] - mx));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::size_t j = 0; j <= pos; ++j)
        for (std::size_t c = 0; c < head_dim; ++c)
          acc[c] += s[j] / sum * static_cast<double>(vh[j * head_dim + c]);
      for (std::size_t c = 0; c < head_dim; ++c)
        out[(i * heads + h) * head_dim + c] = static_cast<float>(acc[c]);
    }
  }
}

}  // namespace reference

namespace detail {

/// fp32 storage: values are kept exactly.
struct StoreF32 {
  using element = float;
  static constexpr std::string_view name = "KVCacheF32";
  static void store(const float* in, element* out, std::size_t n) noexcept {
    std::copy(in, in + n, out);
  }
  static void load(const element* in, float* out, std::size_t n) noexcept {
    std::copy(in, in + n, out);
  }
};

/// fp16 storage: each value rounded to the nearest fp16 (ties to even) on append, read back
/// exactly; values beyond ±65504 become ±inf (keys and values of real models are far smaller).
struct StoreF16 {
  using element = std::uint16_t;
  static constexpr std::string_view name = "KVCacheF16";
  static void store(const float* in, element* out, std::size_t n) noexcept {
    for (std::size_t i = 0; i < n; ++i) out[i] = kernels::f32_to_f16(in[i]);
  }
  static void load(const element* in, float* out, std::size_t n) noexcept {
    for (std::size_t i = 0; i < n; ++i) out[i] = kernels::f16_to_f32(in[i]);
  }
};

/// Dot product of n floats with 8 independent partial sums (a fixed order: the result does not
/// depend on alignment, thread count or which query asked).
inline float dot8(const float* a, const float* b, std::size_t n) noexcept {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (std::size_t l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) acc[i % 8] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

}  // namespace detail

/// A dense KV cache: keys and values of every layer in a preallocated block, stored as
/// Store::element (fp32 or fp16), laid out [layer][kv_head][position][head_dim] so that the
/// attention of one head streams one contiguous run of memory.
///
/// Numerics of attend(), per query i at position p = first_pos + i and head h (kv head
/// h / (heads / kv_heads)), all in fp32, following HF's eager attention:
///   s_j = dot(q, k_j) * scale            j = 0 .. p, scale = attention_scale(head_dim)
///   e_j = exp(s_j - max_j s_j),  P_j = e_j / sum_j e_j
///   out = sum_j P_j * v_j                (in order of j)
/// The dot products use 8 partial sums in a fixed order, so results are bit-identical for every
/// thread count and for the same query no matter which batch it arrives in. Error against
/// reference::attention (on the stored, i.e. possibly fp16-rounded, keys and values): with
/// u = 2^-24 and E = max_j (head_dim + 2) u scale sum_c |q_c k_jc|, each output is within
/// (2E + (2p + 8) u) max_j |v_jc| (first-order bound; the tests check it).
///
/// Memory: 2 * layers * kv_heads * capacity * head_dim * sizeof(element) bytes of storage, plus
/// capacity floats of score scratch per pool thread (grown on first use of a bigger pool).
/// Thread safety: one thread at a time; attend() splits (query, head) pairs over `pool`.
template <class Store>
class DenseKVCache {
 public:
  using element = typename Store::element;

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
    // Not zero-filled: pages are committed as positions are appended (only appended positions
    // are ever read), so a large capacity costs address space, not memory, until it is used.
    c.k_.reset(static_cast<element*>(
        ::operator new (count * sizeof(element), std::align_val_t{64}, std::nothrow)));
    c.v_.reset(static_cast<element*>(
        ::operator new (count * sizeof(element), std::align_val_t{64}, std::nothrow)));
    if (!c.k_ || !c.v_) {
      return fail("create", errc::capacity_exceeded,
                  "cannot allocate 2 x " + std::to_string(count * sizeof(element)) + " bytes");
    }
    c.count_ = count;
    c.layer_length_.assign(layers, 0);
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
  /// Bytes of key and value storage (allocated in full by create()).
  std::size_t bytes() const noexcept { return 2 * count_ * sizeof(element); }

  /// Keeps positions [0, n) of every layer (a no-op for layers holding fewer). Fails if n is
  /// greater than length(), i.e. the cache cannot "grow" by truncation.
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
        const std::size_t dst = offset(layer, h, first_pos + t);
        Store::store(k.data() + t * row + h * head_dim_, k_.get() + dst, head_dim_);
        Store::store(v.data() + t * row + h * head_dim_, v_.get() + dst, head_dim_);
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
  /// have been appended (first_pos + n_q <= layer_length(layer)). (query, head) pairs are split
  /// evenly over `pool` (null: the calling thread); the result is the same for any pool.
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
    const std::size_t n_threads = pool ? pool->size() : 1;
    // Scratch per thread: scores [capacity] + one converted key/value row [head_dim] + the
    // output accumulator [head_dim].
    const std::size_t per_thread = capacity_ + 2 * head_dim_;
    if (scratch_.size() < n_threads * per_thread) scratch_.resize(n_threads * per_thread);

    const std::size_t tasks = n_q * heads, group = heads / kv_heads_;
    const float scale = attention_scale(head_dim_);
    auto work = [&](std::size_t t, std::size_t nt) {
      const std::size_t b = tasks * t / nt, e = tasks * (t + 1) / nt;
      float* scores = scratch_.data() + t * per_thread;
      float* row = scores + capacity_;
      float* acc = row + head_dim_;
      for (std::size_t task = b; task < e; ++task) {
        const std::size_t i = task / heads, h = task % heads;
        attend_one(layer, h / group, q.data() + task * head_dim_, first_pos + i, scale, scores, row,
                   acc, out.data() + task * head_dim_);
      }
    };
    if (pool == nullptr) {
      work(0, 1);
    } else {
      pool->run(work);
    }
    return {};
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

  std::size_t offset(std::size_t layer, std::size_t kv_head, std::size_t pos) const noexcept {
    return ((layer * kv_heads_ + kv_head) * capacity_ + pos) * head_dim_;
  }

  // One (query, head): scores over positions 0..pos, softmax, weighted sum of values.
  void attend_one(std::size_t layer, std::size_t kv_head, const float* q, std::size_t pos,
                  float scale, float* scores, float* row, float* acc, float* out) const noexcept {
    const std::size_t hd = head_dim_;
    const element* kh = k_.get() + offset(layer, kv_head, 0);
    const element* vh = v_.get() + offset(layer, kv_head, 0);
    float mx = -std::numeric_limits<float>::infinity();
    for (std::size_t j = 0; j <= pos; ++j) {
      const float s = detail::dot8(q, load_row(kh + j * hd, row), hd) * scale;
      scores[j] = s;
      mx = std::max(mx, s);
    }
    float sum = 0.0f;
    for (std::size_t j = 0; j <= pos; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
    std::fill(acc, acc + hd, 0.0f);
    for (std::size_t j = 0; j <= pos; ++j) {
      const float p = scores[j] / sum;
      const float* vj = load_row(vh + j * hd, row);
      for (std::size_t c = 0; c < hd; ++c) acc[c] += p * vj[c];
    }
    std::copy(acc, acc + hd, out);
  }

  // A stored row as fp32: in place for fp32 storage, converted into `buf` otherwise.
  const float* load_row(const element* src, float* buf) const noexcept {
    if constexpr (std::is_same_v<element, float>) {
      (void)buf;
      return src;
    } else {
      Store::load(src, buf, head_dim_);
      return buf;
    }
  }

  std::size_t layers_ = 0, kv_heads_ = 0, head_dim_ = 0, capacity_ = 0;
  struct AlignedDelete {
    void operator()(element* p) const noexcept { ::operator delete (p, std::align_val_t{64}); }
  };
  std::unique_ptr<element, AlignedDelete> k_, v_;  // [layers][kv_heads][capacity][head_dim]
  std::size_t count_ = 0;                          // elements of each of k_, v_
  std::vector<std::size_t> layer_length_;          // [layers]
  std::vector<float> scratch_;                     // [threads][capacity + 2 * head_dim]
};

/// fp32 keys and values: attention equals the math of the class comment on the exact inputs.
using KVCacheF32 = DenseKVCache<detail::StoreF32>;
/// fp16 keys and values (half the memory): inputs rounded once to fp16 on append.
using KVCacheF16 = DenseKVCache<detail::StoreF16>;

static_assert(KVCache<KVCacheF32>);
static_assert(KVCache<KVCacheF16>);

}  // namespace edgellm::cache
