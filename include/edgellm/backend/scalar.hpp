// SPDX-License-Identifier: Apache-2.0
// The scalar backend: every op by its scalar twin (kernels/reference.hpp,
// kernels/reference_attention.hpp), on the calling thread. The oracle the CPU backend is tested
// against, and the smallest example of a second backend.
#pragma once

#include "edgellm/backend/backend.hpp"
#include "edgellm/backend/host_state.hpp"
#include "edgellm/cache/dense_kv_cache.hpp"
#include "edgellm/cache/kv_cache.hpp"
#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/kernels/dense_matmul.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/elementwise.hpp"
#include "edgellm/kernels/linear.hpp"
#include "edgellm/kernels/q8_activations.hpp"
#include "edgellm/kernels/reference.hpp"
#include "edgellm/kernels/reference_attention.hpp"
#include "edgellm/result.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::backend {

/// A cache whose stored keys and values the scalar attention can read (DenseKVCache: KVCacheF32,
/// KVCacheF16, KVCacheQ8).
template <class C>
concept ViewableKVCache = cache::KVCache<C> && requires(const C& c, std::size_t layer) {
  { c.layer_view(layer) };
};

/// Scalar twins of every op (see backend/backend.hpp for the calls): int4 linears by
/// kernels::reference::gemv_q4 (exact path: double accumulation) or quantize_activations_q8 +
/// gemm_q4_fast (fast path: the W4A8 specification every microkernel matches bit for bit), int8
/// ones by reference::gemm_q8 / gemm_q8_fast likewise, dense
/// ones by reference::dense_matmul_rows, attention by reference::attention_stored on the
/// cache's stored data (double), RMSNorm, SiLU and RoPE in double. Ignores options.pool and isa.
/// Slow (plain loops): for tests and small models.
class Scalar {
 public:
  using Tensor = HostTensor;
  using Matrix = const kernels::Linear*;
  using Vector = std::span<const float>;
  using Table = const kernels::DenseMatrix*;

  static result<Scalar> create(const ModelShape& shape, const Options& options) {
    auto host = HostState::create(shape);
    if (!host) return host.error();
    Scalar b;
    b.host_ = std::move(*host);
    b.path_ = options.path;
    return b;
  }

  result<Tensor> activation(std::size_t cols) { return host_.activation(cols); }
  result<Matrix> upload(const kernels::Linear& w) { return &w; }
  result<Vector> upload(std::span<const float> v) { return v; }
  result<Table> upload(const kernels::DenseMatrix& t) { return &t; }

  // The RoPE angles are the specification (HF's fp32 products): the twin uses the same tables.
  status begin(std::size_t first_pos, std::size_t rows) { return host_.begin(first_pos, rows); }

  status embed(Table table, std::span<const std::int32_t> ids, Tensor x) {
    return HostState::embed(*table, ids, x);
  }

  void rms_norm(Tensor x, Vector w, Tensor out, std::size_t r0, std::size_t r1) {
    kernels::reference::rms_norm(x.data.data(), w.data(), out.data.data(), x.cols, r0, r1,
                                 host_.shape().rms_norm_eps);
  }

  void head_rms_norm(Tensor t, Vector w, std::size_t rows) {
    const std::size_t head_dim = host_.shape().head_dim;
    kernels::reference::rms_norm(t.data.data(), w.data(), t.data.data(), head_dim, 0,
                                 rows * (t.cols / head_dim), host_.shape().rms_norm_eps);
  }

  status linear(Matrix w, Tensor x, Tensor y, std::size_t rows) {
    return product(*w, x.data.data(), rows, y.data.data());
  }

  status linear_group(std::span<const LinearTarget<Scalar>> targets, Tensor x, std::size_t rows) {
    for (const LinearTarget<Scalar>& t : targets)
      if (auto st = linear(t.w, x, t.y, rows); !st) return st;
    return {};
  }

  void rope(Tensor t, std::size_t rows) {
    const std::size_t head_dim = host_.shape().head_dim;
    kernels::reference::rope(t.data.data(), rows, t.cols / head_dim, head_dim, host_.cos(),
                             host_.sin());
  }

  template <ViewableKVCache Cache>
  status attention(Cache& cache, std::size_t layer, std::size_t first_pos, std::size_t rows,
                   Tensor q, Tensor k, Tensor v, Tensor out) {
    if (auto st = cache.append(layer, first_pos, rows,
                               std::span<const float>(k.data.first(rows * k.cols)),
                               std::span<const float>(v.data.first(rows * v.cols)));
        !st)
      return st;
    kernels::reference::attention_stored(cache.layer_view(layer), q.data.data(), rows, first_pos,
                                         host_.shape().heads, out.data.data());
    return {};
  }

  void silu_mul(Tensor g, Tensor u, std::size_t rows) {
    kernels::reference::silu_mul(g.data.data(), u.data.data(), rows * g.cols);
  }

  void add(Tensor x, Tensor y, std::size_t rows) {
    kernels::reference::add(x.data.data(), y.data.data(), rows * x.cols);
  }

  status logits(Matrix w, Tensor x, std::size_t first_row, std::size_t rows,
                std::span<float> out) {
    if (out.size() < rows * w->n()) {
      return make_error(errc::invalid_argument, "backend::Scalar::logits",
                        "out: size " + std::to_string(out.size()) + ", need " +
                            std::to_string(rows * w->n()));
    }
    return product(*w, x.data.data() + first_row * x.cols, rows, out.data());
  }

  status finish() { return {}; }

  std::size_t bytes() const noexcept {
    return host_.bytes() + q8_.size();
  }

 private:
  Scalar() = default;

  // y [m][w.n()] = x [m][w.k()] w^T (+ bias).
  status product(const kernels::Linear& w, const float* x, std::size_t m, float* y) {
    const float* bias = w.bias.empty() ? nullptr : w.bias.data();
    if (!w.quantized()) {
      kernels::reference::dense_matmul_rows(w.dense.type(), w.dense.data(), w.k(), x, w.k(), m,
                                            bias, y, w.n(), 0, w.n());
      return {};
    }
    if (path_ == kernels::MatmulPath::exact) {
      if (w.int4()) {
        kernels::reference::gemm_q4(w.q4, x, w.k(), y, w.n(), m, bias);
      } else {
        kernels::reference::gemm_q8(w.q8, x, w.k(), y, w.n(), m, bias);
      }
      return {};
    }
    const std::size_t G = w.int4() ? w.q4.group_size() : w.q8.group_size();
    const std::size_t bytes = kernels::q8_activation_bytes(m, w.k(), G) + 64;
    if (q8_.size() < bytes) q8_.resize(bytes);
    auto* base = q8_.data();
    base += (64 - reinterpret_cast<std::uintptr_t>(base) % 64) % 64;
    const kernels::Q8ActivationsView a = kernels::make_q8_view(base, m, w.k(), G);
    kernels::reference::quantize_activations_q8(x, w.k(), a);
    if (w.int4()) {
      kernels::reference::gemm_q4_fast(w.q4, a, bias, y, w.n());
    } else {
      kernels::reference::gemm_q8_fast(w.q8, a, bias, y, w.n());
    }
    return {};
  }

  HostState host_;                           // activations, RoPE tables
  kernels::MatmulPath path_ = kernels::MatmulPath::fast;
  std::vector<std::byte> q8_;                // fast path: quantised activations
};

static_assert(HostBackend<Scalar, cache::KVCacheF32>);

}  // namespace edgellm::backend
