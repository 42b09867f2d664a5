// SPDX-License-Identifier: Apache-2.0
// One allocation for many packed int4 matrices, end to end in the order a decode step reads
// them: on 2 MiB pages as a whole, where separately allocated matrices of a small model
// (0.3-6 MB each) mostly lie on 4 KiB pages, whose TLB misses slow the stream
// (docs/performance.md, "Decode at the roofline: weights in one arena").
#pragma once

#include <cstddef>
#include <cstring>
#include <span>
#include <utility>

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/kernels/formats.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace edgellm::kernels {

/// The memory the matrices gathered by gather_q4_matrices live in. Empty (data null) when
/// nothing was gathered. Must outlive the matrices that view it.
struct Q4Arena {
  edgellm::detail::AlignedBuffer data;
  std::size_t bytes = 0;     ///< bytes in use: the matrices, each padded to 64
  std::size_t capacity = 0;  ///< bytes allocated: whole 2 MiB pages

  bool empty() const noexcept { return data == nullptr; }
  /// Whether p points into the arena.
  bool contains(const void* p) const noexcept {
    const auto* b = static_cast<const std::byte*>(p);
    return data != nullptr && b >= data.get() && b < data.get() + capacity;
  }
  /// The whole allocation, as one range for mlock or madvise. Lock it as one: a locked range
  /// that ends inside a 2 MiB page splits that page into 4 KiB ones, and a range per matrix
  /// would split most of them.
  std::span<const std::byte> pages() const noexcept { return {data.get(), data ? capacity : 0}; }
};

/// Bytes one matrix of byte_size() `bytes` takes in an arena: padded to 64.
inline constexpr std::size_t q4_arena_padded(std::size_t bytes) noexcept {
  return (bytes + 63) / 64 * 64;
}

/// Bytes an arena of `matrix_bytes` (each matrix's byte_size()) uses.
inline std::size_t q4_arena_bytes(std::span<const std::size_t> matrix_bytes) noexcept {
  std::size_t total = 0;
  for (const std::size_t b : matrix_bytes) total += q4_arena_padded(b);
  return total;
}

/// Whether gather_q4_matrices gathers `owned` owned matrices of `padded_total` arena bytes
/// under threshold `min_bytes` (the memory plan asks the same question before loading).
inline constexpr bool q4_arena_gathers(std::size_t owned, std::size_t padded_total,
                                       std::size_t min_bytes) noexcept {
  return owned >= 2 && padded_total >= min_bytes;
}

/// Moves the owned matrices of `order` into one streamed allocation, in that order, and makes
/// each a view of it (the same bytes). Each matrix's own buffer is freed right after its copy,
/// and on glibc the heap trimmed, so resident memory grows by about one matrix, not by all of
/// them. Views (of a mapped file) are skipped. Nothing is moved, and an empty arena returned,
/// when the owned matrices are fewer than two or total less than `min_bytes`, or when the
/// allocation fails: the matrices then work as before, from their own buffers.
inline Q4Arena gather_q4_matrices(std::span<Q4Matrix* const> order,
                                  std::size_t min_bytes = 0) noexcept {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  std::size_t total = 0, owned = 0;
  for (const Q4Matrix* m : order) {
    if (m == nullptr || !m->owns_data()) continue;
    total += q4_arena_padded(m->byte_size());
    ++owned;
  }
  Q4Arena a;
  if (!q4_arena_gathers(owned, total, min_bytes)) return a;
  const std::size_t capacity = (total + kHuge - 1) / kHuge * kHuge;
  a.data = edgellm::detail::allocate_aligned(capacity, edgellm::detail::MemoryUse::streamed);
  if (!a.data) return a;
  a.capacity = capacity;
  for (Q4Matrix* m : order) {
    if (m == nullptr || !m->owns_data()) continue;
    std::byte* dst = a.data.get() + a.bytes;
    std::memcpy(dst, m->data(), m->byte_size());
    auto view = Q4Matrix::view(dst, m->byte_size(), m->n(), m->k(), m->group_size());
    if (!view) continue;  // cannot happen (64-byte aligned, sized): the matrix stays owned
    *m = std::move(*view);  // frees the matrix's own buffer
    a.bytes += q4_arena_padded(m->byte_size());
#if defined(__GLIBC__)
    // A freed buffer below live allocations stays resident until trimmed.
    (void)::malloc_trim(0);
#endif
  }
  return a;
}

}  // namespace edgellm::kernels
