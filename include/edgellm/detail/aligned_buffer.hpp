// SPDX-License-Identifier: Apache-2.0
// The one aligned allocator: uninitialised, cache-line (or 2 MiB) aligned arrays owned by a
// unique_ptr, for packed weights, dense weight copies, KV caches and matmul scratch. Also the
// one way an allocation failure becomes an error (errc::out_of_memory naming what and how many
// bytes): try_allocate_aligned, try_resize / try_assign for std::vector growth sized from a file
// or an argument (guard_exceptions.hpp is the last resort at the public entry points).
#pragma once

#include <cstddef>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "edgellm/result.hpp"

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

/// The largest single allocation asked of the allocator, in bytes: 1 TiB on 64-bit hosts
/// (2 GiB on 32-bit), far above any buffer a model on one device needs. A larger request (a
/// size read from a lying file) is refused as out of memory without calling operator new,
/// because sanitizer allocators abort rather than throw above their own limit of this size.
inline constexpr std::size_t kMaxAllocationBytes = std::size_t{1}
                                                   << (sizeof(std::size_t) >= 8 ? 40 : 31);

/// n * size, saturated at SIZE_MAX (byte counts for messages and overflow checks).
inline std::size_t saturating_bytes(std::size_t n, std::size_t size) noexcept {
  return size != 0 && n > std::numeric_limits<std::size_t>::max() / size
             ? std::numeric_limits<std::size_t>::max()
             : n * size;
}

/// Uninitialised storage for n T (at least one byte is allocated for n = 0), aligned for `use`;
/// null on allocation failure or above kMaxAllocationBytes (never throws).
template <class T = std::byte>
AlignedArray<T> allocate_aligned(std::size_t n, MemoryUse use = MemoryUse::plain) noexcept {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t bytes = saturating_bytes(n, sizeof(T));
  if (bytes > kMaxAllocationBytes) return AlignedArray<T>(nullptr, AlignedDelete{});
  const std::size_t align =
      use == MemoryUse::streamed && bytes >= (std::size_t{4} << 20) ? kHuge : 64;
  void* p = ::operator new (bytes ? bytes : 1, std::align_val_t{align}, std::nothrow);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // A hint only: without transparent huge pages the memory stays on 4 KiB pages. Only the
  // whole 2 MiB pages inside the buffer: a huge page over its tail would make up to 2 MiB past
  // the end resident (on a 7B model's separately allocated matrices, ~200 MiB while loading).
  if (p != nullptr && align == kHuge && bytes >= kHuge)
    (void)::madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);
#endif
  return AlignedArray<T>(static_cast<T*>(p), AlignedDelete{align});
}

/// "[where] what: cannot allocate N bytes" (errc::out_of_memory). Never throws: when even the
/// message cannot be allocated the error has an empty message (to_string(code) still says it).
inline error allocation_error(std::string_view where, std::string_view what,
                              std::size_t bytes) noexcept {
  try {
    return make_error(errc::out_of_memory, where,
                      std::string(what) + ": cannot allocate " + std::to_string(bytes) + " bytes");
  } catch (...) {
    return error{errc::out_of_memory, {}};
  }
}

/// allocate_aligned, with an allocation_error naming `what` on failure.
template <class T = std::byte>
result<AlignedArray<T>> try_allocate_aligned(std::size_t n, std::string_view where,
                                             std::string_view what,
                                             MemoryUse use = MemoryUse::plain) noexcept {
  const std::size_t bytes = saturating_bytes(n, sizeof(T));
  if (bytes > kMaxAllocationBytes) return allocation_error(where, what, bytes);
  auto a = allocate_aligned<T>(n, use);
  if (!a) return allocation_error(where, what, bytes);
  return a;
}

/// v.resize(n, args...) (a std::vector or std::string), or an allocation_error naming `what`
/// and n * sizeof(element) bytes instead of std::bad_alloc / std::length_error (also for more
/// than kMaxAllocationBytes, refused without asking the allocator).
template <class Vec, class... Value>
status try_resize(Vec& v, std::size_t n, std::string_view where, std::string_view what,
                  const Value&... value) noexcept {
  const std::size_t bytes = saturating_bytes(n, sizeof(typename Vec::value_type));
  try {
    if (n > v.max_size() || bytes > kMaxAllocationBytes)
      return allocation_error(where, what, bytes);
    v.resize(n, value...);
  } catch (const std::bad_alloc&) {
    return allocation_error(where, what, bytes);
  } catch (const std::length_error&) {
    return allocation_error(where, what, bytes);
  }
  return {};
}

/// v.assign(n, value), as try_resize.
template <class Vec>
status try_assign(Vec& v, std::size_t n, const typename Vec::value_type& value,
                  std::string_view where, std::string_view what) noexcept {
  v.clear();
  return try_resize(v, n, where, what, value);
}

/// v.reserve(n), as try_resize.
template <class Vec>
status try_reserve(Vec& v, std::size_t n, std::string_view where, std::string_view what) noexcept {
  const std::size_t bytes = saturating_bytes(n, sizeof(typename Vec::value_type));
  try {
    if (n > v.max_size() || bytes > kMaxAllocationBytes)
      return allocation_error(where, what, bytes);
    v.reserve(n);
  } catch (const std::bad_alloc&) {
    return allocation_error(where, what, bytes);
  } catch (const std::length_error&) {
    return allocation_error(where, what, bytes);
  }
  return {};
}

}  // namespace edgellm::detail
