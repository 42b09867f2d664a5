// SPDX-License-Identifier: Apache-2.0
// The KV cache of every layer in Vulkan device memory (int8 codes with fp32 scales, or fp16),
// and KvAppend, the op that stores new fp32 rows into it on the device, recorded into a
// CommandSequence (shaders/vulkan/kv_append.comp), bit for bit as cache::KVCacheQ8 /
// cache::KVCacheF16 store them. Attention over it: backend/vulkan/attention.hpp.
#pragma once

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/pipeline.hpp"
#include "edgellm/backend/vulkan/spirv/kv_append.hpp"
#include "edgellm/cache/prefix_blob.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/detail/bytes.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace edgellm::backend::vk {

/// What a stored K/V element is on the device.
enum class KvFormat {
  int8,  ///< int8 codes + one fp32 scale per row: cache::detail::StoreQ8's format
  f16,   ///< IEEE fp16, nearest even: cache::detail::StoreF16's
};

/// "int8", "f16".
inline const char* kv_format_name(KvFormat f) noexcept {
  return f == KvFormat::int8 ? "int8" : "f16";
}

/// The device format of a host KV type: int8 and f16; f32 and int4 are refused by name
/// (errc::unsupported at `where`, `what` leading the message: "kv_type", "--kv-type").
inline result<KvFormat> kv_format_of(cache::KvType t, std::string_view what,
                                     std::string_view where) {
  if (t == cache::KvType::int8) return KvFormat::int8;
  if (t == cache::KvType::f16) return KvFormat::f16;
  return make_error(errc::unsupported, where,
                    std::string(what) + " " + cache::kv_type_name(t) +
                        ": the device caches hold int8 or f16; choose one of them");
}

/// Keys and values of `layers` layers in four device buffers; a row is one position of one kv
/// head (head_dim values):
///   k codes, v codes  [layers][capacity][kv_heads][head_dim] int8 (4 per 32-bit word, byte b of
///                     word i is coordinate 4 i + b) or fp16 (2 per word, low half first)
///   k scales, v scales [layers][capacity][kv_heads] fp32 (int8 only; a 4-byte placeholder for
///                     f16, so that the shaders bind the same buffers)
/// The cache is written by KvAppend (and import_prefix) and read by vk::Attention (and
/// export_prefix: cache::PrefixKVCache, for the prompt cache); the host keeps the length
/// of each layer, so truncate() (rollback) costs nothing on the device: positions past a layer's
/// length are never read and are overwritten by the next append.
/// Preconditions: head_dim a multiple of 4 and at most 256 (the attention shader's shared
/// query), each K/V buffer within the device's maxStorageBufferRange.
/// Move-only; the Device must outlive it. One thread at a time.
class KVCache {
 public:
  /// Stored codes and scales of some rows, as read back by read() (tests, debugging).
  struct Rows {
    std::vector<std::byte> k, v;  ///< [n][kv_heads][head_dim] int8 or fp16 (host byte order)
    std::vector<float> k_scale, v_scale;  ///< [n][kv_heads] (int8; empty for f16)
  };

  KVCache(KVCache&&) noexcept = default;
  KVCache& operator=(KVCache&&) noexcept = default;
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

  /// Allocates the cache (device-local memory, uninitialised). All sizes must be positive;
  /// errors name the argument.
  static result<KVCache> create(Device& dev, KvFormat format, std::size_t layers,
                                std::size_t kv_heads, std::size_t head_dim, std::size_t capacity) {
    constexpr std::string_view where = "vulkan KVCache::create";
    const std::pair<std::size_t, const char*> sizes[] = {
        {layers, "layers"}, {kv_heads, "kv_heads"}, {head_dim, "head_dim"}, {capacity, "capacity"}};
    for (const auto& [v, name] : sizes)
      if (v == 0)
        return make_error(errc::invalid_argument, where, std::string(name) + ": must be positive");
    if (head_dim % 4 != 0 || head_dim > kMaxHeadDim) {
      return make_error(errc::unsupported, where,
                        "head_dim: " + std::to_string(head_dim) +
                            " (the shaders need a multiple of 4, at most 256)");
    }
    const std::size_t elem = format == KvFormat::int8 ? 1 : 2;
    // Overflow-safe: each factor is checked against the device's range before multiplying on.
    const VkDeviceSize range = dev.info().max_storage_buffer_range;
    std::size_t bytes = head_dim * elem;
    for (std::size_t f : {kv_heads, capacity, layers}) {
      if (bytes > range / f) {
        return make_error(errc::capacity_exceeded, where,
                          "capacity: layers * capacity * kv_heads * head_dim * " +
                              std::to_string(elem) + " bytes (" + std::to_string(layers) + " * " +
                              std::to_string(capacity) + " * " + std::to_string(kv_heads) + " * " +
                              std::to_string(head_dim) + ") exceed one storage buffer of " +
                              std::to_string(range) + " bytes on " + dev.info().name);
      }
      bytes *= f;
    }
    KVCache c;
    c.format_ = format;
    c.layers_ = layers;
    c.kv_heads_ = kv_heads;
    c.head_dim_ = head_dim;
    c.capacity_ = capacity;
    c.layer_length_.assign(layers, 0);
    const std::size_t scale_bytes =
        format == KvFormat::int8 ? layers * capacity * kv_heads * sizeof(float) : 4;
    for (auto [buf, size, name] :
         {std::tuple{&c.k_, bytes, "kv cache k"}, std::tuple{&c.v_, bytes, "kv cache v"},
          std::tuple{&c.k_scale_, scale_bytes, "kv cache k scales"},
          std::tuple{&c.v_scale_, scale_bytes, "kv cache v scales"}}) {
      auto b = Buffer::create(dev, size, name);
      if (!b) return b.error();
      *buf = std::move(*b);
    }
    return c;
  }

  KvFormat format() const noexcept { return format_; }
  std::size_t layers() const noexcept { return layers_; }
  std::size_t kv_heads() const noexcept { return kv_heads_; }
  std::size_t head_dim() const noexcept { return head_dim_; }
  std::size_t capacity() const noexcept { return capacity_; }
  /// Positions held by every layer.
  std::size_t length() const noexcept {
    std::size_t n = capacity_;
    for (std::size_t l : layer_length_) n = std::min(n, l);
    return n;
  }
  /// Positions held by one layer (0 past the last layer).
  std::size_t layer_length(std::size_t layer) const noexcept {
    return layer < layers_ ? layer_length_[layer] : 0;
  }
  /// Device bytes of the four buffers.
  std::size_t bytes() const noexcept {
    return k_.size() + v_.size() + k_scale_.size() + v_scale_.size();
  }

  /// Keeps positions [0, n) of every layer (n <= length()); nothing runs on the device.
  status truncate(std::size_t n) {
    if (n > length()) {
      return make_error(errc::out_of_range, "vulkan KVCache::truncate",
                        "n: " + std::to_string(n) + " is greater than the cached length " +
                            std::to_string(length()));
    }
    for (std::size_t& l : layer_length_) l = std::min(l, n);
    return {};
  }

  /// Reads back positions [first_pos, first_pos + n) of `layer` (all must be held). Waits for
  /// the device (a submission of its own; not while a recorded append is pending).
  result<Rows> read(std::size_t layer, std::size_t first_pos, std::size_t n) const {
    if (layer >= layers_ || first_pos > layer_length_[layer] ||
        n > layer_length_[layer] - first_pos) {
      return make_error(errc::out_of_range, "vulkan KVCache::read",
                        "layer " + std::to_string(layer) + ", positions " +
                            std::to_string(first_pos) + " + " + std::to_string(n) +
                            ": not held (layers " + std::to_string(layers_) + ")");
    }
    Rows r;
    const std::size_t row0 = (layer * capacity_ + first_pos) * kv_heads_;
    const std::size_t rows = n * kv_heads_, row_bytes = head_dim_ * element_bytes();
    r.k.resize(rows * row_bytes);
    r.v.resize(rows * row_bytes);
    if (auto st = k_.read(r.k, row0 * row_bytes); !st) return st.error();
    if (auto st = v_.read(r.v, row0 * row_bytes); !st) return st.error();
    if (format_ == KvFormat::int8) {
      r.k_scale.resize(rows);
      r.v_scale.resize(rows);
      if (auto st = k_scale_.read(std::as_writable_bytes(std::span(r.k_scale)), row0 * 4); !st)
        return st.error();
      if (auto st = v_scale_.read(std::as_writable_bytes(std::span(r.v_scale)), row0 * 4); !st)
        return st.error();
    }
    return r;
  }

  /// The KV type a prefix blob of this cache names (cache/prefix_blob.hpp). Not the CPU caches'
  /// names: the device computes the keys and values in another order, so a state saved on one
  /// backend is not the state the other would hold, and is refused by name.
  std::string_view type_name() const noexcept {
    return format_ == KvFormat::int8 ? "VulkanKVCacheQ8" : "VulkanKVCacheF16";
  }

  /// cache::PrefixKVCache: the first n positions of every layer as a prefix blob tagged with
  /// `model_fingerprint`, in the CPU caches' payload order (per layer, per kv head: keys
  /// [n][head_dim], key scales [n] (int8), values, value scales; little-endian). Reads the
  /// device back (not while a recorded append is pending).
  status export_prefix(std::size_t n, std::uint64_t model_fingerprint,
                       std::vector<std::byte>& out) const {
    if (n > length()) {
      return make_error(errc::out_of_range, "vulkan KVCache::export_prefix",
                        "n: " + std::to_string(n) + " is greater than the cached length " +
                            std::to_string(length()));
    }
    const std::size_t payload = payload_bytes(n);
    std::vector<std::byte> blob(cache::prefix_blob_bytes(payload), std::byte{0});
    cache::store_prefix_header(
        blob.data(), {type_name(), layers_, kv_heads_, head_dim_, n, model_fingerprint, payload});
    std::byte* p = blob.data() + cache::kPrefixHeaderBytes;
    const std::size_t row_bytes = head_dim_ * element_bytes();
    for (std::size_t layer = 0; layer < layers_; ++layer) {
      auto rows = read(layer, 0, n);  // [n][kv_heads][head_dim], [n][kv_heads]
      if (!rows) return rows.error();
      for (std::size_t h = 0; h < kv_heads_; ++h) {
        for (const auto& [codes, scales] : {std::pair{&rows->k, &rows->k_scale},
                                           std::pair{&rows->v, &rows->v_scale}}) {
          for (std::size_t j = 0; j < n; ++j)
            p = store_row(p, codes->data() + (j * kv_heads_ + h) * row_bytes);
          if (format_ == KvFormat::int8) {
            for (std::size_t j = 0; j < n; ++j)
              p = edgellm::detail::store_le_array(p, scales->data() + j * kv_heads_ + h, 1);
          }
        }
      }
    }
    cache::seal_prefix_blob(blob);
    out = std::move(blob);
    return {};
  }

  /// cache::PrefixKVCache: replaces every layer's content by the prefix in `blob` (from
  /// export_prefix of a cache of the same format and shape, tagged with the same
  /// `model_fingerprint`); length() becomes its length. Checked first, each a clear error that
  /// leaves the cache unchanged: framing (size, magic, version, checksum), KV type, fingerprint,
  /// shape, length > capacity. A device error while writing leaves the cache empty.
  status import_prefix(std::span<const std::byte> blob, std::uint64_t model_fingerprint) {
    constexpr std::string_view where = "vulkan KVCache::import_prefix";
    auto parsed = cache::parse_prefix_blob(blob, where);
    if (!parsed) return parsed.error();
    const cache::PrefixBlobHeader& h = *parsed;
    if (h.type != type_name()) {
      return make_error(errc::invalid_argument, where,
                        "the prefix holds KV type " + std::string(h.type) + ", this cache is " +
                            std::string(type_name()));
    }
    if (h.fingerprint != model_fingerprint) {
      return make_error(errc::invalid_argument, where,
                        "the prefix was saved by another model: fingerprint " +
                            edgellm::detail::hex64(h.fingerprint) + ", this model's is " +
                            edgellm::detail::hex64(model_fingerprint));
    }
    if (h.layers != layers_ || h.kv_heads != kv_heads_ || h.head_dim != head_dim_) {
      return make_error(errc::invalid_argument, where,
                        "the prefix has layers x kv_heads x head_dim = " +
                            std::to_string(h.layers) + " x " + std::to_string(h.kv_heads) +
                            " x " + std::to_string(h.head_dim) + ", this cache " +
                            std::to_string(layers_) + " x " + std::to_string(kv_heads_) + " x " +
                            std::to_string(head_dim_));
    }
    if (h.length > capacity_) {
      return make_error(errc::capacity_exceeded, where,
                        "the prefix holds " + std::to_string(h.length) +
                            " positions, more than the capacity " + std::to_string(capacity_));
    }
    const std::size_t n = static_cast<std::size_t>(h.length);
    if (h.payload_bytes != payload_bytes(n)) {
      return make_error(errc::format_error, where,
                        "payload of " + std::to_string(h.payload_bytes) + " bytes, expected " +
                            std::to_string(payload_bytes(n)) + " for " + std::to_string(n) +
                            " positions");
    }
    const std::size_t row_bytes = head_dim_ * element_bytes();
    Rows rows;  // one layer: [n][kv_heads][head_dim], [n][kv_heads]
    rows.k.resize(n * kv_heads_ * row_bytes);
    rows.v.resize(rows.k.size());
    if (format_ == KvFormat::int8) {
      rows.k_scale.resize(n * kv_heads_);
      rows.v_scale.resize(n * kv_heads_);
    }
    const std::byte* p = blob.data() + cache::kPrefixHeaderBytes;
    const auto failed = [&](status st) {
      std::fill(layer_length_.begin(), layer_length_.end(), std::size_t{0});
      return st;
    };
    for (std::size_t layer = 0; layer < layers_; ++layer) {
      for (std::size_t hd = 0; hd < kv_heads_; ++hd) {
        for (const auto& [codes, scales] : {std::pair{&rows.k, &rows.k_scale},
                                           std::pair{&rows.v, &rows.v_scale}}) {
          for (std::size_t j = 0; j < n; ++j)
            p = load_row(p, codes->data() + (j * kv_heads_ + hd) * row_bytes);
          if (format_ == KvFormat::int8) {
            for (std::size_t j = 0; j < n; ++j)
              p = edgellm::detail::load_le_array(p, scales->data() + j * kv_heads_ + hd, 1);
          }
        }
      }
      const std::size_t row0 = layer * capacity_ * kv_heads_;
      if (auto st = k_.write(rows.k, row0 * row_bytes); !st) return failed(st);
      if (auto st = v_.write(rows.v, row0 * row_bytes); !st) return failed(st);
      if (format_ == KvFormat::int8) {
        if (auto st = k_scale_.write(std::as_bytes(std::span(rows.k_scale)), row0 * 4); !st)
          return failed(st);
        if (auto st = v_scale_.write(std::as_bytes(std::span(rows.v_scale)), row0 * 4); !st)
          return failed(st);
      }
    }
    std::fill(layer_length_.begin(), layer_length_.end(), n);
    return {};
  }

  /// The buffers, in the shaders' binding order: k codes, v codes, k scales, v scales.
  const Buffer& k_codes() const noexcept { return k_; }
  const Buffer& v_codes() const noexcept { return v_; }
  const Buffer& k_scales() const noexcept { return k_scale_; }
  const Buffer& v_scales() const noexcept { return v_scale_; }

  /// The largest head_dim the shaders take.
  static constexpr std::size_t kMaxHeadDim = 256;

 private:
  friend class KvAppend;
  KVCache() = default;

  std::size_t element_bytes() const noexcept { return format_ == KvFormat::int8 ? 1 : 2; }

  // Bytes of a prefix blob's payload for n positions (the CPU caches' formula).
  std::size_t payload_bytes(std::size_t n) const noexcept {
    return layers_ * kv_heads_ * n *
           (2 * head_dim_ * element_bytes() + (format_ == KvFormat::int8 ? 8 : 0));
  }

  // One row of head_dim elements between the device's host-order bytes and the blob's
  // little-endian ones.
  std::byte* store_row(std::byte* p, const std::byte* row) const noexcept {
    if (format_ == KvFormat::int8) {
      std::memcpy(p, row, head_dim_);
      return p + head_dim_;
    }
    for (std::size_t i = 0; i < head_dim_; ++i) {
      std::uint16_t bits;
      std::memcpy(&bits, row + 2 * i, 2);
      p = edgellm::detail::store_le_array(p, &bits, 1);
    }
    return p;
  }
  const std::byte* load_row(const std::byte* p, std::byte* row) const noexcept {
    if (format_ == KvFormat::int8) {
      std::memcpy(row, p, head_dim_);
      return p + head_dim_;
    }
    for (std::size_t i = 0; i < head_dim_; ++i) {
      std::uint16_t bits;
      p = edgellm::detail::load_le_array(p, &bits, 1);
      std::memcpy(row + 2 * i, &bits, 2);
    }
    return p;
  }

  KvFormat format_ = KvFormat::int8;
  std::size_t layers_ = 0, kv_heads_ = 0, head_dim_ = 0, capacity_ = 0;
  Buffer k_, v_;                           // [layers][capacity][kv_heads][head_dim] int8 or fp16
  Buffer k_scale_, v_scale_;               // [layers][capacity][kv_heads] fp32 (int8), else 4 bytes
  std::vector<std::size_t> layer_length_;  // [layers] positions held
};

/// Stores rows of fp32 keys and values from two device buffers into a KVCache at positions
/// first_pos..: one workgroup per (row, kv head) quantises (int8: amax / 127 scale, nearest-even
/// codes clamped to ±127) or rounds (f16) the row, as cache::detail::StoreQ8 / StoreF16 do on
/// the CPU, bit for bit (for rows without fp32 subnormals: a device that flushes subnormal
/// products may round those to 0).
/// record() adds the dispatch to a CommandSequence and advances the layer's length at once (the
/// host's view of what the submitted sequence will hold; an abandoned sequence is undone with
/// KVCache::truncate). Holds only the pipeline: one op serves every cache and buffer of its
/// Device. Move-only; the Device must outlive it.
class KvAppend {
 public:
  static result<KvAppend> create(Device& dev) {
    KvAppend op;
    // Two uints of shared memory per invocation (the K and V amax).
    const std::uint32_t wg = choose_workgroup_size(dev.info(), 64, 8);
    auto pipe = ComputePipeline::create(dev, "kv_append", spirv::kKvAppendSpv, 6, sizeof(Push), wg);
    if (!pipe) return pipe.error();
    op.pipeline_ = std::move(*pipe);
    return op;
  }

  /// Records the store of rows [0, rows) of k and v (fp32 [rows][kv_heads][head_dim] each, in
  /// buffers of at least that size) at positions [first_pos, first_pos + rows) of `layer`.
  /// first_pos must equal the layer's length (truncate first to overwrite). Errors name the
  /// argument; nothing is recorded and the length is unchanged on error.
  status record(CommandSequence& seq, KVCache& cache, const Buffer& k, const Buffer& v,
                std::size_t layer, std::size_t first_pos, std::size_t rows) const {
    constexpr std::string_view where = "vulkan KvAppend::record";
    const auto& info = seq.device().info();
    if (layer >= cache.layers()) {
      return make_error(
          errc::out_of_range, where,
          "layer: " + std::to_string(layer) + " >= layers " + std::to_string(cache.layers()));
    }
    if (rows == 0) return make_error(errc::invalid_argument, where, "rows: must be positive");
    if (first_pos >= cache.capacity() || rows > cache.capacity() - first_pos) {
      return make_error(errc::capacity_exceeded, where,
                        "first_pos + rows: " + std::to_string(first_pos) + " + " +
                            std::to_string(rows) + " exceed the capacity " +
                            std::to_string(cache.capacity()));
    }
    if (first_pos != cache.layer_length_[layer]) {
      return make_error(errc::invalid_argument, where,
                        "first_pos: " + std::to_string(first_pos) + " but layer " +
                            std::to_string(layer) + " holds " +
                            std::to_string(cache.layer_length_[layer]) +
                            " positions (append in order; truncate first to overwrite)");
    }
    const std::string shape = "[" + std::to_string(rows) + "][" + std::to_string(cache.kv_heads()) +
                              "][" + std::to_string(cache.head_dim()) + "] fp32";
    const std::uint64_t bytes = std::uint64_t{rows} * cache.kv_heads() * cache.head_dim() * 4;
    if (auto st = require_bytes(k, bytes, where, "k", shape, info); !st) return st;
    if (auto st = require_bytes(v, bytes, where, "v", shape, info); !st) return st;
    if (cache.kv_heads() > info.max_workgroup_count[0] || rows > info.max_workgroup_count[1]) {
      return make_error(errc::unsupported, where,
                        "rows: " + std::to_string(rows) + " x kv_heads " +
                            std::to_string(cache.kv_heads()) +
                            " workgroups exceed the device's dispatch limits (append in smaller "
                            "chunks)");
    }
    const Push push{static_cast<std::uint32_t>(layer * cache.capacity() + first_pos),
                    static_cast<std::uint32_t>(cache.kv_heads()),
                    static_cast<std::uint32_t>(cache.head_dim()),
                    cache.format() == KvFormat::int8 ? 1u : 0u};
    const Buffer* bound[] = {
        &cache.k_codes(), &cache.v_codes(), &cache.k_scales(), &cache.v_scales(), &k, &v};
    if (auto st =
            seq.dispatch(pipeline_, bound, &push, static_cast<std::uint32_t>(cache.kv_heads()),
                         static_cast<std::uint32_t>(rows));
        !st)
      return st;
    cache.layer_length_[layer] = first_pos + rows;
    return {};
  }

  std::uint32_t workgroup_size() const noexcept { return pipeline_.workgroup_size(); }

 private:
  struct Push {
    std::uint32_t pos0, kv_heads, head_dim, q8;  // see kv_append.comp
  };
  KvAppend() = default;

  ComputePipeline pipeline_;
};

}  // namespace edgellm::backend::vk
