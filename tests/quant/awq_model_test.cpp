// SPDX-License-Identifier: Apache-2.0
#include "edgellm/quant/awq_model.hpp"

#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace test_quant_awq_model {

using namespace edgellm;
using namespace edgellm::quant;

namespace {

std::string fixture(const char* name) { return test::source_dir() + "/tests/data/model/" + name; }

std::vector<std::int32_t> random_tokens(std::size_t n, std::int32_t vocab, unsigned seed = 7) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> d(0, vocab - 1);
  std::vector<std::int32_t> t(n);
  for (auto& v : t) v = d(rng);
  return t;
}

QuantizeOptions small_options(QuantMethod method, unsigned bits = 4) {
  QuantizeOptions o;
  o.method = method;
  o.spec = {bits, 32};
  o.samples = 3;
  o.seqlen = 16;
  o.loss_tokens = 32;
  return o;
}

std::vector<float> stored(const std::string& dir, const std::string& name, std::size_t n) {
  auto ck = io::Checkpoint::open(dir);
  REQUIRE(ck);
  auto v = quant::detail::read_f32(*ck, name, n);
  REQUIRE(v);
  return *v;
}

}  // namespace

TEST_CASE("quantize_model rtn: every linear is quantize_rtn of the stored weights", "[awq_model]") {
  const std::string dir = fixture("qwen2-fp16");
  const auto tokens = random_tokens(60, 300);
  std::size_t calls = 0;
  auto r =
      quantize_model(dir, tokens, small_options(QuantMethod::rtn), [&](const LayerProgress& p) {
        ++calls;
        CHECK(p.layer == calls);
        CHECK(p.layers == 2);
      });
  REQUIRE(r);
  CHECK(calls == 2);
  CHECK(r->samples == 3);  // 60 tokens: 3 blocks of 16
  REQUIRE(r->layers.size() == 2);
  const model::ModelConfig& c = r->config;
  for (const QuantLayer& L : r->layers) {
    const std::string pre = "model.layers." + std::to_string(L.index) + ".";
    CHECK(L.input_norm == stored(dir, pre + "input_layernorm.weight", c.hidden_size));
    REQUIRE(L.linears.size() == 7);
    for (const QuantLinear& q : L.linears) {
      const auto w = stored(dir, pre + q.name + ".weight", q.n * q.k);
      auto ref = kernels::quantize_rtn(w, q.n, q.k, 32);
      REQUIRE(ref);
      REQUIRE(q.q4);
      CHECK(q.q4->q == ref->q);
      CHECK(q.q4->zero == ref->zero);
      CHECK(q.q4->scale == ref->scale);
      CHECK(q.weight == kernels::dequantize(*q.q4));
    }
    CHECK(L.linears[0].bias == stored(dir, pre + "self_attn.q_proj.bias", c.q_dim()));
    CHECK(std::isnan(L.alpha[0]));
  }
}

TEST_CASE("quantize_model awq folds scales without changing the float model", "[awq_model]") {
  // At 8 bits without clipping, the quantised weights are the folded ones to ~1/255 of each
  // group's range, so W'[r][c] * norm'[c] must match W[r][c] * norm[c] (q/k/v, gate/up) and
  // up's rows divided by s must be undone by down's columns.
  for (const char* name : {"qwen2-fp16", "qwen3-fp16", "llama-fp16", "smollm3-fp16"}) {
    INFO(name);
    const std::string dir = fixture(name);
    QuantizeOptions o = small_options(QuantMethod::awq, 8);
    o.clip = false;
    auto r = quantize_model(dir, random_tokens(48, 300), o);
    REQUIRE(r);
    const model::ModelConfig& c = r->config;
    const std::size_t h = c.hidden_size;
    for (const QuantLayer& L : r->layers) {
      const std::string pre = "model.layers." + std::to_string(L.index) + ".";
      CHECK(!std::isnan(L.alpha[0]));
      CHECK(!std::isnan(L.alpha[2]));
      CHECK(!std::isnan(L.alpha[3]));
      CHECK(std::isnan(L.alpha[1]));  // GQA: o after v is not searched
      const auto norm = stored(dir, pre + "input_layernorm.weight", h);
      const auto post = stored(dir, pre + "post_attention_layernorm.weight", h);
      // down's columns carry s4 and up's rows 1/s4: estimate s4 from down.
      const QuantLinear& down = L.linears[6];
      const auto down0 = stored(dir, pre + "mlp.down_proj.weight", down.n * down.k);
      std::vector<double> s4(down.k);
      for (std::size_t cc = 0; cc < down.k; ++cc) {
        double a = 0.0, b = 0.0;
        for (std::size_t rr = 0; rr < down.n; ++rr) {
          a += std::fabs(down.weight[rr * down.k + cc]);
          b += std::fabs(down0[rr * down.k + cc]);
        }
        s4[cc] = a / b;
      }
      const std::pair<int, const std::vector<float>*> checks[] = {
          {0, &norm}, {2, &norm}, {4, &post}, {5, &post}};
      for (const auto& [i, orig_norm] : checks) {
        const QuantLinear& q = L.linears[static_cast<std::size_t>(i)];
        const auto& folded = i < 4 ? L.input_norm : L.post_norm;
        const auto w = stored(dir, pre + q.name + ".weight", q.n * q.k);
        double err = 0.0, mag = 0.0;
        for (std::size_t rr = 0; rr < q.n; ++rr)
          for (std::size_t cc = 0; cc < q.k; ++cc) {
            const double a = double(w[rr * q.k + cc]) * (*orig_norm)[cc];
            const double b = double(q.weight[rr * q.k + cc]) * folded[cc] * (i == 5 ? s4[rr] : 1.0);
            err = std::max(err, std::fabs(a - b));
            mag = std::max(mag, std::fabs(a));
          }
        INFO(q.name << " err " << err << " mag " << mag);
        CHECK(err <= 0.02 * mag);
      }
    }
  }
}

TEST_CASE("quantize_model awq lowers the calibration error of 4-bit layers", "[awq_model]") {
  // The whole-model check is the outlier experiment (docs/performance.md); here: the run is
  // deterministic and each quantised weight is the dequantisation of its codes.
  const std::string dir = fixture("llama-fp16");
  const auto tokens = random_tokens(48, 300, 3);
  auto a = quantize_model(dir, tokens, small_options(QuantMethod::awq));
  auto b = quantize_model(dir, tokens, small_options(QuantMethod::awq));
  REQUIRE(a);
  REQUIRE(b);
  for (std::size_t l = 0; l < a->layers.size(); ++l)
    for (std::size_t i = 0; i < 7; ++i) {
      const QuantLinear& q = a->layers[l].linears[i];
      REQUIRE(q.q4);
      CHECK(q.weight == kernels::dequantize(*q.q4));
      CHECK(q.q4->q == b->layers[l].linears[i].q4->q);
      CHECK(q.q4->scale == b->layers[l].linears[i].q4->scale);
    }
  // The default compensated rounding keeps the grids round-to-nearest chooses (same scales and
  // zeros as Rounding::nearest) and picks other codes on them.
  QuantizeOptions nearest = small_options(QuantMethod::awq);
  nearest.rounding = Rounding::nearest;
  auto c = quantize_model(dir, tokens, nearest);
  REQUIRE(c);
  std::size_t differing = 0;
  for (std::size_t l = 0; l < a->layers.size(); ++l)
    for (std::size_t i = 0; i < 7; ++i) {
      const auto& qa = *a->layers[l].linears[i].q4;
      const auto& qc = *c->layers[l].linears[i].q4;
      CHECK(qa.scale == qc.scale);
      CHECK(qa.zero == qc.zero);
      for (std::size_t j = 0; j < qa.q.size(); ++j) differing += qa.q[j] != qc.q[j];
    }
  CHECK(differing > 0);
  // The clip search runs when asked, and clips: some weight moves.
  QuantizeOptions clip = nearest;
  clip.clip = true;
  auto d = quantize_model(dir, tokens, clip);
  REQUIRE(d);
  bool moved = false;
  for (std::size_t l = 0; l < c->layers.size(); ++l)
    for (std::size_t i = 0; i < 7; ++i)
      moved = moved || c->layers[l].linears[i].weight != d->layers[l].linears[i].weight;
  CHECK(moved);
}

TEST_CASE("quantize_model refuses bad inputs with clear errors", "[awq_model]") {
  const auto tokens = random_tokens(40, 300);
  QuantizeOptions o = small_options(QuantMethod::awq);
  o.seqlen = 64;
  o.calib_name = "calib.txt";
  auto r = quantize_model(fixture("qwen2-fp16"), tokens, o);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("calib.txt") && Catch::Contains("40 tokens"));

  o = small_options(QuantMethod::awq);
  o.spec.group = 128;  // hidden 96
  r = quantize_model(fixture("qwen2-fp16"), tokens, o);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("128") && Catch::Contains("96"));

  r = quantize_model(fixture("qwen2-awq-gemm"), tokens, small_options(QuantMethod::awq));
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("already quantised"));

  auto bad = tokens;
  bad[5] = 300;
  r = quantize_model(fixture("qwen2-fp16"), bad, small_options(QuantMethod::rtn));
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("outside the vocabulary"));
}

TEST_CASE("quantize_model modules_bits: first match wins, 8 bits is symmetric int8",
          "[awq_model]") {
  auto s = quant::detail::linear_specs({4, 32}, std::vector<ModuleBits>{{"down", 16}, {"mlp", 8}, {"q_proj", 3}});
  REQUIRE(s);
  CHECK((*s)[0].bits == 3);  // q_proj
  CHECK((*s)[1].bits == 4);  // k_proj: the default
  CHECK_FALSE((*s)[1].symmetric);
  CHECK((*s)[4].bits == 8);  // gate_proj
  CHECK((*s)[4].symmetric);
  CHECK((*s)[6].kept());     // down_proj: the first match, not "mlp"
  CHECK_FALSE(quant::detail::linear_specs({4, 32}, std::vector<ModuleBits>{{"mlp", 12}}));
  CHECK_FALSE(quant::detail::linear_specs({4, 32}, std::vector<ModuleBits>{{"", 8}}));

  // AWQ with the attention at 8 bits and the MLP kept: only the attention is quantised, and
  // the MLP's weights are the stored ones (no scales folded into a kept group).
  const std::string dir = fixture("llama-fp16");
  const auto tokens = random_tokens(60, 300);
  QuantizeOptions o = small_options(QuantMethod::awq);
  o.modules_bits = {{"self_attn", 8}, {"mlp", 16}};
  auto r = quantize_model(dir, tokens, o);
  REQUIRE(r);
  for (const QuantLayer& L : r->layers) {
    const std::string pre = "model.layers." + std::to_string(L.index) + ".";
    CHECK(L.post_norm ==
          stored(dir, pre + "post_attention_layernorm.weight", r->config.hidden_size));
    for (const QuantLinear& q : L.linears) {
      INFO(q.name);
      if (q.name.starts_with("mlp")) {
        auto w = stored(dir, pre + q.name + ".weight", q.n * q.k);
        for (float& v : w) v = kernels::f16_to_f32(kernels::f32_to_f16(v));
        CHECK(q.weight == w);
      } else {
        REQUIRE(q.q8);
        std::vector<float> row(q.k);
        for (std::size_t rr = 0; rr < q.n; ++rr) {
          q.q8->row(rr, row.data());
          REQUIRE(std::equal(row.begin(), row.end(), q.weight.begin() + std::ptrdiff_t(rr * q.k)));
        }
      }
    }
  }
}

}  // namespace test_quant_awq_model
