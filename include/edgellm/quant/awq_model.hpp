// SPDX-License-Identifier: Apache-2.0
// AWQ over a whole Llama / Qwen2 / Qwen3 / Mistral checkpoint (../shared/docs/formats.md 1.6):
// layer by layer, one layer's weights in fp32 at a time, the layer is run in fp32 on the
// calibration activations, the scale searches of quant/awq_search.hpp run on its four scaling
// groups, the scales are folded, the clip search runs on v/o/gate/up/down (when asked), and the
// linears are quantised: on each group's round-to-nearest grid, with the rounding errors
// compensated against the layer's calibration inputs (quant/compensated_rounding.hpp) unless
// Rounding::nearest asks for AutoAWQ's plain rounding. The next layer's input is this layer's output with the ORIGINAL weights (AutoAWQ),
// so quantisation error is not propagated. The fp32 layer, its forward pass and the losses are
// quant/awq_layer.hpp; writing the result is quant/awq_output.hpp.
//
// Memory: the checkpoint stays mmapped; besides one layer's fp32 weights the pipeline holds the
// residual stream twice ([samples * seqlen][hidden] in and out), one sample block's
// activations, and the subsets of captured inputs the losses and clip search use.
#pragma once

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/detail/guard_exceptions.hpp"
#include "edgellm/io/checkpoint.hpp"
#include "edgellm/kernels/elementwise.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/gemm_f32.hpp"
#include "edgellm/kernels/q8_matrix.hpp"
#include "edgellm/kernels/quantize.hpp"
#include "edgellm/model/config.hpp"
#include "edgellm/model/config_json.hpp"
#include "edgellm/model/layer_layout.hpp"
#include "edgellm/quant/awq_layer.hpp"
#include "edgellm/quant/awq_search.hpp"
#include "edgellm/quant/compensated_rounding.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::quant {

/// awq: scale search, folding, the clip search (QuantizeOptions::clip), then quantisation
/// (QuantizeOptions::rounding); rtn: round-to-nearest of the original weights (no search, no
/// clip, no compensation), the baseline.
enum class QuantMethod { awq, rtn };

/// How awq chooses the codes on each group's grid: nearest (AutoAWQ's), or compensated
/// (quant/compensated_rounding.hpp: each rounding error spread over the group's later inputs,
/// against the layer's calibration inputs). rtn always rounds to nearest.
enum class Rounding { nearest, compensated };

/// A bit width for the linears whose layer-relative name (e.g. "mlp.down_proj") contains
/// `pattern`: 2..8, or 16 (QuantSpec::kKeepBits: kept in fp16).
struct ModuleBits {
  std::string pattern;
  unsigned bits = 4;
};

/// Options of quantize_model.
struct QuantizeOptions {
  QuantMethod method = QuantMethod::awq;
  /// Bits and group size of every linear no modules_bits entry matches. 8 bits is always the
  /// symmetric int8 format (kernels::Q8Matrix), other widths AutoAWQ's asymmetric grid.
  QuantSpec spec;
  /// Per-module bit widths; the first entry whose pattern a linear's name contains wins.
  std::vector<ModuleBits> modules_bits;
  std::size_t samples = 32;  ///< calibration blocks (fewer if the text is short)
  std::size_t seqlen = 512;  ///< tokens per block
  /// Tokens the block losses of the scale search run on (whole sample blocks, evenly spaced,
  /// at least one); 0 = all. Bounds the search's time: each loss is evaluated 21 times per group.
  /// x_mean always uses every calibration token.
  std::size_t loss_tokens = 4096;
  /// AutoAWQ's clip search (awq only). Off by default: with either rounding it lowered the
  /// output error it scores but cost perplexity on every model measured (docs/performance.md).
  bool clip = false;
  Rounding rounding = Rounding::compensated;  ///< awq only
  CompensationOptions compensation;
  ScaleSearchOptions scale_search;
  ClipSearchOptions clip_search;
  std::string calib_name = "the calibration text";  ///< names the tokens in error messages
  ThreadPool* pool = nullptr;                       ///< matmuls, attention, clip search
};

/// One quantised linear (layer-relative name, e.g. "self_attn.q_proj").
struct QuantLinear {
  std::string name;
  std::size_t n = 0, k = 0;
  QuantSpec spec;                         ///< the grid it was quantised to
  std::vector<float> weight;              ///< [n][k]: the dequantised values chosen
  std::optional<kernels::UnpackedQ4> q4;  ///< 4 bits: the codes; weight == dequantize(*q4)
  /// 8 bits: the codes; weight[r][c] == q8->row(r)[c]
  std::optional<kernels::Q8Matrix> q8;
  std::vector<float> bias;                ///< [n] (after folding) or empty
};

/// One finished decoder layer: folded norms and quantised linears.
struct QuantLayer {
  std::size_t index = 0;
  std::vector<float> input_norm, post_norm;  ///< [hidden], 1/s folded in
  std::vector<float> q_norm, k_norm;         ///< [head_dim] (Qwen3) or empty
  std::vector<QuantLinear> linears;          ///< q, k, v, o, gate, up, down
  /// The alpha each scaling group chose (qkv, o, gate/up, down): -1 for s = 1, NaN when the
  /// group was not searched (rtn, or o under GQA).
  double alpha[4] = {NAN, NAN, NAN, NAN};
  double seconds = 0.0;
};

/// Progress after each layer.
struct LayerProgress {
  std::size_t layer = 0, layers = 0;
  double seconds = 0.0;  ///< since the start
};

/// What quantize_model did.
struct QuantizeResult {
  model::ModelConfig config;
  std::size_t samples = 0, seqlen = 0;
  std::vector<QuantLayer> layers;             ///< filled only when no sink was given
  std::vector<std::array<double, 4>> alphas;  ///< per layer, QuantLayer::alpha
  double seconds = 0.0;
};

using LayerSink = std::function<status(QuantLayer&&)>;
using ProgressFn = std::function<void(const LayerProgress&)>;

namespace detail {

using model::kLayerLinears;
using model::kLayerNorms;

/// Which captured input linear i (kLayerLinears' order) reads: 0 the input norm's output (q, k,
/// v), 1 the attention output (o), 2 the post-attention norm's output (gate, up), 3 SiLU(gate) *
/// up (down); model::LinearInput in that order.
inline std::size_t input_of(std::size_t i) noexcept {
  return static_cast<std::size_t>(kLayerLinears[i].input);
}

/// The grid of each of a layer's seven linears (kLayerLinears' order): opt.spec, or the bits of
/// the first modules_bits entry the name contains; 8 bits symmetric.
inline result<std::array<QuantSpec, 7>> linear_specs(const QuantSpec& base,
                                                     std::span<const ModuleBits> modules_bits) {
  std::array<QuantSpec, 7> out;
  for (const ModuleBits& mb : modules_bits) {
    bool matched = false;
    std::string names;
    for (const model::LayerLinear& l : kLayerLinears) {
      matched = matched || l.name.find(mb.pattern) != std::string_view::npos;
      names += (names.empty() ? "" : ", ") + std::string(l.name);
    }
    if (mb.pattern.empty() || !matched)
      return make_error(errc::invalid_argument, "quantize_model",
                        "modules_bits: pattern '" + mb.pattern +
                            "' matches none of the linears (" + names + ")");
    if ((mb.bits < 2 || mb.bits > 8) && mb.bits != QuantSpec::kKeepBits)
      return make_error(errc::invalid_argument, "quantize_model",
                        "modules_bits: '" + mb.pattern + "=" + std::to_string(mb.bits) +
                            "': bits must be 2..8 or 16 (kept in fp16)");
  }
  for (int i = 0; i < 7; ++i) {
    QuantSpec s = base;
    for (const ModuleBits& mb : modules_bits) {
      if (kLayerLinears[static_cast<std::size_t>(i)].name.find(mb.pattern) !=
          std::string_view::npos) {
        s.bits = mb.bits;
        break;
      }
    }
    s.symmetric = s.bits == 8;
    out[static_cast<std::size_t>(i)] = s;
  }
  return out;
}


/// quantize_model without its guard: allocations that fail throw.
inline result<QuantizeResult> quantize_model_unguarded(const std::string& dir,
                                                       std::span<const std::int32_t> calib_tokens,
                                                       const QuantizeOptions& opt,
                                                       const ProgressFn& progress,
                                                       const LayerSink& sink) {
  constexpr std::string_view where = "quantize_model";
  const auto t_start = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  };
  auto cfg = model::load_model_config(dir);
  if (!cfg) return cfg.error();
  const model::ModelConfig& c = *cfg;
  if (c.awq)
    return make_error(errc::unsupported, where,
                      dir +
                          ": already quantised (config.json has an AWQ quantization_config); "
                          "quantize the fp16/bf16/fp32 original");
  for (const std::size_t k : {c.hidden_size, c.intermediate_size, c.q_dim()})
    if (auto st = check_spec(opt.spec, k, where); !st) return st.error();
  auto specs_r = detail::linear_specs(opt.spec, opt.modules_bits);
  if (!specs_r) return specs_r.error();
  const std::array<QuantSpec, 7>& spec = *specs_r;
  if (opt.seqlen == 0 || opt.samples == 0)
    return make_error(errc::invalid_argument, where, "samples and seqlen must be positive");
  const std::size_t nb = std::min(opt.samples, calib_tokens.size() / opt.seqlen);
  if (nb == 0)
    return make_error(errc::invalid_argument, where,
                      opt.calib_name + ": " + std::to_string(calib_tokens.size()) +
                          " tokens, fewer than one calibration block of seqlen " +
                          std::to_string(opt.seqlen));
  for (std::size_t i = 0; i < nb * opt.seqlen; ++i)
    if (calib_tokens[i] < 0 || std::size_t(calib_tokens[i]) >= c.vocab_size)
      return make_error(errc::out_of_range, where,
                        opt.calib_name + ": token " + std::to_string(calib_tokens[i]) + " at " +
                            std::to_string(i) + " is outside the vocabulary (" +
                            std::to_string(c.vocab_size) + ")");
  auto ckpt = io::Checkpoint::open(dir);
  if (!ckpt) return ckpt.error();

  const std::size_t L = opt.seqlen, M = nb * L, h = c.hidden_size;
  ThreadPool* pool = opt.pool;
  const bool awq = opt.method == QuantMethod::awq;

  // Which blocks the losses use (evenly spaced), and the clip search's token step (AutoAWQ:
  // max(1, tokens / n_sample_tokens)).
  std::size_t n_loss = opt.loss_tokens == 0 ? nb : (opt.loss_tokens + L - 1) / L;
  n_loss = std::clamp<std::size_t>(n_loss, 1, nb);
  std::vector<bool> loss_block(nb, false);
  for (std::size_t i = 0; i < n_loss; ++i) loss_block[i * nb / n_loss] = true;
  const std::size_t clip_step =
      std::max<std::size_t>(1, M / std::max<std::size_t>(1, opt.clip_search.n_sample_tokens));

  // The residual stream [M][hidden], starting from the embeddings.
  std::vector<float> x(M * h), y(M * h);
  {
    auto emb = ckpt->find("model.embed_tokens.weight");
    if (!emb) return emb.error();
    if (emb->numel() != c.vocab_size * h)
      return make_error(errc::shape_mismatch, where,
                        dir + ": model.embed_tokens.weight is not [vocab_size, hidden_size]");
    // Row by row: the table is never converted whole (vocab x hidden can be gigabytes).
    const std::byte* p = emb->bytes.data();
    const io::dtype ty = emb->type();
    if (ty != io::dtype::f32 && ty != io::dtype::f16 && ty != io::dtype::bf16)
      return make_error(errc::unsupported, where,
                        dir + ": model.embed_tokens.weight is " + std::string(io::dtype_name(ty)) +
                            " (expected F16, BF16 or F32)");
    const std::size_t es = io::dtype_size(ty);
    for (std::size_t t = 0; t < M; ++t) {
      const std::byte* row = p + std::size_t(calib_tokens[t]) * h * es;
      float* dst = x.data() + t * h;
      for (std::size_t i = 0; i < h; ++i) {
        if (ty == io::dtype::f32) {
          std::memcpy(dst + i, row + 4 * i, 4);
        } else {
          std::uint16_t v;
          std::memcpy(&v, row + 2 * i, 2);
          dst[i] = ty == io::dtype::f16 ? kernels::f16_to_f32(v) : kernels::bf16_to_f32(v);
        }
      }
    }
  }

  detail::AttentionCore core;
  core.cfg = &c;
  core.seqlen = L;
  core.pool = pool;
  {
    const std::vector<float> inv = model::rope_inv_freq(c);
    core.cos.resize(L * inv.size());
    core.sin.resize(L * inv.size());
    kernels::rope_tables(inv.data(), inv.size(), 0, L, core.cos.data(), core.sin.data());
  }
  const auto eps = static_cast<float>(c.rms_norm_eps);

  QuantizeResult res;
  res.config = c;
  res.samples = nb;
  res.seqlen = L;
  for (std::size_t li = 0; li < c.num_hidden_layers; ++li) {
    const double t_layer = elapsed();
    auto lw = detail::load_layer(*ckpt, c, li);
    if (!lw) return lw.error();
    core.rope = c.uses_rope(li);
    detail::LayerF32& W = *lw;
    core.layer = &W;
    QuantLayer out;
    out.index = li;

    detail::Capture cap[4];  // inputs of q (= k, v), o, gate (= up), down
    const std::size_t cap_k[4] = {h, c.q_dim(), h, c.intermediate_size};
    for (int i = 0; i < 4; ++i) {
      cap[i].k = cap_k[i];
      cap[i].abs_sum.assign(cap_k[i], 0.0);
    }
    // The Gram matrices of each captured input, divided by its folded scales (compensated
    // rounding): H_ij / (s_i s_j) is the Gram of the scaled inputs x / s.
    std::vector<float> grams[4];
    const bool compensate = awq && opt.rounding == Rounding::compensated;
    // The forward pass, one sample block at a time, with the original weights.
    {
      std::vector<float> xn(L * h), a(L * c.q_dim()), o(L * h), g(L * c.intermediate_size),
          u(L * c.intermediate_size);
      for (std::size_t b = 0; b < nb; ++b) {
        const float* xb = x.data() + b * L * h;
        float* yb = y.data() + b * L * h;
        const std::size_t t0 = b * L;
        kernels::rms_norm(xb, W.input_norm.data(), xn.data(), h, 0, L, eps);
        if (awq) cap[0].add(xn.data(), L, t0, loss_block[b], clip_step);
        core.run(xn.data(), L, W.w[0], W.w[1], W.w[2], a.data());
        if (awq) cap[1].add(a.data(), L, t0, loss_block[b], clip_step);
        detail::linear(W.w[3], W.n[3], W.k[3], W.b[3], a.data(), L, o.data(), pool);
        for (std::size_t i = 0; i < L * h; ++i) yb[i] = xb[i] + o[i];
        kernels::rms_norm(yb, W.post_norm.data(), xn.data(), h, 0, L, eps);
        if (awq) cap[2].add(xn.data(), L, t0, loss_block[b], clip_step);
        detail::linear(W.w[4], W.n[4], W.k[4], W.b[4], xn.data(), L, g.data(), pool);
        detail::linear(W.w[5], W.n[5], W.k[5], W.b[5], xn.data(), L, u.data(), pool);
        kernels::silu_mul(g.data(), u.data(), g.size());
        if (awq) cap[3].add(g.data(), L, t0, loss_block[b], clip_step);
        detail::linear(W.w[6], W.n[6], W.k[6], W.b[6], g.data(), L, o.data(), pool);
        for (std::size_t i = 0; i < L * h; ++i) yb[i] += o[i];
      }
    }

    if (awq) {
      const std::size_t m_loss = n_loss * L;
      ScaleSearchOptions search_options = opt.scale_search;
      search_options.pool = pool;
      // The four searches, all against the original weights (AutoAWQ searches every group
      // before applying any scale).
      std::vector<float> s[4];
      bool searched[4] = {false, false, false, false};
      // A group whose linears are all kept in fp16 is not searched (s = 1).
      const auto any_quantised = [&](std::initializer_list<int> ids) {
        for (const int i : ids)
          if (!spec[static_cast<std::size_t>(i)].kept()) return true;
        return false;
      };
      for (int i = 0; i < 4; ++i) s[i].assign(cap[i].k, 1.0f);
      if (any_quantised({0, 1, 2})) {
        const WeightRef ws[3] = {
            {W.w[0], W.n[0], &spec[0]}, {W.w[1], W.n[1], &spec[1]}, {W.w[2], W.n[2], &spec[2]}};
        detail::AttentionLoss loss(core, cap[0].loss, m_loss);
        auto r = search_scales(ws, h, cap[0].mean(M), opt.spec, loss, search_options);
        if (!r) return r.error();
        s[0] = std::move(r->scales);
        out.alpha[0] = r->alpha;
        searched[0] = true;
      }
      if (W.n[2] == W.n[3] && W.k[2] == W.k[3] && any_quantised({3})) {  // o after v: no GQA
        const WeightRef ws[1] = {{W.w[3], W.n[3], &spec[3]}};
        LinearOutputLoss loss(cap[1].loss, m_loss, W.w[3], W.n[3], W.k[3], pool);
        auto r = search_scales(ws, W.k[3], cap[1].mean(M), opt.spec, loss, search_options);
        if (!r) return r.error();
        s[1] = std::move(r->scales);
        out.alpha[1] = r->alpha;
        searched[1] = true;
      }
      if (any_quantised({4, 5})) {
        const WeightRef ws[2] = {{W.w[4], W.n[4], &spec[4]}, {W.w[5], W.n[5], &spec[5]}};
        detail::MlpLoss loss(W, cap[2].loss, m_loss, pool);
        auto r = search_scales(ws, h, cap[2].mean(M), opt.spec, loss, search_options);
        if (!r) return r.error();
        s[2] = std::move(r->scales);
        out.alpha[2] = r->alpha;
        searched[2] = true;
      }
      if (any_quantised({6})) {
        const WeightRef ws[1] = {{W.w[6], W.n[6], &spec[6]}};
        LinearOutputLoss loss(cap[3].loss, m_loss, W.w[6], W.n[6], W.k[6], pool);
        auto r = search_scales(ws, W.k[6], cap[3].mean(M), opt.spec, loss, search_options);
        if (!r) return r.error();
        s[3] = std::move(r->scales);
        out.alpha[3] = r->alpha;
        searched[3] = true;
      }
      // Fold: 1/s into the producer of each group's input, s into the consumers' columns.
      if (searched[0]) {
        divide_by_scales(W.input_norm, s[0]);
        for (int i = 0; i < 3; ++i) scale_input_columns(W.w[i], W.n[i], W.k[i], s[0]);
      }
      if (searched[1]) {
        divide_output_rows(W.w[2], W.n[2], W.k[2], W.b[2], s[1]);
        scale_input_columns(W.w[3], W.n[3], W.k[3], s[1]);
      }
      if (searched[2]) {
        divide_by_scales(W.post_norm, s[2]);
        for (int i = 4; i < 6; ++i) scale_input_columns(W.w[i], W.n[i], W.k[i], s[2]);
      }
      if (searched[3]) {
        divide_output_rows(W.w[5], W.n[5], W.k[5], W.b[5], s[3]);
        scale_input_columns(W.w[6], W.n[6], W.k[6], s[3]);
      }
      // Clip search on v, o, gate, up, down (never q, k) with the scaled inputs.
      if (opt.clip) {
        const int lin[5] = {2, 3, 4, 5, 6};
        const int src[5] = {0, 1, 2, 2, 3};
        std::vector<float> xs[4];
        for (int i = 0; i < 4; ++i) xs[i] = cap[i].clip_scaled(s[i]);  // s = 1 if not searched
        for (int j = 0; j < 5; ++j) {
          const int i = lin[j];
          const QuantSpec& si = spec[static_cast<std::size_t>(i)];
          if (si.kept()) continue;
          const std::size_t tk = xs[src[j]].size() / W.k[i];
          auto mv = search_clip(W.w[i], W.n[i], W.k[i], xs[src[j]], tk, si, opt.clip_search, pool);
          if (!mv) return mv.error();
          apply_clip(W.w[i], W.n[i], W.k[i], opt.spec.group, *mv);
        }
      }
      if (compensate) {
        const std::size_t G = opt.spec.group;
        for (int j = 0; j < 4; ++j) {
          const std::size_t k = cap[j].k;
          grams[j] = input_grams(cap[j].loss, cap[j].loss.size() / k, k, G, pool);
          for (std::size_t g = 0; g < k / G; ++g)
            for (std::size_t a = 0; a < G; ++a)
              for (std::size_t b = 0; b < G; ++b)
                grams[j][(g * G + a) * G + b] /= s[j][g * G + a] * s[j][g * G + b];
        }
      }
    }

    // Quantise.
    out.input_norm = std::move(W.input_norm);
    out.post_norm = std::move(W.post_norm);
    out.q_norm = std::move(W.q_norm);
    out.k_norm = std::move(W.k_norm);
    for (int i = 0; i < 7; ++i) {
      QuantLinear ql;
      ql.name = std::string(detail::kLayerLinears[static_cast<std::size_t>(i)].name);
      ql.n = W.n[i];
      ql.k = W.k[i];
      ql.bias = std::move(W.b[i]);
      const std::string what = "model.layers." + std::to_string(li) + "." + ql.name;
      const auto named = [&](error e) {  // the linear's name in front of the message
        e.message = what + ": " + e.message;
        return e;
      };
      ql.spec = spec[static_cast<std::size_t>(i)];
      const std::vector<float>& gram = grams[detail::input_of(static_cast<std::size_t>(i))];
      if (ql.spec.bits == 8) {  // symmetric int8: the codes Q8Matrix runs
        auto q = kernels::quantize_q8(W.w[i], W.n[i], W.k[i], ql.spec.group);
        if (!q) return named(q.error());
        ql.weight.resize(W.n[i] * W.k[i]);
        for (std::size_t r = 0; r < W.n[i]; ++r) q->row(r, ql.weight.data() + r * W.k[i]);
        ql.q8 = std::move(*q);
      } else if (ql.spec.bits == 4) {
        auto q = kernels::quantize_rtn(W.w[i], W.n[i], W.k[i], opt.spec.group);
        if (!q) return named(q.error());
        if (compensate)
          if (auto st = compensate_codes(*q, W.w[i], gram, opt.compensation,
                                         pool);
              !st)
            return named(st.error());
        ql.weight = kernels::dequantize(*q);
        ql.q4 = std::move(*q);
      } else if (compensate && !ql.spec.kept() && !ql.spec.symmetric) {
        if (auto st = compensate_fake_quantize(W.w[i], W.n[i], W.k[i], ql.spec,
                                               gram, opt.compensation, pool);
            !st)
          return named(st.error());
        ql.weight = std::move(W.w[i]);
      } else {
        if (auto st = fake_quantize(W.w[i], W.n[i], W.k[i], ql.spec); !st)
          return named(st.error());
        ql.weight = std::move(W.w[i]);
      }
      W.w[i] = {};
      out.linears.push_back(std::move(ql));
    }
    out.seconds = elapsed() - t_layer;
    res.alphas.push_back({out.alpha[0], out.alpha[1], out.alpha[2], out.alpha[3]});
    if (sink) {
      if (auto st = sink(std::move(out)); !st) return st.error();
    } else {
      res.layers.push_back(std::move(out));
    }
    std::swap(x, y);
    if (progress) progress(LayerProgress{li + 1, c.num_hidden_layers, elapsed()});
  }
  res.seconds = elapsed();
  return res;
}

}  // namespace detail

/// Quantises the checkpoint in `dir` (an unquantised Llama / Qwen2 / Qwen3 / Mistral, F16 /
/// BF16 / F32) with `calib_tokens` cut into min(samples, tokens / seqlen) blocks of seqlen.
/// Each finished layer goes to `sink` (in order; an error from it stops the run) or, without
/// one, into the result. Errors: the config's and checkpoint's, an already quantised
/// checkpoint, a spec the widths do not allow (the group must divide hidden, intermediate and
/// heads x head_dim), fewer calibration tokens than one block (the message says how many).
/// Memory that runs out (an fp32 layer, the activations) is an errc::out_of_memory error, not an
/// exception, naming `dir` and the layer it happened in.
inline result<QuantizeResult> quantize_model(const std::string& dir,
                                             std::span<const std::int32_t> calib_tokens,
                                             const QuantizeOptions& opt,
                                             const ProgressFn& progress = {},
                                             const LayerSink& sink = {}) {
  std::size_t done = 0, layers = 0;  // the layers finished: the message names the next one
  const ProgressFn track = [&](const LayerProgress& p) {
    done = p.layer;
    layers = p.layers;
    if (progress) progress(p);
  };
  auto r = edgellm::detail::guard_exceptions("quantize_model", [&] {
    return detail::quantize_model_unguarded(dir, calib_tokens, opt, track, sink);
  });
  if (!r && r.error().code == errc::out_of_memory &&
      r.error().message.find(dir) == std::string::npos) {
    const std::string stage = layers == 0 && done == 0
                                  ? "the calibration activations or layer 1"
                                  : done < layers ? "layer " + std::to_string(done + 1) + " of " +
                                                        std::to_string(layers)
                                                  : "the tensors after the last layer";
    error e = r.error();
    e.message += " (quantising " + dir + ", " + stage +
                 ": an fp32 layer and the activations of --samples x --seqlen tokens)";
    return e;
  }
  return r;
}

}  // namespace edgellm::quant
