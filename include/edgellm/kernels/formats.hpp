// SPDX-License-Identifier: Apache-2.0
// The packed int4 weight format (AWQ math: w = (q - z) * s per group) that every kernel reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/result.hpp"

namespace edgellm::kernels {

/// Group sizes the kernels are instantiated for (AutoAWQ checkpoints use 128, some 64 or 32).
inline constexpr bool is_supported_group_size(std::size_t g) noexcept {
  return g == 32 || g == 64 || g == 128;
}

/// One packed tile: 16 consecutive output rows (n) x one group of G input channels (k) of an
/// int4 weight matrix W[n][k], with AWQ's asymmetric dequantisation
///     w[r][k] = (q[r][k] - zero[r]) * scale[r]        (q, zero in [0, 15]; scale fp16).
///
/// Layout, chosen for integer dot-product instructions (vpdpbusd, vpmaddubsw, sdot): the codes
/// come in G/8 blocks of 64 bytes; block b covers k = 8b .. 8b+7 of all 16 rows, and
///     byte 4*r + j  (r = row 0..15, j = 0..3)  holds  low nibble  = q[r][8b + j]
///                                                     high nibble = q[r][8b + 4 + j].
/// So `codes & 0x0F` is a vector whose 32-bit lane r holds q[r][8b..8b+3] as four bytes, and
/// `(codes >> 4) & 0x0F` holds q[r][8b+4..8b+7]: one broadcast of four activations and one
/// 4-way dot product per lane yields 16 rows at once, with no shuffles and no horizontal sums.
/// The same lane = row mapping lets a plain fp32 path read lane r with shifts and masks.
/// Rows past the matrix's n (padding of the last tile) hold q = z = 0 and scale = 0.
template <std::size_t G>
struct alignas(64) Q4Tile {
  static_assert(G == 32 || G == 64 || G == 128, "group size must be 32, 64 or 128");
  static constexpr std::size_t rows = 16;           ///< output rows per tile
  static constexpr std::size_t group_size = G;      ///< input channels per tile
  static constexpr std::size_t kblocks = G / 8;     ///< 64-byte code blocks per tile
  std::uint16_t scale[rows];        ///< fp16 bits of each row's scale
  std::uint8_t zero[rows];          ///< each row's zero point, 0..15
  std::uint8_t reserved[16];        ///< zero; pads the header to one 64-byte line
  std::uint8_t codes[kblocks][64];  ///< nibbles, see above
};
static_assert(sizeof(Q4Tile<32>) == 64 + 32 * 8);
static_assert(sizeof(Q4Tile<64>) == 64 + 64 * 8);
static_assert(sizeof(Q4Tile<128>) == 64 + 128 * 8, "1088 bytes per 16 x 128 weights");

/// Software-prefetches every cache line of the tile `distance` tiles after `tile` (the next
/// tiles of a tile row lie back to back, so this runs ahead along a kernel's stream). Locality
/// is __builtin_prefetch's: 3 = all levels (T0), 2 = L2 and beyond (T1). Only an address is
/// formed, no pointer arithmetic, and prefetches never fault: past the end is harmless.
template <int Locality, std::size_t G>
inline void prefetch_tile_ahead(const Q4Tile<G>* tile, std::size_t distance) noexcept {
  const std::uintptr_t ahead =
      reinterpret_cast<std::uintptr_t>(tile) + distance * sizeof(Q4Tile<G>);
  for (std::size_t b = 0; b < sizeof(Q4Tile<G>); b += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(ahead + b), 0, Locality);
}

/// Bytes of one packed tile for a run-time group size.
inline constexpr std::size_t q4_tile_bytes(std::size_t group_size) noexcept {
  return 64 + group_size * 8;
}

/// Bytes of a packed int4 matrix [n][k] with `group_size` (Q4Matrix::byte_size; memory plans).
inline constexpr std::size_t q4_matrix_bytes(std::size_t n, std::size_t k,
                                             std::size_t group_size) noexcept {
  return group_size ? (n + 15) / 16 * (k / group_size) * q4_tile_bytes(group_size) : 0;
}

/// An int4 weight matrix W[n][k] (nn.Linear orientation: n outputs, k inputs) in the packed
/// tile layout. Tiles are stored row-tile major: tile (t, g) covers rows 16t..16t+15 and input
/// channels g*G..g*G+G-1, at byte offset (t * n_groups + g) * tile_bytes, so one row tile's
/// groups are contiguous and a GEMV streams the matrix front to back.
/// The storage is either owned (edgellm::detail::allocate_aligned, MemoryUse::streamed: 64-byte
/// aligned, on 2 MiB pages for large matrices where the kernel allows) or a read-only view of
/// memory the caller keeps alive (e.g. an mmapped cache file). Read-only after packing, so it may
/// be shared by threads.
class Q4Matrix {
 public:
  Q4Matrix() = default;

  /// Allocates a zero-filled matrix (with zero_fill = false: uninitialised, for a caller that
  /// writes every byte); fails on bad sizes or allocation failure.
  static result<Q4Matrix> allocate(std::size_t n, std::size_t k, std::size_t group_size,
                                   bool zero_fill = true) {
    if (auto st = check_dims(n, k, group_size, "Q4Matrix::allocate"); !st) return st.error();
    Q4Matrix m;
    m.n_ = n;
    m.k_ = k;
    m.group_size_ = group_size;
    const std::size_t bytes = m.byte_size();
    auto buf = edgellm::detail::allocate_aligned(bytes, edgellm::detail::MemoryUse::streamed);
    if (!buf) {
      return edgellm::detail::allocation_error("Q4Matrix::allocate",
                                               "packed int4 [" + std::to_string(n) + ", " +
                                                   std::to_string(k) + "]",
                                               bytes);
    }
    std::byte* p = buf.get();
    if (zero_fill) std::memset(p, 0, bytes);
    m.owned_ = std::move(buf);
    m.data_ = p;
    return m;
  }

  /// Wraps existing packed bytes (64-byte aligned, byte_size() long) without copying.
  static result<Q4Matrix> view(const std::byte* data, std::size_t size, std::size_t n,
                               std::size_t k, std::size_t group_size) {
    if (auto st = check_dims(n, k, group_size, "Q4Matrix::view"); !st) return st.error();
    Q4Matrix m;
    m.n_ = n;
    m.k_ = k;
    m.group_size_ = group_size;
    if (data == nullptr || size < m.byte_size()) {
      return make_error(errc::invalid_argument, "Q4Matrix::view",
                        "data: need " + std::to_string(m.byte_size()) + " bytes, got " +
                            std::to_string(data ? size : 0));
    }
    if (reinterpret_cast<std::uintptr_t>(data) % 64 != 0) {
      return make_error(errc::invalid_argument, "Q4Matrix::view", "data: not 64-byte aligned");
    }
    m.data_ = data;
    return m;
  }

  std::size_t n() const noexcept { return n_; }                  ///< output rows
  std::size_t k() const noexcept { return k_; }                  ///< input channels
  std::size_t group_size() const noexcept { return group_size_; }
  std::size_t n_groups() const noexcept { return group_size_ ? k_ / group_size_ : 0; }
  std::size_t n_tiles() const noexcept { return (n_ + 15) / 16; }  ///< 16-row tiles
  std::size_t tile_bytes() const noexcept { return q4_tile_bytes(group_size_); }
  std::size_t byte_size() const noexcept { return q4_matrix_bytes(n_, k_, group_size_); }
  bool empty() const noexcept { return data_ == nullptr; }
  bool owns_data() const noexcept { return owned_ != nullptr; }

  /// Packed bytes, 64-byte aligned.
  const std::byte* data() const noexcept { return data_; }
  /// Writable bytes; only for owned matrices (packing). Null for views.
  std::byte* mutable_data() noexcept { return owned_.get(); }

  /// Pointer to tile (t, g) as the typed struct for group size G.
  template <std::size_t G>
  const Q4Tile<G>* tile(std::size_t t, std::size_t g) const noexcept {
    return reinterpret_cast<const Q4Tile<G>*>(data_ + (t * n_groups() + g) * sizeof(Q4Tile<G>));
  }
  template <std::size_t G>
  Q4Tile<G>* mutable_tile(std::size_t t, std::size_t g) noexcept {
    return reinterpret_cast<Q4Tile<G>*>(owned_.get() + (t * n_groups() + g) * sizeof(Q4Tile<G>));
  }

  /// Scalar accessors (slow; for tests, export and the reference kernels).
  std::uint8_t code(std::size_t row, std::size_t col) const noexcept {
    const std::byte* tp = tile_ptr(row / 16, col / group_size_);
    const std::size_t r = row % 16, kk = col % group_size_;
    const std::size_t b = kk / 8, j = kk % 8;
    const auto byte = static_cast<std::uint8_t>(tp[64 + b * 64 + 4 * r + (j & 3)]);
    return j < 4 ? (byte & 0x0F) : (byte >> 4);
  }
  std::uint8_t zero(std::size_t row, std::size_t group) const noexcept {
    return static_cast<std::uint8_t>(tile_ptr(row / 16, group)[32 + row % 16]);
  }
  std::uint16_t scale_bits(std::size_t row, std::size_t group) const noexcept {
    const std::byte* p = tile_ptr(row / 16, group) + 2 * (row % 16);
    std::uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }

  /// Checks n, k and group size: k a positive multiple of a supported group size, n > 0.
  static status check_dims(std::size_t n, std::size_t k, std::size_t group_size,
                           std::string_view where) {
    if (!is_supported_group_size(group_size)) {
      return make_error(errc::unsupported, where,
                        "group_size: " + std::to_string(group_size) +
                            " is not supported (32, 64 or 128)");
    }
    if (k == 0 || k % group_size != 0) {
      return make_error(errc::invalid_argument, where,
                        "k: " + std::to_string(k) + " is not a positive multiple of group_size " +
                            std::to_string(group_size));
    }
    if (n == 0) return make_error(errc::invalid_argument, where, "n: must be positive");
    if (n > (std::size_t{1} << 31) || k > (std::size_t{1} << 31)) {
      return make_error(errc::invalid_argument, where, "n or k: larger than 2^31");
    }
    return {};
  }

 private:
  const std::byte* tile_ptr(std::size_t t, std::size_t g) const noexcept {
    return data_ + (t * n_groups() + g) * tile_bytes();
  }

  edgellm::detail::AlignedBuffer owned_;
  const std::byte* data_ = nullptr;
  std::size_t n_ = 0, k_ = 0, group_size_ = 0;
};

}  // namespace edgellm::kernels
