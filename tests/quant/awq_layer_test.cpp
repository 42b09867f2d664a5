// SPDX-License-Identifier: Apache-2.0
#include "edgellm/quant/awq_layer.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace test_quant_awq_layer {

using namespace edgellm;

TEST_CASE("AttentionCore (GEMM scores and P V) matches plain causal GQA attention",
          "[awq_model]") {
  // The oracle: the attention written out in loops (q/k/v, q/k norm, RoPE, causal softmax).
  const bool qk_norm = GENERATE(false, true);
  const std::size_t heads = GENERATE(2, 6), kv_heads = 2, D = GENERATE(16, 64);
  const std::size_t seqlen = GENERATE(1, 9, 40), blocks = 2, m = blocks * seqlen;
  CAPTURE(qk_norm, heads, D, seqlen);
  model::ModelConfig c;
  c.hidden_size = 48;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = D;
  c.attention_qk_norm = qk_norm;
  c.rms_norm_eps = 1e-6;
  std::mt19937 rng(static_cast<unsigned>(heads * 1000 + D * 10 + seqlen));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const auto randv = [&](std::size_t n, float sd) {
    std::vector<float> v(n);
    for (auto& e : v) e = sd * nd(rng);
    return v;
  };
  const std::size_t h = c.hidden_size, qd = c.q_dim(), kd = c.kv_dim();
  quant::detail::LayerF32 L;
  L.b[0] = randv(qd, 0.5f);
  L.b[1] = randv(kd, 0.5f);
  L.b[2] = randv(kd, 0.5f);
  if (qk_norm) {
    L.q_norm = randv(D, 1.0f);
    L.k_norm = randv(D, 1.0f);
  }
  const auto wq = randv(qd * h, 0.3f), wk = randv(kd * h, 0.3f), wv = randv(kd * h, 0.3f);
  const auto x = randv(m * h, 1.0f);
  quant::detail::AttentionCore core;
  core.cfg = &c;
  core.layer = &L;
  core.seqlen = seqlen;
  const std::vector<float> inv = model::rope_inv_freq(c);
  core.cos.resize(seqlen * inv.size());
  core.sin.resize(seqlen * inv.size());
  kernels::rope_tables(inv.data(), inv.size(), 0, seqlen, core.cos.data(), core.sin.data());
  std::vector<float> got(m * qd);
  core.run(x.data(), m, wq, wk, wv, got.data());

  // q, k, v in double, then the same norm and rotation, then softmax attention per block.
  const auto proj = [&](const std::vector<float>& w, const std::vector<float>& b, std::size_t n) {
    std::vector<double> y(m * n);
    for (std::size_t t = 0; t < m; ++t)
      for (std::size_t r = 0; r < n; ++r) {
        double s = b[r];
        for (std::size_t cc = 0; cc < h; ++cc) s += double(x[t * h + cc]) * w[r * h + cc];
        y[t * n + r] = s;
      }
    return y;
  };
  auto q = proj(wq, L.b[0], qd), k = proj(wk, L.b[1], kd);
  const auto v = proj(wv, L.b[2], kd);
  const auto norm_rope = [&](std::vector<double>& a, std::size_t nh, const std::vector<float>& g) {
    for (std::size_t t = 0; t < m; ++t)
      for (std::size_t hh = 0; hh < nh; ++hh) {
        double* e = a.data() + (t * nh + hh) * D;
        if (qk_norm) {
          double ss = 0.0;
          for (std::size_t d = 0; d < D; ++d) ss += e[d] * e[d];
          const double r = 1.0 / std::sqrt(ss / double(D) + c.rms_norm_eps);
          for (std::size_t d = 0; d < D; ++d) e[d] *= r * g[d];
        }
        const std::size_t pos = t % seqlen;  // each block starts at position 0
        for (std::size_t d = 0; d < D / 2; ++d) {  // rotate-half pairs (d, d + D/2)
          const double ang = double(pos) * inv[d];
          const double a0 = e[d], a1 = e[d + D / 2];
          e[d] = a0 * std::cos(ang) - a1 * std::sin(ang);
          e[d + D / 2] = a1 * std::cos(ang) + a0 * std::sin(ang);
        }
      }
  };
  norm_rope(q, heads, L.q_norm);
  norm_rope(k, kv_heads, L.k_norm);
  double worst = 0.0;
  for (std::size_t b = 0; b < blocks; ++b)
    for (std::size_t hh = 0; hh < heads; ++hh) {
      const std::size_t g = hh / (heads / kv_heads);
      for (std::size_t i = 0; i < seqlen; ++i) {
        const std::size_t ti = b * seqlen + i;
        std::vector<double> p(i + 1);
        double mx = -1e300, sum = 0.0;
        for (std::size_t j = 0; j <= i; ++j) {
          double d = 0.0;
          for (std::size_t e = 0; e < D; ++e)
            d += q[ti * qd + hh * D + e] * k[(b * seqlen + j) * kd + g * D + e];
          p[j] = d / std::sqrt(double(D));
          mx = std::max(mx, p[j]);
        }
        for (double& e : p) sum += (e = std::exp(e - mx));
        for (std::size_t e = 0; e < D; ++e) {
          double o = 0.0;
          for (std::size_t j = 0; j <= i; ++j) o += p[j] * v[(b * seqlen + j) * kd + g * D + e];
          worst = std::max(worst, std::fabs(o / sum - got[ti * qd + hh * D + e]));
        }
      }
    }
  CHECK(worst < 5e-5);
}

}  // namespace test_quant_awq_layer
