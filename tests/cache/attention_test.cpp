// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/cache/attention.hpp's scheduling helpers (the kernels themselves are tested
// through the caches that run them: dense_kv_cache_test.cpp, quantized_kv_cache_test.cpp).
#include "edgellm/cache/attention.hpp"

#include <catch2/catch.hpp>

namespace test_cache_attention {

using namespace edgellm::cache;

TEST_CASE("attention_macs counts the causal positions of each query", "[cache]") {
  // One query at position 0 sees 1 position; three queries at 4, 5, 6 see 5 + 6 + 7.
  CHECK(attention_macs(1, 0, 1, 1) == 2);
  CHECK(attention_macs(3, 4, 2, 8) == (5 + 6 + 7) * 2 * 8 * 2);
  static_assert(attention_macs(1, 99, 32, 64) == 100 * 32 * 64 * 2);
}

TEST_CASE("attention_worth_forking: short decode steps stay on the caller", "[cache]") {
  // TinyLlama's shape (32 heads x 64): a decode step forks from position 256 on.
  CHECK_FALSE(attention_worth_forking(1, 254, 32, 64));
  CHECK(attention_worth_forking(1, 255, 32, 64));
  // A prefill chunk of 128 tokens forks from the start.
  CHECK(attention_worth_forking(128, 0, 32, 64));
  CHECK(attention_macs(1, 255, 32, 64) == kAttentionForkMinMacs);
}

}  // namespace test_cache_attention
