// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/backend.hpp: which backends and caches satisfy ComputeBackend, and
// that a backend constrains the cache types it runs with.
#include "edgellm/backend/backend.hpp"

#include "edgellm/backend/cpu.hpp"
#include "edgellm/backend/scalar.hpp"
#include "edgellm/cache/kv_cache.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <span>

namespace test_backend_backend {

namespace {

// A KV cache that satisfies cache::KVCache but does not show its storage (no layer_view()):
// the CPU backend runs it (it calls the cache's own attend), the scalar backend cannot.
struct OpaqueCache {
  static edgellm::result<OpaqueCache> create(std::size_t, std::size_t, std::size_t, std::size_t) {
    return OpaqueCache{};
  }
  std::size_t layers() const { return 1; }
  std::size_t kv_heads() const { return 1; }
  std::size_t head_dim() const { return 1; }
  std::size_t capacity() const { return 1; }
  std::size_t length() const { return 0; }
  std::size_t bytes() const { return 0; }
  edgellm::status truncate(std::size_t) { return {}; }
  edgellm::status append(std::size_t, std::size_t, std::size_t, std::span<const float>,
                         std::span<const float>) {
    return {};
  }
  edgellm::status attend(std::size_t, std::span<const float>, std::size_t, std::size_t,
                         std::size_t, std::span<float>, edgellm::ThreadPool*) {
    return {};
  }
};

}  // namespace

TEST_CASE("ComputeBackend: the CPU and scalar backends, and the caches they accept", "[backend]") {
  using edgellm::backend::ComputeBackend;
  using edgellm::backend::Cpu;
  using edgellm::backend::Scalar;
  STATIC_REQUIRE(edgellm::cache::KVCache<OpaqueCache>);
  STATIC_REQUIRE(ComputeBackend<Cpu, OpaqueCache>);
  STATIC_REQUIRE_FALSE(ComputeBackend<Scalar, OpaqueCache>);
  STATIC_REQUIRE(ComputeBackend<Scalar, edgellm::cache::KVCacheQ8>);
  STATIC_REQUIRE_FALSE(ComputeBackend<int, edgellm::cache::KVCacheF32>);
  // Handles are cheap values, as the Transformer keeps one per weight and activation.
  STATIC_REQUIRE(std::is_trivially_copyable_v<Cpu::Tensor>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<Cpu::Matrix>);
}

TEST_CASE("LinearTarget pairs a backend's matrix with its output tensor", "[backend]") {
  edgellm::kernels::Linear lin;
  float y[4] = {};
  const edgellm::backend::LinearTarget<edgellm::backend::Cpu> t{&lin, {std::span<float>(y), 2}};
  CHECK(t.w == &lin);
  CHECK(t.y.cols == 2);
  CHECK(t.y.data.size() == 4);
}

}  // namespace test_backend_backend
