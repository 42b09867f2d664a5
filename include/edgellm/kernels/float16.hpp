// SPDX-License-Identifier: Apache-2.0
// IEEE fp16 and bfloat16 <-> fp32 conversion in portable integer code (no _Float16, no F16C).
#pragma once

#include <bit>
#include <cstdint>

namespace edgellm::kernels {

/// fp16 (IEEE binary16 bits) -> fp32. Exact for every input: normals, subnormals, ±0, ±inf;
/// NaNs stay NaNs (quiet bit set, payload kept in the high mantissa bits).
inline float f16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  std::uint32_t bits;
  if (exp == 0x1Fu) {  // inf / nan
    bits = sign | 0x7F800000u | (mant << 13) | (mant ? 0x00400000u : 0u);
  } else if (exp != 0) {  // normal: rebias 15 -> 127
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {  // ±0
    bits = sign;
  } else {  // subnormal: value = mant * 2^-24, renormalise
    std::uint32_t e = 113;  // exponent of 2^-14 in fp32 bias, before shifting
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mant & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

/// fp16 bits -> fp32 like f16_to_f32, branch-free so that loops over it vectorise: the
/// exponent/mantissa bits shifted into an fp32 and multiplied by 2^112 rebias normals and
/// renormalise subnormals exactly; inf/NaN are patched by a select. Equal to f16_to_f32 for all
/// 65536 inputs (tested), unless the FPU flushes subnormal inputs to zero (DAZ), which no
/// supported target enables by default.
inline float f16_to_f32_branchless(std::uint16_t h) noexcept {
  const std::uint32_t em = h & 0x7FFFu;
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const float mag = std::bit_cast<float>(em << 13) * 0x1p112f;
  const std::uint32_t mant = em & 0x3FFu;
  // inf / NaN (quiet bit set for NaN); the select is written as masks so that no branch is left
  const std::uint32_t special =
      0x7F800000u | (mant << 13) | (static_cast<std::uint32_t>(mant != 0) << 22);
  const std::uint32_t is_special = 0u - static_cast<std::uint32_t>(em >= 0x7C00u);
  const std::uint32_t bits =
      (special & is_special) | (std::bit_cast<std::uint32_t>(mag) & ~is_special);
  return std::bit_cast<float>(bits | sign);
}

/// fp32 -> fp16 with round-to-nearest-even. Overflow goes to ±inf, tiny values to
/// subnormals or ±0, NaN to a quiet NaN with the sign kept.
inline std::uint16_t f32_to_f16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) {  // inf or nan
    return static_cast<std::uint16_t>(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0u));
  }
  if (ax >= 0x477FF000u) {  // >= 65520 rounds to inf
    return static_cast<std::uint16_t>(sign | 0x7C00u);
  }
  if (ax < 0x38800000u) {  // below the smallest fp16 normal (2^-14): subnormal or zero
    if (ax < 0x33000000u) return sign;  // < 2^-25 rounds to zero (2^-25 exactly ties to 0)
    const std::uint32_t e = ax >> 23;
    const std::uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // 14 + (127 - e) - 1 ... places m at 2^-24 units
    // value = m * 2^(e-150); in units of 2^-24: m >> (126 - e) with e in [102, 112]
    const std::uint32_t q = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    std::uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  // normal: rebias exponent, round mantissa from 23 to 10 bits (carry may bump exponent)
  std::uint32_t r = ax - 0x38000000u;  // exponent 127 -> 15 bias
  const std::uint32_t rem = r & 0x1FFFu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<std::uint16_t>(sign | r);
}

/// bfloat16 bits -> fp32 (exact: bf16 is the top half of an fp32).
inline float bf16_to_f32(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

/// fp32 -> bfloat16 with round-to-nearest-even; NaN stays a quiet NaN.
inline std::uint16_t f32_to_bf16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

}  // namespace edgellm::kernels
