// SPDX-License-Identifier: Apache-2.0
// One decoder layer in fp32 as AWQ's searches see it (quant/awq_model.hpp): its weights read
// from the checkpoint (LayerF32, load_layer), its attention block and MLP run on calibration
// blocks (AttentionCore), the losses the scale searches minimise (AttentionLoss, MlpLoss), and
// the linear inputs one forward pass captures (Capture). Shapes follow model/layer_layout.hpp.
#pragma once

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/io/checkpoint.hpp"
#include "edgellm/kernels/elementwise.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/gemm_f32.hpp"
#include "edgellm/model/config.hpp"
#include "edgellm/model/layer_layout.hpp"
#include "edgellm/quant/awq_search.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace edgellm::quant::detail {

using model::kLayerLinears;
using model::kLayerNorms;

/// A stored F16 / BF16 / F32 tensor as fp32 (copied; the mapping may be unaligned).
inline result<std::vector<float>> read_f32(const io::Checkpoint& ckpt, const std::string& name,
                                           std::size_t expect_numel) {
  auto t = ckpt.find(name);
  if (!t) return t.error();
  if (t->numel() != expect_numel)
    return make_error(errc::shape_mismatch, "quantize_model",
                      ckpt.path() + ": tensor '" + name + "' has " + std::to_string(t->numel()) +
                          " elements, the config implies " + std::to_string(expect_numel));
  std::vector<float> out(expect_numel);
  const std::byte* p = t->bytes.data();
  switch (t->type()) {
    case io::dtype::f32:
      std::memcpy(out.data(), p, expect_numel * 4);
      break;
    case io::dtype::f16:
    case io::dtype::bf16:
      for (std::size_t i = 0; i < expect_numel; ++i) {
        std::uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = t->type() == io::dtype::f16 ? kernels::f16_to_f32(h) : kernels::bf16_to_f32(h);
      }
      break;
    default:
      return make_error(errc::unsupported, "quantize_model",
                        ckpt.path() + ": tensor '" + name + "' is " +
                            std::string(io::dtype_name(t->type())) +
                            " (expected F16, BF16 or F32: an unquantised checkpoint)");
  }
  return out;
}

/// Y [m][n] = X [m][k] W^T + bias, W fp32 [n][k], rows split over pool.
inline void linear(std::span<const float> w, std::size_t n, std::size_t k,
                   std::span<const float> bias, const float* x, std::size_t m, float* y,
                   ThreadPool* pool) {
  matmul(w, n, k, std::span<const float>(x, m * k), m, std::span<float>(y, m * n), pool, bias);
}

/// A layer's weights in fp32 (the original ones until folded).
struct LayerF32 {
  std::vector<float> input_norm, post_norm, q_norm, k_norm;
  std::vector<float> w[7];  // model::kLayerLinears' order (q, k, v, o, gate, up, down): [n][k]
  std::vector<float> b[7];  // biases or empty
  std::size_t n[7] = {}, k[7] = {};
};

/// The shapes of a layer's seven linears (in kLayerLinears' order) and which have a bias: what
/// the loader reads and the writer declares.
struct LinearShapes {
  std::size_t n[7] = {}, k[7] = {};  // W [n][k]
  bool bias[7] = {};
};
inline LinearShapes linear_shapes(const model::ModelConfig& c) {
  LinearShapes s;
  for (std::size_t i = 0; i < kLayerLinears.size(); ++i) {
    s.n[i] = kLayerLinears[i].n(c);
    s.k[i] = kLayerLinears[i].k(c);
    s.bias[i] = kLayerLinears[i].has_bias(c);
  }
  return s;
}

/// LayerF32's norms in kLayerNorms' order.
inline std::array<std::vector<float>*, 4> norms_of(LayerF32& L) noexcept {
  return {&L.input_norm, &L.post_norm, &L.q_norm, &L.k_norm};
}
static_assert(kLayerNorms.size() == 4);

inline result<LayerF32> load_layer(const io::Checkpoint& ckpt, const model::ModelConfig& c,
                                   std::size_t layer) {
  LayerF32 L;
  const std::string pre = "model.layers." + std::to_string(layer) + ".";
  const LinearShapes shapes = linear_shapes(c);
  const std::size_t* ns = shapes.n;
  const std::size_t* ks = shapes.k;
  const bool* has_bias = shapes.bias;
  for (std::size_t i = 0; i < kLayerLinears.size(); ++i) {
    const std::string name = pre + std::string(kLayerLinears[i].name);
    L.n[i] = ns[i];
    L.k[i] = ks[i];
    auto w = read_f32(ckpt, name + ".weight", ns[i] * ks[i]);
    if (!w) return w.error();
    L.w[i] = std::move(*w);
    if (has_bias[i]) {
      auto b = read_f32(ckpt, name + ".bias", ns[i]);
      if (!b) return b.error();
      L.b[i] = std::move(*b);
    }
  }
  const auto norms = norms_of(L);
  for (std::size_t i = 0; i < kLayerNorms.size(); ++i) {
    if (!kLayerNorms[i].present(c)) continue;
    auto v = read_f32(ckpt, pre + std::string(kLayerNorms[i].name) + ".weight",
                      kLayerNorms[i].size(c));
    if (!v) return v.error();
    *norms[i] = std::move(*v);
  }
  return L;
}

/// The attention block of one layer on normalised inputs, in sample blocks of `seqlen` tokens
/// (each starting at position 0): q/k/v (+bias), Qwen3 q/k norm, RoPE, causal GQA softmax
/// attention; the result before o_proj, [m][q_dim]. Weights are passed separately so the
/// scale search can substitute candidates.
struct AttentionCore {
  const model::ModelConfig* cfg = nullptr;
  const LayerF32* layer = nullptr;
  std::size_t seqlen = 0;
  std::vector<float> cos, sin;  // [seqlen][head_dim / 2]
  ThreadPool* pool = nullptr;
  bool rope = true;  // false in SmolLM3's NoPE layers

  void run(const float* xn, std::size_t m, std::span<const float> wq, std::span<const float> wk,
           std::span<const float> wv, float* out) const {
    const model::ModelConfig& c = *cfg;
    const std::size_t h = c.hidden_size, qd = c.q_dim(), kd = c.kv_dim(), D = c.head_dim;
    std::vector<float> q(m * qd), k(m * kd), v(m * kd);
    linear(wq, qd, h, layer->b[0], xn, m, q.data(), pool);
    linear(wk, kd, h, layer->b[1], xn, m, k.data(), pool);
    linear(wv, kd, h, layer->b[2], xn, m, v.data(), pool);
    if (c.attention_qk_norm) {
      const auto eps = static_cast<float>(c.rms_norm_eps);
      kernels::rms_norm(q.data(), layer->q_norm.data(), q.data(), D, 0, m * c.num_attention_heads,
                        eps);
      kernels::rms_norm(k.data(), layer->k_norm.data(), k.data(), D, 0, m * c.num_key_value_heads,
                        eps);
    }
    const std::size_t blocks = m / seqlen, H = c.num_attention_heads, group = c.gqa_group();
    for (std::size_t b = 0; b < blocks && rope; ++b) {
      kernels::rope(q.data() + b * seqlen * qd, seqlen, H, D, cos.data(), sin.data());
      kernels::rope(k.data() + b * seqlen * kd, seqlen, c.num_key_value_heads, D, cos.data(),
                    sin.data());
    }
    // Per (block, kv head): K and V^T packed once for the group's query heads, then per head
    // S = Q K^T [seqlen][seqlen] and O = P V [seqlen][D] through the fp32 GEMM. S is computed
    // whole and the causal part masked: twice the products of the triangle, at GEMM speed.
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const std::size_t kv_heads = c.num_key_value_heads;
    // One scratch set per thread (thread t uses scratch[t], as kernels/attention.hpp does),
    // allocated here on the calling thread: a failure throws to quantize_model's guard, and
    // nothing may throw inside the region. The tasks cost the same, so a static split.
    struct Scratch {
      edgellm::detail::AlignedArray<float> pk, pv;  // K as W [seqlen][D], V^T as W [D][seqlen]
      std::vector<float> sc, acc, sums;            // S [seqlen][seqlen], P V [seqlen][D], [seqlen]
    };
    const std::size_t nt = pool ? pool->size() : 1, tasks = blocks * kv_heads;
    std::vector<Scratch> scratch(nt);
    for (Scratch& slot : scratch) {
      slot.pk = edgellm::detail::allocate_aligned<float>(kernels::gemm_f32_packed_floats(seqlen, D));
      slot.pv = edgellm::detail::allocate_aligned<float>(kernels::gemm_f32_packed_floats(D, seqlen));
      if (!slot.pk || !slot.pv) throw std::bad_alloc();
      slot.sc.resize(seqlen * seqlen);
      slot.acc.resize(seqlen * D);
      slot.sums.resize(seqlen);
    }
    auto work = [&](std::size_t thread, std::size_t n_threads) {
      Scratch& mine = scratch[thread];
      float* pk = mine.pk.get();
      float* pv = mine.pv.get();
      std::vector<float>& sc = mine.sc;
      std::vector<float>& acc = mine.acc;
      std::vector<float>& sums = mine.sums;
      const std::size_t j0 = tasks * thread / n_threads, j1 = tasks * (thread + 1) / n_threads;
      for (std::size_t j = j0; j < j1; ++j) {
        const std::size_t b = j / kv_heads, kvh = j % kv_heads, base = b * seqlen;
        const float* kb = k.data() + base * kd + kvh * D;
        const float* vb = v.data() + base * kd + kvh * D;
        kernels::gemm_f32_pack(kb, kd, seqlen, D, 0, kernels::gemm_f32_panels(seqlen), pk);
        kernels::gemm_f32_pack_transposed(vb, kd, D, seqlen, 0, kernels::gemm_f32_panels(D),
                                          pv);
        for (std::size_t hd = kvh * group; hd < (kvh + 1) * group; ++hd) {
          const float* qb = q.data() + base * qd + hd * D;
          kernels::gemm_f32_rows(pk, seqlen, D, qb, qd, seqlen, nullptr, sc.data(), seqlen,
                                 0, kernels::gemm_f32_panels(seqlen));
          for (std::size_t i = 0; i < seqlen; ++i) {
            float* si = sc.data() + i * seqlen;
            float mx = -std::numeric_limits<float>::infinity();
            for (std::size_t t = 0; t <= i; ++t) mx = std::max(mx, si[t] *= scale);
            float sum = 0.0f;
            for (std::size_t t = 0; t <= i; ++t) sum += (si[t] = std::exp(si[t] - mx));
            for (std::size_t t = i + 1; t < seqlen; ++t) si[t] = 0.0f;
            sums[i] = sum;
          }
          kernels::gemm_f32_rows(pv, D, seqlen, sc.data(), seqlen, seqlen, nullptr,
                                 acc.data(), D, 0, kernels::gemm_f32_panels(D));
          for (std::size_t i = 0; i < seqlen; ++i) {
            float* o = out + (base + i) * qd + hd * D;
            for (std::size_t e = 0; e < D; ++e) o[e] = acc[i * D + e] / sums[i];
          }
        }
      }
    };
    if (nt > 1)
      pool->run(work);
    else
      work(0, 1);
  }
};

inline double mse(std::span<const float> a, std::span<const float> b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    s += d * d;
  }
  return a.empty() ? 0.0 : s / double(a.size());
}

/// Group 1's loss: the whole attention block's output (through the original o_proj) from
/// candidate q/k/v weights, against the original weights' output. xn: [m][hidden], m a
/// multiple of seqlen.
class AttentionLoss {
 public:
  AttentionLoss(const AttentionCore& core, std::span<const float> xn, std::size_t m)
      : core_(core), xn_(xn), m_(m), a_(m * core.layer->n[0]), o_(m * core.layer->n[3]) {
    const LayerF32& L = *core.layer;
    ref_ = output(L.w[0], L.w[1], L.w[2]);
  }
  double operator()(std::span<const std::vector<float>> fake) {
    return mse(output(fake[0], fake[1], fake[2]), ref_);
  }

 private:
  // Into o_ (buffers reused across the 21 evaluations: no fresh pages per candidate).
  const std::vector<float>& output(std::span<const float> wq, std::span<const float> wk,
                                   std::span<const float> wv) {
    const LayerF32& L = *core_.layer;
    core_.run(xn_.data(), m_, wq, wk, wv, a_.data());
    linear(L.w[3], L.n[3], L.k[3], L.b[3], a_.data(), m_, o_.data(), core_.pool);
    return o_;
  }
  const AttentionCore& core_;
  std::span<const float> xn_;
  std::size_t m_;
  std::vector<float> a_, o_;  // [m][q_dim], [m][hidden]
  std::vector<float> ref_;
};

/// Group 3's loss: the MLP's output (through the original down_proj) from candidate gate/up
/// weights. xn: [m][hidden].
class MlpLoss {
 public:
  MlpLoss(const LayerF32& L, std::span<const float> xn, std::size_t m, ThreadPool* pool)
      : L_(L), xn_(xn), m_(m), pool_(pool), g_(m * L.n[4]), u_(m * L.n[5]), d_(m * L.n[6]) {
    ref_ = output(L.w[4], L.w[5]);
  }
  double operator()(std::span<const std::vector<float>> fake) {
    return mse(output(fake[0], fake[1]), ref_);
  }

 private:
  const std::vector<float>& output(std::span<const float> wg, std::span<const float> wu) {
    linear(wg, L_.n[4], L_.k[4], L_.b[4], xn_.data(), m_, g_.data(), pool_);
    linear(wu, L_.n[5], L_.k[5], L_.b[5], xn_.data(), m_, u_.data(), pool_);
    kernels::silu_mul(g_.data(), u_.data(), g_.size());
    linear(L_.w[6], L_.n[6], L_.k[6], L_.b[6], g_.data(), m_, d_.data(), pool_);
    return d_;
  }
  const LayerF32& L_;
  std::span<const float> xn_;
  std::size_t m_;
  ThreadPool* pool_;
  std::vector<float> g_, u_, d_;  // [m][intermediate] x 2, [m][hidden]
  std::vector<float> ref_;
};

/// What one forward pass over the calibration blocks collects for one linear input.
struct Capture {
  std::size_t k = 0;
  std::vector<double> abs_sum;  // [k]: sum over all tokens of |x|
  std::vector<float> loss;      // [loss tokens][k]
  std::vector<float> clip;      // [clip tokens][k]

  void add(const float* x, std::size_t rows, std::size_t first_token, bool loss_block,
           std::size_t clip_step) {
    for (std::size_t r = 0; r < rows; ++r) {
      const float* xr = x + r * k;
      for (std::size_t c = 0; c < k; ++c) abs_sum[c] += std::fabs(xr[c]);
      if ((first_token + r) % clip_step == 0) clip.insert(clip.end(), xr, xr + k);
    }
    if (loss_block) loss.insert(loss.end(), x, x + rows * k);
  }
  std::vector<float> mean(std::size_t tokens) const {
    std::vector<float> m(k);
    for (std::size_t c = 0; c < k; ++c) m[c] = static_cast<float>(abs_sum[c] / double(tokens));
    return m;
  }
  /// The clip tokens' inputs divided by s (the scaled problem the clip search sees).
  std::vector<float> clip_scaled(std::span<const float> s) const {
    std::vector<float> out = clip;
    for (std::size_t i = 0; i < out.size(); ++i) out[i] /= s[i % k];
    return out;
  }
};

}  // namespace edgellm::quant::detail
