// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/host_state.hpp: activations, RoPE tables and the embedding lookup
// that the CPU and scalar backends share.
#include "edgellm/backend/host_state.hpp"

#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/elementwise.hpp"
#include "support/prelude.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace test_backend_host_state {

using edgellm::backend::HostState;
using edgellm::backend::ModelShape;

namespace {

ModelShape small_shape() {
  ModelShape s;
  s.hidden = 8;
  s.heads = 2;
  s.kv_heads = 1;
  s.head_dim = 4;
  s.max_batch = 3;
  s.rope_inv_freq = {1.0f, 0.01f};
  return s;
}

}  // namespace

TEST_CASE("HostState: activations are zeroed, max_batch rows each, and counted", "[backend]") {
  auto h = HostState::create(small_shape());
  REQUIRE(h);
  const std::size_t before = h->bytes();
  CHECK(before == 2 * 3 * 2 * sizeof(float));  // cos and sin, [max_batch][head_dim / 2]
  auto a = h->activation(8);
  auto b = h->activation(5);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->cols == 8);
  CHECK(a->data.size() == 3 * 8);
  CHECK(b->data.size() == 3 * 5);
  for (float v : a->data) CHECK(v == 0.0f);
  // Buffers never overlap and stay put as more are made.
  a->data[0] = 1.0f;
  auto c = h->activation(4);
  REQUIRE(c);
  CHECK(a->data[0] == 1.0f);
  CHECK(h->bytes() == before + (3 * 8 + 3 * 5 + 3 * 4) * sizeof(float));
  // Moving the state keeps the memory the spans point to.
  HostState moved = std::move(*h);
  CHECK(a->data[0] == 1.0f);
  CHECK(moved.bytes() == before + (3 * 8 + 3 * 5 + 3 * 4) * sizeof(float));
}

TEST_CASE("HostState::begin fills the RoPE tables kernels::rope_tables gives, and checks rows",
          "[backend]") {
  const ModelShape shape = small_shape();
  auto h = HostState::create(shape);
  REQUIRE(h);
  REQUIRE(h->begin(7, 3));
  std::vector<float> cos(3 * 2), sin(3 * 2);
  edgellm::kernels::rope_tables(shape.rope_inv_freq.data(), 2, 7, 3, cos.data(), sin.data());
  for (std::size_t i = 0; i < cos.size(); ++i) {
    CHECK(h->cos()[i] == cos[i]);
    CHECK(h->sin()[i] == sin[i]);
  }
  auto st = h->begin(0, 4);
  REQUIRE_FALSE(st);
  CHECK(st.error().code == errc::invalid_argument);
  CHECK_THAT(st.error().message, Contains("max_batch 3"));
}

TEST_CASE("HostState::embed copies the table rows of the ids", "[backend]") {
  const std::vector<float> values = {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23};  // [3][4]
  auto table = edgellm::kernels::DenseMatrix::from_f32(values, 3, 4);
  REQUIRE(table);
  auto h = HostState::create(small_shape());
  REQUIRE(h);
  auto x = h->activation(4);
  REQUIRE(x);
  const std::vector<std::int32_t> ids = {2, 0};
  REQUIRE(HostState::embed(*table, ids, *x));
  const std::vector<float> want = {20, 21, 22, 23, 0, 1, 2, 3};
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(x->data[i] == want[i]);
  for (std::size_t i = want.size(); i < x->data.size(); ++i) CHECK(x->data[i] == 0.0f);
}

}  // namespace test_backend_host_state
