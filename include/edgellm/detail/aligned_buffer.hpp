// SPDX-License-Identifier: Apache-2.0
// The one aligned allocator: uninitialised, cache-line (or 2 MiB) aligned arrays owned by a
// unique_ptr, for packed weights, dense weight copies, KV caches and matmul scratch.
#pragma once

#include <cstddef>
#include <memory>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace edgellm::detail {

/// Frees memory from the aligned operator new with the alignment it was allocated with.
struct AlignedDelete {
  std::size_t align = 64;
  void operator()(void* p) const noexcept { ::operator delete (p, std::align_val_t{align}); }
};

/// An owned, aligned array of T (std::byte: raw bytes); null when allocation failed.
template <class T = std::byte>
using AlignedArray = std::unique_ptr<T[], AlignedDelete>;
using AlignedBuffer = AlignedArray<std::byte>;

/// How memory will be used, which picks its alignment and backing.
enum class MemoryUse {
  /// 64-byte aligned (one cache line; every SIMD load width up to AVX-512).
  plain,
  /// Read front to back every token (packed or dense weights): for 4 MiB or more, 2 MiB
  /// aligned and backed by 2 MiB pages where the kernel allows (transparent huge pages in
  /// madvise mode), which removes most TLB misses; smaller buffers as `plain`.
  streamed,
};

/// Uninitialised storage for n T (at least one byte is allocated for n = 0), aligned for `use`;
/// null on allocation failure (never throws).
template <class T = std::byte>
AlignedArray<T> allocate_aligned(std::size_t n, MemoryUse use = MemoryUse::plain) noexcept {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t bytes = n * sizeof(T);
  const std::size_t align =
      use == MemoryUse::streamed && bytes >= (std::size_t{4} << 20) ? kHuge : 64;
  void* p = ::operator new (bytes ? bytes : 1, std::align_val_t{align}, std::nothrow);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // A hint only: without transparent huge pages the memory stays on 4 KiB pages.
  if (p != nullptr && align == kHuge)
    (void)::madvise(p, (bytes + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);
#endif
  return AlignedArray<T>(static_cast<T*>(p), AlignedDelete{align});
}

}  // namespace edgellm::detail
