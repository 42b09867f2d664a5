// SPDX-License-Identifier: Apache-2.0
// Run-time CPU feature detection for the instruction sets xsimd has no tag for (VNNI, dotprod,
// i8mm).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace edgellm::detail {

/// What the running CPU (and OS, for register state) supports.
struct CpuFeatures {
  bool avx2 = false;        ///< AVX2 + FMA + F16C, with YMM state enabled by the OS
  bool avx_vnni = false;    ///< AVX-VNNI (VEX vpdpbusd on ymm), on top of avx2
  bool avx512_vnni = false; ///< AVX-512 F/BW/VL/VNNI, with ZMM state enabled by the OS
  bool neon = false;          ///< AArch64 Advanced SIMD (every arm64 core)
  bool neon_dotprod = false;  ///< Armv8.2 SDOT/UDOT (FEAT_DotProd)
  bool neon_i8mm = false;     ///< SMMLA/UMMLA/USMMLA (FEAT_I8MM), on top of neon_dotprod
};

inline CpuFeatures detect_cpu_features() noexcept {
  CpuFeatures f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(1, 0, a, b, c, d);
  const bool osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1,
             avx = (c >> 28) & 1;
  if (!osxsave || !avx) return f;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_state = (xcr0_lo & 0x6u) == 0x6u;             // SSE + AVX state
  const bool zmm_state = ymm_state && (xcr0_lo & 0xE0u) == 0xE0u;  // opmask + ZMM state
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1, avx512bw = (b >> 30) & 1,
             avx512vl = (b >> 31) & 1, avx512vnni = (c >> 11) & 1;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  const bool avxvnni = (a1 >> 4) & 1;
  f.avx2 = ymm_state && avx2 && fma && f16c;
  f.avx_vnni = f.avx2 && avxvnni;
  f.avx512_vnni = f.avx2 && zmm_state && avx512f && avx512bw && avx512vl && avx512vnni;
#elif defined(__aarch64__)
  f.neon = true;
#if defined(__linux__)  // Linux and Android: the kernel's hwcaps
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
  f.neon_dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
  // Both, so the i8mm kernel may run the SDOT one for a single row (every i8mm core has both).
  f.neon_i8mm = f.neon_dotprod && (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#else  // no hwcaps to ask: what the binary was compiled for
#if defined(__ARM_FEATURE_DOTPROD)
  f.neon_dotprod = true;
#endif
#if defined(__ARM_FEATURE_DOTPROD) && defined(__ARM_FEATURE_MATMUL_INT8)
  f.neon_i8mm = true;
#endif
#endif
#endif
  return f;
}

/// Detected once; the function-local static is the only static state in edgellm.
inline const CpuFeatures& cpu_features() noexcept {
  static const CpuFeatures f = detect_cpu_features();
  return f;
}

}  // namespace edgellm::detail
