// SPDX-License-Identifier: Apache-2.0
// Key/value caches for causal self-attention: the KVCache concept the transformer is written
// against, the dense cache over a storage format (fp32 and fp16 here; int8 in
// quantized_kv_cache.hpp), the prefix blob format, and the scalar attention oracle.
#pragma once

#include "edgellm/cache/attention.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

/// A cache whose KV state can be saved and restored as a prefix blob (a system prompt prefilled
/// once): export_prefix(n, model_fingerprint, out) writes positions [0, n) of every layer, and
/// import_prefix(blob, model_fingerprint) replaces the cache content by them. The blob carries
/// the KV type, shape, length and the caller's 64-bit model fingerprint, and a checksum; an
/// import from another model, another KV type or shape, or of a corrupted or truncated blob is
/// refused with an error that names what differs, and leaves the cache unchanged.
template <class C>
concept PrefixKVCache =
    KVCache<C> && requires(C& c, const C& cc, std::size_t n, std::uint64_t fingerprint,
                           std::vector<std::byte>& out, std::span<const std::byte> in) {
      { cc.export_prefix(n, fingerprint, out) } -> std::same_as<status>;
      { c.import_prefix(in, fingerprint) } -> std::same_as<status>;
    };

namespace detail {

// ---------------------------------------------------------------------------------------------
// The prefix blob: an 80-byte header, the payload, an 8-byte checksum; integers little-endian.
//   0  magic "EDGELKV\x1a"        8 bytes
//   8  version (1)                u32
//  12  header bytes (80)          u32
//  16  KV type name               16 bytes, zero padded (e.g. "KVCacheQ8")
//  32  layers, kv_heads, head_dim, length (positions), model fingerprint, payload bytes   u64 each
//  80  payload: per layer, per kv head: keys [length][head_dim] elements, key scales [length]
//      fp32 (scaled types only), values [length][head_dim], value scales [length]; elements
//      little-endian (int8 codes, fp16 bits, fp32 bits)
//  80 + payload: checksum64 of every byte before it

inline constexpr char kPrefixMagic[8] = {'E', 'D', 'G', 'E', 'L', 'K', 'V', '\x1a'};
inline constexpr std::uint32_t kPrefixVersion = 1;
inline constexpr std::size_t kPrefixHeaderBytes = 80;

inline std::uint64_t load_le64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}
inline std::uint32_t load_le32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}
inline void store_le64(std::byte* p, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFF);
}
inline void store_le32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFF);
}

/// The number of positions a prefix blob says it holds (its header's length field), without
/// checking the rest: callers that pair a blob with other data (a prompt cache's token ids)
/// compare before import_prefix() checks everything else. Error if too short or bad magic.
inline result<std::uint64_t> prefix_blob_length(std::span<const std::byte> blob) {
  if (blob.size() < kPrefixHeaderBytes || std::memcmp(blob.data(), kPrefixMagic, 8) != 0) {
    return make_error(errc::format_error, "prefix_blob_length",
                      "not a KV prefix blob (bad magic or shorter than its " +
                          std::to_string(kPrefixHeaderBytes) + "-byte header)");
  }
  return load_le64(blob.data() + 32 + 3 * 8);
}

/// FNV-1a over 64-bit little-endian words (then single bytes for the tail), finished with
/// MurmurHash3's fmix64 so every input bit reaches every output bit. Each step is a bijection
/// of the state for a given word, so any change confined to one word always changes the result.
/// Not cryptographic: it detects corruption and mix-ups, not tampering.
inline std::uint64_t checksum64(std::span<const std::byte> data,
                                std::uint64_t h = 0xcbf29ce484222325ull) noexcept {
  constexpr std::uint64_t prime = 0x100000001b3ull;
  std::size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) h = (h ^ load_le64(data.data() + i)) * prime;
  for (; i < data.size(); ++i) h = (h ^ static_cast<std::uint8_t>(data[i])) * prime;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

/// Writes n elements little-endian at p (a copy on little-endian hosts); returns p advanced.
template <class T>
std::byte* put_elements(std::byte* p, const T* src, std::size_t n) noexcept {
  if constexpr (std::endian::native == std::endian::little || sizeof(T) == 1) {
    if (n) std::memcpy(p, src, n * sizeof(T));
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const auto bits = std::bit_cast<std::conditional_t<sizeof(T) == 2, std::uint16_t, std::uint32_t>>(src[i]);
      for (std::size_t b = 0; b < sizeof(T); ++b)
        p[i * sizeof(T) + b] = static_cast<std::byte>((bits >> (8 * b)) & 0xFF);
    }
  }
  return p + n * sizeof(T);
}

/// Reads n little-endian elements from p; returns p advanced.
template <class T>
const std::byte* get_elements(const std::byte* p, T* dst, std::size_t n) noexcept {
  if constexpr (std::endian::native == std::endian::little || sizeof(T) == 1) {
    if (n) std::memcpy(dst, p, n * sizeof(T));
  } else {
    using U = std::conditional_t<sizeof(T) == 2, std::uint16_t, std::uint32_t>;
    for (std::size_t i = 0; i < n; ++i) {
      U bits = 0;
      for (std::size_t b = sizeof(T); b-- > 0;)
        bits = static_cast<U>((bits << 8) | static_cast<std::uint8_t>(p[i * sizeof(T) + b]));
      dst[i] = std::bit_cast<T>(bits);
    }
  }
  return p + n * sizeof(T);
}

inline std::string hex64(std::uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Storage formats: the element type, whether rows carry a scale, the name used in errors and
// prefix blobs, and the conversion of one fp32 row on append.

/// fp32 storage: values are kept exactly.
struct StoreF32 {
  using element = float;
  static constexpr bool scaled = false;
  static constexpr std::string_view name = "KVCacheF32";
  static void store(const float* in, element* out, std::size_t n) noexcept {
    std::copy(in, in + n, out);
  }
};

/// fp16 storage: each value rounded to the nearest fp16 (ties to even) on append, read back
/// exactly; values beyond ±65504 become ±inf (keys and values of real models are far smaller).
struct StoreF16 {
  using element = std::uint16_t;
  static constexpr bool scaled = false;
  static constexpr std::string_view name = "KVCacheF16";
  static void store(const float* in, element* out, std::size_t n) noexcept {
    for (std::size_t i = 0; i < n; ++i) out[i] = kernels::f32_to_f16(in[i]);
  }
};

struct AlignedDelete {
  void operator()(void* p) const noexcept { ::operator delete (p, std::align_val_t{64}); }
};

/// Uninitialised 64-byte-aligned storage for n T (null if the allocation fails).
template <class T>
std::unique_ptr<T[], AlignedDelete> allocate_aligned(std::size_t n) {
  return std::unique_ptr<T[], AlignedDelete>(
      static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64}, std::nothrow)));
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Prefix files.

/// Writes a prefix blob (export_prefix's output) to `path`: first to `path`.tmp, then renamed
/// over `path`, so a failed or interrupted write never leaves a partial file under that name.
/// Errors name the file and the OS reason.
inline status write_prefix_file(const std::string& path, std::span<const std::byte> blob) {
  constexpr std::string_view where = "write_prefix_file";
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return make_error(errc::io_error, where, tmp + ": cannot open for writing: " + std::strerror(errno));
  }
  const bool wrote = blob.empty() || std::fwrite(blob.data(), 1, blob.size(), f) == blob.size();
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    std::remove(tmp.c_str());
    return make_error(errc::io_error, where,
                      tmp + ": write of " + std::to_string(blob.size()) +
                          " bytes failed: " + std::strerror(wrote ? errno : err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return make_error(errc::io_error, where, path + ": cannot rename " + tmp + " to it: " + std::strerror(e));
  }
  return {};
}

/// Reads a whole prefix file (at most max_bytes). Errors name the file.
inline result<std::vector<std::byte>> read_prefix_file(const std::string& path,
                                                       std::size_t max_bytes = std::size_t{1} << 40) {
  constexpr std::string_view where = "read_prefix_file";
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return make_error(errc::io_error, where, path + ": cannot open: " + std::strerror(errno));
  }
  std::vector<std::byte> out;
  std::byte buf[1 << 16];
  for (;;) {
    const std::size_t got = std::fread(buf, 1, sizeof(buf), f);
    if (got == 0) break;
    if (out.size() + got > max_bytes) {
      std::fclose(f);
      return make_error(errc::capacity_exceeded, where,
                        path + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
    out.insert(out.end(), buf, buf + got);
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return make_error(errc::io_error, where, path + ": read failed: " + std::strerror(err));
  return out;
}

// ---------------------------------------------------------------------------------------------

/// A dense KV cache: keys and values of every layer in one preallocated block (as opposed to
/// paged), stored in a format `Store`: fp32 (KVCacheF32), fp16 (KVCacheF16) or int8 with an fp32
/// scale per (position, kv head) (KVCacheQ8, cache/quantized_kv_cache.hpp). Layout per layer and
/// kv head (detail::LayerView): keys in tiles of 16 positions stored transposed
/// [slots / 16][head_dim][16], values row-major [slots][head_dim], scales [slots]; slots =
/// capacity rounded up to 16. Every format runs the same attention kernel
/// (detail::attend_layer, xsimd), so formats differ only in the bytes they read.
///
/// Numerics of attend(), per query at position p and head h (kv head h / (heads / kv_heads)),
/// all in fp32 (detail::chunk_partial and detail::merge_partials list every operation):
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
/// division). The tests check it against reference::attention.
///
/// Memory: bytes() (allocated by create(); pages are committed as positions are appended), plus
/// attention scratch grown on first use: per pool thread (8 head_dim + 2048 + (p / 256 + 1) *
/// group * (head_dim + 2)) floats, and for decode the partial results of every chunk.
/// Thread safety: one thread at a time; attend() splits work over `pool`.
template <class Store>
class DenseKVCache {
 public:
  using element = typename Store::element;
  /// Whether rows carry an fp32 scale (int8 storage).
  static constexpr bool scaled = Store::scaled;
  /// The name used in errors and prefix blobs ("KVCacheF32", "KVCacheF16", "KVCacheQ8").
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
    c.slots_ = detail::round_up(capacity, detail::kTile);
    c.count_ = layers * kv_heads * c.slots_ * head_dim;
    // Not zero-filled: pages are committed as positions are appended (a tile is zeroed when its
    // first position is written; only written tiles are read).
    c.k_ = detail::allocate_aligned<element>(c.count_);
    c.v_ = detail::allocate_aligned<element>(c.count_);
    bool ok = c.k_ && c.v_;
    if constexpr (scaled) {
      c.k_scale_ = detail::allocate_aligned<float>(layers * kv_heads * c.slots_);
      c.v_scale_ = detail::allocate_aligned<float>(layers * kv_heads * c.slots_);
      ok = ok && c.k_scale_ && c.v_scale_;
    }
    if (!ok) {
      return fail("create", errc::capacity_exceeded,
                  "cannot allocate " + std::to_string(c.bytes()) + " bytes");
    }
    c.layer_length_.assign(layers, 0);
    c.row_.resize(head_dim);
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
  /// kv_heads * slots * (head_dim * sizeof(element) [+ 4]), slots = capacity rounded up to 16.
  std::size_t bytes() const noexcept {
    const std::size_t scales = scaled ? 2 * layers_ * kv_heads_ * slots_ * sizeof(float) : 0;
    return 2 * count_ * sizeof(element) + scales;
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
        element* vrow = v_.get() + (head * slots_ + pos) * head_dim_;
        if constexpr (scaled) {
          k_scale_[head * slots_ + pos] = Store::store(kin, row_.data(), head_dim_);
          v_scale_[head * slots_ + pos] = Store::store(vin, vrow, head_dim_);
        } else {
          Store::store(kin, row_.data(), head_dim_);
          Store::store(vin, vrow, head_dim_);
        }
        put_key_row(head, pos, row_.data());
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
    detail::attend_layer<Arch, element, scaled>(layer_view(layer), q.data(), n_q, first_pos, heads,
                                                out.data(), pool, scratch_);
    return {};
  }

  /// Writes positions [0, n) of every layer as a prefix blob (format in detail::kPrefixMagic's
  /// comment) tagged with `model_fingerprint` into `out` (resized). Errors: n > length().
  status export_prefix(std::size_t n, std::uint64_t model_fingerprint,
                       std::vector<std::byte>& out) const {
    if (n > length()) {
      return fail("export_prefix", errc::out_of_range,
                  "n: " + std::to_string(n) + " is greater than the cached length " +
                      std::to_string(length()));
    }
    const std::size_t payload = payload_bytes(n), hb = detail::kPrefixHeaderBytes;
    out.assign(hb + payload + 8, std::byte{0});
    std::byte* p = out.data();
    std::memcpy(p, detail::kPrefixMagic, 8);
    detail::store_le32(p + 8, detail::kPrefixVersion);
    detail::store_le32(p + 12, static_cast<std::uint32_t>(hb));
    std::memcpy(p + 16, type_name.data(), std::min<std::size_t>(type_name.size(), 16));
    const std::uint64_t fields[6] = {layers_, kv_heads_, head_dim_, n, model_fingerprint, payload};
    for (std::size_t i = 0; i < 6; ++i) detail::store_le64(p + 32 + 8 * i, fields[i]);
    p += hb;
    std::vector<element> row(head_dim_);
    for (std::size_t head = 0; head < layers_ * kv_heads_; ++head) {
      for (std::size_t j = 0; j < n; ++j) {
        get_key_row(head, j, row.data());
        p = detail::put_elements(p, row.data(), head_dim_);
      }
      if constexpr (scaled) p = detail::put_elements(p, k_scale_.get() + head * slots_, n);
      p = detail::put_elements(p, v_.get() + head * slots_ * head_dim_, n * head_dim_);
      if constexpr (scaled) p = detail::put_elements(p, v_scale_.get() + head * slots_, n);
    }
    detail::store_le64(p, detail::checksum64(std::span<const std::byte>(out.data(), hb + payload)));
    return {};
  }

  /// Replaces the content of every layer by the prefix in `blob` (from export_prefix of a cache
  /// of the same type and shape, tagged with the same `model_fingerprint`); length() becomes the
  /// prefix length. Checked first, in order, each a clear error that leaves the cache unchanged:
  /// size, magic, version (format_error / unsupported), checksum (format_error: corrupted or
  /// truncated), KV type, model fingerprint, shape (invalid_argument), length > capacity
  /// (capacity_exceeded).
  status import_prefix(std::span<const std::byte> blob, std::uint64_t model_fingerprint) {
    const std::size_t hb = detail::kPrefixHeaderBytes;
    if (blob.size() < hb + 8) {
      return fail("import_prefix", errc::format_error,
                  "blob of " + std::to_string(blob.size()) + " bytes is shorter than the " +
                      std::to_string(hb + 8) + " bytes of header and checksum (truncated?)");
    }
    const std::byte* p = blob.data();
    if (std::memcmp(p, detail::kPrefixMagic, 8) != 0) {
      return fail("import_prefix", errc::format_error, "not a KV prefix blob (bad magic)");
    }
    const std::uint32_t version = detail::load_le32(p + 8), header = detail::load_le32(p + 12);
    if (version != detail::kPrefixVersion || header != hb) {
      return fail("import_prefix", errc::unsupported,
                  "format version " + std::to_string(version) + " with a " +
                      std::to_string(header) + "-byte header; this build reads version " +
                      std::to_string(detail::kPrefixVersion) + " (" + std::to_string(hb) + ")");
    }
    std::uint64_t f[6];
    for (std::size_t i = 0; i < 6; ++i) f[i] = detail::load_le64(p + 32 + 8 * i);
    const std::uint64_t payload = f[5];
    if (payload != blob.size() - hb - 8) {
      return fail("import_prefix", errc::format_error,
                  "blob of " + std::to_string(blob.size()) + " bytes but its header describes " +
                      (payload > blob.size() ? std::string("more")
                                             : std::to_string(payload + hb + 8)) +
                      " (truncated or corrupted)");
    }
    const std::uint64_t stored = detail::load_le64(p + hb + payload);
    const std::uint64_t computed = detail::checksum64(blob.first(hb + payload));
    if (stored != computed) {
      return fail("import_prefix", errc::format_error,
                  "checksum mismatch (stored " + detail::hex64(stored) + ", computed " +
                      detail::hex64(computed) + "): the blob is corrupted");
    }
    const char* name = reinterpret_cast<const char*>(p + 16);
    const std::string_view type(name, static_cast<std::size_t>(std::find(name, name + 16, '\0') - name));
    if (type != type_name) {
      return fail("import_prefix", errc::invalid_argument,
                  "the prefix holds KV type " + std::string(type) + ", this cache is " +
                      std::string(type_name));
    }
    if (f[4] != model_fingerprint) {
      return fail("import_prefix", errc::invalid_argument,
                  "the prefix was saved by another model: fingerprint " + detail::hex64(f[4]) +
                      ", this model's is " + detail::hex64(model_fingerprint));
    }
    if (f[0] != layers_ || f[1] != kv_heads_ || f[2] != head_dim_) {
      return fail("import_prefix", errc::invalid_argument,
                  "the prefix has layers x kv_heads x head_dim = " + std::to_string(f[0]) + " x " +
                      std::to_string(f[1]) + " x " + std::to_string(f[2]) + ", this cache " +
                      std::to_string(layers_) + " x " + std::to_string(kv_heads_) + " x " +
                      std::to_string(head_dim_));
    }
    const std::uint64_t n = f[3];
    if (n > capacity_) {
      return fail("import_prefix", errc::capacity_exceeded,
                  "the prefix holds " + std::to_string(n) + " positions, more than the capacity " +
                      std::to_string(capacity_));
    }
    if (payload != payload_bytes(n)) {
      return fail("import_prefix", errc::format_error,
                  "payload of " + std::to_string(payload) + " bytes, expected " +
                      std::to_string(payload_bytes(n)) + " for " + std::to_string(n) + " positions");
    }
    p += hb;
    for (std::size_t head = 0; head < layers_ * kv_heads_; ++head) {
      for (std::size_t j = 0; j < n; ++j) {
        start_tile(head, j);
        p = detail::get_elements(p, row_.data(), head_dim_);
        put_key_row(head, j, row_.data());
      }
      if constexpr (scaled) p = detail::get_elements(p, k_scale_.get() + head * slots_, n);
      p = detail::get_elements(p, v_.get() + head * slots_ * head_dim_, n * head_dim_);
      if constexpr (scaled) p = detail::get_elements(p, v_scale_.get() + head * slots_, n);
    }
    std::fill(layer_length_.begin(), layer_length_.end(), static_cast<std::size_t>(n));
    return {};
  }

  /// The storage of one layer as the kernels read it (tests, the scalar twin
  /// reference::attention_stored). Valid until the cache is modified or destroyed.
  detail::LayerView<element> layer_view(std::size_t layer) const noexcept {
    detail::LayerView<element> v;
    const std::size_t head = layer * kv_heads_;
    v.k = k_.get() + head * slots_ * head_dim_;
    v.v = v_.get() + head * slots_ * head_dim_;
    if constexpr (scaled) {
      v.k_scale = k_scale_.get() + head * slots_;
      v.v_scale = v_scale_.get() + head * slots_;
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
    return layers_ * kv_heads_ * n * (2 * head_dim_ * sizeof(element) + (scaled ? 8 : 0));
  }

  // Zeroes the key tile (and the scales) of position pos of head (layer * kv_heads + kv head)
  // when pos starts it, so that tiles the kernels read hold no uninitialised lanes.
  void start_tile(std::size_t head, std::size_t pos) noexcept {
    if (pos % detail::kTile != 0) return;
    element* tile = k_.get() + (head * slots_ + pos) * head_dim_;  // tile pos/16 starts at pos*hd
    std::fill(tile, tile + detail::kTile * head_dim_, element{});
    if constexpr (scaled) {
      std::fill_n(k_scale_.get() + head * slots_ + pos, detail::kTile, 0.0f);
      std::fill_n(v_scale_.get() + head * slots_ + pos, detail::kTile, 0.0f);
    }
  }

  void put_key_row(std::size_t head, std::size_t pos, const element* row) noexcept {
    element* kh = k_.get() + head * slots_ * head_dim_;
    for (std::size_t c = 0; c < head_dim_; ++c)
      kh[detail::LayerView<element>::k_index(pos, c, head_dim_)] = row[c];
  }

  void get_key_row(std::size_t head, std::size_t pos, element* row) const noexcept {
    const element* kh = k_.get() + head * slots_ * head_dim_;
    for (std::size_t c = 0; c < head_dim_; ++c)
      row[c] = kh[detail::LayerView<element>::k_index(pos, c, head_dim_)];
  }

  std::size_t layers_ = 0, kv_heads_ = 0, head_dim_ = 0, capacity_ = 0;
  std::size_t slots_ = 0;  // capacity rounded up to detail::kTile
  std::size_t count_ = 0;  // elements of each of k_, v_
  // [layers][kv_heads][slots / 16][head_dim][16] keys, [layers][kv_heads][slots][head_dim] values
  std::unique_ptr<element[], detail::AlignedDelete> k_, v_;
  // [layers][kv_heads][slots] fp32 scales (scaled formats only)
  std::unique_ptr<float[], detail::AlignedDelete> k_scale_, v_scale_;
  std::vector<std::size_t> layer_length_;  // [layers]
  std::vector<element> row_;               // [head_dim] one converted key row
  std::vector<float> scratch_;             // attention scratch, see detail::attend_scratch_floats
};

/// fp32 keys and values: attention equals the math of the class comment on the exact inputs.
using KVCacheF32 = DenseKVCache<detail::StoreF32>;
/// fp16 keys and values (half the memory): inputs rounded once to fp16 on append.
using KVCacheF16 = DenseKVCache<detail::StoreF16>;

static_assert(PrefixKVCache<KVCacheF32>);
static_assert(PrefixKVCache<KVCacheF16>);

}  // namespace edgellm::cache
