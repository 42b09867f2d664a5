// SPDX-License-Identifier: Apache-2.0
// Causal GQA attention over a KV cache's stored keys and values, for every storage format
// (fp32, fp16, int8 with per-(position, kv head) scales, int4 with per-(position, kv head, 32
// coordinates) fp16 scales): the tiled layout, the xsimd kernels,
// and the split over a thread pool, on a plain view of a layer's storage (KvLayerView). The
// caches (cache/dense_kv_cache.hpp) store and append; they call attend_layer. The scalar twin
// and oracle: kernels/reference_attention.hpp.
//
// Cost: every stored position of a kv head is read once per query and costs 2 G head_dim fp32
// FMAs (keys and values, G = query heads per kv head) plus the conversion of 2 head_dim
// elements; per byte of int8 K/V that is G FMAs (7 for Qwen2-7B, 4 for Llama-3-8B). So a
// decode step is memory-bound only where the FMA rate exceeds G x the read bandwidth; on CPUs
// with one 512-bit (or two 256-bit) FMA per cycle, Qwen2-7B's G = 7 is close to balanced, and
// int8's lead over fp16 then comes from fp16's doubled traffic, not from less arithmetic.
// (Integer dot products on the codes, with queries as int16, would cut the key half of it.)
#pragma once

#include "edgellm/config.hpp"
#include "edgellm/detail/diagnostics.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/thread_pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

EDGELLM_SUPPRESS_GCC105593_BEGIN  // see detail/diagnostics.hpp

namespace edgellm::kernels {

/// The attention scale HF uses: head_dim^-0.5 computed in double, applied as an fp32 multiply.
inline float attention_scale(std::size_t head_dim) noexcept {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

/// Multiply-adds below which one attend call is not split over a pool: small enough that waking
/// a worker and joining it costs a good share of the work saved (docs/performance.md, "Where a
/// decode token's time goes"). A decode step at short context falls below it; a prefill chunk
/// or a decode step past a few hundred positions is above it.
inline constexpr std::size_t kAttentionForkMinMacs = std::size_t{1} << 20;

/// Multiply-adds of one attend call: n_q queries at positions first_pos .., query i over the
/// first_pos + i + 1 positions it sees, QK^T and the weighted sum of V for each of `heads`.
inline constexpr std::size_t attention_macs(std::size_t n_q, std::size_t first_pos,
                                            std::size_t heads, std::size_t head_dim) noexcept {
  return (n_q * first_pos + n_q * (n_q + 1) / 2) * heads * head_dim * 2;
}

/// Whether an attend call is worth a fork-join (kAttentionForkMinMacs). Only a scheduling
/// choice: attention's results do not depend on the pool.
inline constexpr bool attention_worth_forking(std::size_t n_q, std::size_t first_pos,
                                              std::size_t heads, std::size_t head_dim) noexcept {
  return attention_macs(n_q, first_pos, heads, head_dim) >= kAttentionForkMinMacs;
}

/// Positions per key tile. Keys are stored transposed within a tile, [head_dim][kAttentionTile],
/// so that one load of a column gives that coordinate of 16 consecutive positions: the scores of
/// a tile are plain FMAs (a broadcast query coordinate times a column) with no horizontal sums,
/// and each converted column serves every query head of a GQA group.
inline constexpr std::size_t kAttentionTile = 16;
/// Positions per softmax chunk. A query's positions [0, p] are split into chunks
/// [b kAttentionChunk, (b + 1) kAttentionChunk) whatever the thread count; each chunk gets its
/// own max, sum and weighted sum of values, merged in chunk order (flash-decoding), so the
/// result does not depend on how chunks are spread over threads.
inline constexpr std::size_t kAttentionChunk = 256;

/// Positions a cache allocates per kv head to hold `capacity`: whole key tiles.
constexpr std::size_t attention_slots(std::size_t capacity) noexcept {
  return (capacity + kAttentionTile - 1) / kAttentionTile * kAttentionTile;
}

/// One layer of a cache, as the kernels read it. T: float (fp32), std::uint16_t (fp16 bits) or
/// std::int8_t (codes; the stored value is code * scale). Per kv head g:
///   k       + g * slots * head_dim   [slots / 16][head_dim][16]   keys, tiles transposed
///   v       + g * slots * head_dim   [slots][head_dim]            values, row-major
///   k_scale + g * slots, v_scale + g * slots   [slots] fp32 scales (null for fp32 / fp16)
/// slots: positions allocated per head (attention_slots: a multiple of kAttentionTile).
template <class T>
struct KvLayerView {
  const T* k = nullptr;
  const float* k_scale = nullptr;
  const T* v = nullptr;
  const float* v_scale = nullptr;
  std::size_t kv_heads = 0, head_dim = 0, slots = 0;

  const T* k_head(std::size_t g) const noexcept { return k + g * slots * head_dim; }
  const T* v_head(std::size_t g) const noexcept { return v + g * slots * head_dim; }
  const float* k_scale_head(std::size_t g) const noexcept {
    return k_scale ? k_scale + g * slots : nullptr;
  }
  const float* v_scale_head(std::size_t g) const noexcept {
    return v_scale ? v_scale + g * slots : nullptr;
  }
  /// Index of key (position j, coordinate c) within a head's key tiles.
  static std::size_t k_index(std::size_t j, std::size_t c, std::size_t head_dim) noexcept {
    return ((j / kAttentionTile) * head_dim + c) * kAttentionTile + j % kAttentionTile;
  }

  // What the generic kernel (detail::chunk_partial) asks of a view.
  /// Rows carry one fp32 scale each (int8 codes).
  static constexpr bool row_scaled = std::is_same_v<T, std::int8_t>;
  /// Keys and values carry a scale per group of coordinates (int4 only).
  static constexpr bool grouped = false;
};

/// Coordinates per scale group of the int4 cache (head_dim must be a multiple).
inline constexpr std::size_t kKvQ4Group = 32;

/// One layer of an int4 cache: 4-bit two's complement codes q in [-7, 7], the stored value
/// q * scale, one fp16 scale per (position, group of kKvQ4Group coordinates). Sixteen values
/// pack into a block of 8 bytes read as a little-endian 64-bit word: value i at bit 32 (i % 2) +
/// 4 (i / 2), so that the word broadcast to 32-bit lanes gives lane i the half holding value i,
/// and one variable left shift and one arithmetic right shift give every lane its code.
/// Per kv head g (groups = head_dim / 32):
///   k       + g * slots * head_dim / 2   [slots / 16][head_dim][8 bytes]  key tiles: column c
///                                        packs coordinate c of the tile's 16 positions
///   k_scale + g * slots * groups         [slots / 16][groups][16] fp16    per tile and group
///   v       + g * slots * head_dim / 2   [slots][head_dim / 16][8 bytes]  values by position
///   v_scale + g * slots * groups         [slots][groups] fp16
struct KvLayerViewQ4 {
  const std::uint8_t* k = nullptr;
  const std::uint16_t* k_scale = nullptr;
  const std::uint8_t* v = nullptr;
  const std::uint16_t* v_scale = nullptr;
  std::size_t kv_heads = 0, head_dim = 0, slots = 0;

  static constexpr bool row_scaled = false;
  static constexpr bool grouped = true;
  std::size_t groups() const noexcept { return head_dim / kKvQ4Group; }
  const std::uint8_t* k_head(std::size_t g) const noexcept { return k + g * slots * head_dim / 2; }
  const std::uint8_t* v_head(std::size_t g) const noexcept { return v + g * slots * head_dim / 2; }
  const std::uint16_t* k_scale_head(std::size_t g) const noexcept {
    return k_scale + g * slots * groups();
  }
  const std::uint16_t* v_scale_head(std::size_t g) const noexcept {
    return v_scale + g * slots * groups();
  }
  /// Byte of a block and bit within it where value i's nibble starts (bit 32 (i % 2) + 4 (i / 2)
  /// of the little-endian word).
  static constexpr std::size_t code_byte(std::size_t i) noexcept { return 4 * (i % 2) + i / 4; }
  static constexpr unsigned code_bit(std::size_t i) noexcept { return 4 * ((i / 2) % 2); }
  /// The 4-bit code (-7 .. 7; -8 is never stored) of value i of a 16-value block.
  static int code(const std::uint8_t* block, std::size_t i) noexcept {
    const int n = (block[code_byte(i)] >> code_bit(i)) & 15;
    return n >= 8 ? n - 16 : n;
  }
  /// Replaces value i's code (-8 .. 7) in a block.
  static void set_code(std::uint8_t* block, std::size_t i, int q) noexcept {
    std::uint8_t& b = block[code_byte(i)];
    const unsigned shift = code_bit(i);
    b = static_cast<std::uint8_t>((b & ~(15u << shift)) | ((static_cast<unsigned>(q) & 15u) << shift));
  }
  /// Code and scale of key (position j, coordinate c) / value (position j, coordinate c).
  int key_code(std::size_t g, std::size_t j, std::size_t c) const noexcept {
    return code(k_head(g) + ((j / kAttentionTile) * head_dim + c) * 8, j % kAttentionTile);
  }
  std::uint16_t key_scale(std::size_t g, std::size_t j, std::size_t c) const noexcept {
    return k_scale_head(g)[((j / kAttentionTile) * groups() + c / kKvQ4Group) * kAttentionTile +
                           j % kAttentionTile];
  }
  int value_code(std::size_t g, std::size_t j, std::size_t c) const noexcept {
    return code(v_head(g) + j * head_dim / 2 + c / 16 * 8, c % 16);
  }
  std::uint16_t value_scale(std::size_t g, std::size_t j, std::size_t c) const noexcept {
    return v_scale_head(g)[j * groups() + c / kKvQ4Group];
  }
};

namespace detail {

inline constexpr std::size_t kTile = kAttentionTile;
inline constexpr std::size_t kChunk = kAttentionChunk;
/// Value rows per pass of the weighted sum (so a pass's rows stay in L1 across column blocks).
inline constexpr std::size_t kVBlock = 64;

constexpr std::size_t round_up(std::size_t n, std::size_t m) noexcept { return (n + m - 1) / m * m; }

/// A stored element as fp32 (exact).
inline float element_f32(float x) noexcept { return x; }
inline float element_f32(std::int8_t x) noexcept { return x; }
inline float element_f32(std::uint16_t x) noexcept { return f16_to_f32(x); }

// ---------------------------------------------------------------------------------------------
// Loading stored elements as fp32 batches (exact conversions).

template <class Arch>
using fbatch = xsimd::batch<float, Arch>;

template <class Arch>
EDGELLM_ALWAYS_INLINE fbatch<Arch> load_f32(const float* p) noexcept {
  return fbatch<Arch>::load_unaligned(p);
}

/// fbatch::size int8 codes as floats: sign-extend + convert (AVX-512, AVX2, SSE4.1, NEON), else
/// a scalar loop.
template <class Arch>
EDGELLM_ALWAYS_INLINE fbatch<Arch> load_f32(const std::int8_t* p) noexcept {
#if XSIMD_WITH_AVX512F
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  } else
#endif
#if XSIMD_WITH_AVX2
      if constexpr (std::is_base_of_v<xsimd::avx2, Arch>) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  } else
#endif
#if XSIMD_WITH_SSE4_1
      if constexpr (std::is_base_of_v<xsimd::sse4_1, Arch>) {
    std::int32_t w;
    std::memcpy(&w, p, 4);
    return _mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(w)));
  } else
#endif
#if XSIMD_WITH_NEON64
      if constexpr (std::is_base_of_v<xsimd::neon64, Arch>) {
    std::uint32_t w;
    std::memcpy(&w, p, 4);
    const int16x8_t h = vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(w)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(h)));
  } else
#endif
  {
    alignas(64) float buf[fbatch<Arch>::size];
    for (std::size_t i = 0; i < fbatch<Arch>::size; ++i) buf[i] = p[i];
    return fbatch<Arch>::load_aligned(buf);
  }
}

/// fbatch::size fp16 values as floats: F16C (x86, when the build enables it), FCVTL (AArch64),
/// else the portable converter.
template <class Arch>
EDGELLM_ALWAYS_INLINE fbatch<Arch> load_f32(const std::uint16_t* p) noexcept {
#if XSIMD_WITH_AVX512F
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else
#endif
#if XSIMD_WITH_AVX && defined(__F16C__)
      if constexpr (std::is_base_of_v<xsimd::avx, Arch>) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else
#endif
#if XSIMD_WITH_SSE2 && defined(__F16C__)
      if constexpr (std::is_base_of_v<xsimd::sse2, Arch>) {
    return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  } else
#endif
#if XSIMD_WITH_NEON64
      if constexpr (std::is_base_of_v<xsimd::neon64, Arch>) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
  } else
#endif
  {
    alignas(64) float buf[fbatch<Arch>::size];
    for (std::size_t i = 0; i < fbatch<Arch>::size; ++i) buf[i] = f16_to_f32(p[i]);
    return fbatch<Arch>::load_aligned(buf);
  }
}

/// Values lane .. lane + fbatch::size - 1 of a 16-value int4 block (8 bytes, KvLayerViewQ4) as
/// floats (the codes, exact); lane is a multiple of the batch size below 16. x86 and AArch64:
/// the block's word broadcast, each lane shifted left to put its nibble on top and
/// arithmetically right by 28.
template <class Arch>
EDGELLM_ALWAYS_INLINE fbatch<Arch> load_q4(const std::uint8_t* block, std::size_t lane) noexcept {
#if XSIMD_WITH_AVX512F
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    std::int64_t w;
    std::memcpy(&w, block, 8);
    const __m512i up = _mm512_setr_epi32(28, 28, 24, 24, 20, 20, 16, 16, 12, 12, 8, 8, 4, 4, 0, 0);
    return _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_sllv_epi32(_mm512_set1_epi64(w), up), 28));
  } else
#endif
#if XSIMD_WITH_AVX2
      if constexpr (std::is_base_of_v<xsimd::avx2, Arch>) {
    std::int64_t w;
    std::memcpy(&w, block, 8);
    const __m256i up = lane == 0 ? _mm256_setr_epi32(28, 28, 24, 24, 20, 20, 16, 16)
                                 : _mm256_setr_epi32(12, 12, 8, 8, 4, 4, 0, 0);
    return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_sllv_epi32(_mm256_set1_epi64x(w), up), 28));
  } else
#endif
#if XSIMD_WITH_NEON64
      if constexpr (std::is_base_of_v<xsimd::neon64, Arch>) {
    std::uint64_t w;
    std::memcpy(&w, block, 8);
    const std::int32_t top = static_cast<std::int32_t>(28 - 2 * lane);  // lanes lane .. lane + 3
    const int32x4_t up = {top, top, top - 4, top - 4};
    const int32x4_t x = vreinterpretq_s32_u64(vdupq_n_u64(w));
    return vcvtq_f32_s32(vshrq_n_s32(vshlq_s32(x, up), 28));
  } else
#endif
  {
    alignas(64) float buf[fbatch<Arch>::size];
    for (std::size_t i = 0; i < fbatch<Arch>::size; ++i)
      buf[i] = static_cast<float>(KvLayerViewQ4::code(block, lane + i));
    return fbatch<Arch>::load_aligned(buf);
  }
}

/// exp of every lane (xsimd::exp: Cephes-style range reduction and polynomial; 0 below -87.3).
/// The attention bound assumes a relative error <= 4u on [-88, 0]; the tests check it.
template <class Arch>
EDGELLM_ALWAYS_INLINE fbatch<Arch> exp_f32(const fbatch<Arch>& x) noexcept {
  return xsimd::exp(x);
}

/// Accumulator batches a kernel keeps in registers next to its operands: 16 on ISAs with 32
/// vector registers (AVX-512, AArch64), 8 on the others.
template <class Arch>
constexpr std::size_t acc_budget() noexcept {
#if XSIMD_WITH_AVX512F
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) return 16;
#endif
#if XSIMD_WITH_NEON64
  if constexpr (std::is_base_of_v<xsimd::neon64, Arch>) return 16;
#endif
  return 8;
}

// ---------------------------------------------------------------------------------------------
// One chunk: positions [j0, j0 + n) of one kv head against NH query heads of its group.

/// Per-thread scratch of the chunk kernel, in floats: pre-scaled queries [8][head_dim], scores /
/// weights [8][kChunk] and the int4 value scales of a chunk in fp32 [kChunk][head_dim / 32].
inline std::size_t chunk_scratch_floats(std::size_t head_dim) noexcept {
  return 8 * head_dim + 8 * kChunk + kChunk * (head_dim / kKvQ4Group);
}

/// The partial result of one chunk for one query head: [m, l, o[head_dim]] with m the largest
/// score, l = sum_j exp(s_j - m), o = sum_j exp(s_j - m) v_j (unnormalised).
inline std::size_t partial_floats(std::size_t head_dim) noexcept { return head_dim + 2; }

/// Partial results of one chunk for NH query heads (nh of them real; the rest are padding with
/// zero queries whose results are dropped), over a KvLayerView<T> or a KvLayerViewQ4.
///   qs:   [NH][head_dim] queries times attention_scale (padding rows zero)
///   s:    [NH][kChunk] scratch (scores, then weights)
///   vsf:  [kChunk][head_dim / 32] scratch (int4: the chunk's value scales in fp32)
///   part: [nh][head_dim + 2] output, see partial_floats
/// j0 is a multiple of kChunk, 1 <= n <= kChunk, and positions < j0 + n are stored.
/// Numerics, per head and position j (all fp32; sums in the order written):
///   s_j = dot(qs, k_j) (* k_scale_j)     one running FMA sum over c = 0 .. head_dim - 1
///   m = max_j s_j,  e_j = exp(s_j - m) (xsimd::exp),  l = sum of e_j (per-lane partial sums)
///   w_j = e_j (* v_scale_j),  o_c = sum_j w_j v_jc    one running FMA sum over j in order
/// int4 (grouped): k_jc and v_jc are code * scale of their group, exact in fp32 (a 4-bit code
/// times an fp16 scale), and no row scale applies.
template <class Arch, class View, std::size_t NH>
void chunk_partial(const View& kv, std::size_t g, const float* qs, std::size_t nh,
                   std::size_t j0, std::size_t n, float* s, float* vsf, float* part) noexcept {
  using B = fbatch<Arch>;
  constexpr std::size_t W = B::size;
  static_assert(kTile % W == 0 && kChunk % kTile == 0 && kVBlock % kTile == 0);
  constexpr std::size_t budget = acc_budget<Arch>();
  // Key batches per pass (lanes = positions) and value batches per pass (lanes = coordinates).
  constexpr std::size_t KB = std::clamp<std::size_t>(budget / NH, 1, kTile / W);
  constexpr std::size_t VB = std::max<std::size_t>(budget / NH, 1);
  const std::size_t hd = kv.head_dim, ps = partial_floats(hd);
  const auto* kh = kv.k_head(g);
  const auto* vh = kv.v_head(g);
  const auto* ksc = kv.k_scale_head(g);
  const auto* vsc = kv.v_scale_head(g);

  // 1. Scores, a tile at a time; lanes past n are computed on stored (initialised) data and
  //    masked below.
  const std::size_t t_end = (j0 + n + kTile - 1) / kTile;
  for (std::size_t t = j0 / kTile; t < t_end; ++t) {
    for (std::size_t lane = 0; lane < kTile && t * kTile + lane < j0 + n; lane += KB * W) {
      B acc[NH][KB];
#pragma GCC unroll 8
      for (std::size_t r = 0; r < NH; ++r)
#pragma GCC unroll 4
        for (std::size_t b = 0; b < KB; ++b) acc[r][b] = B(0.0f);
      if constexpr (View::grouped) {
        // Per group: sum_c q_c code_c, then times the group's scale (with 32 vector registers:
        // the sums in registers of their own) or each code times its scale before the FMA.
        constexpr bool group_sums = budget >= 16;
        const std::uint8_t* kt = kh + t * hd * 8;
        const std::uint16_t* kst = ksc + t * kv.groups() * kTile;
        for (std::size_t gi = 0, c = 0; gi < kv.groups(); ++gi) {
          B ks[KB], gsum[group_sums ? NH : 1][KB];
#pragma GCC unroll 4
          for (std::size_t b = 0; b < KB; ++b) ks[b] = load_f32<Arch>(kst + gi * kTile + lane + b * W);
          if constexpr (group_sums) {
#pragma GCC unroll 8
            for (std::size_t r = 0; r < NH; ++r)
#pragma GCC unroll 4
              for (std::size_t b = 0; b < KB; ++b) gsum[r][b] = B(0.0f);
          }
          for (const std::size_t ce = c + kKvQ4Group; c < ce; ++c) {
            B kb[KB];
#pragma GCC unroll 4
            for (std::size_t b = 0; b < KB; ++b) {
              kb[b] = load_q4<Arch>(kt + c * 8, lane + b * W);
              if constexpr (!group_sums) kb[b] *= ks[b];
            }
#pragma GCC unroll 8
            for (std::size_t r = 0; r < NH; ++r) {
              const B qr(qs[r * hd + c]);
#pragma GCC unroll 4
              for (std::size_t b = 0; b < KB; ++b) {
                if constexpr (group_sums) gsum[r][b] = xsimd::fma(qr, kb[b], gsum[r][b]);
                else acc[r][b] = xsimd::fma(qr, kb[b], acc[r][b]);
              }
            }
          }
          if constexpr (group_sums) {
#pragma GCC unroll 8
            for (std::size_t r = 0; r < NH; ++r)
#pragma GCC unroll 4
              for (std::size_t b = 0; b < KB; ++b) acc[r][b] = xsimd::fma(gsum[r][b], ks[b], acc[r][b]);
          }
        }
      } else {
        const auto* kt = kh + t * hd * kTile;
        for (std::size_t c = 0; c < hd; ++c) {
          B kb[KB];
#pragma GCC unroll 4
          for (std::size_t b = 0; b < KB; ++b) kb[b] = load_f32<Arch>(kt + c * kTile + lane + b * W);
#pragma GCC unroll 8
          for (std::size_t r = 0; r < NH; ++r) {
            const B qr(qs[r * hd + c]);
#pragma GCC unroll 4
            for (std::size_t b = 0; b < KB; ++b) acc[r][b] = xsimd::fma(qr, kb[b], acc[r][b]);
          }
        }
      }
      const std::size_t at = t * kTile + lane - j0;
#pragma GCC unroll 4
      for (std::size_t b = 0; b < KB; ++b) {
        B sc(1.0f);
        if constexpr (View::row_scaled) sc = B::load_unaligned(ksc + t * kTile + lane + b * W);
#pragma GCC unroll 8
        for (std::size_t r = 0; r < NH; ++r) {
          B x = acc[r][b];
          if constexpr (View::row_scaled) x *= sc;
          x.store_unaligned(s + r * kChunk + at + b * W);
        }
      }
    }
  }

  // 2. Softmax pieces per real head; the weights overwrite the scores. Padding rows get zero
  //    weights so that step 3 can run all NH rows.
  alignas(64) float lane_index[W];
  for (std::size_t i = 0; i < W; ++i) lane_index[i] = static_cast<float>(i);
  const B idx = B::load_aligned(lane_index);
  const B neg_inf(-std::numeric_limits<float>::infinity());
  const std::size_t nv = round_up(n, W);
  for (std::size_t r = 0; r < NH; ++r) {
    float* row = s + r * kChunk;
    if (r >= nh) {
      std::fill(row, row + nv, 0.0f);
      continue;
    }
    B mx = neg_inf;
    for (std::size_t k = 0; k < nv; k += W) {
      B x = B::load_unaligned(row + k);
      if (k + W > n) x = xsimd::select(idx < B(static_cast<float>(n - k)), x, neg_inf);
      mx = xsimd::max(mx, x);
    }
    alignas(64) float lanes[W];
    mx.store_aligned(lanes);
    float m = lanes[0];
    for (std::size_t i = 1; i < W; ++i) m = std::max(m, lanes[i]);
    const B mb(m);
    B sum(0.0f);
    for (std::size_t k = 0; k < nv; k += W) {
      B e = exp_f32<Arch>(B::load_unaligned(row + k) - mb);
      if (k + W > n) e = xsimd::select(idx < B(static_cast<float>(n - k)), e, B(0.0f));
      sum += e;
      if constexpr (View::row_scaled) {
        e *= B::load_unaligned(vsc + j0 + k);
        if (k + W > n) e = xsimd::select(idx < B(static_cast<float>(n - k)), e, B(0.0f));
      }
      e.store_unaligned(row + k);
    }
    part[r * ps] = m;
    part[r * ps + 1] = xsimd::hadd(sum);
  }

  if constexpr (View::grouped) {  // the chunk's value scales, converted once for every pass
    const std::size_t count = n * kv.groups();
    const std::uint16_t* from = vsc + j0 * kv.groups();
    std::size_t i = 0;
    for (; i + W <= count; i += W) load_f32<Arch>(from + i).store_unaligned(vsf + i);
    for (; i < count; ++i) vsf[i] = f16_to_f32(from[i]);
  }

  // 3. o[r] = sum_j w[r][j] v_j: blocks of kVBlock rows; per pass NB batches of coordinates
  //    (the largest power of two <= VB that fits), every value row converted once per pass for
  //    all NH heads.
  const std::size_t hd_vec = hd / W * W;
  for (std::size_t jb = 0; jb < n; jb += kVBlock) {
    const std::size_t je = std::min(n, jb + kVBlock);
    std::size_t c0 = 0;
    const auto passes = [&](auto batches) {
      constexpr std::size_t NB = decltype(batches)::value;
      if constexpr (NB <= VB) {
        for (; c0 + NB * W <= hd_vec; c0 += NB * W) {
          B acc[NH][NB];
#pragma GCC unroll 8
          for (std::size_t r = 0; r < NH; ++r)
#pragma GCC unroll 16
            for (std::size_t b = 0; b < NB; ++b)
              acc[r][b] = (jb == 0 || r >= nh)
                              ? B(0.0f)
                              : B::load_unaligned(part + r * ps + 2 + c0 + b * W);
          for (std::size_t j = jb; j < je; ++j) {
            B vb[NB];
            if constexpr (View::grouped) {
              const std::uint8_t* vr = vh + (j0 + j) * hd / 2;
              const float* vs = vsf + j * kv.groups();
#pragma GCC unroll 16
              for (std::size_t b = 0; b < NB; ++b) {
                const std::size_t c = c0 + b * W;
                vb[b] = load_q4<Arch>(vr + c / 16 * 8, c % 16) * B(vs[c / kKvQ4Group]);
              }
            } else {
              const auto* vr = vh + (j0 + j) * hd + c0;
#pragma GCC unroll 16
              for (std::size_t b = 0; b < NB; ++b) vb[b] = load_f32<Arch>(vr + b * W);
            }
#pragma GCC unroll 8
            for (std::size_t r = 0; r < NH; ++r) {
              const B wr(s[r * kChunk + j]);
#pragma GCC unroll 16
              for (std::size_t b = 0; b < NB; ++b) acc[r][b] = xsimd::fma(wr, vb[b], acc[r][b]);
            }
          }
          for (std::size_t r = 0; r < nh; ++r)
            for (std::size_t b = 0; b < NB; ++b)
              acc[r][b].store_unaligned(part + r * ps + 2 + c0 + b * W);
        }
      }
    };
    passes(std::integral_constant<std::size_t, 16>{});
    passes(std::integral_constant<std::size_t, 8>{});
    passes(std::integral_constant<std::size_t, 4>{});
    passes(std::integral_constant<std::size_t, 2>{});
    passes(std::integral_constant<std::size_t, 1>{});
    if constexpr (!View::grouped) {  // int4 needs head_dim % 32 == 0: no partial batch
      for (std::size_t c = hd_vec; c < hd; ++c) {  // coordinates past the last whole batch
        for (std::size_t r = 0; r < nh; ++r) {
          float o = jb == 0 ? 0.0f : part[r * ps + 2 + c];
          for (std::size_t j = jb; j < je; ++j)
            o = std::fma(s[r * kChunk + j], element_f32(vh[(j0 + j) * hd + c]), o);
          part[r * ps + 2 + c] = o;
        }
      }
    }
  }
}

/// Merges the partial results of nb chunks (part + b * stride, b in order) of one query head:
///   M = max_b m_b,  a_b = exp(m_b - M) (std::exp in fp32),  l = sum_b a_b l_b,
///   out_c = (sum_b a_b o_bc) / l      (sums in chunk order; FMA)
/// Overwrites each m_b with a_b.
template <class Arch>
void merge_partials(float* part, std::size_t nb, std::size_t stride, std::size_t hd,
                    float* out) noexcept {
  using B = fbatch<Arch>;
  constexpr std::size_t W = B::size;
  float mx = part[0];
  for (std::size_t b = 1; b < nb; ++b) mx = std::max(mx, part[b * stride]);
  float l = 0.0f;
  for (std::size_t b = 0; b < nb; ++b) {
    float* p = part + b * stride;
    p[0] = std::exp(p[0] - mx);
    l = std::fma(p[0], p[1], l);
  }
  const B lb(l);
  std::size_t c = 0;
  for (; c + W <= hd; c += W) {
    B acc(0.0f);
    for (std::size_t b = 0; b < nb; ++b) {
      const float* p = part + b * stride;
      acc = xsimd::fma(B(p[0]), B::load_unaligned(p + 2 + c), acc);
    }
    (acc / lb).store_unaligned(out + c);
  }
  for (; c < hd; ++c) {
    float acc = 0.0f;
    for (std::size_t b = 0; b < nb; ++b) acc = std::fma(part[b * stride], part[b * stride + 2 + c], acc);
    out[c] = acc / l;
  }
}

/// Number of chunks of a query at position pos.
constexpr std::size_t chunks_of(std::size_t pos) noexcept { return pos / kChunk + 1; }

/// All chunks of one (query, kv head) pair for query heads [0, group): partial results of chunk
/// b at part + b * group * partial_floats(hd), head r at + r * partial_floats(hd).
template <class Arch, class View>
void chunk_task(const View& kv, std::size_t g, const float* q, std::size_t group,
                std::size_t pos, std::size_t b, float scale, float* scratch, float* part) noexcept {
  const std::size_t hd = kv.head_dim, j0 = b * kChunk, n = std::min(kChunk, pos + 1 - j0);
  float* qs = scratch;
  float* s = scratch + 8 * hd;
  float* vsf = s + 8 * kChunk;
  for (std::size_t h0 = 0; h0 < group;) {
    const std::size_t rest = group - h0;
    // Pieces of 8, 7 or 6 heads (exact for Qwen2's groups of 7 and 6), 5 padded to 6, 3 to 4.
    const std::size_t width = rest >= 8 ? 8 : rest >= 6 ? rest : rest == 5 ? 6 : rest == 3 ? 4 : rest;
    const std::size_t nh = std::min(width, rest);
    for (std::size_t r = 0; r < width; ++r)
      for (std::size_t c = 0; c < hd; ++c) qs[r * hd + c] = r < nh ? q[(h0 + r) * hd + c] * scale : 0.0f;
    float* p = part + h0 * partial_floats(hd);
    switch (width) {
      case 8: chunk_partial<Arch, View, 8>(kv, g, qs, nh, j0, n, s, vsf, p); break;
      case 7: chunk_partial<Arch, View, 7>(kv, g, qs, nh, j0, n, s, vsf, p); break;
      case 6: chunk_partial<Arch, View, 6>(kv, g, qs, nh, j0, n, s, vsf, p); break;
      case 4: chunk_partial<Arch, View, 4>(kv, g, qs, nh, j0, n, s, vsf, p); break;
      case 2: chunk_partial<Arch, View, 2>(kv, g, qs, nh, j0, n, s, vsf, p); break;
      default: chunk_partial<Arch, View, 1>(kv, g, qs, nh, j0, n, s, vsf, p); break;
    }
    h0 += nh;
  }
}

}  // namespace detail

/// Floats of scratch attend_layer needs for the given call.
inline std::size_t attend_scratch_floats(std::size_t n_q, std::size_t first_pos,
                                         std::size_t heads, std::size_t kv_heads,
                                         std::size_t head_dim, std::size_t threads) noexcept {
  using namespace detail;  // the chunk kernels' sizes
  const std::size_t group = heads / kv_heads, slot = group * partial_floats(head_dim);
  const std::size_t per_thread = chunk_scratch_floats(head_dim) + chunks_of(first_pos + n_q - 1) * slot;
  std::size_t items = 0;  // every (query, kv head, chunk), for the chunk-parallel mode
  for (std::size_t i = 0; i < n_q; ++i) items += chunks_of(first_pos + i) * kv_heads;
  return threads * per_thread + (threads > 1 ? items * slot : 0);
}

/// Causal GQA attention of n_q queries at positions first_pos .. first_pos + n_q - 1 over one
/// layer (every position up to the last query's must be stored):
///   q, out: [n_q][heads][head_dim]; query head h uses kv head h / (heads / kv_heads).
/// Each (query, kv head) is computed chunk by chunk (chunk_partial, all query heads of the
/// group at once) and merged (merge_partials). Work split, fixed by the arguments and the pool
/// size only: many (query, kv head) pairs -> contiguous runs of pairs of about equal cost per
/// thread; few pairs (decode) -> (pair, chunk) items split evenly, then the merges. Both give
/// the same bits, so results do not depend on the pool (null: the calling thread).
/// kv: a KvLayerView<T> or a KvLayerViewQ4. scratch: grown to attend_scratch_floats(...).
template <class Arch, class View>
void attend_layer(const View& kv, const float* q, std::size_t n_q,
                  std::size_t first_pos, std::size_t heads, float* out, ThreadPool* pool,
                  std::vector<float>& scratch) {
  using namespace detail;  // the chunk kernels
  const std::size_t hd = kv.head_dim, kvh = kv.kv_heads, group = heads / kvh;
  const std::size_t slot = group * partial_floats(hd);
  const std::size_t threads = pool ? pool->size() : 1;
  const std::size_t need = attend_scratch_floats(n_q, first_pos, heads, kvh, hd, threads);
  if (scratch.size() < need) scratch.resize(need);
  const std::size_t per_thread = chunk_scratch_floats(hd) + chunks_of(first_pos + n_q - 1) * slot;
  const float scale = attention_scale(hd);
  const std::size_t pairs = n_q * kvh;
  const auto q_of = [&](std::size_t i, std::size_t g) { return q + (i * heads + g * group) * hd; };
  const auto out_of = [&](std::size_t i, std::size_t g) { return out + (i * heads + g * group) * hd; };

  std::size_t items = 0;
  for (std::size_t i = 0; i < n_q; ++i) items += chunks_of(first_pos + i) * kvh;
  if (threads > 1 && pairs < 4 * threads && items > pairs) {
    // Chunk-parallel (decode): item k -> query i, kv head g, chunk b, in that nesting order.
    float* shared = scratch.data() + threads * per_thread;
    pool->run([&](std::size_t t, std::size_t nt) {
      float* mine = scratch.data() + t * per_thread;
      std::size_t k = 0;
      const std::size_t k0 = items * t / nt, k1 = items * (t + 1) / nt;
      for (std::size_t i = 0; i < n_q && k < k1; ++i) {
        const std::size_t nb = chunks_of(first_pos + i);
        for (std::size_t g = 0; g < kvh; ++g, k += nb) {
          for (std::size_t b = std::max(k, k0) - k; b < nb && k + b < k1; ++b)
            chunk_task<Arch, View>(kv, g, q_of(i, g), group, first_pos + i, b, scale, mine,
                                        shared + (k + b) * slot);
        }
      }
    });
    pool->run([&](std::size_t t, std::size_t nt) {
      const std::size_t u0 = pairs * group * t / nt, u1 = pairs * group * (t + 1) / nt;
      std::size_t k = 0;
      for (std::size_t i = 0; i < n_q; ++i) {
        const std::size_t nb = chunks_of(first_pos + i);
        for (std::size_t g = 0; g < kvh; ++g, k += nb) {
          for (std::size_t r = 0; r < group; ++r) {
            const std::size_t u = (i * kvh + g) * group + r;
            if (u < u0 || u >= u1) continue;
            merge_partials<Arch>(shared + k * slot + r * partial_floats(hd), nb, slot, hd,
                                 out_of(i, g) + r * hd);
          }
        }
      }
    });
    return;
  }

  // Pair-parallel: pair (i, g) costs ~ first_pos + i + 1 positions; thread t takes the pairs
  // whose cumulative cost starts in [total t / nt, total (t + 1) / nt).
  auto work = [&](std::size_t t, std::size_t nt) {
    float* mine = scratch.data() + t * per_thread;
    float* part = mine + chunk_scratch_floats(hd);
    const std::size_t total = (n_q * (2 * first_pos + n_q + 1)) / 2 * kvh;
    const std::size_t c0 = total * t / nt, c1 = total * (t + 1) / nt;
    std::size_t acc = 0;
    for (std::size_t i = 0; i < n_q; ++i) {
      const std::size_t cost = first_pos + i + 1;
      for (std::size_t g = 0; g < kvh; ++g, acc += cost) {
        if (acc < c0 || acc >= c1) continue;
        const std::size_t pos = first_pos + i, nb = chunks_of(pos);
        for (std::size_t b = 0; b < nb; ++b)
          chunk_task<Arch, View>(kv, g, q_of(i, g), group, pos, b, scale, mine, part + b * slot);
        for (std::size_t r = 0; r < group; ++r)
          merge_partials<Arch>(part + r * partial_floats(hd), nb, slot, hd, out_of(i, g) + r * hd);
      }
    }
  };
  if (pool == nullptr || threads == 1) {
    work(0, 1);
  } else {
    pool->run(work);
  }
}

}  // namespace edgellm::kernels

EDGELLM_SUPPRESS_GCC105593_END
