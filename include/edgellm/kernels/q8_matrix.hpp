// SPDX-License-Identifier: Apache-2.0
// The int8 weight format (symmetric, one scale per group: w = code * scale) and its
// round-to-nearest quantiser from fp32 / fp16 / bf16 rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/result.hpp"

namespace edgellm::kernels {

/// Bytes of an int8 matrix [n][k] with `group_size` (Q8Matrix::byte_size; memory plans):
/// the codes, padded to 64 bytes, then the fp32 scales.
inline constexpr std::size_t q8_matrix_bytes(std::size_t n, std::size_t k,
                                             std::size_t group_size) noexcept {
  return group_size ? (n * k + 63) / 64 * 64 + n * (k / group_size) * 4 : 0;
}

/// An int8 weight matrix W[n][k] (nn.Linear orientation), symmetric per group of G input
/// channels (G = 128, or 64 / 32 when k needs it):
///   codes[n][k]       int8 in [-127, 127], row-major (row r at byte r * k)
///   scales[n][k / G]  fp32, after the codes at a 64-byte aligned offset
///   w[r][c] = codes[r][c] * scales[r][c / G]
/// The scales are fp32, not fp16: no conversion in the kernels' group loop, no fp16 range
/// limit on rows of small magnitude (an fp16 scale of amax / 127 turns subnormal below
/// amax ~ 8e-3), at a cost of 4 bytes per group (3 % of the codes at G = 128).
/// Owned storage (edgellm::detail::allocate_aligned, MemoryUse::streamed, 64-byte aligned);
/// read-only after quantising, so it may be shared by threads.
class Q8Matrix {
 public:
  Q8Matrix() = default;

  /// Allocates a zero-filled matrix; fails on bad sizes (as Q4Matrix::check_dims) or
  /// allocation failure.
  static result<Q8Matrix> allocate(std::size_t n, std::size_t k, std::size_t group_size) {
    if (auto st = Q4Matrix::check_dims(n, k, group_size, "Q8Matrix::allocate"); !st)
      return st.error();
    Q8Matrix m;
    m.n_ = n;
    m.k_ = k;
    m.group_size_ = group_size;
    const std::size_t bytes = m.byte_size();
    auto buf = edgellm::detail::allocate_aligned(bytes, edgellm::detail::MemoryUse::streamed);
    if (!buf) {
      return edgellm::detail::allocation_error(
          "Q8Matrix::allocate",
          "int8 [" + std::to_string(n) + ", " + std::to_string(k) + "]", bytes);
    }
    std::memset(buf.get(), 0, bytes);
    m.owned_ = std::move(buf);
    return m;
  }

  std::size_t n() const noexcept { return n_; }  ///< output rows
  std::size_t k() const noexcept { return k_; }  ///< input channels
  std::size_t group_size() const noexcept { return group_size_; }
  std::size_t n_groups() const noexcept { return group_size_ ? k_ / group_size_ : 0; }
  std::size_t byte_size() const noexcept { return q8_matrix_bytes(n_, k_, group_size_); }
  bool empty() const noexcept { return owned_ == nullptr; }
  /// All bytes (codes, then scales), 64-byte aligned; byte_size() long.
  const std::byte* data() const noexcept { return owned_.get(); }
  std::byte* mutable_data() noexcept { return owned_.get(); }

  /// Codes of row r: [k].
  const std::int8_t* codes(std::size_t r) const noexcept {
    return reinterpret_cast<const std::int8_t*>(owned_.get()) + r * k_;
  }
  std::int8_t* mutable_codes(std::size_t r) noexcept {
    return reinterpret_cast<std::int8_t*>(owned_.get()) + r * k_;
  }
  /// Scales of row r: [n_groups].
  const float* scales(std::size_t r) const noexcept {
    return reinterpret_cast<const float*>(owned_.get() + scales_offset()) + r * n_groups();
  }
  float* mutable_scales(std::size_t r) noexcept {
    return reinterpret_cast<float*>(owned_.get() + scales_offset()) + r * n_groups();
  }

  /// Row r dequantised into out[k] (code * scale, one fp32 rounding each).
  void row(std::size_t r, float* out) const noexcept {
    const std::int8_t* q = codes(r);
    const float* s = scales(r);
    for (std::size_t c = 0; c < k_; ++c)
      out[c] = static_cast<float>(q[c]) * s[c / group_size_];
  }

 private:
  std::size_t scales_offset() const noexcept { return (n_ * k_ + 63) / 64 * 64; }

  edgellm::detail::AlignedBuffer owned_;
  std::size_t n_ = 0, k_ = 0, group_size_ = 0;
};

namespace detail {
/// Quantises row r's values v[k] into m (see quantize_q8). False on a non-finite value, whose
/// column is written to *bad_col.
inline bool quantize_q8_row(Q8Matrix& m, std::size_t r, const float* v,
                            std::size_t* bad_col) noexcept {
  const std::size_t G = m.group_size(), ng = m.n_groups();
  std::int8_t* q = m.mutable_codes(r);
  float* s = m.mutable_scales(r);
  for (std::size_t g = 0; g < ng; ++g) {
    const float* vg = v + g * G;
    float amax = 0.0f;
    for (std::size_t i = 0; i < G; ++i) {
      if (!std::isfinite(vg[i])) {
        *bad_col = g * G + i;
        return false;
      }
      amax = std::max(amax, std::fabs(vg[i]));
    }
    const float scale = amax / 127.0f;
    s[g] = scale;
    for (std::size_t i = 0; i < G; ++i) {
      const float c = scale > 0.0f ? std::nearbyint(vg[i] / scale) : 0.0f;
      q[g * G + i] = static_cast<std::int8_t>(std::clamp(c, -127.0f, 127.0f));
    }
  }
  return true;
}

template <class RowFn, class RowsDone>
result<Q8Matrix> quantize_q8_impl(RowFn row, std::size_t n, std::size_t k,
                                  std::size_t group_size, std::string_view what,
                                  std::size_t block_rows, RowsDone rows_done) {
  auto m = Q8Matrix::allocate(n, k, group_size);
  if (!m) return m.error();
  std::vector<float> buf;
  if (auto st = edgellm::detail::try_resize(buf, k, "quantize_q8", std::string(what) + " row");
      !st)
    return st.error();
  for (std::size_t r = 0; r < n; ++r) {
    std::size_t bad = 0;
    if (!quantize_q8_row(*m, r, row(r, buf.data()), &bad)) {
      return make_error(errc::invalid_argument, "quantize_q8",
                        std::string(what) + ": non-finite value at row " + std::to_string(r) +
                            ", column " + std::to_string(bad));
    }
    if ((r + 1) % block_rows == 0 || r + 1 == n) rows_done(r + 1);
  }
  return m;
}
}  // namespace detail

/// Round-to-nearest symmetric int8 quantisation of W[n][k] (row-major fp32), per group of
/// `group_size` input channels: scale = amax / 127 (fp32, amax = max |w| over the group),
/// code = clamp(round_half_even(w / scale), -127, 127) (0 for an all-zero group), so
/// |w - code * scale| <= scale / 2 up to fp32 rounding (a relative 2^-24 of |w|).
/// Errors: non-finite weights, k not a multiple of a supported group size, size != n * k.
inline result<Q8Matrix> quantize_q8(std::span<const float> w, std::size_t n, std::size_t k,
                                    std::size_t group_size = 128) {
  if (w.size() != n * k) {
    return make_error(errc::shape_mismatch, "quantize_q8",
                      "w: size " + std::to_string(w.size()) + " != n * k = " +
                          std::to_string(n * k));
  }
  return detail::quantize_q8_impl(
      [&](std::size_t r, float*) { return w.data() + r * k; }, n, k, group_size, "w", n,
      [](std::size_t) {});
}

/// As above, from a dense fp32 / fp16 / bf16 matrix (e.g. a checkpoint's lm_head in place).
/// `rows_done(r)` is called after every `block_rows` rows and at the end, rows [0, r) done (a
/// loader releases their source pages there).
template <class RowsDone>
result<Q8Matrix> quantize_q8(const DenseMatrix& w, std::size_t group_size,
                             std::size_t block_rows, RowsDone rows_done) {
  if (w.empty()) return make_error(errc::invalid_argument, "quantize_q8", "w: empty matrix");
  return detail::quantize_q8_impl(
      [&](std::size_t r, float* buf) { return w.row_chunk(r, 0, w.k(), buf); }, w.n(), w.k(),
      group_size, "w", std::max<std::size_t>(1, block_rows), rows_done);
}
inline result<Q8Matrix> quantize_q8(const DenseMatrix& w, std::size_t group_size = 128) {
  return quantize_q8(w, group_size, w.n(), [](std::size_t) {});
}

}  // namespace edgellm::kernels
