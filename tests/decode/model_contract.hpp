// SPDX-License-Identifier: Apache-2.0
// A runtime check of the decode::Model semantics that the concept cannot express, run on the
// archetype and on every real model.
#pragma once

#include "edgellm/decode/model.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace edgellm::test {

/// Runs `make()` (a fresh model each call) through the documented contract with `tokens`
/// (at least 4, all valid ids, fewer than context_size()):
/// - position() starts at 0 and advances by tokens.size() per forward();
/// - invalid calls fail and change nothing: empty tokens, ids -1 and vocab_size(), a too short
///   logits buffer, more tokens than the context holds, truncate past position();
/// - mode `last` writes the last row of mode `all` (within `split_tolerance`, absolute);
/// - one forward of all tokens equals a forward split in two and a token-by-token forward (within
///   `split_tolerance`, absolute);
/// - truncate(n) then forwarding the same tokens, split the same way, gives bit-identical logits;
///   truncate(position()) is a no-op.
template <class Make>
void check_model_contract(Make make, std::span<const std::int32_t> tokens, float split_tolerance) {
  using decode::LogitsMode;
  auto m = make();
  static_assert(decode::Model<decltype(m)>);
  const std::size_t V = m.vocab_size(), n = tokens.size();
  REQUIRE(n >= 4);
  REQUIRE(n < m.context_size());
  REQUIRE(m.position() == 0);

  std::vector<float> all(n * V), row(V);
  // Failing calls change nothing.
  CHECK_FALSE(m.forward({}, LogitsMode::last, row));
  const std::int32_t bad_ids[] = {-1, static_cast<std::int32_t>(V)};
  for (std::int32_t bad : bad_ids) {
    std::vector<std::int32_t> t(tokens.begin(), tokens.end());
    t[1] = bad;
    CHECK_FALSE(m.forward(t, LogitsMode::last, row));
  }
  CHECK_FALSE(m.forward(tokens, LogitsMode::all, std::span<float>(all).first(n * V - 1)));
  CHECK_FALSE(m.forward(tokens, LogitsMode::last, std::span<float>(row).first(V - 1)));
  {
    std::vector<std::int32_t> too_long(m.context_size() + 1, tokens[0]);
    std::vector<float> big((m.context_size() + 1) * V);
    CHECK_FALSE(m.forward(too_long, LogitsMode::all, big));
  }
  CHECK_FALSE(m.truncate(1));
  REQUIRE(m.position() == 0);

  // One forward of everything; `last` is the last row of `all`.
  REQUIRE(m.forward(tokens, LogitsMode::all, all));
  REQUIRE(m.position() == n);
  {
    auto m2 = make();
    REQUIRE(m2.forward(tokens, LogitsMode::last, row));
    for (std::size_t v = 0; v < V; ++v)
      REQUIRE(std::fabs(row[v] - all[(n - 1) * V + v]) <= split_tolerance);
  }

  // Split in two at a, and token by token: same logits up to rounding.
  const std::size_t a = n / 2;
  std::vector<float> split(n * V);
  {
    auto m2 = make();
    REQUIRE(m2.forward(tokens.first(a), LogitsMode::all, split));
    REQUIRE(m2.position() == a);
    REQUIRE(m2.forward(tokens.subspan(a), LogitsMode::all, std::span<float>(split).subspan(a * V)));
    REQUIRE(m2.position() == n);
    for (std::size_t i = 0; i < n * V; ++i)
      REQUIRE(std::fabs(split[i] - all[i]) <= split_tolerance);

    // truncate(n) is a no-op; truncate(a) then the same second call reproduces it bit for bit.
    REQUIRE(m2.truncate(n));
    REQUIRE(m2.position() == n);
    REQUIRE(m2.truncate(a));
    REQUIRE(m2.position() == a);
    std::vector<float> again((n - a) * V);
    REQUIRE(m2.forward(tokens.subspan(a), LogitsMode::all, again));
    for (std::size_t i = 0; i < (n - a) * V; ++i) REQUIRE(again[i] == split[a * V + i]);

    // ...also after something else was forwarded in between.
    REQUIRE(m2.truncate(a));
    std::vector<std::int32_t> other(tokens.begin() + static_cast<std::ptrdiff_t>(a), tokens.end());
    for (auto& t : other) t = static_cast<std::int32_t>((static_cast<std::size_t>(t) + 1) % V);
    REQUIRE(m2.forward(other, LogitsMode::all, again));
    REQUIRE(m2.truncate(a));
    REQUIRE(m2.forward(tokens.subspan(a), LogitsMode::all, again));
    for (std::size_t i = 0; i < (n - a) * V; ++i) REQUIRE(again[i] == split[a * V + i]);

    // truncate(0) forgets everything.
    REQUIRE(m2.truncate(0));
    REQUIRE(m2.position() == 0);
    std::vector<float> fresh(n * V);
    REQUIRE(m2.forward(tokens.first(a), LogitsMode::all, fresh));
    for (std::size_t i = 0; i < a * V; ++i) REQUIRE(fresh[i] == split[i]);
  }
  {
    auto m2 = make();
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(m2.forward(tokens.subspan(i, 1), LogitsMode::last, row));
      for (std::size_t v = 0; v < V; ++v)
        REQUIRE(std::fabs(row[v] - all[i * V + v]) <= split_tolerance);
    }
    REQUIRE(m2.position() == n);
  }
}

}  // namespace edgellm::test
