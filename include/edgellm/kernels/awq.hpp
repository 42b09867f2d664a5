// SPDX-License-Identifier: Apache-2.0
// Bit-exact import of AutoAWQ's `gemm` and `gemv` tensor layouts, and export to `gemm`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "edgellm/kernels/quantize.hpp"
#include "edgellm/result.hpp"

namespace edgellm::kernels {

/// One stored tensor as raw little-endian bytes (possibly unaligned, e.g. inside an mmapped
/// safetensors file) with its shape and its name for error messages.
struct TensorBytes {
  std::span<const std::byte> data;
  std::vector<std::size_t> shape;
  std::string name;
};

/// The three tensors AutoAWQ stores for one quantised nn.Linear P: P.qweight (I32), P.qzeros
/// (I32), P.scales (F16). Shapes for K inputs, N outputs, group size G:
///   gemm: qweight [K, N/8], qzeros [K/G, N/8], scales [K/G, N]
///   gemv: qweight [N, K/8], qzeros [N, ZW],   scales [N, ZW*8]   (ZW = awq_gemv_zeros_width)
struct AwqLinearTensors {
  TensorBytes qweight, qzeros, scales;
};

/// AutoAWQ's packing order for `gemm`: nibble slot i of a word holds column 8c + kAwqOrder[i];
/// column 8c + j sits in slot kAwqReverseOrder[j].
inline constexpr std::array<unsigned, 8> kAwqOrder = {0, 2, 4, 6, 1, 3, 5, 7};
inline constexpr std::array<unsigned, 8> kAwqReverseOrder = {0, 4, 1, 5, 2, 6, 3, 7};

/// Width in int32 words of a `gemv` qzeros row (AutoAWQ's zeros_width): ceil(K/G/8) rounded up
/// to a multiple of 1, 2 or 4 for G >= 128, 64, 32.
inline std::size_t awq_gemv_zeros_width(std::size_t k, std::size_t group_size) noexcept {
  const std::size_t w = (k / group_size + 7) / 8;
  const std::size_t mult = group_size >= 128 ? 1 : group_size == 64 ? 2 : 4;
  return (w + mult - 1) / mult * mult;
}

namespace detail {
inline std::uint32_t load_u32_le(const std::byte* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian hosts only (x86-64, arm64 Linux/Android)
  return v;
}
inline std::uint16_t load_u16_le(const std::byte* p) noexcept {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline std::string shape_str(const std::vector<std::size_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}
inline status check_tensor(const TensorBytes& t, std::vector<std::size_t> expect,
                           std::size_t elem_bytes, std::string_view where) {
  if (t.shape != expect) {
    return make_error(errc::shape_mismatch, where,
                      t.name + ": shape " + shape_str(t.shape) + ", expected " +
                          shape_str(expect));
  }
  std::size_t count = 1;
  for (auto d : expect) count *= d;
  if (t.data.size() != count * elem_bytes) {
    return make_error(errc::shape_mismatch, where,
                      t.name + ": " + std::to_string(t.data.size()) + " bytes, expected " +
                          std::to_string(count * elem_bytes));
  }
  return {};
}
inline status check_2d(const TensorBytes& t, std::string_view where) {
  if (t.shape.size() != 2 || t.shape[0] == 0 || t.shape[1] == 0) {
    return make_error(errc::shape_mismatch, where,
                      t.name + ": expected a non-empty 2-D tensor, got shape " +
                          shape_str(t.shape));
  }
  return {};
}
}  // namespace detail

/// Imports AutoAWQ `gemm` tensors: q[n][k] = (qweight[k][n/8] >> 4*kAwqReverseOrder[n%8]) & 15,
/// zero[n][g] likewise from qzeros[g][n/8], scale[n][g] = scales[g][n]. Zero points are the plain
/// stored integers (no GPTQ-style -1). Shapes are checked against each other; the caller checks
/// N and K against the model config. Errors name the offending tensor.
inline result<UnpackedQ4> import_awq_gemm(const AwqLinearTensors& t, std::size_t group_size) {
  constexpr std::string_view where = "import_awq_gemm";
  if (auto st = detail::check_2d(t.qweight, where); !st) return st.error();
  const std::size_t k = t.qweight.shape[0], n = t.qweight.shape[1] * 8;
  if (auto st = Q4Matrix::check_dims(n, k, group_size, where); !st) {
    return make_error(st.error().code, where, t.qweight.name + ": " + st.error().message);
  }
  const std::size_t ng = k / group_size;
  if (auto st = detail::check_tensor(t.qweight, {k, n / 8}, 4, where); !st) return st.error();
  if (auto st = detail::check_tensor(t.qzeros, {ng, n / 8}, 4, where); !st) return st.error();
  if (auto st = detail::check_tensor(t.scales, {ng, n}, 2, where); !st) return st.error();

  UnpackedQ4 w;
  w.n = n;
  w.k = k;
  w.group_size = group_size;
  if (auto st = allocate_unpacked(w, where, t.qweight.name); !st) return st.error();
  for (std::size_t kk = 0; kk < k; ++kk) {
    for (std::size_t c = 0; c < n / 8; ++c) {
      const std::uint32_t word = detail::load_u32_le(t.qweight.data.data() + 4 * (kk * (n / 8) + c));
      for (std::size_t j = 0; j < 8; ++j)
        w.q[(8 * c + j) * k + kk] =
            static_cast<std::uint8_t>((word >> (4 * kAwqReverseOrder[j])) & 0xFu);
    }
  }
  for (std::size_t g = 0; g < ng; ++g) {
    for (std::size_t c = 0; c < n / 8; ++c) {
      const std::uint32_t word = detail::load_u32_le(t.qzeros.data.data() + 4 * (g * (n / 8) + c));
      for (std::size_t j = 0; j < 8; ++j)
        w.zero[(8 * c + j) * ng + g] =
            static_cast<std::uint8_t>((word >> (4 * kAwqReverseOrder[j])) & 0xFu);
    }
    for (std::size_t col = 0; col < n; ++col)
      w.scale[col * ng + g] = detail::load_u16_le(t.scales.data.data() + 2 * (g * n + col));
  }
  return w;
}

/// Imports AutoAWQ `gemv` tensors: qweight[n][k/8] holds input channels 8c..8c+7 sequentially
/// (slot i = channel 8c + i), qzeros[n][w] holds groups 8w..8w+7 sequentially, scales[n][g]
/// (padded to ZW*8 columns; the padding is ignored).
inline result<UnpackedQ4> import_awq_gemv(const AwqLinearTensors& t, std::size_t group_size) {
  constexpr std::string_view where = "import_awq_gemv";
  if (auto st = detail::check_2d(t.qweight, where); !st) return st.error();
  const std::size_t n = t.qweight.shape[0], k = t.qweight.shape[1] * 8;
  if (auto st = Q4Matrix::check_dims(n, k, group_size, where); !st) {
    return make_error(st.error().code, where, t.qweight.name + ": " + st.error().message);
  }
  const std::size_t ng = k / group_size, zw = awq_gemv_zeros_width(k, group_size);
  if (auto st = detail::check_tensor(t.qweight, {n, k / 8}, 4, where); !st) return st.error();
  if (auto st = detail::check_tensor(t.qzeros, {n, zw}, 4, where); !st) return st.error();
  if (auto st = detail::check_tensor(t.scales, {n, zw * 8}, 2, where); !st) return st.error();

  UnpackedQ4 w;
  w.n = n;
  w.k = k;
  w.group_size = group_size;
  if (auto st = allocate_unpacked(w, where, t.qweight.name); !st) return st.error();
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t c = 0; c < k / 8; ++c) {
      const std::uint32_t word = detail::load_u32_le(t.qweight.data.data() + 4 * (r * (k / 8) + c));
      for (std::size_t i = 0; i < 8; ++i)
        w.q[r * k + 8 * c + i] = static_cast<std::uint8_t>((word >> (4 * i)) & 0xFu);
    }
    for (std::size_t g = 0; g < ng; ++g) {
      const std::uint32_t word = detail::load_u32_le(t.qzeros.data.data() + 4 * (r * zw + g / 8));
      w.zero[r * ng + g] = static_cast<std::uint8_t>((word >> (4 * (g % 8))) & 0xFu);
      w.scale[r * ng + g] = detail::load_u16_le(t.scales.data.data() + 2 * (r * zw * 8 + g));
    }
  }
  return w;
}

/// AutoAWQ `gemm` tensors as owned arrays (little-endian values; shapes as AutoAWQ writes them).
struct AwqGemmArrays {
  std::vector<std::int32_t> qweight;  ///< [k, n/8]
  std::vector<std::int32_t> qzeros;   ///< [k/G, n/8]
  std::vector<std::uint16_t> scales;  ///< [k/G, n] fp16 bits
  std::vector<std::size_t> qweight_shape, qzeros_shape, scales_shape;
};

/// Exports to AutoAWQ's `gemm` layout; import_awq_gemm(export_awq_gemm(w)) == w and, for any
/// valid gemm checkpoint, export_awq_gemm(import_awq_gemm(t)) reproduces t byte for byte.
/// Requires n % 8 == 0 (AutoAWQ's own constraint).
inline result<AwqGemmArrays> export_awq_gemm(const UnpackedQ4& w) {
  if (auto st = validate(w, "export_awq_gemm"); !st) return st.error();
  if (w.n % 8 != 0) {
    return make_error(errc::invalid_argument, "export_awq_gemm",
                      "n: " + std::to_string(w.n) + " is not a multiple of 8");
  }
  const std::size_t n = w.n, k = w.k, ng = w.n_groups();
  AwqGemmArrays a;
  a.qweight.assign(k * (n / 8), 0);
  a.qzeros.assign(ng * (n / 8), 0);
  a.scales.assign(ng * n, 0);
  a.qweight_shape = {k, n / 8};
  a.qzeros_shape = {ng, n / 8};
  a.scales_shape = {ng, n};
  for (std::size_t kk = 0; kk < k; ++kk)
    for (std::size_t c = 0; c < n / 8; ++c) {
      std::uint32_t word = 0;
      for (std::size_t j = 0; j < 8; ++j)
        word |= static_cast<std::uint32_t>(w.q[(8 * c + j) * k + kk]) << (4 * kAwqReverseOrder[j]);
      a.qweight[kk * (n / 8) + c] = static_cast<std::int32_t>(word);
    }
  for (std::size_t g = 0; g < ng; ++g) {
    for (std::size_t c = 0; c < n / 8; ++c) {
      std::uint32_t word = 0;
      for (std::size_t j = 0; j < 8; ++j)
        word |= static_cast<std::uint32_t>(w.zero[(8 * c + j) * ng + g])
                << (4 * kAwqReverseOrder[j]);
      a.qzeros[g * (n / 8) + c] = static_cast<std::int32_t>(word);
    }
    for (std::size_t col = 0; col < n; ++col) a.scales[g * n + col] = w.scale[col * ng + g];
  }
  return a;
}

}  // namespace edgellm::kernels
