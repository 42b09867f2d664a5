// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/kernels/dense_matrix.hpp: views, owned copies, rows as fp32, errors.
#include "edgellm/kernels/dense_matrix.hpp"

#include "edgellm/kernels/float16.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace test_kernels_dense_matrix {

using edgellm::errc;
using edgellm::kernels::DenseMatrix;
using edgellm::kernels::DenseType;

TEST_CASE("DenseMatrix: view, copy_of and from_f32 give the same rows", "[kernels]") {
  const std::vector<float> values = {1.0f, -2.0f, 0.5f, 3.0f, 0.25f, -0.125f};  // exact in 16 bits
  const DenseType type = GENERATE(DenseType::f32, DenseType::f16, DenseType::bf16);
  std::vector<std::byte> bytes(values.size() * edgellm::kernels::dense_element_size(type) + 2);
  std::byte* at = bytes.data() + 2;  // 2-byte aligned, never 4-byte aligned for f32 when odd
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (type == DenseType::f32) {
      std::memcpy(at + 4 * i, &values[i], 4);
    } else {
      const std::uint16_t h = type == DenseType::f16 ? edgellm::kernels::f32_to_f16(values[i])
                                                     : edgellm::kernels::f32_to_bf16(values[i]);
      std::memcpy(at + 2 * i, &h, 2);
    }
  }
  const std::span<const std::byte> stored(at, bytes.size() - 2);
  auto v = DenseMatrix::view(type, 2, 3, stored, "w");
  auto c = DenseMatrix::copy_of(type, 2, 3, stored, "w");
  auto f = DenseMatrix::from_f32(values, 2, 3);
  REQUIRE(v);
  REQUIRE(c);
  REQUIRE(f);
  CHECK(v->type() == type);
  CHECK(v->n() == 2);
  CHECK(v->k() == 3);
  CHECK(c->owned_bytes() == stored.size());
  const bool aligned = reinterpret_cast<std::uintptr_t>(at) % v->element_size() == 0;
  CHECK((v->data() == at) == aligned);  // misaligned elements are copied
  for (std::size_t r = 0; r < 2; ++r) {
    std::vector<float> a(3), b(3), d(3);
    v->row(r, a.data());
    c->row(r, b.data());
    f->row(r, d.data());
    const std::vector<float> want(values.begin() + static_cast<std::ptrdiff_t>(3 * r),
                                  values.begin() + static_cast<std::ptrdiff_t>(3 * r + 3));
    CHECK(a == want);
    CHECK(b == want);
    CHECK(d == want);
  }
  // A size that does not match the shape.
  auto bad = DenseMatrix::view(type, 2, 4, stored, "w");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == errc::shape_mismatch);
  CHECK_FALSE(DenseMatrix::from_f32(values, 4, 2 + 1));
  CHECK(DenseMatrix().empty());
  CHECK(std::string(edgellm::kernels::to_string(type)).size() >= 3);
}

}  // namespace test_kernels_dense_matrix
