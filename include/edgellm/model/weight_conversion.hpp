// SPDX-License-Identifier: Apache-2.0
// Converting a checkpoint's linears into the form the transformer runs: AutoAWQ gemm/gemv
// imported exactly and repacked to int4, edgellm's int8 linears, unquantised ones RTN-quantised
// to int4, or everything dequantised / widened to dense fp32 in reference mode (LoadOptions).
#pragma once

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/io/checkpoint.hpp"
#include "edgellm/kernels/awq.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/kernels/linear.hpp"
#include "edgellm/kernels/q8_matrix.hpp"
#include "edgellm/kernels/quantize.hpp"
#include "edgellm/model/config.hpp"
#include "edgellm/model/tensor_reader.hpp"
#include "edgellm/result.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::model {

namespace detail {

/// The conversions of load_weights on top of TensorReader: each linear in the form the options
/// ask for.
class WeightLoader : public TensorReader {
 public:
  using TensorReader::TensorReader;

  /// A dense weight [n][k] converted to owned fp32 (reference mode).
  result<DenseMatrix> dense_f32(const std::string& name, std::size_t n, std::size_t k,
                                std::string_view why) {
    auto t = get(name, {io::dtype::f16, io::dtype::bf16, io::dtype::f32}, {n, k}, why);
    if (!t) return t.error();
    auto v = dense_matrix_view(*t);
    if (!v) return v.error();
    std::vector<float> values;
    if (auto st = edgellm::detail::try_resize(values, n * k, kWhere, name + " (as fp32)"); !st)
      return st.error();
    for (std::size_t r = 0; r < n; ++r) v->row(r, values.data() + r * k);
    auto m = DenseMatrix::from_f32(values, n, k);
    if (m) release(t->bytes);
    return m;
  }

  /// A dense weight [n][k] RTN-quantised to int4 with `group` and packed (quantize_rtn_packed).
  result<kernels::Q4Matrix> dense_q4(const std::string& name, std::size_t n, std::size_t k,
                                     std::size_t group, std::string_view why) {
    return converted<kernels::Q4Matrix>(name, n, k, why,
                                        [&](const DenseMatrix& v, std::size_t rows, auto done) {
      return kernels::quantize_rtn_packed(v, group, rows, done);
    });
  }

  /// A dense weight [n][k] quantised to int8 per `group` (kernels::quantize_q8).
  result<kernels::Q8Matrix> dense_q8(const std::string& name, std::size_t n, std::size_t k,
                                     std::size_t group, std::string_view why) {
    return converted<kernels::Q8Matrix>(name, n, k, why,
                                        [&](const DenseMatrix& v, std::size_t rows, auto done) {
      return kernels::quantize_q8(v, group, rows, done);
    });
  }

  /// The dense tensor `name` [n][k] converted by `convert(view, block_rows, rows_done)` a block
  /// of rows at a time, each block's source pages released once converted
  /// (release_source_pages): the conversion holds one block of the mapped tensor, not the whole.
  template <class Matrix, class Convert>
  result<Matrix> converted(const std::string& name, std::size_t n, std::size_t k,
                           std::string_view why, Convert convert) {
    auto t = get(name, {io::dtype::f16, io::dtype::bf16, io::dtype::f32}, {n, k}, why);
    if (!t) return t.error();
    auto v = dense_matrix_view(*t);
    if (!v) return v.error();
    const std::size_t row_bytes = t->bytes.size() / n;
    std::size_t cursor = 0;
    auto out = convert(*v, conversion_block_rows(row_bytes), [&](std::size_t rows) {
      release_through(t->bytes, cursor, rows * row_bytes);
    });
    if (!out) return tensor_error(out.error().code, name, out.error().message);
    return out;
  }

  /// A dense fp32 [n][k] matrix whose row r `row(r, out)` writes (reference mode's dequantised
  /// linears).
  template <class RowFn>
  result<DenseMatrix> dequantised(const std::string& prefix, std::size_t n, std::size_t k,
                                  RowFn row) const {
    std::vector<float> w;
    if (auto st = edgellm::detail::try_resize(w, n * k, kWhere, prefix + " (dequantised fp32)");
        !st)
      return st.error();
    for (std::size_t r = 0; r < n; ++r) row(r, w.data() + r * k);
    return DenseMatrix::from_f32(w, n, k);
  }

  /// An AutoAWQ linear `prefix` (qweight, qzeros, scales) with n outputs and k inputs, imported
  /// exactly; packed to int4, or dequantised to dense fp32 in reference mode.
  result<Linear> awq_linear(const std::string& prefix, std::size_t n, std::size_t k,
                            std::string_view n_why, std::string_view k_why) {
    const AwqConfig& awq = *cfg_.awq;
    const std::size_t g = awq.group_size;
    const bool gemm = awq.version == AwqVersion::gemm;
    const std::string dims = "N = " + std::string(n_why) + " = " + std::to_string(n) +
                             ", K = " + std::string(k_why) + " = " + std::to_string(k) +
                             ", G = group_size = " + std::to_string(g) + ", AWQ " +
                             to_string(awq.version);
    if (k % g != 0) {
      return make_error(errc::shape_mismatch, kWhere,
                        dir_ + ": " + prefix + ": K = " + std::string(k_why) + " = " +
                            std::to_string(k) + " is not a multiple of group_size " +
                            std::to_string(g));
    }
    if (n % 8 != 0 && gemm) {
      return make_error(errc::shape_mismatch, kWhere,
                        dir_ + ": " + prefix + ": N = " + std::string(n_why) + " = " +
                            std::to_string(n) + " is not a multiple of 8 (AWQ gemm packing)");
    }
    if (k % 8 != 0 && !gemm) {
      return make_error(errc::shape_mismatch, kWhere,
                        dir_ + ": " + prefix + ": K = " + std::string(k_why) + " = " +
                            std::to_string(k) + " is not a multiple of 8 (AWQ gemv packing)");
    }
    const std::size_t ng = k / g, zw = kernels::awq_gemv_zeros_width(k, g);
    auto qw = get(prefix + ".qweight", {io::dtype::i32},
                  gemm ? std::vector<std::size_t>{k, n / 8} : std::vector<std::size_t>{n, k / 8},
                  gemm ? "[K, N/8]; " + dims : "[N, K/8]; " + dims);
    if (!qw) return qw.error();
    auto qz = get(prefix + ".qzeros", {io::dtype::i32},
                  gemm ? std::vector<std::size_t>{ng, n / 8} : std::vector<std::size_t>{n, zw},
                  gemm ? "[K/G, N/8]; " + dims : "[N, zeros_width(K, G)]; " + dims);
    if (!qz) return qz.error();
    auto sc = get(prefix + ".scales", {io::dtype::f16},
                  gemm ? std::vector<std::size_t>{ng, n} : std::vector<std::size_t>{n, zw * 8},
                  gemm ? "[K/G, N]; " + dims : "[N, 8 * zeros_width(K, G)]; " + dims);
    if (!sc) return sc.error();
    const kernels::AwqLinearTensors tensors{{qw->bytes, qw->shape(), qw->name()},
                                            {qz->bytes, qz->shape(), qz->name()},
                                            {sc->bytes, sc->shape(), sc->name()}};
    auto u = gemm ? kernels::import_awq_gemm(tensors, g) : kernels::import_awq_gemv(tensors, g);
    if (!u) return tensor_error(u.error().code, prefix + ".qweight", u.error().message);
    Linear lin;
    if (opts_.fp32_reference) {
      // AutoAWQ's dequantisation: one rounding of (q - z) * s to fp16 (docs/formats.md 1.3).
      auto d = dequantised(prefix, n, k, [&](std::size_t r, float* out) {
        for (std::size_t c = 0; c < k; ++c)
          out[c] = kernels::f16_to_f32(kernels::f32_to_f16(u->weight(r, c)));
      });
      if (!d) return d.error();
      lin.dense = std::move(*d);
    } else {
      auto p = kernels::pack_q4(*u);
      if (!p) return tensor_error(p.error().code, prefix + ".qweight", p.error().message);
      lin.q4 = std::move(*p);
    }
    release(qw->bytes);
    release(qz->bytes);
    release(sc->bytes);
    return lin;
  }

  /// An int8 linear `prefix` in edgellm's extension of the AutoAWQ layout (AwqConfig::
  /// int8_modules: qweight I8 [n][k], scales F32 [n][k / G]) as a kernels::Q8Matrix, or
  /// dequantised to dense fp32 in reference mode.
  result<Linear> int8_linear(const std::string& prefix, std::size_t n, std::size_t k,
                             std::string_view n_why, std::string_view k_why) {
    const std::size_t g = cfg_.awq->group_size;
    const std::string dims = "N = " + std::string(n_why) + " = " + std::to_string(n) +
                             ", K = " + std::string(k_why) + " = " + std::to_string(k) +
                             ", G = group_size = " + std::to_string(g) + ", edgellm int8";
    if (k % g != 0) {
      return make_error(errc::shape_mismatch, kWhere,
                        dir_ + ": " + prefix + ": K = " + std::string(k_why) + " = " +
                            std::to_string(k) + " is not a multiple of group_size " +
                            std::to_string(g));
    }
    auto qw = get(prefix + ".qweight", {io::dtype::i8}, {n, k}, "[N, K]; " + dims);
    if (!qw) return qw.error();
    auto sc = get(prefix + ".scales", {io::dtype::f32}, {n, k / g}, "[N, K/G]; " + dims);
    if (!sc) return sc.error();
    auto m = kernels::Q8Matrix::allocate(n, k, g);
    if (!m) return tensor_error(m.error().code, prefix + ".qweight", m.error().message);
    const std::size_t ng = k / g;
    for (std::size_t r = 0; r < n; ++r) {
      std::memcpy(m->mutable_codes(r), qw->bytes.data() + r * k, k);
      std::memcpy(m->mutable_scales(r), sc->bytes.data() + r * ng * 4, ng * 4);
      for (std::size_t j = 0; j < ng; ++j) {
        const float v = m->scales(r)[j];
        if (!std::isfinite(v) || v < 0.0f)
          return tensor_error(errc::format_error, prefix + ".scales",
                              "scale " + std::to_string(v) + " at row " + std::to_string(r) +
                                  ", group " + std::to_string(j) +
                                  " (expected finite and non-negative)");
      }
      for (std::size_t c = 0; c < k; ++c)
        if (m->codes(r)[c] == -128)
          return tensor_error(errc::format_error, prefix + ".qweight",
                              "code -128 at row " + std::to_string(r) + ", column " +
                                  std::to_string(c) + " (symmetric codes are in [-127, 127])");
    }
    Linear lin;
    if (opts_.fp32_reference) {
      auto d = dequantised(prefix, n, k, [&](std::size_t r, float* out) { m->row(r, out); });
      if (!d) return d.error();
      lin.dense = std::move(*d);
    } else {
      lin.q8 = std::move(*m);
    }
    release(qw->bytes);
    release(sc->bytes);
    return lin;
  }

  /// Linear `model.layers.<i>.<module>` with n outputs and k inputs, in the form the options
  /// ask for, plus its bias when `has_bias`.
  result<Linear> linear(std::size_t layer, std::string_view module, std::size_t n, std::size_t k,
                        std::string_view n_why, std::string_view k_why, bool has_bias,
                        std::size_t rtn_group) {
    const std::string prefix = "model.layers." + std::to_string(layer) + "." + std::string(module);
    const std::string why = "[" + std::string(n_why) + ", " + std::string(k_why) + "]";
    Linear lin;
    const bool awq_module = cfg_.awq && cfg_.awq->is_quantized(module);
    const bool int8_module = cfg_.awq && cfg_.awq->is_int8(module);
    const bool int4 = !opts_.fp32_reference && !int8_module && (awq_module || !cfg_.awq);
    if (auto cached = int4 ? from_packed_cache(prefix, n, k, awq_module ? cfg_.awq->group_size
                                                                         : rtn_group)
                           : std::nullopt) {
      lin.q4 = std::move(*cached);
    } else if (int8_module) {
      auto a = int8_linear(prefix, n, k, n_why, k_why);
      if (!a) return a.error();
      lin = std::move(*a);
    } else if (awq_module) {
      auto a = awq_linear(prefix, n, k, n_why, k_why);
      if (!a) return a.error();
      lin = std::move(*a);
    } else if (opts_.fp32_reference) {
      auto d = dense_f32(prefix + ".weight", n, k, why);
      if (!d) return d.error();
      lin.dense = std::move(*d);
    } else if (cfg_.awq) {
      // modules_to_not_convert: AutoAWQ left this linear in fp16; it stays dense.
      auto d = dense_view(prefix + ".weight", n, k, why);
      if (!d) return d.error();
      lin.dense = std::move(*d);
    } else {
      auto q = dense_q4(prefix + ".weight", n, k, rtn_group, why);
      if (!q) return q.error();
      lin.q4 = std::move(*q);
    }
    if (has_bias) {
      auto b = vector_f32(prefix + ".bias", n, "[" + std::string(n_why) + "]");
      if (!b) return b.error();
      lin.bias = std::move(*b);
    }
    return lin;
  }
};

}  // namespace detail

/// The largest int4 kernel group size (128, 64, 32) dividing every width in `ks`, or 0: the RTN
/// group of an unquantised checkpoint ({hidden, intermediate, heads * head_dim}) and the int4
/// lm_head's ({hidden}).
inline std::size_t largest_group_dividing(std::initializer_list<std::size_t> ks) noexcept {
  for (std::size_t g : {std::size_t{128}, std::size_t{64}, std::size_t{32}}) {
    bool ok = true;
    for (std::size_t k : ks) ok = ok && k % g == 0;
    if (ok) return g;
  }
  return 0;
}

}  // namespace edgellm::model
