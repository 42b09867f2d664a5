// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/attention.hpp: causal GQA attention on the device over the
// device KV cache, each shader build the device has (portable, subgroup, storage), int8 and f16,
// GQA ratios 1, 2, 4, 7 (Qwen2-7B), 8 and groups split over workgroups (12, 16), head_dim 64, 96
// and 128, at lengths 1, 7, 63, 64, 65, 129 and 300 reached by a prefill chunk of 5 rows, decode
// rows and longer chunks (of which the last 8 positions attend, in one dispatch), in either of
// two layers; against the
// double-precision oracle on the stored keys and values (kernels::reference::attention_stored
// over the CPU cache, whose codes the device holds bit for bit: kv_cache_test.cpp) within a
// bound derived below, and against the CPU cache's own attend(); bad arguments are named.
// Validation on.
#include "edgellm/backend/vulkan/attention.hpp"

#include "backend/vulkan/kv_harness.hpp"
#include "backend/vulkan/test_device.hpp"
#include "edgellm/kernels/reference_attention.hpp"
#include "support/prelude.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace test_backend_vulkan_attention {

namespace vk = edgellm::backend::vk;
namespace cache = edgellm::cache;
namespace kernels = edgellm::kernels;

namespace {

constexpr double kU = 0x1p-24;  // fp32 unit roundoff

struct Config {
  vk::KvFormat format;
  std::size_t heads, kv_heads, head_dim;
  std::size_t length;  // a length the schedule reaches (kChunks' prefix sums)
};

// Chunks reaching lengths 1, 6, 7, 63, 64, 65, 129, 130, 299 and 300: decode rows, a prefill
// chunk of 5, longer chunks (block edges of 64 and 256 positions lie inside or at their ends).
constexpr std::size_t kChunks[] = {1, 5, 1, 56, 1, 1, 64, 1, 169, 1};

// The bound the device result must meet against exact attention over the stored keys and
// values, for query row i, relative to max |v| of its kv head over positions [0, p]. With
// E = (head_dim + 2) u scale max_j sum_c |q_c k_jc| (the score error: q * scale, head_dim
// products and sums, the key scale), S = max_j s_j - min_j s_j, WG the workgroup size, P the
// positions per invocation per block, B = WG P, nb = p / B + 1 blocks, C the value vec4s per
// invocation and sets = WG / ceil(head_dim / 4 / C) (attention.glsl):
//   2E                                   score errors reweight the softmax
//   2 ((3 + 3S)(nb + 1) + nb + 2) u      each weight: exp (Vulkan: 3 + 2|x| ulp, x in [-S, 0],
//                                        plus the rounding of x) and up to nb rescalings by
//                                        exp(m_old - m_new), the value scale; once in the
//                                        numerator and once in the denominator
//   (nb P + WG) u                        the denominator: each invocation's running sum of its
//                                        own weights (at most P a block), then the sum over the
//                                        invocations (or subgroups)
//   (nb ceil(B / sets) + sets + 64) u    the numerator: each set's running sum over its
//                                        positions, the sets' partial sums; the final division
// k, v: the stored (dequantised) keys and values of kv head g, [capacity][head_dim] each.
double tolerance(const double* k, const double* v, std::size_t hd, const float* q, std::size_t p,
                 std::size_t wg, std::size_t per, std::size_t chunks) {
  const double scale = kernels::attention_scale(hd);
  double e = 0.0, smax = -1e300, smin = 1e300, vmax = 0.0;
  for (std::size_t j = 0; j <= p; ++j) {
    double abs_sum = 0.0, s = 0.0;
    for (std::size_t c = 0; c < hd; ++c) {
      abs_sum += std::fabs(q[c] * k[j * hd + c]);
      s += q[c] * k[j * hd + c];
      vmax = std::max(vmax, std::fabs(v[j * hd + c]));
    }
    e = std::max(e, abs_sum);
    smax = std::max(smax, s * scale);
    smin = std::min(smin, s * scale);
  }
  e *= static_cast<double>(hd + 2) * kU * scale;
  const std::size_t block = wg * per, sets = wg / ((hd / 4 + chunks - 1) / chunks);
  const double big_s = smax - smin, nb = static_cast<double>(p / block + 1);
  const double sums = nb * static_cast<double>(per) + static_cast<double>(wg) +
                      nb * static_cast<double>((block + sets - 1) / sets) +
                      static_cast<double>(sets) + 64.0;
  return (2.0 * e + (2.0 * ((3.0 + 3.0 * big_s) * (nb + 1.0) + nb + 2.0) + sums) * kU) * vmax;
}

template <class Cache>
void check_attention(vk::Device& dev, const Config& cfg, const vk::AttentionOptions& options,
                     std::uint64_t salt) {
  auto rng = test::make_rng(salt);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  test::KvShape s;
  s.attention = options;
  s.format = cfg.format;
  s.layers = 2;
  s.heads = cfg.heads;
  s.kv_heads = cfg.kv_heads;
  s.head_dim = cfg.head_dim;
  s.capacity = 300;
  s.max_rows = 169;
  auto d = test::DeviceKv::create(dev, s);
  auto cpu = test::cpu_cache<Cache>(s);
  const std::size_t layer = salt % 2, kv_len = s.kv_heads * s.head_dim,
                    q_len = s.heads * s.head_dim;
  REQUIRE(d->attention.build() == options.build);
  const std::size_t wg = d->attention.workgroup_size(),
                    per = d->attention.positions_per_invocation(),
                    chunks = d->attention.vec4s_per_invocation();
  const std::size_t group = s.heads / s.kv_heads;
  std::size_t pos = 0, checked = 0, want_checked = 0;
  // [kv_heads][capacity][head_dim]: what the cache holds, as exact doubles
  std::vector<double> stored_k(s.kv_heads * s.capacity * s.head_dim), stored_v(stored_k.size());
  double worst = 0.0;  // largest error / bound seen
  for (std::size_t rows : kChunks) {
    if (pos == cfg.length) break;
    INFO("rows " << rows << " at position " << pos);
    // The device attends the chunk's last n_q positions (all of a short chunk; a long chunk's
    // rows differ only in their position, and the oracle costs O(p) per row).
    const std::size_t n_q = std::min<std::size_t>(rows, 8), q0 = pos + rows - n_q;
    std::vector<float> k(rows * kv_len), v(rows * kv_len), q(n_q * q_len);
    for (auto& x : k) x = dist(rng);
    for (auto& x : v) x = dist(rng);
    for (auto& x : q) x = 1.5f * dist(rng);  // peakier softmax than N(0, 1) queries give
    std::vector<float> got(n_q * q_len, -1.0f), want(q_len), cpu_out(q_len);
    auto st = d->step(layer, pos, rows, k, v, q, got);
    INFO((st ? std::string() : st.error().message));
    REQUIRE(st);
    REQUIRE(cpu.append(layer, pos, rows, k, v));
    const auto view = cpu.layer_view(layer);
    for (std::size_t g = 0; g < s.kv_heads; ++g) {  // the new positions, dequantised once
      for (std::size_t j = pos; j < pos + rows; ++j) {
        for (std::size_t c = 0; c < s.head_dim; ++c) {
          stored_k[(g * s.capacity + j) * s.head_dim + c] =
              kernels::reference::stored_key(view, g, j, c);
          stored_v[(g * s.capacity + j) * s.head_dim + c] =
              kernels::reference::stored_value(view, g, j, c);
        }
      }
    }
    for (std::size_t i = 0; i < n_q; ++i) {
      const std::span<const float> qi = std::span(q).subspan(i * q_len, q_len);
      kernels::reference::attention_stored(view, qi.data(), 1, q0 + i, s.heads, want.data());
      REQUIRE(cpu.attend(layer, qi, 1, q0 + i, s.heads, std::span(cpu_out).first(q_len), nullptr));
      for (std::size_t h = 0; h < s.heads; ++h) {
        const float* qh = qi.data() + h * s.head_dim;
        const std::size_t at_g = (h / group) * s.capacity * s.head_dim;
        const double tol =
            tolerance(stored_k.data() + at_g, stored_v.data() + at_g, s.head_dim, qh, q0 + i, wg, per,
                      chunks);
        for (std::size_t c = 0; c < s.head_dim; ++c) {
          const std::size_t at = h * s.head_dim + c;
          const float dev_out = got[i * q_len + at];
          const double err = std::fabs(double{dev_out} - double{want[at]});
          worst = std::max(worst, err / tol);
          if (!(err <= tol)) {
            INFO("position " << q0 + i << ", head " << h << ", coordinate " << c << ": device "
                             << dev_out << ", oracle " << want[at] << ", bound " << tol);
            REQUIRE(err <= tol);
          }
          // The CPU's result is within its own (smaller) bound of the oracle.
          if (!(std::fabs(double{dev_out} - double{cpu_out[at]}) <= 2.0 * tol)) {
            INFO("position " << q0 + i << ", head " << h << ", coordinate " << c << ": device "
                             << dev_out << ", CPU " << cpu_out[at]);
            REQUIRE(std::fabs(double{dev_out} - double{cpu_out[at]}) <= 2.0 * tol);
          }
        }
      }
      ++checked;
    }
    pos += rows;
    want_checked += n_q;
  }
  CHECK(pos == cfg.length);
  CHECK(checked == want_checked);
  UNSCOPED_INFO("largest error / bound: " << worst);
  CHECK(worst < 1.0);
}

}  // namespace

TEST_CASE("Vulkan attention over the device KV cache matches the oracle", "[vulkan][attention]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    // Each build the device has; each format sees every GQA ratio (heads / kv_heads = 1, 2, 7
    // as Qwen2-7B, 8 = a full workgroup of heads, 12 and 16 split over two workgroups), head_dim
    // 64 and 128 (and 96: sets of 24 invocations), lengths across the block edges (under ASan
    // the device's work dominates the test's time). One device for all: creating one with
    // validation costs more than a configuration's run.
    const Config configs[] = {
        {vk::KvFormat::int8, 2, 2, 64, 300},  {vk::KvFormat::int8, 4, 2, 128, 300},
        {vk::KvFormat::int8, 14, 2, 128, 300}, {vk::KvFormat::int8, 8, 1, 64, 129},
        {vk::KvFormat::int8, 16, 1, 64, 65},  {vk::KvFormat::int8, 12, 1, 128, 64},
        {vk::KvFormat::int8, 6, 2, 96, 63},   {vk::KvFormat::f16, 2, 2, 128, 129},
        {vk::KvFormat::f16, 4, 2, 64, 300},   {vk::KvFormat::f16, 7, 1, 128, 300},
        {vk::KvFormat::f16, 16, 2, 64, 300},  {vk::KvFormat::f16, 16, 1, 128, 65},
        {vk::KvFormat::f16, 4, 1, 128, 7},    {vk::KvFormat::f16, 12, 4, 96, 129}};
    std::uint64_t salt = 0;
    int builds = 0;
    for (vk::AttentionBuild build : {vk::AttentionBuild::portable, vk::AttentionBuild::subgroup,
                                     vk::AttentionBuild::storage}) {
      vk::AttentionOptions options;
      options.build = build;
      auto probe = vk::Attention::create(*dev, options);
      if (!probe) {
        CHECK(probe.error().code == errc::unsupported);
        WARN("attention build " << vk::attention_build_name(build)
                                << " skipped: " << probe.error().message);
        continue;
      }
      ++builds;
      for (vk::AttentionTiling tiling : {vk::AttentionTiling::cpu, vk::AttentionTiling::gpu}) {
        options.tiling = tiling;
        for (const Config& c : configs) {
          INFO(vk::attention_build_name(build)
               << " build, " << (tiling == vk::AttentionTiling::cpu ? "cpu" : "gpu")
               << " tiling, " << vk::kv_format_name(c.format) << ", heads " << c.heads
               << ", kv_heads " << c.kv_heads << ", head_dim " << c.head_dim << ", length "
               << c.length);
          if (c.format == vk::KvFormat::int8) {
            check_attention<cache::KVCacheQ8>(*dev, c, options, ++salt);
          } else {
            check_attention<cache::KVCacheF16>(*dev, c, options, ++salt);
          }
        }
      }
    }
    CHECK(builds >= 1);  // portable runs everywhere
    auto best = vk::Attention::create(*dev);
    REQUIRE(best);
    CHECK(best->build() != vk::AttentionBuild::best);
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("Vulkan attention names the bad argument", "[vulkan][attention]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    test::KvShape s;
    s.heads = 4;
    s.kv_heads = 2;
    s.capacity = 8;
    s.max_rows = 4;
    auto d = test::DeviceKv::create(*dev, s);
    const auto fails = [](const auto& r, errc code, const char* text) {
      REQUIRE_FALSE(r);
      CHECK(r.error().code == code);
      CHECK_THAT(r.error().message, Contains(text));
    };
    std::vector<float> kv(4 * 2 * 64, 0.5f), q(4 * 4 * 64, 0.25f), out(q.size());
    REQUIRE(
        d->step(0, 0, 2, kv, kv, std::span(q).first(2 * 4 * 64), std::span(out).first(2 * 4 * 64)));
    // Equal keys: uniform weights over equal values.
    for (float x : std::span(out).first(2 * 4 * 64)) CHECK(x == Approx(0.5f));
    const auto attend = [&](std::size_t heads, const vk::Buffer& out_buffer, std::size_t layer,
                            std::size_t first_pos, std::size_t rows) {
      return d->run([&](vk::CommandSequence& seq) {
        return d->attention.record(seq, d->cache, d->q, out_buffer, heads, layer, first_pos, rows);
      });
    };
    fails(attend(3, d->out, 0, 0, 1), errc::invalid_argument,
          "heads: 3 is not a positive multiple of kv_heads 2");
    fails(attend(4, d->out, 0, 1, 2), errc::out_of_range,
          "first_pos + rows: queries at positions 1..2 but layer 0 holds 2");
    fails(attend(4, d->out, 1, 0, 1), errc::out_of_range, "layer: 1 >= layers 1");
    fails(attend(4, d->out, 0, 0, 0), errc::invalid_argument, "rows: must be positive");
    auto small = vk::Buffer::create(*dev, 256, "small", {vk::BufferKind::host_io});
    REQUIRE(small);
    fails(attend(4, *small, 0, 0, 2), errc::shape_mismatch,
          "out: buffer 'small' holds 256 bytes; [2][4][64] fp32 needs 2048");
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_attention
