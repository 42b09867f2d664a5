// SPDX-License-Identifier: Apache-2.0
// arm64 microkernel for the int8-weight fast path (W8A8, kernels/gemm_q8.hpp): SDOT (dotprod),
// compiled with a per-function target attribute so that the Armv8.0 baseline binary carries it
// and the dispatcher calls it only where the OS reports the feature (detail/cpu_features.hpp).
// Cores without dotprod run the compiler-vectorised kernel of gemm_q8.hpp.
#pragma once

#include "edgellm/config.hpp"
#include "edgellm/kernels/arch/neon_q4_fast.hpp"  // EDGELLM_NEON_MICROKERNELS, target macros

#if EDGELLM_NEON_MICROKERNELS

#include <arm_neon.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "edgellm/kernels/q8_activations.hpp"
#include "edgellm/kernels/q8_matrix.hpp"

namespace edgellm::kernels::arch {

/// Rows [r0, r1) of Y = Xq W^T with the group dots by SDOT (four int8 products summed into
/// each int32 lane: exact, |dot| <= 128 * 127 * 127 per group), two accumulators per group to
/// halve the dependency chain, one ADDV per group; then the scalar twin's epilogue
/// (acc = fma(float(dot), s * dx, acc) group by group), so the result equals
/// reference::gemm_q8_fast bit for bit. G a multiple of 32.
EDGELLM_TARGET_DOTPROD inline void gemm_q8_fast_rows_dotprod(
    const Q8Matrix& w, const Q8ActivationsView& a, const float* bias, float* EDGELLM_RESTRICT y,
    std::size_t ldy, std::size_t r0, std::size_t r1) noexcept {
  const std::size_t ng = w.n_groups(), k = w.k(), G = w.group_size();
  for (std::size_t r = r0; r < r1; ++r) {
    const std::int8_t* q = w.codes(r);
    const float* s = w.scales(r);
    for (std::size_t i = 0; i < a.m; ++i) {
      const std::int8_t* xq = a.q + i * k;
      const float* dx = a.scale + i * ng;
      float acc = 0.0f;
      for (std::size_t g = 0; g < ng; ++g) {
        int32x4_t d0 = vdupq_n_s32(0), d1 = vdupq_n_s32(0);
        for (std::size_t c = g * G; c < (g + 1) * G; c += 32) {
          d0 = vdotq_s32(d0, vld1q_s8(q + c), vld1q_s8(xq + c));
          d1 = vdotq_s32(d1, vld1q_s8(q + c + 16), vld1q_s8(xq + c + 16));
        }
        const std::int32_t dot = vaddvq_s32(vaddq_s32(d0, d1));
        acc = std::fma(static_cast<float>(dot), s[g] * dx[g], acc);
      }
      y[i * ldy + r] = acc + (bias ? bias[r] : 0.0f);
    }
  }
}

}  // namespace edgellm::kernels::arch

#endif  // EDGELLM_NEON_MICROKERNELS
