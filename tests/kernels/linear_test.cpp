// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/kernels/linear.hpp: shape and memory accounting of int4 and dense linears.
#include "edgellm/kernels/linear.hpp"

#include "support/q4_fixtures.hpp"
#include "support/test_util.hpp"

#include <catch2/catch.hpp>

TEST_CASE("Linear: int4 or dense, shape and owned bytes", "[kernels]") {
  auto rng = edgellm::test::make_rng(5);
  edgellm::kernels::Linear q;
  q.q4 = edgellm::test::random_q4(rng, 32, 128, 64);
  q.bias.assign(32, 1.0f);
  CHECK(q.quantized());
  CHECK(q.n() == 32);
  CHECK(q.k() == 128);
  CHECK(q.owned_bytes() == q.q4.byte_size() + 32 * sizeof(float));

  edgellm::kernels::Linear d;
  auto m = edgellm::kernels::DenseMatrix::from_f32(edgellm::test::random_floats(rng, 6), 2, 3);
  REQUIRE(m);
  d.dense = std::move(*m);
  CHECK_FALSE(d.quantized());
  CHECK(d.n() == 2);
  CHECK(d.k() == 3);
  CHECK(d.owned_bytes() == 6 * sizeof(float));
}
