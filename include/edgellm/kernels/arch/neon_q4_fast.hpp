// SPDX-License-Identifier: Apache-2.0
// arm64 microkernel for the W4A8 fast path: Armv8.2 SDOT (vdotq_laneq_s32).
// Selected at compile time (build with -march=armv8.2-a+dotprod or a -mcpu that has it, as the
// aarch64 preset does) and, where the OS says so, at run time (HWCAP_ASIMDDP).
#pragma once

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#define EDGELLM_NEON_DOTPROD 1

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

#include "edgellm/kernels/formats.hpp"

namespace edgellm::kernels::arch {

/// gemm_f32_qa8g<G>_qa4g<G>p16x8_<MR>x16_neon_dotprod. A tile's 64-byte code block is four
/// 16-byte vectors (rows 0-3, 4-7, 8-11, 12-15); `& 0x0F` and `>> 4` give four u8 codes per
/// 32-bit lane (codes 0..15 are valid s8), and SDOT by lane 0 / lane 1 of the 8 activations adds
/// 4 products per row. Register use at MR = 2: 8 int32 + 8 fp32 accumulators + 8 code vectors.
struct Q4FastMicroNeonDot {
  static constexpr std::size_t mr = 2;
  static constexpr const char* name = "neon_dotprod";

  template <std::size_t G, std::size_t MR>
  static void run(const Q4Tile<G>* tiles, std::size_t ng, const std::int8_t* xq, std::size_t ldq,
                  const float* dx, const std::int32_t* xs, std::size_t lds, float* out) noexcept {
    constexpr std::size_t NA = MR == 1 ? 2 : 1;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float32x4_t yacc[MR][4];
    for (std::size_t i = 0; i < MR; ++i)
      for (std::size_t b = 0; b < 4; ++b) yacc[i][b] = vld1q_f32(out + 16 * i + 4 * b);
    for (std::size_t g = 0; g < ng; ++g) {
      const Q4Tile<G>* tl = tiles + g;
      int32x4_t acc[MR][4][NA];
      for (std::size_t i = 0; i < MR; ++i)
        for (std::size_t b = 0; b < 4; ++b)
          for (std::size_t a = 0; a < NA; ++a) acc[i][b][a] = vdupq_n_s32(0);
      const std::int8_t* xg = xq + g * G;
      for (std::size_t kb = 0; kb < G / 8; ++kb) {
        int8x16_t lo[4], hi[4];
        for (std::size_t b = 0; b < 4; ++b) {
          const uint8x16_t c = vld1q_u8(tl->codes[kb] + 16 * b);
          lo[b] = vreinterpretq_s8_u8(vandq_u8(c, m4));
          hi[b] = vreinterpretq_s8_u8(vshrq_n_u8(c, 4));
        }
        const std::size_t a = kb % NA;
        for (std::size_t i = 0; i < MR; ++i) {
          const int8x8_t x8 = vld1_s8(xg + i * ldq + 8 * kb);  // lane 0: x[0..3], lane 1: x[4..7]
          const int8x16_t xv = vcombine_s8(x8, x8);
          for (std::size_t b = 0; b < 4; ++b) {
            acc[i][b][a] = vdotq_laneq_s32(acc[i][b][a], lo[b], xv, 0);
            acc[i][b][a] = vdotq_laneq_s32(acc[i][b][a], hi[b], xv, 1);
          }
        }
      }
      const uint8x16_t z8 = vld1q_u8(tl->zero);
      const uint16x8_t z16lo = vmovl_u8(vget_low_u8(z8)), z16hi = vmovl_u8(vget_high_u8(z8));
      float32x4_t zf[4] = {vcvtq_f32_u32(vmovl_u16(vget_low_u16(z16lo))),
                           vcvtq_f32_u32(vmovl_u16(vget_high_u16(z16lo))),
                           vcvtq_f32_u32(vmovl_u16(vget_low_u16(z16hi))),
                           vcvtq_f32_u32(vmovl_u16(vget_high_u16(z16hi)))};
      float32x4_t sf[4];
      for (std::size_t b = 0; b < 4; ++b)
        sf[b] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(tl->scale + 4 * b)));
      for (std::size_t i = 0; i < MR; ++i) {
        const float32x4_t xsum = vdupq_n_f32(static_cast<float>(xs[i * lds + g]));
        const float32x4_t d = vdupq_n_f32(dx[i * lds + g]);
        for (std::size_t b = 0; b < 4; ++b) {
          int32x4_t isum = acc[i][b][0];
          for (std::size_t aa = 1; aa < NA; ++aa) isum = vaddq_s32(isum, acc[i][b][aa]);
          // t = dot - z * xsum, exact in fp32 (an integer below 2^24 in magnitude).
          const float32x4_t t = vfmsq_f32(vcvtq_f32_s32(isum), zf[b], xsum);
          yacc[i][b] = vfmaq_f32(yacc[i][b], t, vmulq_f32(sf[b], d));
        }
      }
    }
    for (std::size_t i = 0; i < MR; ++i)
      for (std::size_t b = 0; b < 4; ++b) vst1q_f32(out + 16 * i + 4 * b, yacc[i][b]);
  }
};

}  // namespace edgellm::kernels::arch

#else
#define EDGELLM_NEON_DOTPROD 0
#endif
