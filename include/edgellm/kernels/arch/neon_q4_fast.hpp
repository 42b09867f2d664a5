// SPDX-License-Identifier: Apache-2.0
// arm64 microkernels for the W4A8 fast path: plain NEON (Armv8.0 SMULL/SADALP), SDOT (dotprod)
// and SMMLA (i8mm). One binary serves every arm64 core: the build needs no -march beyond the
// Armv8.0 baseline, the dotprod and i8mm kernels are compiled with per-function target
// attributes, and the dispatcher calls one only after the OS said the CPU has it
// (getauxval HWCAP_ASIMDDP / HWCAP2_I8MM, detail/cpu_features.hpp).
#pragma once

#include "edgellm/config.hpp"

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define EDGELLM_NEON_MICROKERNELS 1

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "edgellm/kernels/formats.hpp"

// GCC 12's arm_neon.h declares the SDOT and SMMLA intrinsics under
// `#pragma GCC target ("arch=armv8.2-a+dotprod")` (and "+i8mm"), and an always-inline intrinsic
// inlines only into a function whose ISA includes all of that: a bare "+dotprod" on an Armv8.0
// build fails with "target specific option mismatch". Hence the full arch string. Every core
// with dotprod implements Armv8.2, so the v8.2 instructions the compiler may then pick are
// there too. A build whose -march already has the feature needs no attribute.
#if defined(__ARM_FEATURE_DOTPROD)
#define EDGELLM_TARGET_DOTPROD
#else
#define EDGELLM_TARGET_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#if defined(__ARM_FEATURE_MATMUL_INT8) && defined(__ARM_FEATURE_DOTPROD)
#define EDGELLM_TARGET_I8MM
#else
#define EDGELLM_TARGET_I8MM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#endif

namespace edgellm::kernels::arch {

namespace neon_detail {
inline std::int32_t load_x4(const std::int8_t* p) noexcept {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

/// A tile's 16 zero points and fp16 scales as fp32, four rows per vector.
struct TileHeaderF32 {
  float32x4_t zf[4];
  float32x4_t sf[4];
};

template <std::size_t G>
EDGELLM_ALWAYS_INLINE TileHeaderF32 load_header(const Q4Tile<G>* tl) noexcept {
  TileHeaderF32 h;
  const uint8x16_t z8 = vld1q_u8(tl->zero);
  const uint16x8_t z16lo = vmovl_u8(vget_low_u8(z8)), z16hi = vmovl_u8(vget_high_u8(z8));
  h.zf[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(z16lo)));
  h.zf[1] = vcvtq_f32_u32(vmovl_u16(vget_high_u16(z16lo)));
  h.zf[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(z16hi)));
  h.zf[3] = vcvtq_f32_u32(vmovl_u16(vget_high_u16(z16hi)));
  for (std::size_t b = 0; b < 4; ++b)
    h.sf[b] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(tl->scale + 4 * b)));
  return h;
}

/// One activation row's group epilogue, as the twin's chain: y[r] = fma(float(t), scale[r] *
/// dx, y[r]) with t = dot[r] - z[r] * xsum. isum[b]: the int32 dot products of rows 4b..4b+3.
EDGELLM_ALWAYS_INLINE void add_group(const TileHeaderF32& h, const int32x4_t (&isum)[4],
                                     std::int32_t xsum_i, float dx, float32x4_t (&yacc)[4]) noexcept {
  const float32x4_t xsum = vdupq_n_f32(static_cast<float>(xsum_i));
  const float32x4_t d = vdupq_n_f32(dx);
  for (std::size_t b = 0; b < 4; ++b) {
    // t = dot - z * xsum, exact in fp32 (an integer below 2^24 in magnitude).
    const float32x4_t t = vfmsq_f32(vcvtq_f32_s32(isum[b]), h.zf[b], xsum);
    yacc[b] = vfmaq_f32(yacc[b], t, vmulq_f32(h.sf[b], d));
  }
}
}  // namespace neon_detail

/// gemm_f32_qa8g<G>_qa4g<G>p16x8_<MR>x16_neon: the Armv8.0 integer path (no dotprod). A tile's
/// 64-byte code block is four 16-byte vectors (rows 0-3, 4-7, 8-11, 12-15); byte j of row r's
/// word holds codes k = j (low nibble) and k = 4 + j (high). SMULL/SMLAL of the nibbles with the
/// activations x[0..3] / x[4..7] repeated per word gives int16 pairs (|2 * 15 * 127| < 2^15),
/// SADALP folds them into int32, and ADDP at the group's end sums each row's two halves.
/// Register use at MR = 2: 16 int32 + 8 fp32 accumulators + 8 code vectors + 4 activations.
struct Q4FastMicroNeon {
  static constexpr std::size_t mr = 2;
  static constexpr const char* name = "neon";

  template <std::size_t G, std::size_t MR>
  static void run(const Q4Tile<G>* tiles, std::size_t ng, const std::int8_t* xq, std::size_t ldq,
                  const float* dx, const std::int32_t* xs, std::size_t lds, float* out) noexcept {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float32x4_t yacc[MR][4];
    for (std::size_t i = 0; i < MR; ++i)
      for (std::size_t b = 0; b < 4; ++b) yacc[i][b] = vld1q_f32(out + 16 * i + 4 * b);
    for (std::size_t g = 0; g < ng; ++g) {
      const Q4Tile<G>* tl = tiles + g;
      int32x4_t acc[MR][4][2];  // [row][rows 4b..4b+3][words 0-1 | 2-3], two partials a word
      for (std::size_t i = 0; i < MR; ++i)
        for (std::size_t b = 0; b < 4; ++b) acc[i][b][0] = acc[i][b][1] = vdupq_n_s32(0);
      const std::int8_t* xg = xq + g * G;
      for (std::size_t kb = 0; kb < G / 8; ++kb) {
        int8x16_t lo[4], hi[4];
        for (std::size_t b = 0; b < 4; ++b) {
          const uint8x16_t c = vld1q_u8(tl->codes[kb] + 16 * b);
          lo[b] = vreinterpretq_s8_u8(vandq_u8(c, m4));
          hi[b] = vreinterpretq_s8_u8(vshrq_n_u8(c, 4));
        }
        for (std::size_t i = 0; i < MR; ++i) {
          const std::int8_t* xp = xg + i * ldq + 8 * kb;
          const int8x16_t xl = vreinterpretq_s8_s32(vdupq_n_s32(neon_detail::load_x4(xp)));
          const int8x16_t xh = vreinterpretq_s8_s32(vdupq_n_s32(neon_detail::load_x4(xp + 4)));
          for (std::size_t b = 0; b < 4; ++b) {
            int16x8_t p0 = vmull_s8(vget_low_s8(lo[b]), vget_low_s8(xl));
            p0 = vmlal_s8(p0, vget_low_s8(hi[b]), vget_low_s8(xh));
            int16x8_t p1 = vmull_high_s8(lo[b], xl);
            p1 = vmlal_high_s8(p1, hi[b], xh);
            acc[i][b][0] = vpadalq_s16(acc[i][b][0], p0);
            acc[i][b][1] = vpadalq_s16(acc[i][b][1], p1);
          }
        }
      }
      const neon_detail::TileHeaderF32 h = neon_detail::load_header(tl);
      for (std::size_t i = 0; i < MR; ++i) {
        int32x4_t isum[4];
        for (std::size_t b = 0; b < 4; ++b) isum[b] = vpaddq_s32(acc[i][b][0], acc[i][b][1]);
        neon_detail::add_group(h, isum, xs[i * lds + g], dx[i * lds + g], yacc[i]);
      }
    }
    for (std::size_t i = 0; i < MR; ++i)
      for (std::size_t b = 0; b < 4; ++b) vst1q_f32(out + 16 * i + 4 * b, yacc[i][b]);
  }
};

/// gemm_f32_qa8g<G>_qa4g<G>p16x8_<MR>x16_neon_dotprod: Armv8.2 SDOT (vdotq_laneq_s32). The
/// nibbles of a code vector are four s8 codes per 32-bit lane (codes 0..15 are valid s8), and
/// SDOT by lane 0 / lane 1 of the 8 activations adds 4 products per row. Register use at MR = 2:
/// 8 int32 + 8 fp32 accumulators + 8 code vectors.
struct Q4FastMicroNeonDot {
  static constexpr std::size_t mr = 2;
  static constexpr const char* name = "neon_dotprod";

  template <std::size_t G, std::size_t MR>
  EDGELLM_TARGET_DOTPROD static void run(const Q4Tile<G>* tiles, std::size_t ng,
                                         const std::int8_t* xq, std::size_t ldq, const float* dx,
                                         const std::int32_t* xs, std::size_t lds,
                                         float* out) noexcept {
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
      const neon_detail::TileHeaderF32 h = neon_detail::load_header(tl);
      for (std::size_t i = 0; i < MR; ++i) {
        int32x4_t isum[4];
        for (std::size_t b = 0; b < 4; ++b) {
          isum[b] = acc[i][b][0];
          for (std::size_t aa = 1; aa < NA; ++aa) isum[b] = vaddq_s32(isum[b], acc[i][b][aa]);
        }
        neon_detail::add_group(h, isum, xs[i * lds + g], dx[i * lds + g], yacc[i]);
      }
    }
    for (std::size_t i = 0; i < MR; ++i)
      for (std::size_t b = 0; b < 4; ++b) vst1q_f32(out + 16 * i + 4 * b, yacc[i][b]);
  }
};

/// gemm_f32_qa8g<G>_qa4g<G>p16x8_<MR>x16_neon_i8mm: SMMLA (vmmlaq_s32), a 2x8 by 8x2 int8 product
/// into a 2x2 int32 block, for prefill and speculative verification (m >= 2). Zipping the low
/// and high nibbles of a code vector by 32-bit lanes gives rows (4b, 4b+1) and (4b+2, 4b+3) with
/// their 8 codes in k order; two activation rows side by side are the other operand, so each
/// SMMLA adds 8 products to 4 (activation row, weight row) sums: twice SDOT's work per
/// instruction. acc[p][q] = [x(2p).w(2q), x(2p).w(2q+1), x(2p+1).w(2q), x(2p+1).w(2q+1)]. An odd
/// last row is paired with itself and the copy discarded; one row (decode) runs the SDOT kernel.
/// Register use at MR = 4: 16 int32 + 16 fp32 accumulators + code and activation vectors (the
/// fp32 sums, touched once per group, are what spills).
struct Q4FastMicroNeonI8mm {
  static constexpr std::size_t mr = 4;
  static constexpr const char* name = "neon_i8mm";

  template <std::size_t G, std::size_t MR>
  EDGELLM_TARGET_I8MM static void run(const Q4Tile<G>* tiles, std::size_t ng,
                                      const std::int8_t* xq, std::size_t ldq, const float* dx,
                                      const std::int32_t* xs, std::size_t lds,
                                      float* out) noexcept {
    if constexpr (MR == 1) {
      Q4FastMicroNeonDot::run<G, 1>(tiles, ng, xq, ldq, dx, xs, lds, out);
    } else {
      constexpr std::size_t NP = (MR + 1) / 2;  // activation row pairs
      const uint8x16_t m4 = vdupq_n_u8(0x0F);
      float32x4_t yacc[MR][4];
      for (std::size_t i = 0; i < MR; ++i)
        for (std::size_t b = 0; b < 4; ++b) yacc[i][b] = vld1q_f32(out + 16 * i + 4 * b);
      for (std::size_t g = 0; g < ng; ++g) {
        const Q4Tile<G>* tl = tiles + g;
        int32x4_t acc[NP][8];
        for (std::size_t p = 0; p < NP; ++p)
          for (std::size_t q = 0; q < 8; ++q) acc[p][q] = vdupq_n_s32(0);
        const std::int8_t* xg = xq + g * G;
        for (std::size_t kb = 0; kb < G / 8; ++kb) {
          int8x16_t xv[NP];
          for (std::size_t p = 0; p < NP; ++p) {
            const std::size_t i1 = 2 * p + 1 < MR ? 2 * p + 1 : 2 * p;
            xv[p] = vcombine_s8(vld1_s8(xg + 2 * p * ldq + 8 * kb), vld1_s8(xg + i1 * ldq + 8 * kb));
          }
          for (std::size_t b = 0; b < 4; ++b) {
            const uint8x16_t c = vld1q_u8(tl->codes[kb] + 16 * b);
            const uint32x4_t lo = vreinterpretq_u32_u8(vandq_u8(c, m4));
            const uint32x4_t hi = vreinterpretq_u32_u8(vshrq_n_u8(c, 4));
            const int8x16_t w01 = vreinterpretq_s8_u32(vzip1q_u32(lo, hi));  // rows 4b, 4b+1
            const int8x16_t w23 = vreinterpretq_s8_u32(vzip2q_u32(lo, hi));  // rows 4b+2, 4b+3
            for (std::size_t p = 0; p < NP; ++p) {
              acc[p][2 * b] = vmmlaq_s32(acc[p][2 * b], xv[p], w01);
              acc[p][2 * b + 1] = vmmlaq_s32(acc[p][2 * b + 1], xv[p], w23);
            }
          }
        }
        const neon_detail::TileHeaderF32 h = neon_detail::load_header(tl);
        for (std::size_t p = 0; p < NP; ++p) {
          int32x4_t even[4], odd[4];  // rows 2p and 2p + 1: weight rows 4b..4b+3
          for (std::size_t b = 0; b < 4; ++b) {
            const int64x2_t a01 = vreinterpretq_s64_s32(acc[p][2 * b]);
            const int64x2_t a23 = vreinterpretq_s64_s32(acc[p][2 * b + 1]);
            even[b] = vreinterpretq_s32_s64(vzip1q_s64(a01, a23));
            odd[b] = vreinterpretq_s32_s64(vzip2q_s64(a01, a23));
          }
          const std::size_t i0 = 2 * p;
          neon_detail::add_group(h, even, xs[i0 * lds + g], dx[i0 * lds + g], yacc[i0]);
          if (i0 + 1 < MR)
            neon_detail::add_group(h, odd, xs[(i0 + 1) * lds + g], dx[(i0 + 1) * lds + g],
                                   yacc[i0 + 1]);
        }
      }
      for (std::size_t i = 0; i < MR; ++i)
        for (std::size_t b = 0; b < 4; ++b) vst1q_f32(out + 16 * i + 4 * b, yacc[i][b]);
    }
  }
};

}  // namespace edgellm::kernels::arch

#else
#define EDGELLM_NEON_MICROKERNELS 0
#endif
