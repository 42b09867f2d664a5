// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/scalar.hpp: the scalar backend runs the fixtures and the bundled
// model end to end through model::Transformer, and is the oracle for the CPU backend: the CPU
// backend's logits equal its logits within the tolerances the transformer tests use.
#include "edgellm/backend/scalar.hpp"

#include "edgellm/backend/cpu.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/model/weights.hpp"
#include "model/model_test_support.hpp"
#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace test_backend_scalar {

namespace {

using edgellm::backend::Cpu;
using edgellm::backend::Scalar;
using edgellm::cache::KVCacheF16;
using edgellm::cache::KVCacheF32;
using edgellm::cache::KVCacheQ8;
using edgellm::kernels::MatmulPath;
using edgellm::model::LogitsMode;
using edgellm::model::Transformer;
using edgellm::model::TransformerOptions;
using WeightsPtr = std::shared_ptr<const edgellm::model::TransformerWeights>;

static_assert(edgellm::backend::ComputeBackend<Scalar, KVCacheF32>);
static_assert(edgellm::backend::ComputeBackend<Scalar, KVCacheF16>);
static_assert(edgellm::backend::ComputeBackend<Scalar, KVCacheQ8>);

WeightsPtr load(const std::string& dir, bool reference,
               edgellm::model::LmHeadFormat lm_head = edgellm::model::LmHeadFormat::as_stored) {
  edgellm::model::LoadOptions o;
  o.fp32_reference = reference;
  o.lm_head = lm_head;
  auto w = edgellm::model::load_weights(dir, o);
  INFO(dir << ": " << (w ? std::string() : w.error().message));
  REQUIRE(w);
  return *w;
}

// Logits of every position of `ids` ([ids.size()][V]) on backend B, prefilled in chunks of
// max_batch tokens.
template <class Cache, class B>
std::vector<float> logits_on(const WeightsPtr& w, MatmulPath path,
                             const std::vector<std::int32_t>& ids, std::size_t max_batch = 64) {
  TransformerOptions o;
  o.path = path;
  o.max_batch = max_batch;
  auto t = Transformer<Cache, B>::create(w, o);
  INFO((t ? std::string() : t.error().message));
  REQUIRE(t);
  std::vector<float> out(ids.size() * t->vocab_size());
  REQUIRE(t->forward(ids, LogitsMode::all, out));
  return out;
}

// Largest |cpu - scalar| of each position relative to that position's scalar logit range.
float worst_relative(const std::vector<float>& cpu, const std::vector<float>& scalar,
                     std::size_t V) {
  float worst = 0.0f;
  for (std::size_t i = 0; i < cpu.size() / V; ++i) {
    const std::vector<float> row(scalar.begin() + static_cast<std::ptrdiff_t>(i * V),
                                 scalar.begin() + static_cast<std::ptrdiff_t>((i + 1) * V));
    worst = std::max(worst, edgellm::test::max_abs_diff(cpu.data() + i * V, row.data(), V) /
                                edgellm::test::logit_range(row));
  }
  return worst;
}

// The tolerances of tests/model/transformer_test.cpp, as fractions of the logit range:
// - exact path and fp32 reference mode: the same weights and math on both sides, only the
//   summation order, fp32 vs double accumulation and exp/SIMD implementations differ: 1e-4 (the
//   decode::Model contract tolerance; measured a few 1e-6).
// - fast path: both sides run the same W4A8 arithmetic (the twin is bit-exact to the
//   microkernels), but an activation a few ulp off can round to the next int8 step; such a step
//   is within the fast path's first-order tolerance (7 L + 1) / 254 (fast_path_tolerance there).
constexpr float kExactTolerance = 1e-4f;
float fast_tolerance(const WeightsPtr& w) {
  return static_cast<float>(7 * w->config.num_hidden_layers + 1) / 254.0f;
}

template <class Cache>
void check_cpu_against_scalar(const std::string& dir, const std::vector<std::int32_t>& ids) {
  INFO(dir);
  for (const bool reference : {false, true}) {
    const WeightsPtr w = load(dir, reference);
    const std::size_t V = w->config.vocab_size;
    for (const MatmulPath path : {MatmulPath::exact, MatmulPath::fast}) {
      if (reference && path == MatmulPath::fast) continue;  // dense fp32: no int4 path
      INFO("fp32_reference " << reference << ", path "
                             << (path == MatmulPath::exact ? "exact" : "fast"));
      const auto cpu = logits_on<Cache, Cpu>(w, path, ids);
      const auto scalar = logits_on<Cache, Scalar>(w, path, ids, 5);  // several chunks
      const float err = worst_relative(cpu, scalar, V);
      UNSCOPED_INFO("worst relative difference " << err);
      CHECK(err <= (path == MatmulPath::exact ? kExactTolerance : fast_tolerance(w)));
    }
  }
}

}  // namespace

TEST_CASE("Scalar backend: the CPU backend's logits on every fixture", "[backend]") {
  for (const auto& f : edgellm::test::kFixtures) {
    const std::string dir = edgellm::test::model_fixture(f.name);
    const auto e = edgellm::test::load_expected(dir);
    check_cpu_against_scalar<KVCacheF32>(dir, e.ids);
    check_cpu_against_scalar<KVCacheQ8>(dir, e.ids);
  }
}

TEST_CASE("Scalar backend: the bundled model end to end, greedy tokens as on the CPU",
          "[backend]") {
  const std::string dir = edgellm::test::source_dir() + "/models/kjv-target-awq";
  const std::vector<std::int32_t> prompt = {1, 5, 9, 17, 33, 2, 7, 11, 3, 4, 6, 8};
  check_cpu_against_scalar<KVCacheF32>(dir, prompt);

  // Greedy decoding, one token per forward, on the exact path: the same tokens on both backends.
  const WeightsPtr w = load(dir, false);
  const auto greedy = [&](auto& t) {
    std::vector<float> logits(t.vocab_size());
    REQUIRE(t.forward(prompt, LogitsMode::last, logits));
    std::vector<std::int32_t> out;
    for (int i = 0; i < 24; ++i) {
      const std::int32_t next = edgellm::test::argmax(logits.data(), logits.size());
      out.push_back(next);
      REQUIRE(t.forward(std::span(&next, 1), LogitsMode::last, logits));
    }
    return out;
  };
  TransformerOptions o;
  o.path = MatmulPath::exact;
  auto cpu = Transformer<KVCacheQ8, Cpu>::create(w, o);
  auto scalar = Transformer<KVCacheQ8, Scalar>::create(w, o);
  REQUIRE(cpu);
  REQUIRE(scalar);
  CHECK(greedy(*cpu) == greedy(*scalar));
  CHECK(cpu->model_fingerprint() == scalar->model_fingerprint());
  // Prefix blobs move between backends (same fingerprint, same cache type).
  std::vector<std::byte> blob;
  REQUIRE(cpu->save_prefix(cpu->position(), blob));
  auto other = Transformer<KVCacheQ8, Scalar>::create(w, o);
  REQUIRE(other);
  REQUIRE(other->load_prefix(blob));
  CHECK(other->position() == cpu->position());
}

TEST_CASE("Scalar backend: an int8 lm_head gives the CPU backend's logits", "[backend]") {
  const std::string dir = edgellm::test::source_dir() + "/models/kjv-target-awq";
  const std::vector<std::int32_t> ids = {1, 5, 9, 17, 33, 2, 7, 11};
  const WeightsPtr w = load(dir, false, edgellm::model::LmHeadFormat::int8);
  REQUIRE(w->lm_head.int8());
  const std::size_t V = w->config.vocab_size;
  for (const MatmulPath path : {MatmulPath::exact, MatmulPath::fast}) {
    const auto cpu = logits_on<KVCacheF32, Cpu>(w, path, ids);
    const auto scalar = logits_on<KVCacheF32, Scalar>(w, path, ids, 3);
    CHECK(worst_relative(cpu, scalar, V) <=
          (path == MatmulPath::exact ? kExactTolerance : fast_tolerance(w)));
  }
}

}  // namespace test_backend_scalar
