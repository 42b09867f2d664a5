// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/kernels/dense_matrix.hpp: views, owned copies, rows as fp32, errors, and
// dense_matmul (the checked product split over a pool) against a double-precision product.
#include "edgellm/kernels/dense_matrix.hpp"

#include "edgellm/kernels/float16.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "support/temp_dir.hpp"
#include "support/test_util.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace test_kernels_dense_matrix {

using edgellm::errc;
using edgellm::ThreadPool;
using edgellm::kernels::dense_matmul;
using edgellm::kernels::DenseMatrix;
using edgellm::kernels::DenseType;

namespace {

// fp32 matrix bits in a DenseMatrix of `type` (values must be representable in it).
DenseMatrix make_dense(const std::vector<float>& w, std::size_t n, std::size_t k, DenseType type,
                       std::vector<std::uint16_t>& storage) {
  if (type == DenseType::f32) {
    auto m = DenseMatrix::from_f32(w, n, k);
    REQUIRE(m);
    return std::move(*m);
  }
  storage.resize(n * k);
  for (std::size_t i = 0; i < n * k; ++i) {
    storage[i] = type == DenseType::f16 ? edgellm::kernels::f32_to_f16(w[i])
                                        : edgellm::kernels::f32_to_bf16(w[i]);
  }
  auto m = DenseMatrix::view(type, n, k, std::as_bytes(std::span(storage)), "w");
  REQUIRE(m);
  return std::move(*m);
}

}  // namespace

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

TEST_CASE("DenseMatrix::lookup of a mapped table: the rows of row(), their pages released",
          "[kernels]") {
  // A [n][k] f16 table in a file, 1 MiB: each row 1 KiB.
  const std::size_t n = 1024, k = 512;
  std::vector<std::uint16_t> h(n * k);
  for (std::size_t i = 0; i < h.size(); ++i)
    h[i] = edgellm::kernels::f32_to_f16(static_cast<float>(static_cast<int>(i % 2001) - 1000) / 64);
  edgellm::test::TempDir dir;
  const std::string path =
      dir.write("table.bin", std::string(reinterpret_cast<const char*>(h.data()), h.size() * 2));
  auto f = edgellm::io::MappedFile::open(path);
  REQUIRE(f);
  auto t = DenseMatrix::view(DenseType::f16, n, k, f->bytes(), "table");
  REQUIRE(t);
  // Resident file-backed pages of this process (statm's third field).
  const auto resident_file_pages = [] {
    std::ifstream statm("/proc/self/statm");
    std::size_t size = 0, resident = 0, shared = 0;
    statm >> size >> resident >> shared;
    return shared;
  };
  const auto read_all = [&](bool once) {
    t->set_file_rows_read_once(once);
    CHECK(t->file_rows_read_once() == once);
    const std::size_t before = resident_file_pages();
    std::vector<float> a(k), b(k);
    for (std::size_t r = 0; r < n; r += 3) {
      t->lookup(r, a.data());
      std::vector<float> want(k);
      for (std::size_t c = 0; c < k; ++c) want[c] = edgellm::kernels::f16_to_f32(h[r * k + c]);
      REQUIRE(a == want);
    }
    const std::size_t after = resident_file_pages();
    REQUIRE(edgellm::io::release_mapped_pages(f->bytes()) > 0);  // back to none resident
    return after > before ? after - before : 0;
  };
  REQUIRE(edgellm::io::release_mapped_pages(f->bytes()) > 0);
  const std::size_t kept = read_all(false), released = read_all(true);
  const std::size_t table_pages = n * k * 2 / edgellm::io::page_size();
  INFO("file pages resident after reading every third row: " << kept << " kept, " << released
                                                             << " released, of " << table_pages);
#if defined(__linux__)
  CHECK(kept >= table_pages * 9 / 10);
  CHECK(released <= 2 * edgellm::io::kFaultAroundBytes / edgellm::io::page_size());
#endif
  // Owned memory is never marked.
  std::vector<float> values(n * 4, 1.0f);
  auto owned = DenseMatrix::from_f32(values, n, 4);
  REQUIRE(owned);
  owned->set_file_rows_read_once(true);
  CHECK_FALSE(owned->file_rows_read_once());
}

TEST_CASE("dense_matmul matches a double-precision product", "[kernels]") {
  const DenseType type = GENERATE(DenseType::f32, DenseType::f16, DenseType::bf16);
  const std::size_t k = GENERATE(std::size_t{7}, std::size_t{64}, std::size_t{1037});
  const std::size_t n = 19;
  auto rng = edgellm::test::make_rng(k);
  auto w = edgellm::test::random_floats(rng, n * k);
  // Round to the storage type so that the double reference sees the same weights.
  for (float& v : w) {
    if (type == DenseType::f16) v = edgellm::kernels::f16_to_f32(edgellm::kernels::f32_to_f16(v));
    if (type == DenseType::bf16)
      v = edgellm::kernels::bf16_to_f32(edgellm::kernels::f32_to_bf16(v));
  }
  std::vector<std::uint16_t> storage;
  const DenseMatrix d = make_dense(w, n, k, type, storage);
  REQUIRE(d.type() == type);
  const auto bias = edgellm::test::random_floats(rng, n);
  const std::size_t m_max = 70;  // more than one 64-row block
  const auto x = edgellm::test::random_floats(rng, m_max * k);
  std::vector<float> y(m_max * n);
  REQUIRE(dense_matmul(d, x, m_max, y, bias, nullptr));
  // Error of an fp32 dot product of k terms (16 partial sums, then a tree): <= (k/16 + 6) u sum|w
  // x|.
  const double u = std::ldexp(1.0, -24);
  for (std::size_t i = 0; i < m_max; ++i) {
    for (std::size_t r = 0; r < n; ++r) {
      double ref = bias[r], mag = std::fabs(bias[r]);
      for (std::size_t c = 0; c < k; ++c) {
        ref += static_cast<double>(x[i * k + c]) * w[r * k + c];
        mag += std::fabs(static_cast<double>(x[i * k + c]) * w[r * k + c]);
      }
      REQUIRE(std::fabs(y[i * n + r] - ref) <= (static_cast<double>(k) / 16 + 8) * u * mag);
    }
  }
  // The same bits for any m and thread count.
  auto pool = ThreadPool::create(3);
  REQUIRE(pool);
  for (std::size_t m : {std::size_t{1}, std::size_t{3}, m_max}) {
    std::vector<float> y2(m * n);
    REQUIRE(dense_matmul(d, std::span(x).first(m * k), m, y2, bias, pool->get()));
    REQUIRE(std::equal(y2.begin(), y2.end(), y.begin()));
  }
  // Argument errors.
  CHECK_FALSE(dense_matmul(d, std::span(x).first(k - 1), 1, y, bias, nullptr));
  CHECK_FALSE(dense_matmul(d, x, 1, y, std::span(bias).first(n - 1), nullptr));
}

}  // namespace test_kernels_dense_matrix
