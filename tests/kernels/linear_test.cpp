// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/kernels/linear.hpp: shape and memory accounting of int4, int8 and dense linears.
#include "edgellm/kernels/linear.hpp"

#include "support/q4_fixtures.hpp"
#include "support/test_util.hpp"

#include <catch2/catch.hpp>

namespace test_kernels_linear {

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
  CHECK(d.form() == edgellm::kernels::LinearForm::dense);
  CHECK(q.form() == edgellm::kernels::LinearForm::int4);
}

TEST_CASE("Linear: int8 form, shape and owned bytes", "[kernels]") {
  auto rng = edgellm::test::make_rng(6);
  edgellm::kernels::Linear l;
  auto q = edgellm::kernels::quantize_q8(edgellm::test::random_floats(rng, 7 * 64), 7, 64, 32);
  REQUIRE(q);
  l.q8 = std::move(*q);
  CHECK(l.form() == edgellm::kernels::LinearForm::int8);
  CHECK(l.quantized());
  CHECK(l.int8());
  CHECK_FALSE(l.int4());
  CHECK(l.n() == 7);
  CHECK(l.k() == 64);
  CHECK(l.owned_bytes() == edgellm::kernels::q8_matrix_bytes(7, 64, 32));
  CHECK(l.weight_bytes() == l.owned_bytes());
}

}  // namespace test_kernels_linear
