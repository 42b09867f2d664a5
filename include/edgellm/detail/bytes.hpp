// SPDX-License-Identifier: Apache-2.0
// Byte helpers every file format shares: little-endian loads and stores (of one integer or of an
// array of elements), the 64-bit checksums of the on-disk formats, and hex formatting of a
// 64-bit value for error messages.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace edgellm::detail {

// ---------------------------------------------------------------------------------------------
// Little-endian integers at any (unaligned) address.

inline std::uint64_t load_le64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}
inline std::uint32_t load_le32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}
inline void store_le64(std::byte* p, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFF);
}
inline void store_le32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFF);
}

/// Writes n elements (1, 2 or 4 bytes each: int8, fp16 bits, fp32) little-endian at p (a plain
/// copy on little-endian hosts); returns p advanced past them.
template <class T>
std::byte* store_le_array(std::byte* p, const T* src, std::size_t n) noexcept {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4);
  if constexpr (std::endian::native == std::endian::little || sizeof(T) == 1) {
    if (n) std::memcpy(p, src, n * sizeof(T));
  } else {
    using U = std::conditional_t<sizeof(T) == 2, std::uint16_t, std::uint32_t>;
    for (std::size_t i = 0; i < n; ++i) {
      const auto bits = std::bit_cast<U>(src[i]);
      for (std::size_t b = 0; b < sizeof(T); ++b)
        p[i * sizeof(T) + b] = static_cast<std::byte>((bits >> (8 * b)) & 0xFF);
    }
  }
  return p + n * sizeof(T);
}

/// Reads n little-endian elements (see store_le_array) from p into dst; returns p advanced.
template <class T>
const std::byte* load_le_array(const std::byte* p, T* dst, std::size_t n) noexcept {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4);
  if constexpr (std::endian::native == std::endian::little || sizeof(T) == 1) {
    if (n) std::memcpy(dst, p, n * sizeof(T));
  } else {
    using U = std::conditional_t<sizeof(T) == 2, std::uint16_t, std::uint32_t>;
    for (std::size_t i = 0; i < n; ++i) {
      U bits = 0;
      for (std::size_t b = sizeof(T); b-- > 0;)
        bits = static_cast<U>((bits << 8) | static_cast<std::uint8_t>(p[i * sizeof(T) + b]));
      dst[i] = std::bit_cast<T>(bits);
    }
  }
  return p + n * sizeof(T);
}

/// "0x0123456789abcdef": a checksum or fingerprint in an error message.
inline std::string hex64(std::uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Checksums. None is cryptographic: they detect corruption and mix-ups, not tampering. Every
// value below is stored in a file format (prefix blobs, prompt caches, packed caches), so none
// may change; a new format should use checksum64.

inline constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;  ///< FNV-1a 64 start value
inline constexpr std::uint64_t kFnvPrime = 0x100000001b3ull;        ///< FNV-1a 64 multiplier

/// FNV-1a over single bytes, continuing from state h (start with kFnvOffset). The building
/// block of checksum64 (its tail) and of the packed cache's source key.
inline std::uint64_t fnv1a64(std::uint64_t h, std::span<const std::byte> data) noexcept {
  for (std::byte b : data) h = (h ^ static_cast<std::uint8_t>(b)) * kFnvPrime;
  return h;
}
inline std::uint64_t fnv1a64(std::uint64_t h, std::string_view s) noexcept {
  return fnv1a64(h, std::as_bytes(std::span<const char>(s.data(), s.size())));
}

/// The checksum of the formats: FNV-1a over 64-bit little-endian words (then single bytes for
/// the tail), finished with MurmurHash3's fmix64 so every input bit reaches every output bit.
/// Each step is a bijection of the state for a given word, so any change confined to one word
/// always changes the result. `seed` is the starting state (kFnvOffset in every format so far).
/// Used by: prefix blobs (their trailer), prompt caches (the token ids), the transformer's
/// model fingerprint.
inline std::uint64_t checksum64(std::span<const std::byte> data,
                                std::uint64_t seed = kFnvOffset) noexcept {
  std::uint64_t h = seed;
  std::size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) h = (h ^ load_le64(data.data() + i)) * kFnvPrime;
  h = fnv1a64(h, data.subspan(i));
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

/// A checksum of 8-byte words fast enough for gigabytes (four interleaved Fletcher-style lanes,
/// which compilers vectorise, where checksum64 is one serial multiply chain), fed in pieces:
/// sensitive to any changed, swapped or truncated word. Used by the packed weight cache, whose
/// files store its values (so it stays as it is beside checksum64). Host byte order: the packed
/// cache is for little-endian hosts only.
class LaneChecksum64 {
 public:
  /// Feeds the next bytes; every piece but the last must be a multiple of 32 bytes long.
  void update(const std::byte* p, std::size_t n) noexcept {
    const std::size_t blocks = n / 32;
    for (std::size_t i = 0; i < blocks; ++i) {
      for (std::size_t j = 0; j < 4; ++j) {
        std::uint64_t w;
        std::memcpy(&w, p + 32 * i + 8 * j, 8);
        a_[j] += w;
        b_[j] += a_[j];
      }
    }
    tail_ = p + 32 * blocks;
    tail_bytes_ = n - 32 * blocks;
    size_ += n;
  }
  /// The checksum of everything fed (the last piece must still be readable).
  std::uint64_t finish() const noexcept {
    std::uint64_t h = 0x9E3779B97F4A7C15ull;
    const std::size_t words = tail_bytes_ / 8;
    for (std::size_t i = 0; i < words; ++i) {
      std::uint64_t w;
      std::memcpy(&w, tail_ + 8 * i, 8);
      h = (h ^ w) * kFnvPrime;
    }
    h = fnv1a64(h, std::span<const std::byte>(tail_ + 8 * words, tail_bytes_ - 8 * words));
    for (std::size_t j = 0; j < 4; ++j) h = (h ^ a_[j]) * kFnvPrime ^ (b_[j] + j);
    return h ^ size_;
  }

 private:
  std::uint64_t a_[4] = {1, 2, 3, 4}, b_[4] = {0, 0, 0, 0};
  const std::byte* tail_ = nullptr;  // the last piece's bytes past its 32-byte blocks
  std::size_t tail_bytes_ = 0, size_ = 0;
};

/// LaneChecksum64 of one span.
inline std::uint64_t lane_checksum64(std::span<const std::byte> data) noexcept {
  LaneChecksum64 c;
  c.update(data.data(), data.size());
  return c.finish();
}

}  // namespace edgellm::detail
