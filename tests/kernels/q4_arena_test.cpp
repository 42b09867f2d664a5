// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/kernels/q4_arena.hpp: gathering packed matrices into one allocation keeps
// their bytes, lays them end to end in the given order, and leaves views and small sets alone.
#include "edgellm/kernels/q4_arena.hpp"
#include "support/prelude.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace test_kernels_q4_arena {

using namespace edgellm::kernels;

namespace {

// An owned n x k matrix (group 32) whose bytes are a pattern of `seed`.
Q4Matrix patterned(std::size_t n, std::size_t k, unsigned seed) {
  auto m = Q4Matrix::allocate(n, k, 32);
  REQUIRE(m);
  std::byte* p = m->mutable_data();
  for (std::size_t i = 0; i < m->byte_size(); ++i)
    p[i] = static_cast<std::byte>((i * 131 + seed * 17) & 0xFF);
  return std::move(*m);
}

}  // namespace

TEST_CASE("gather_q4_matrices: same bytes, end to end in order, views of one allocation",
          "[kernels][q4_arena]") {
  // Shapes whose byte sizes are not all multiples of 64 apart: 17 rows pad a tile.
  std::vector<Q4Matrix> ms;
  ms.push_back(patterned(17, 64, 1));
  ms.push_back(patterned(48, 32, 2));
  ms.push_back(patterned(16, 96, 3));
  std::vector<std::vector<std::byte>> before;
  for (const Q4Matrix& m : ms) before.emplace_back(m.data(), m.data() + m.byte_size());
  // Gathered in an order other than creation: 2, 0, 1.
  std::vector<Q4Matrix*> order = {&ms[2], &ms[0], &ms[1]};
  const Q4Arena a = gather_q4_matrices(order);
  REQUIRE_FALSE(a.empty());
  CHECK(a.capacity % (std::size_t{2} << 20) == 0);
  CHECK(a.pages().data() == a.data.get());
  CHECK(a.pages().size() == a.capacity);
  std::vector<std::size_t> sizes;
  const std::byte* next = a.data.get();
  for (Q4Matrix* m : order) {
    CHECK_FALSE(m->owns_data());
    CHECK(m->data() == next);
    CHECK(a.contains(m->data()));
    CHECK(reinterpret_cast<std::uintptr_t>(m->data()) % 64 == 0);
    next += (m->byte_size() + 63) / 64 * 64;
    sizes.push_back(m->byte_size());
  }
  CHECK(a.bytes == q4_arena_bytes(sizes));
  CHECK(static_cast<std::size_t>(next - a.data.get()) == a.bytes);
  for (std::size_t i = 0; i < ms.size(); ++i) {
    REQUIRE(ms[i].byte_size() == before[i].size());
    CHECK(std::memcmp(ms[i].data(), before[i].data(), before[i].size()) == 0);
  }
  int outside = 0;
  CHECK_FALSE(a.contains(&outside));
}

TEST_CASE("gather_q4_matrices: views, nulls, one matrix and a set below min_bytes stay",
          "[kernels][q4_arena]") {
  Q4Matrix owned = patterned(16, 32, 4);
  Q4Matrix other = patterned(16, 32, 5);
  auto view = Q4Matrix::view(other.data(), other.byte_size(), 16, 32, 32);
  REQUIRE(view);
  const std::byte* owned_at = owned.data();
  {
    // One owned matrix (the view and the null do not count): nothing to gather.
    std::vector<Q4Matrix*> order = {&owned, &*view, nullptr};
    const Q4Arena a = gather_q4_matrices(order);
    CHECK(a.empty());
    CHECK(a.pages().empty());
    CHECK(owned.owns_data());
    CHECK(owned.data() == owned_at);
    CHECK(view->data() == other.data());
  }
  {
    // Two owned ones below the threshold stay too.
    std::vector<Q4Matrix*> order = {&owned, &other};
    const Q4Arena a = gather_q4_matrices(order, owned.byte_size() + other.byte_size() + 1);
    CHECK(a.empty());
    CHECK(owned.owns_data());
    CHECK(other.owns_data());
  }
  {
    // At the threshold they move; the view of `other` would dangle, so it is dropped first.
    view = Q4Matrix{};
    std::vector<Q4Matrix*> order = {&owned, &other};
    const Q4Arena a = gather_q4_matrices(order, 2 * owned.byte_size());
    REQUIRE_FALSE(a.empty());
    CHECK_FALSE(owned.owns_data());
    CHECK(a.contains(owned.data()));
    CHECK(a.contains(other.data()));
  }
}

}  // namespace test_kernels_q4_arena
