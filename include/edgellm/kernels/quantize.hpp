// SPDX-License-Identifier: Apache-2.0
// Round-to-nearest int4 quantiser, and packing between the plain (unpacked) form and Q4Matrix.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/result.hpp"

namespace edgellm::kernels {

/// The plain form of an int4 AWQ-style matrix W[n][k]: one byte per code, the specification
/// every packed layout is converted from and to.
///   q[n * k]          codes, row-major, each 0..15
///   zero[n * groups]  zero point per (row, group), 0..15
///   scale[n * groups] fp16 bits of the scale per (row, group)
/// Dequantised weight: w[r][c] = (q[r][c] - zero[r][c / G]) * f16_to_f32(scale[r][c / G]).
struct UnpackedQ4 {
  std::size_t n = 0, k = 0, group_size = 0;
  std::vector<std::uint8_t> q;
  std::vector<std::uint8_t> zero;
  std::vector<std::uint16_t> scale;

  std::size_t n_groups() const noexcept { return group_size ? k / group_size : 0; }
  /// Dequantised value of W[r][c] in fp32 ((q - z) is an integer in [-15, 15] and the scale has
  /// 11 significant bits, so the product is exact in fp32).
  float weight(std::size_t r, std::size_t c) const noexcept {
    const std::size_t g = r * n_groups() + c / group_size;
    return static_cast<float>(static_cast<int>(q[r * k + c]) - static_cast<int>(zero[g])) *
           f16_to_f32(scale[g]);
  }
  /// Bytes an UnpackedQ4 of [n][k] holds (one code byte per weight, a zero byte and an fp16
  /// scale per group): the transient of an AWQ import or an RTN quantisation (memory plans).
  static constexpr std::size_t bytes_for(std::size_t n, std::size_t k, std::size_t g) noexcept {
    return n * k * sizeof(std::uint8_t) +
           n * (g ? k / g : 0) * (sizeof(std::uint8_t) + sizeof(std::uint16_t));
  }
};

/// Sizes w.q, w.zero and w.scale for w.n, w.k and w.group_size (zero-filled); an out_of_memory
/// error naming `what` (a tensor) and the bytes when the memory is not there.
inline status allocate_unpacked(UnpackedQ4& w, std::string_view where, std::string_view what) {
  const std::size_t ng = w.n_groups();
  const std::string name(what);
  if (auto st = edgellm::detail::try_resize(w.q, w.n * w.k, where, name + " (int4 codes)"); !st)
    return st;
  if (auto st = edgellm::detail::try_resize(w.zero, w.n * ng, where, name + " (zero points)"); !st)
    return st;
  return edgellm::detail::try_resize(w.scale, w.n * ng, where, name + " (scales)");
}

/// Dequantises to a row-major fp32 matrix [n][k].
inline std::vector<float> dequantize(const UnpackedQ4& w) {
  std::vector<float> out(w.n * w.k);
  for (std::size_t r = 0; r < w.n; ++r)
    for (std::size_t c = 0; c < w.k; ++c) out[r * w.k + c] = w.weight(r, c);
  return out;
}

namespace detail {
// Element readers so one quantiser body serves fp32, fp16 and bf16 sources.
struct ReadF32 {
  const float* p;
  float operator()(std::size_t i) const noexcept { return p[i]; }
};
struct ReadF16 {
  const std::uint16_t* p;
  float operator()(std::size_t i) const noexcept { return f16_to_f32(p[i]); }
};
struct ReadBF16 {
  const std::uint16_t* p;
  float operator()(std::size_t i) const noexcept { return bf16_to_f32(p[i]); }
};

/// One row v[k] quantised per group of G: codes q[k], zero points and fp16 scales [k / G]
/// (see quantize_rtn). Returns k, or the column of the first non-finite value.
inline std::size_t quantize_rtn_row(const float* v, std::size_t k, std::size_t G,
                                    std::uint8_t* q, std::uint8_t* zero,
                                    std::uint16_t* scale) noexcept {
  for (std::size_t g = 0; g < k / G; ++g) {
    const float* vg = v + g * G;
    float lo = vg[0], hi = lo;
    for (std::size_t i = 0; i < G; ++i) {
      if (!std::isfinite(vg[i])) return g * G + i;
      lo = std::min(lo, vg[i]);
      hi = std::max(hi, vg[i]);
    }
    // AutoAWQ's pseudo_quantize_tensor, with two changes: the range is widened to include
    // 0 (the grid (q - z) * s with z in [0, 15] always contains 0, so a group that does not
    // straddle 0, e.g. a constant one, would otherwise be clamped to garbage), and the scale
    // is rounded to its stored fp16 before the codes are chosen against it.
    lo = std::min(lo, 0.0f);
    hi = std::max(hi, 0.0f);
    const std::uint16_t s16 = f32_to_f16(std::max(hi - lo, 1e-5f) / 15.0f);
    const float s = f16_to_f32(s16);
    const float z = std::clamp(-std::nearbyint(lo / s), 0.0f, 15.0f);
    scale[g] = s16;
    zero[g] = static_cast<std::uint8_t>(z);
    for (std::size_t i = 0; i < G; ++i)
      q[g * G + i] = static_cast<std::uint8_t>(std::clamp(std::nearbyint(vg[i] / s) + z, 0.0f, 15.0f));
  }
  return k;
}

inline status non_finite_error(std::size_t row, std::size_t col) {
  return make_error(errc::invalid_argument, "quantize_rtn",
                    "w: non-finite value at row " + std::to_string(row) + ", column " +
                        std::to_string(col));
}

template <class Read>
result<UnpackedQ4> quantize_rtn_impl(Read read, std::size_t size, std::size_t n, std::size_t k,
                                     std::size_t group_size) {
  if (auto st = Q4Matrix::check_dims(n, k, group_size, "quantize_rtn"); !st) return st.error();
  if (size != n * k) {
    return make_error(errc::shape_mismatch, "quantize_rtn",
                      "w: size " + std::to_string(size) + " != n * k = " + std::to_string(n * k));
  }
  UnpackedQ4 out;
  out.n = n;
  out.k = k;
  out.group_size = group_size;
  const std::size_t ng = k / group_size;
  if (auto st = allocate_unpacked(out, "quantize_rtn", "w"); !st) return st.error();
  std::vector<float> row;
  if (auto st = edgellm::detail::try_resize(row, k, "quantize_rtn", "w (one row)"); !st)
    return st.error();
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t c = 0; c < k; ++c) row[c] = read(r * k + c);
    const std::size_t bad = quantize_rtn_row(row.data(), k, group_size, &out.q[r * k],
                                             &out.zero[r * ng], &out.scale[r * ng]);
    if (bad != k) return non_finite_error(r, bad).error();
  }
  return out;
}

/// Packs rows [0, rows) of the plain arrays (codes q[rows][k], zeros and scales [rows][k / G])
/// into m's rows row0.. (row0 a multiple of 16: whole tiles). Rows of m's last tile past n stay
/// as they are (zero when m was just allocated).
inline void pack_q4_rows(const std::uint8_t* q, const std::uint8_t* zero,
                         const std::uint16_t* scale, std::size_t rows, std::size_t row0,
                         Q4Matrix& m) noexcept {
  const std::size_t ng = m.n_groups(), G = m.group_size(), tb = m.tile_bytes(), k = m.k();
  std::byte* base = m.mutable_data();
  for (std::size_t t = row0 / 16; t < (row0 + rows + 15) / 16; ++t) {
    for (std::size_t g = 0; g < ng; ++g) {
      std::byte* tp = base + (t * ng + g) * tb;
      for (std::size_t r = 0; r < 16; ++r) {
        const std::size_t row = t * 16 + r - row0;
        if (row >= rows) break;  // padding rows stay all zero
        std::memcpy(tp + 2 * r, &scale[row * ng + g], 2);
        tp[32 + r] = static_cast<std::byte>(zero[row * ng + g]);
        const std::uint8_t* qr = &q[row * k + g * G];
        for (std::size_t b = 0; b < G / 8; ++b) {
          for (std::size_t j = 0; j < 4; ++j) {
            const auto lo = qr[8 * b + j], hi = qr[8 * b + 4 + j];
            tp[64 + b * 64 + 4 * r + j] = static_cast<std::byte>(lo | (hi << 4));
          }
        }
      }
    }
  }
}
}  // namespace detail

/// Round-to-nearest asymmetric int4 quantisation of a row-major matrix W[n][k], per group of
/// `group_size` consecutive input channels, as AutoAWQ's quantiser with the range widened to
/// include 0 (lo = min(min(w), 0), hi = max(max(w), 0); identical for groups that straddle 0):
///   s = max(hi - lo, 1e-5) / 15 (stored as fp16), z = clamp(-round(lo / s), 0, 15),
///   q = clamp(round(w / s) + z, 0, 15), rounding half to even.
/// AutoAWQ does this arithmetic in fp16; here it is fp32 with s rounded to fp16 first, so
/// |w - (q - z) * s| <= s / 2, except at the ends of a group's range where the fp16 rounding of
/// s (relative 2^-11) can push a value past code 15 or 0 by at most 15 * 2^-11 of a step.
/// Errors: non-finite weights, k not a multiple of the group size, size != n * k.
inline result<UnpackedQ4> quantize_rtn(std::span<const float> w, std::size_t n, std::size_t k,
                                       std::size_t group_size = 128) {
  return detail::quantize_rtn_impl(detail::ReadF32{w.data()}, w.size(), n, k, group_size);
}
/// As above, from fp16 bit patterns.
inline result<UnpackedQ4> quantize_rtn_f16(std::span<const std::uint16_t> w, std::size_t n,
                                           std::size_t k, std::size_t group_size = 128) {
  return detail::quantize_rtn_impl(detail::ReadF16{w.data()}, w.size(), n, k, group_size);
}
/// As above, from bfloat16 bit patterns.
inline result<UnpackedQ4> quantize_rtn_bf16(std::span<const std::uint16_t> w, std::size_t n,
                                            std::size_t k, std::size_t group_size = 128) {
  return detail::quantize_rtn_impl(detail::ReadBF16{w.data()}, w.size(), n, k, group_size);
}

/// Checks that an UnpackedQ4 is self-consistent (sizes, codes and zeros in 0..15).
inline status validate(const UnpackedQ4& w, std::string_view where) {
  if (auto st = Q4Matrix::check_dims(w.n, w.k, w.group_size, where); !st) return st;
  const std::size_t ng = w.k / w.group_size;
  if (w.q.size() != w.n * w.k || w.zero.size() != w.n * ng || w.scale.size() != w.n * ng) {
    return make_error(errc::shape_mismatch, where, "q/zero/scale sizes disagree with n, k");
  }
  for (auto v : w.q)
    if (v > 15) return make_error(errc::invalid_argument, where, "q: code > 15");
  for (auto v : w.zero)
    if (v > 15) return make_error(errc::invalid_argument, where, "zero: zero point > 15");
  return {};
}

/// Packs the plain form into the kernel layout (see Q4Tile). Done once, at load.
inline result<Q4Matrix> pack_q4(const UnpackedQ4& w) {
  if (auto st = validate(w, "pack_q4"); !st) return st.error();
  auto m = Q4Matrix::allocate(w.n, w.k, w.group_size);
  if (!m) return m.error();
  detail::pack_q4_rows(w.q.data(), w.zero.data(), w.scale.data(), w.n, 0, *m);
  return m;
}

/// quantize_rtn and pack_q4 in one pass over a dense fp32 / fp16 / bf16 matrix, a block of
/// `block_rows` rows (rounded up to whole 16-row tiles) at a time: the same Q4Matrix, bit for
/// bit, with one block's codes unpacked at once instead of the whole matrix's.
/// `rows_done(r)` is called after rows [0, r) are packed (a loader releases their source pages
/// there, so converting a mapped tensor never holds more of it than one block).
template <class RowsDone>
result<Q4Matrix> quantize_rtn_packed(const DenseMatrix& w, std::size_t group_size,
                                     std::size_t block_rows, RowsDone rows_done) {
  constexpr std::string_view where = "quantize_rtn";
  const std::size_t n = w.n(), k = w.k();
  if (w.empty()) return make_error(errc::invalid_argument, where, "w: empty matrix");
  if (auto st = Q4Matrix::check_dims(n, k, group_size, where); !st) return st.error();
  auto m = Q4Matrix::allocate(n, k, group_size);
  if (!m) return m.error();
  const std::size_t rows = std::min(n, std::max<std::size_t>(16, (block_rows + 15) / 16 * 16));
  UnpackedQ4 block;
  block.n = rows;
  block.k = k;
  block.group_size = group_size;
  if (auto st = allocate_unpacked(block, where, "w (one block of rows)"); !st) return st.error();
  std::vector<float> buf;
  if (auto st = edgellm::detail::try_resize(buf, k, where, "w (one row)"); !st) return st.error();
  const std::size_t ng = k / group_size;
  for (std::size_t r0 = 0; r0 < n; r0 += rows) {
    const std::size_t count = std::min(rows, n - r0);
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t bad =
          detail::quantize_rtn_row(w.row_chunk(r0 + i, 0, k, buf.data()), k, group_size,
                                   &block.q[i * k], &block.zero[i * ng], &block.scale[i * ng]);
      if (bad != k) return detail::non_finite_error(r0 + i, bad).error();
    }
    detail::pack_q4_rows(block.q.data(), block.zero.data(), block.scale.data(), count, r0, *m);
    rows_done(r0 + count);
  }
  return m;
}

/// Inverse of pack_q4 (tests, export).
inline UnpackedQ4 unpack_q4(const Q4Matrix& m) {
  UnpackedQ4 w;
  w.n = m.n();
  w.k = m.k();
  w.group_size = m.group_size();
  const std::size_t ng = m.n_groups();
  w.q.resize(w.n * w.k);
  w.zero.resize(w.n * ng);
  w.scale.resize(w.n * ng);
  for (std::size_t r = 0; r < w.n; ++r) {
    for (std::size_t c = 0; c < w.k; ++c) w.q[r * w.k + c] = m.code(r, c);
    for (std::size_t g = 0; g < ng; ++g) {
      w.zero[r * ng + g] = m.zero(r, g);
      w.scale[r * ng + g] = m.scale_bits(r, g);
    }
  }
  return w;
}

}  // namespace edgellm::kernels
