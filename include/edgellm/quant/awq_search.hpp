// SPDX-License-Identifier: Apache-2.0
// The searches of activation-aware weight quantisation (AWQ) on one group of linears that share
// an input: the per-input-channel scale search over the grid of alpha, and the per-(row, group)
// clipping search, following AutoAWQ's defaults (../shared/docs/formats.md, 1.5-1.6). Weights
// and activations here are fp32, row-major: a linear's W is [n][k] (out x in), its inputs X
// [m][k] (tokens x in). What the searches choose is applied by folding: W[:, c] *= s[c] and
// 1/s[c] into what produces the input (an RMSNorm weight, or the previous linear's output rows),
// which leaves the float model unchanged; then the scaled W is clipped and quantised.
#pragma once

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/gemm_f32.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::quant {

/// The grid a search quantises one linear to, per `group` consecutive input channels:
/// - bits 2..8, asymmetric (AutoAWQ's): codes 0 .. 2^bits - 1 with one fp16 scale and one zero
///   point per group;
/// - bits 2..8, symmetric: codes -(2^(bits-1) - 1) .. 2^(bits-1) - 1 with one fp32 scale
///   amax / max_code per group; at 8 bits the int8 weight format kernels::Q8Matrix runs
///   (kernels::quantize_q8 gives the same values);
/// - bits 16 (kKeepBits): not quantised, kept in fp16 (AutoAWQ's modules_to_not_convert).
struct QuantSpec {
  static constexpr unsigned kKeepBits = 16;
  unsigned bits = 4;
  std::size_t group = 128;
  bool symmetric = false;

  bool kept() const noexcept { return bits == kKeepBits; }
  unsigned max_code() const noexcept {
    return symmetric ? (1u << (bits - 1)) - 1u : (1u << bits) - 1u;
  }
};

/// Errors: bits outside 2..8 (and not 16), a group of 0, k not a multiple of the group.
inline status check_spec(const QuantSpec& spec, std::size_t k, std::string_view where) {
  if ((spec.bits < 2 || spec.bits > 8) && !spec.kept())
    return make_error(errc::invalid_argument, where,
                      "bits: " + std::to_string(spec.bits) + " (supported: 2 to 8, or 16 = kept)");
  if (spec.group == 0 || k % spec.group != 0)
    return make_error(errc::shape_mismatch, where,
                      "group: " + std::to_string(spec.group) + " does not divide the input width " +
                          std::to_string(k));
  return {};
}

/// Fake-quantises one group of g values from `in` into `out` (may alias): the values
/// kernels::quantize_rtn followed by dequantisation gives at 4 bits, generalised to
/// max_code = 2^bits - 1: the range widened to include 0, s = fp16(max(hi - lo, 1e-5) /
/// max_code), z = clamp(-round(lo / s), 0, max_code), q = clamp(round(w / s) + z, 0, max_code),
/// out = (q - z) * s, rounding half to even. Inputs must be finite.
inline void fake_quantize_group(const float* in, float* out, std::size_t g,
                                unsigned max_code) noexcept {
  float lo = 0.0f, hi = 0.0f;
  for (std::size_t i = 0; i < g; ++i) {
    lo = std::min(lo, in[i]);
    hi = std::max(hi, in[i]);
  }
  const float mc = static_cast<float>(max_code);
  const float s = kernels::f16_to_f32(kernels::f32_to_f16(std::max(hi - lo, 1e-5f) / mc));
  const float z = std::clamp(-std::nearbyint(lo / s), 0.0f, mc);
  for (std::size_t i = 0; i < g; ++i)
    out[i] = (std::clamp(std::nearbyint(in[i] / s) + z, 0.0f, mc) - z) * s;
}

/// Symmetric fake-quantisation of one group (see QuantSpec): scale = amax / max_code (fp32),
/// out = clamp(round(w / scale), -max_code, max_code) * scale, rounding half to even; all
/// zeros for an all-zero group. At max_code 127 equal to kernels::quantize_q8 then
/// Q8Matrix::row. Inputs must be finite.
inline void fake_quantize_group_symmetric(const float* in, float* out, std::size_t g,
                                          unsigned max_code) noexcept {
  float amax = 0.0f;
  for (std::size_t i = 0; i < g; ++i) amax = std::max(amax, std::fabs(in[i]));
  const float mc = static_cast<float>(max_code);
  const float s = amax / mc;
  for (std::size_t i = 0; i < g; ++i)
    out[i] = s > 0.0f ? std::clamp(std::nearbyint(in[i] / s), -mc, mc) * s : 0.0f;
}

/// One group fake-quantised to `spec`'s grid (asymmetric, symmetric, or kept: fp16 rounding).
inline void fake_quantize_group(const float* in, float* out, std::size_t g,
                                const QuantSpec& spec) noexcept {
  if (spec.kept()) {
    for (std::size_t i = 0; i < g; ++i) out[i] = kernels::f16_to_f32(kernels::f32_to_f16(in[i]));
  } else if (spec.symmetric) {
    fake_quantize_group_symmetric(in, out, g, spec.max_code());
  } else {
    fake_quantize_group(in, out, g, spec.max_code());
  }
}

/// Fake-quantises W [n][k] in place, group by group. Errors: check_spec's, a size that is not
/// n * k, a non-finite weight (naming its row and column).
inline status fake_quantize(std::span<float> w, std::size_t n, std::size_t k,
                            const QuantSpec& spec) {
  constexpr std::string_view where = "quant::fake_quantize";
  if (auto st = check_spec(spec, k, where); !st) return st;
  if (w.size() != n * k)
    return make_error(errc::shape_mismatch, where,
                      "w: size " + std::to_string(w.size()) + " != n * k = " + std::to_string(n * k));
  for (std::size_t i = 0; i < w.size(); ++i)
    if (!std::isfinite(w[i]))
      return make_error(errc::invalid_argument, where,
                        "w: non-finite value at row " + std::to_string(i / k) + ", column " +
                            std::to_string(i % k));
  for (std::size_t base = 0; base < w.size(); base += spec.group)
    fake_quantize_group(w.data() + base, w.data() + base, spec.group, spec);
  return {};
}

/// Y [m][n] = X [m][k] W [n][k]^T (+ bias [n]) in fp32 (kernels/gemm_f32.hpp): W packed into
/// panels, panels split over pool, each thread packing the panels it then multiplies. Every
/// output is one in-order FMA chain over k, so the result does not depend on the thread count.
inline void matmul(std::span<const float> w, std::size_t n, std::size_t k,
                   std::span<const float> x, std::size_t m, std::span<float> y, ThreadPool* pool,
                   std::span<const float> bias = {}) {
  const float* b = bias.empty() ? nullptr : bias.data();
  // [panels][k][NR]; throws as the std::vectors around it do (quantize_model's guard catches).
  const auto packed = edgellm::detail::allocate_aligned<float>(kernels::gemm_f32_packed_floats(n, k));
  if (!packed) throw std::bad_alloc();
  parallel_for_balanced(pool, kernels::gemm_f32_panels(n), 1, [&](std::size_t p0, std::size_t p1) {
    kernels::gemm_f32_pack(w.data(), k, n, k, p0, p1, packed.get());
    kernels::gemm_f32_rows(packed.get(), n, k, x.data(), k, m, b, y.data(), n, p0, p1);
  });
}

/// x_mean[c] = mean over the m rows of |X[t][c]| (accumulated in double): AutoAWQ's input
/// statistic. X: [m][k].
inline std::vector<float> mean_abs_columns(std::span<const float> x, std::size_t m,
                                           std::size_t k) {
  std::vector<double> acc(k, 0.0);
  for (std::size_t t = 0; t < m; ++t)
    for (std::size_t c = 0; c < k; ++c) acc[c] += std::fabs(x[t * k + c]);
  std::vector<float> out(k);
  for (std::size_t c = 0; c < k; ++c) out[c] = static_cast<float>(m ? acc[c] / double(m) : 0.0);
  return out;
}

/// One linear's weights in a group being searched: W [n][k], fp32, row-major, and the grid it
/// is quantised to (null: the search's spec; its group must be the search's).
struct WeightRef {
  std::span<const float> w;
  std::size_t n = 0;
  const QuantSpec* spec = nullptr;
};

/// w_mean[c]: every (row, group) of the stacked weights normalised by its max |w| (+ 1e-6),
/// then averaged over all rows: AutoAWQ's weight statistic.
inline std::vector<float> weight_mean(std::span<const WeightRef> ws, std::size_t k,
                                      std::size_t group) {
  std::vector<double> acc(k, 0.0);
  std::size_t rows = 0;
  for (const WeightRef& r : ws) {
    for (std::size_t i = 0; i < r.n; ++i, ++rows) {
      const float* row = r.w.data() + i * k;
      for (std::size_t g0 = 0; g0 < k; g0 += group) {
        float mx = 0.0f;
        for (std::size_t c = g0; c < g0 + group; ++c) mx = std::max(mx, std::fabs(row[c]));
        const double inv = 1.0 / (double(mx) + 1e-6);
        for (std::size_t c = g0; c < g0 + group; ++c) acc[c] += std::fabs(row[c]) * inv;
      }
    }
  }
  std::vector<float> out(k);
  for (std::size_t c = 0; c < k; ++c) out[c] = static_cast<float>(rows ? acc[c] / double(rows) : 0.0);
  return out;
}

/// The candidate scales for one alpha (AutoAWQ's _search_best_scale): with duo scaling
/// s = max(x_mean^a / (w_mean^(1-a) + 1e-4), 1e-4), else s = max(x_mean^a, 1e-4); then
/// s /= sqrt(max(s) min(s)); non-finite entries become 1.
inline std::vector<float> scales_for_alpha(std::span<const float> x_mean,
                                           std::span<const float> w_mean, double alpha, bool duo) {
  const std::size_t k = x_mean.size();
  std::vector<float> s(k);
  for (std::size_t c = 0; c < k; ++c) {
    const double xs = std::pow(double(x_mean[c]), alpha);
    const double v = duo ? xs / (std::pow(double(w_mean[c]), 1.0 - alpha) + 1e-4) : xs;
    s[c] = static_cast<float>(std::max(v, 1e-4));
  }
  const auto [mn, mx] = std::minmax_element(s.begin(), s.end());
  const double norm = std::sqrt(double(*mx) * double(*mn));
  for (float& v : s) {
    v = static_cast<float>(v / norm);
    if (!std::isfinite(v)) v = 1.0f;
  }
  return s;
}

/// W' = Q(W diag(s)) diag(1/s): what the layer computes from input x after the scales are
/// folded and the weights quantised. w: [n][k]; s: [k]; out: [n][k]. Rows split over pool.
inline void scaled_fake_quantize(std::span<const float> w, std::size_t n, std::size_t k,
                                 std::span<const float> s, const QuantSpec& spec,
                                 std::span<float> out, ThreadPool* pool = nullptr) {
  parallel_for_balanced(pool, n, 16, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      float* row = out.data() + r * k;
      for (std::size_t c = 0; c < k; ++c) row[c] = w[r * k + c] * s[c];
      for (std::size_t g0 = 0; g0 < k; g0 += spec.group)
        fake_quantize_group(row + g0, row + g0, spec.group, spec);
      for (std::size_t c = 0; c < k; ++c) row[c] /= s[c];
    }
  });
}

/// Options of search_scales.
struct ScaleSearchOptions {
  std::size_t n_grid = 20;  ///< alpha in {0, 1/n_grid, ..., (n_grid - 1)/n_grid}
  bool duo_scaling = true;  ///< AutoAWQ's default: divide by w_mean^(1 - alpha)
  /// Also try s = 1 (plain round-to-nearest) and keep it when no alpha beats it. AutoAWQ does
  /// not; it can only lower the calibration loss.
  bool try_identity = true;
  ThreadPool* pool = nullptr;  ///< splits each candidate's fake quantisation (same result)
};

/// What search_scales chose.
struct ScaleSearchResult {
  std::vector<float> scales;     ///< [k]: fold 1/s into the producer of x, s into W's columns
  double alpha = -1.0;           ///< the alpha of `scales`; -1 when s = 1 won
  double loss = 0.0;             ///< the loss of `scales`
  double rtn_loss = 0.0;         ///< the loss of s = 1 (plain RTN); NaN if not tried
  std::vector<double> grid_loss; ///< [n_grid]: the loss of each alpha, in order
};

/// The scale search for a group of linears sharing an input. `loss(fake)` gets one fp32 matrix
/// per linear, in the order of `ws`, holding W' = Q(W diag(s)) diag(1/s) for a candidate s, and
/// returns the error of the block they feed against its output with the original weights (for
/// a lone linear: linear_output_loss). Errors: check_spec's, sizes that disagree, a non-finite
/// statistic or loss.
template <class Loss>
result<ScaleSearchResult> search_scales(std::span<const WeightRef> ws, std::size_t k,
                                        std::span<const float> x_mean, const QuantSpec& spec,
                                        Loss&& loss, const ScaleSearchOptions& options = {}) {
  constexpr std::string_view where = "quant::search_scales";
  if (auto st = check_spec(spec, k, where); !st) return st.error();
  if (ws.empty() || x_mean.size() != k || options.n_grid == 0)
    return make_error(errc::invalid_argument, where,
                      "needs at least one linear, x_mean of size k = " + std::to_string(k) +
                          " (got " + std::to_string(x_mean.size()) + ") and n_grid > 0");
  for (std::size_t i = 0; i < ws.size(); ++i) {
    if (ws[i].spec != nullptr && ws[i].spec->group != spec.group)
      return make_error(errc::invalid_argument, where,
                        "linear " + std::to_string(i) + ": group " +
                            std::to_string(ws[i].spec->group) + " differs from the search's " +
                            std::to_string(spec.group));
    if (ws[i].spec != nullptr)
      if (auto st = check_spec(*ws[i].spec, k, where); !st) return st.error();
    if (ws[i].w.size() != ws[i].n * k)
      return make_error(errc::shape_mismatch, where,
                        "linear " + std::to_string(i) + ": size " + std::to_string(ws[i].w.size()) +
                            " != n * k = " + std::to_string(ws[i].n * k));
  }
  for (std::size_t c = 0; c < k; ++c)
    if (!std::isfinite(x_mean[c]))
      return make_error(errc::invalid_argument, where,
                        "x_mean: non-finite at channel " + std::to_string(c));
  const std::vector<float> w_mean = weight_mean(ws, k, spec.group);

  std::vector<std::vector<float>> fake(ws.size());
  for (std::size_t i = 0; i < ws.size(); ++i) fake[i].resize(ws[i].w.size());
  const auto evaluate = [&](std::span<const float> s) -> result<double> {
    for (std::size_t i = 0; i < ws.size(); ++i)
      scaled_fake_quantize(ws[i].w, ws[i].n, k, s, ws[i].spec ? *ws[i].spec : spec, fake[i],
                           options.pool);
    const double l = loss(std::span<const std::vector<float>>(fake));
    if (!std::isfinite(l))
      return make_error(errc::invalid_argument, where, "the block's loss is not finite");
    return l;
  };

  ScaleSearchResult best;
  best.loss = std::numeric_limits<double>::infinity();
  best.rtn_loss = std::numeric_limits<double>::quiet_NaN();
  if (options.try_identity) {
    const std::vector<float> ones(k, 1.0f);
    auto l = evaluate(ones);
    if (!l) return l.error();
    best.rtn_loss = *l;
    best.loss = *l;
    best.scales = ones;
  }
  for (std::size_t i = 0; i < options.n_grid; ++i) {
    const double alpha = double(i) / double(options.n_grid);
    std::vector<float> s = scales_for_alpha(x_mean, w_mean, alpha, options.duo_scaling);
    auto l = evaluate(s);
    if (!l) return l.error();
    best.grid_loss.push_back(*l);
    if (*l < best.loss) {
      best.loss = *l;
      best.alpha = alpha;
      best.scales = std::move(s);
    }
  }
  return best;
}

/// The loss of a lone linear (AutoAWQ's groups 2 and 4: o_proj after v_proj, down_proj after
/// up_proj): mean over all outputs of (X W'^T - Y_ref)^2, with Y_ref = X W^T computed once.
class LinearOutputLoss {
 public:
  /// x: [m][k] inputs (kept by reference: it must outlive the object); w: [n][k].
  LinearOutputLoss(std::span<const float> x, std::size_t m, std::span<const float> w,
                   std::size_t n, std::size_t k, ThreadPool* pool)
      : x_(x), m_(m), n_(n), k_(k), pool_(pool), ref_(m * n), out_(m * n) {
    matmul(w, n, k, x, m, ref_, pool);
  }

  double operator()(std::span<const std::vector<float>> fake) {
    matmul(fake[0], n_, k_, x_, m_, out_, pool_);
    double sum = 0.0;
    for (std::size_t i = 0; i < out_.size(); ++i) {
      const double d = double(out_[i]) - double(ref_[i]);
      sum += d * d;
    }
    return out_.empty() ? 0.0 : sum / double(out_.size());
  }

 private:
  std::span<const float> x_;
  std::size_t m_, n_, k_;
  ThreadPool* pool_;
  std::vector<float> ref_, out_;  // [m][n]
};

/// The Gram matrices of X [m][k]'s input groups over the rows `tokens`: [k / G][G][G],
/// H_g = sum_t x_t[g] x_t[g]^T (x_t[g] the G inputs of group g). Groups split over pool; each
/// sums its tokens in order, so the result does not depend on the thread count.
inline std::vector<float> group_grams(std::span<const float> x, std::size_t k, std::size_t G,
                                      std::span<const std::size_t> tokens, ThreadPool* pool) {
  const std::size_t ng = k / G;
  std::vector<float> gram(ng * G * G, 0.0f);
  parallel_for_balanced(pool, ng, 1, [&](std::size_t g0, std::size_t g1) {
    for (std::size_t g = g0; g < g1; ++g) {
      float* H = gram.data() + g * G * G;
      for (std::size_t t : tokens) {
        const float* xg = x.data() + t * k + g * G;
        for (std::size_t i = 0; i < G; ++i) {
          const float xi = xg[i];
          float* Hi = H + i * G;
          for (std::size_t j = 0; j < G; ++j) Hi[j] += xi * xg[j];
        }
      }
    }
  });
  return gram;
}

/// Options of search_clip.
struct ClipSearchOptions {
  std::size_t n_grid = 20;          ///< shrink steps of 1/n_grid
  double max_shrink = 0.5;          ///< try max |w| * (1 - i/n_grid) for i < max_shrink * n_grid
  std::size_t n_sample_tokens = 512;  ///< tokens subsampled with step max(1, m / this)
};

/// AutoAWQ's clipping search (_compute_best_clip) on W [n][k] with its (already scaled) inputs
/// X [m][k]: for each (row, group), the clip value max_val = max|w| * (1 - i / n_grid) whose
/// fake-quantised clamped weights give the least mean squared error of the group's partial dot
/// products over the subsampled tokens (evaluated as d^T H d through the group's Gram matrix H,
/// the same quantity). Returns max_val [n][k / group]. Groups, then rows, split over pool.
inline result<std::vector<float>> search_clip(std::span<const float> w, std::size_t n,
                                              std::size_t k, std::span<const float> x,
                                              std::size_t m, const QuantSpec& spec,
                                              const ClipSearchOptions& options = {},
                                              ThreadPool* pool = nullptr) {
  constexpr std::string_view where = "quant::search_clip";
  if (auto st = check_spec(spec, k, where); !st) return st.error();
  if (w.size() != n * k || x.size() != m * k || m == 0 || options.n_grid == 0)
    return make_error(errc::shape_mismatch, where,
                      "w: size " + std::to_string(w.size()) + " (n * k = " +
                          std::to_string(n * k) + "), x: size " + std::to_string(x.size()) +
                          " (m * k = " + std::to_string(m * k) + "), m and n_grid must be > 0");
  const std::size_t step = std::max<std::size_t>(1, m / std::max<std::size_t>(1, options.n_sample_tokens));
  std::vector<std::size_t> tokens;
  for (std::size_t t = 0; t < m; t += step) tokens.push_back(t);
  const std::size_t G = spec.group, ng = k / G;
  const auto steps = static_cast<std::size_t>(options.max_shrink * double(options.n_grid));
  std::vector<float> best(n * ng);
  // The error of a candidate d = W'_g - W_g over the tokens is sum_t (x_t . d)^2 = d^T H_g d with
  // H_g the group's Gram matrix: computed once per group for all rows, then each (row, group,
  // shrink step) costs G^2 multiply-adds instead of T x G.
  const std::vector<float> gram = group_grams(x, k, G, tokens, pool);
  parallel_for_balanced(pool, n, 4, [&](std::size_t r0, std::size_t r1) {
    std::vector<float> clamped(G), d(G), hd(G);
    for (std::size_t r = r0; r < r1; ++r) {
      for (std::size_t g = 0; g < ng; ++g) {
        const float* wg = w.data() + r * k + g * G;
        const float* H = gram.data() + g * G * G;
        float org_max = 0.0f;
        for (std::size_t c = 0; c < G; ++c) org_max = std::max(org_max, std::fabs(wg[c]));
        double best_err = std::numeric_limits<double>::infinity();
        float best_max = org_max;
        for (std::size_t s = 0; s < std::max<std::size_t>(1, steps); ++s) {
          const float mv = org_max * static_cast<float>(1.0 - double(s) / double(options.n_grid));
          for (std::size_t c = 0; c < G; ++c) clamped[c] = std::clamp(wg[c], -mv, mv);
          fake_quantize_group(clamped.data(), clamped.data(), G, spec);
          for (std::size_t c = 0; c < G; ++c) d[c] = clamped[c] - wg[c];
          // hd = H d as a sum of H's rows (H is symmetric) scaled by d: vectorisable axpys.
          std::fill(hd.begin(), hd.end(), 0.0f);
          for (std::size_t j = 0; j < G; ++j) {
            const float dj = d[j];
            const float* Hj = H + j * G;
            for (std::size_t i = 0; i < G; ++i) hd[i] += Hj[i] * dj;
          }
          double err = 0.0;
          for (std::size_t c = 0; c < G; ++c) err += double(d[c]) * double(hd[c]);
          if (err < best_err) {  // strict: ties keep the least clipping
            best_err = err;
            best_max = mv;
          }
        }
        best[r * ng + g] = best_max;
      }
    }
  });
  return best;
}

/// W = clamp(W, -max_val, max_val) per (row, group), max_val [n][k / group] from search_clip.
inline void apply_clip(std::span<float> w, std::size_t n, std::size_t k, std::size_t group,
                       std::span<const float> max_val) {
  const std::size_t ng = k / group;
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t c = 0; c < k; ++c) {
      const float mv = max_val[r * ng + c / group];
      w[r * k + c] = std::clamp(w[r * k + c], -mv, mv);
    }
}

/// Folds scales into a linear that consumes the scaled input: W[:, c] *= s[c]. W: [n][k].
inline void scale_input_columns(std::span<float> w, std::size_t n, std::size_t k,
                                std::span<const float> s) {
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t c = 0; c < k; ++c) w[r * k + c] *= s[c];
}

/// Folds 1/s into an RMSNorm weight that produces the input: v[c] /= s[c]. v: [k].
inline void divide_by_scales(std::span<float> v, std::span<const float> s) {
  for (std::size_t c = 0; c < v.size(); ++c) v[c] /= s[c];
}

/// Folds 1/s into a linear that produces the input (v_proj before o_proj, up_proj before
/// down_proj): its last s.size() output rows and their bias entries are divided by s.
/// W: [n][k] with n >= s.size(); bias: [n] or empty.
inline void divide_output_rows(std::span<float> w, std::size_t n, std::size_t k,
                               std::span<float> bias, std::span<const float> s) {
  const std::size_t first = n - s.size();
  for (std::size_t i = 0; i < s.size(); ++i) {
    for (std::size_t c = 0; c < k; ++c) w[(first + i) * k + c] /= s[i];
    if (!bias.empty()) bias[first + i] /= s[i];
  }
}

}  // namespace edgellm::quant
