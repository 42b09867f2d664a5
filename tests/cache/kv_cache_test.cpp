// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/cache/kv_cache.hpp: which types the KVCache and PrefixKVCache concepts
// accept (the caches that implement them are tested in their own files).
#include "edgellm/cache/kv_cache.hpp"

#include "edgellm/cache/dense_kv_cache.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace test_cache_kv_cache {

namespace {

using edgellm::result;
using edgellm::status;
using edgellm::ThreadPool;

// The smallest type that satisfies KVCache: every member, the exact return types.
struct MinimalCache {
  static result<MinimalCache> create(std::size_t, std::size_t, std::size_t, std::size_t) {
    return MinimalCache{};
  }
  std::size_t layers() const { return 0; }
  std::size_t kv_heads() const { return 0; }
  std::size_t head_dim() const { return 0; }
  std::size_t capacity() const { return 0; }
  std::size_t length() const { return 0; }
  std::size_t bytes() const { return 0; }
  status truncate(std::size_t) { return {}; }
  status append(std::size_t, std::size_t, std::size_t, std::span<const float>,
                std::span<const float>) {
    return {};
  }
  status attend(std::size_t, std::span<const float>, std::size_t, std::size_t, std::size_t,
                std::span<float>, ThreadPool*) {
    return {};
  }
};

// MinimalCache plus prefix export and import.
struct MinimalPrefixCache : MinimalCache {
  static result<MinimalPrefixCache> create(std::size_t, std::size_t, std::size_t, std::size_t) {
    return MinimalPrefixCache{};
  }
  status export_prefix(std::size_t, std::uint64_t, std::vector<std::byte>&) const { return {}; }
  status import_prefix(std::span<const std::byte>, std::uint64_t) { return {}; }
};

// A cache whose length() returns the wrong type.
struct WrongLength : MinimalCache {
  static result<WrongLength> create(std::size_t, std::size_t, std::size_t, std::size_t) {
    return WrongLength{};
  }
  int length() const { return 0; }
};

}  // namespace

TEST_CASE("KVCache and PrefixKVCache accept the caches and refuse other types", "[cache]") {
  using edgellm::cache::KVCache;
  using edgellm::cache::PrefixKVCache;
  STATIC_REQUIRE(KVCache<MinimalCache>);
  STATIC_REQUIRE_FALSE(PrefixKVCache<MinimalCache>);
  STATIC_REQUIRE(PrefixKVCache<MinimalPrefixCache>);
  STATIC_REQUIRE_FALSE(KVCache<WrongLength>);
  STATIC_REQUIRE_FALSE(KVCache<int>);
  STATIC_REQUIRE_FALSE(KVCache<std::vector<float>>);
  STATIC_REQUIRE(PrefixKVCache<edgellm::cache::KVCacheF32>);
  STATIC_REQUIRE(PrefixKVCache<edgellm::cache::KVCacheF16>);
  STATIC_REQUIRE(PrefixKVCache<edgellm::cache::KVCacheQ8>);
}

}  // namespace test_cache_kv_cache
