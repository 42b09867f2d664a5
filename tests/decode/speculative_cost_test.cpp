// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/decode/speculative_cost.hpp: expected tokens and projected speedup of the
// geometric acceptance model, the best draft length for given costs, and AdaptiveDraftLength fed
// synthetic costs (a good draft, a useless one, acceptance that drops and recovers).
#include "edgellm/decode/speculative_cost.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <vector>

namespace test_decode_speculative_cost {

using edgellm::decode::AdaptiveDraftLength;

TEST_CASE("speculative: the cost model", "[speculative]") {
  using edgellm::decode::best_draft_length;
  using edgellm::decode::expected_tokens;
  using edgellm::decode::projected_speedup;
  CHECK(expected_tokens(0.0, 5) == 1.0);
  CHECK(expected_tokens(1.0, 5) == 6.0);
  CHECK(expected_tokens(0.5, 2) == Approx(1.75));
  CHECK(expected_tokens(0.7, 5) == Approx((1 - std::pow(0.7, 6)) / 0.3));
  CHECK(projected_speedup(0.8, 4, 1.2, 0.05) == Approx(expected_tokens(0.8, 4) / 1.4));
  // Free verification and drafts: the longest k wins; useless drafts: plain decoding.
  const std::vector<double> flat(9, 1.0), steep = {1, 1.9, 2.8, 3.7, 4.6};
  CHECK(best_draft_length(0.9, flat, 0.0) == 8);
  CHECK(best_draft_length(0.0, flat, 0.01) == 0);
  CHECK(best_draft_length(0.0, flat, 0.01, /*allow_plain=*/false) == 1);
  CHECK(best_draft_length(0.95, steep, 0.1) == 0);  // verification as dear as decoding
  // An interior optimum: cost 1 + 0.1 k, draft 0.05 per token, acceptance 0.8.
  std::vector<double> lin;
  for (int k = 0; k <= 8; ++k) lin.push_back(1 + 0.1 * k);
  const std::size_t best = best_draft_length(0.8, lin, 0.05);
  for (std::size_t k = 1; k <= 8; ++k)
    CHECK(projected_speedup(0.8, best, lin[best], 0.05) >= projected_speedup(0.8, k, lin[k], 0.05));
  CHECK(best > 1);
  CHECK(best < 8);
}

TEST_CASE("speculative: AdaptiveDraftLength with synthetic costs", "[speculative]") {
  // Target cost 1 + 0.05 (n - 1) ms, draft 0.1 ms per token.
  const auto cost = [](std::size_t n) { return 1e-3 * (1 + 0.05 * static_cast<double>(n - 1)); };
  SECTION("a good draft: speculates with a long k") {
    AdaptiveDraftLength a(5, 8, 16);
    CHECK(a.next(100) == 0);  // the baseline first
    a.record(0, 0, 0, cost(1));
    CHECK(a.next(100) == 5);  // then the initial k
    std::size_t k = 5, plain_steps = 0, at_best = 0;
    for (int i = 0; i < 200; ++i) {
      a.record(k, k, 1e-4 * static_cast<double>(k), cost(k + 1));  // all accepted
      k = a.next(100);
      if (k == 0) ++plain_steps, a.record(0, 0, 0, cost(1)), k = a.next(100);
      if (i >= 100 && k == 8) ++at_best;
    }
    CHECK(at_best >= 85);  // the rest: exploration of other k
    CHECK(a.acceptance() > 0.95);
    CHECK(plain_steps <= 4);  // the periodic refresh of the baseline only
    CHECK(a.next(3) <= 3);    // clamped by the room
    CHECK(a.next(0) == 0);
  }
  SECTION("a useless draft: plain decoding, rare probes") {
    AdaptiveDraftLength a(5, 8, 16);
    std::size_t spec_steps = 0, drafted = 0;
    double seconds = 0;  // one token per step: plain decoding would take 1000 * cost(1)
    for (int i = 0; i < 1000; ++i) {
      const std::size_t k = a.next(100);
      if (k > 0) ++spec_steps, drafted += k;
      a.record(k, 0, 1e-4 * static_cast<double>(k), cost(k + 1));  // nothing accepted
      seconds += cost(k + 1) + 1e-4 * static_cast<double>(k);
    }
    const double slowdown = seconds / (1000 * cost(1));
    INFO("speculative steps " << spec_steps << ", drafted " << drafted << ", time vs plain "
                              << slowdown);
    CHECK(a.plain());
    CHECK(spec_steps <= 100);  // probes, cheap ones near break-even: the time is what counts
    CHECK(slowdown < 1.02);
  }
  SECTION("acceptance that drops, then recovers") {
    AdaptiveDraftLength a(4, 8, 4);
    std::size_t k = a.next(100);
    for (int i = 0; i < 100; ++i) {
      a.record(k, 0, 1e-4 * static_cast<double>(k), cost(k + 1));
      k = a.next(100);
    }
    CHECK(a.plain());
    for (int i = 0; i < 400 && a.plain(); ++i) {
      a.record(k, k, 1e-4 * static_cast<double>(k), cost(k + 1));
      k = a.next(100);
    }
    CHECK_FALSE(a.plain());
  }
}

}  // namespace test_decode_speculative_cost
