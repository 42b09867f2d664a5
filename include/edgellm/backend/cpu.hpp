// SPDX-License-Identifier: Apache-2.0
// The CPU backend: the xsimd int4, int8 and dense kernels (each format's thread-pool split is
// kernels/'), the cache's SIMD attention (kernels/attention.hpp), the elementwise ops of
// kernels/elementwise.hpp, on host activations.
#pragma once

#include "edgellm/backend/backend.hpp"
#include "edgellm/backend/host_state.hpp"
#include "edgellm/backend/profile.hpp"
#include "edgellm/cache/dense_kv_cache.hpp"
#include "edgellm/cache/kv_cache.hpp"
#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/kernels/attention.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/elementwise.hpp"
#include "edgellm/kernels/gemm_q8.hpp"
#include "edgellm/kernels/linear.hpp"
#include "edgellm/kernels/matmul.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace edgellm::backend {

/// Y[m][n] = X[m][k] W^T + bias through the int4 or int8 kernels (gemv for m == 1, gemm
/// otherwise, on opts.path) or kernels::dense_matmul (opts.pool only).
inline status linear_forward(const kernels::Linear& w, std::span<const float> x, std::size_t m,
                             std::span<float> y, const kernels::MatmulOptions& opts) {
  if (w.int4()) {
    if (m == 1) return kernels::gemv(w.q4, x.first(w.k()), y.first(w.n()), w.bias, opts);
    return kernels::gemm(w.q4, x.first(m * w.k()), m, y.first(m * w.n()), w.bias, opts);
  }
  if (w.int8()) {
    if (m == 1) return kernels::gemv(w.q8, x.first(w.k()), y.first(w.n()), w.bias, opts);
    return kernels::gemm(w.q8, x.first(m * w.k()), m, y.first(m * w.n()), w.bias, opts);
  }
  return kernels::dense_matmul(w.dense, x, m, y, w.bias, opts.pool);
}

/// One output of linear_forward_multi: y[m][w->n()] = x w^T (+ bias).
struct LinearOutput {
  const kernels::Linear* w;
  std::span<float> y;
};

/// linear_forward on several linears of the same input x [m][k] (a layer's q/k/v or gate/up).
/// When all are int4 with one group size they run as one kernels::gemm_multi: the same bits as
/// separate calls, with one fork-join and (fast path) one activation quantisation for all.
inline status linear_forward_multi(std::span<const LinearOutput> outs, std::span<const float> x,
                                   std::size_t m, const kernels::MatmulOptions& opts) {
  constexpr std::size_t kMax = 8;
  bool grouped = !outs.empty() && outs.size() <= kMax;
  for (const LinearOutput& o : outs) {
    grouped = grouped && o.w->int4() &&
              o.w->q4.group_size() == outs.front().w->q4.group_size() &&
              o.w->k() == outs.front().w->k();
  }
  if (!grouped) {
    for (const LinearOutput& o : outs)
      if (auto st = linear_forward(*o.w, x, m, o.y, opts); !st) return st;
    return {};
  }
  kernels::MatmulOutput mo[kMax];
  for (std::size_t i = 0; i < outs.size(); ++i)
    mo[i] = {&outs[i].w->q4, outs[i].y.first(m * outs[i].w->n()), outs[i].w->bias, 0};
  return kernels::gemm_multi(std::span<const kernels::MatmulOutput>(mo, outs.size()),
                             x.first(m * outs.front().w->k()), m, opts);
}

/// The CPU backend: every op runs at once on the calling thread, the matmuls and attention
/// split over options.pool. Weights are used in place (Matrix, Vector and Table point into the
/// host weights, which the Transformer keeps alive); activations are host vectors of
/// max_batch rows. Works with every cache::KVCache (attention is the cache's own SIMD attend).
class Cpu {
 public:
  using Tensor = HostTensor;
  using Matrix = const kernels::Linear*;
  using Vector = std::span<const float>;
  using Table = const kernels::DenseMatrix*;

  /// Errors: the fast path with an ISA this CPU/build cannot run.
  static result<Cpu> create(const ModelShape& shape, const Options& options) {
    if (options.path == kernels::MatmulPath::fast && !kernels::isa_supported(options.isa)) {
      return make_error(errc::unsupported, "backend::Cpu::create",
                        std::string("isa: ") + kernels::isa_name(options.isa) +
                            " is not supported by this CPU/build");
    }
    auto host = HostState::create(shape);
    if (!host) return host.error();
    Cpu b;
    b.host_ = std::move(*host);
    b.workspace_ = std::make_unique<kernels::Workspace>();
    b.mo_.pool = options.pool;
    b.mo_.path = options.path;
    b.mo_.isa = options.isa;
    b.mo_.workspace = b.workspace_.get();
    b.profile_ = options.profile;
    return b;
  }

  Cpu(Cpu&&) noexcept = default;
  Cpu& operator=(Cpu&&) noexcept = default;

  result<Tensor> activation(std::size_t cols) { return host_.activation(cols); }
  result<Matrix> upload(const kernels::Linear& w) { return &w; }
  result<Vector> upload(std::span<const float> v) { return v; }
  result<Table> upload(const kernels::DenseMatrix& t) { return &t; }

  status begin(std::size_t first_pos, std::size_t rows) {
    const ProfileScope scope = profiled(OpKind::other);
    return host_.begin(first_pos, rows);
  }

  status embed(Table table, std::span<const std::int32_t> ids, Tensor x) {
    const ProfileScope scope = profiled(OpKind::embed);
    return HostState::embed(*table, ids, x);
  }

  void rms_norm(Tensor x, Vector w, Tensor out, std::size_t r0, std::size_t r1) {
    const ProfileScope scope = profiled(OpKind::rms_norm);
    kernels::rms_norm(x.data.data(), w.data(), out.data.data(), x.cols, r0, r1,
                      host_.shape().rms_norm_eps);
  }

  // Rows of [rows * heads][head_dim]; kernels::rms_norm reads each element before writing it,
  // so in place is fine.
  void head_rms_norm(Tensor t, Vector w, std::size_t rows) {
    const ProfileScope scope = profiled(OpKind::rms_norm);
    const std::size_t head_dim = host_.shape().head_dim;
    kernels::rms_norm(t.data.data(), w.data(), t.data.data(), head_dim, 0,
                      rows * (t.cols / head_dim), host_.shape().rms_norm_eps);
  }

  status linear(Matrix w, Tensor x, Tensor y, std::size_t rows) {
    const ProfileScope scope =
        profiled(w->k() == host_.shape().intermediate ? OpKind::down : OpKind::o_proj);
    return linear_forward(*w, x.data.first(rows * w->k()), rows, y.data, mo_);
  }

  status linear_group(std::span<const LinearTarget<Cpu>> targets, Tensor x, std::size_t rows) {
    const ProfileScope scope =
        profiled(!targets.empty() && targets.front().w->n() == host_.shape().intermediate
                     ? OpKind::gate_up
                     : OpKind::qkv);
    constexpr std::size_t kMax = 8;
    if (targets.size() > kMax) {
      for (const LinearTarget<Cpu>& t : targets)
        if (auto st = linear_forward(*t.w, x.data.first(rows * t.w->k()), rows, t.y.data, mo_);
            !st)
          return st;
      return {};
    }
    LinearOutput outs[kMax];
    for (std::size_t i = 0; i < targets.size(); ++i) outs[i] = {targets[i].w, targets[i].y.data};
    return linear_forward_multi(std::span<const LinearOutput>(outs, targets.size()),
                                x.data.first(rows * x.cols), rows, mo_);
  }

  void rope(Tensor t, std::size_t rows) {
    const ProfileScope scope = profiled(OpKind::rope);
    const std::size_t head_dim = host_.shape().head_dim;
    kernels::rope(t.data.data(), rows, t.cols / head_dim, head_dim, host_.cos(), host_.sin());
  }

  template <cache::KVCache Cache>
  status attention(Cache& cache, std::size_t layer, std::size_t first_pos, std::size_t rows,
                   Tensor q, Tensor k, Tensor v, Tensor out) {
    const ProfileScope scope = profiled(OpKind::attention);
    if (auto st = cache.append(layer, first_pos, rows, std::span<const float>(k.data.first(rows * k.cols)),
                               std::span<const float>(v.data.first(rows * v.cols)));
        !st)
      return st;
    // A short decode step runs on this thread: its fork-join would cost more than it saves.
    const std::size_t heads = host_.shape().heads, head_dim = host_.shape().head_dim;
    ThreadPool* pool =
        kernels::attention_worth_forking(rows, first_pos, heads, head_dim) ? mo_.pool : nullptr;
    return cache.attend(layer, std::span<const float>(q.data.first(rows * q.cols)), rows, first_pos,
                        heads, out.data.first(rows * q.cols), pool);
  }

  void silu_mul(Tensor g, Tensor u, std::size_t rows) {
    const ProfileScope scope = profiled(OpKind::silu_mul);
    kernels::silu_mul(g.data.data(), u.data.data(), rows * g.cols);
  }

  void add(Tensor x, Tensor y, std::size_t rows) {
    const ProfileScope scope = profiled(OpKind::add);
    kernels::add(x.data.data(), y.data.data(), rows * x.cols);
  }

  status logits(Matrix w, Tensor x, std::size_t first_row, std::size_t rows,
                std::span<float> out) {
    const ProfileScope scope = profiled(OpKind::lm_head);
    return linear_forward(*w, x.data.subspan(first_row * x.cols, rows * x.cols), rows,
                          out.first(rows * w->n()), mo_);
  }

  status finish() {
    const ProfileScope scope = profiled(OpKind::other);
    return {};
  }

  /// Activations, RoPE tables and the fast path's workspace.
  std::size_t bytes() const noexcept {
    return host_.bytes() + (workspace_ ? workspace_->capacity() : 0);
  }

  const kernels::MatmulOptions& matmul_options() const noexcept { return mo_; }

 private:
  Cpu() = default;

  // Times the op it is made in when options.profile was set (ProfileScope).
  ProfileScope profiled(OpKind kind) const noexcept { return {profile_, kind, mo_.pool}; }

  HostState host_;                                 // activations, RoPE tables
  std::unique_ptr<kernels::Workspace> workspace_;  // fast-path activation scratch
  kernels::MatmulOptions mo_;                      // pool, path, isa, &*workspace_
  Profile* profile_ = nullptr;                     // options.profile: per-op timing, or none
};

static_assert(HostBackend<Cpu, cache::KVCacheF32>);

}  // namespace edgellm::backend
