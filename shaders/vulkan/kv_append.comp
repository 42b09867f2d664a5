// SPDX-License-Identifier: Apache-2.0
// Stores rows of fp32 keys and values into the device KV cache (backend/vulkan/kv_cache.hpp),
// bit for bit as the CPU caches do (cache/quantized_kv_cache.hpp StoreQ8, cache/dense_kv_cache.hpp
// StoreF16). A "row" is one position of one kv head: head_dim values.
//   int8: scale = amax / 127, code = clamp(roundEven(x * (127 / amax)), -127, 127), packed 4 a
//         word (byte b of word i: coordinate 4 i + b); all-zero row: scale 0; inf/NaN: scale
//         NaN, codes 0. The two divisions are done in integer arithmetic, rounded to nearest
//         even, because Vulkan lets `/` err by 2.5 ulp; the multiply is correctly rounded.
//   f16:  x rounded to nearest even in integer arithmetic (not packHalf2x16, whose rounding
//         Vulkan leaves open), packed 2 a word (low half: coordinate 2 i).
// The input is read as bits, so a device that flushes subnormals still sees the CPU's amax.
// One workgroup per (kv head, row): gl_WorkGroupID = (head, row).
#version 450

layout(constant_id = 0) const uint WG = 64;  // power of two
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) writeonly buffer KCodes { uint k_codes[]; };  // [layers][capacity][kv_heads][head_dim / per_word]
layout(std430, binding = 1) writeonly buffer VCodes { uint v_codes[]; };
layout(std430, binding = 2) writeonly buffer KScale { uint k_scale[]; };  // [layers][capacity][kv_heads] fp32 bits (int8)
layout(std430, binding = 3) writeonly buffer VScale { uint v_scale[]; };
layout(std430, binding = 4) readonly buffer KIn { uint k_in[]; };  // [rows][kv_heads][head_dim] fp32 bits
layout(std430, binding = 5) readonly buffer VIn { uint v_in[]; };

layout(push_constant) uniform Push {
  uint pos0;      // layer * capacity + first_pos: the cache position of input row 0
  uint kv_heads;
  uint head_dim;  // a multiple of 4
  uint q8;        // 1: int8 codes + scales, 0: fp16
} pc;

shared uint amax_k[WG];
shared uint amax_v[WG];

// a / b rounded to nearest even, for positive finite non-zero a and b given as fp32 bits;
// returns fp32 bits (inf on overflow, subnormals rounded correctly).
uint div_rn(uint a, uint b) {
  int ea = int(a >> 23), eb = int(b >> 23);
  uint ma = a & 0x7FFFFFu, mb = b & 0x7FFFFFu;
  if (ea == 0) {  // subnormal: normalise the significand
    const int sh = 23 - findMSB(ma);
    ma <<= uint(sh);
    ea = 1 - sh;
  } else {
    ma |= 0x800000u;
  }
  if (eb == 0) {
    const int sh = 23 - findMSB(mb);
    mb <<= uint(sh);
    eb = 1 - sh;
  } else {
    mb |= 0x800000u;
  }
  int e = ea - eb + 127;  // biased exponent of the quotient once ma / mb is in [1, 2)
  if (ma < mb) {
    ma <<= 1;
    e -= 1;
  }
  // 25 quotient bits (24 of significand + 1 guard); the remainder is the sticky bit.
  uint q = 0u, r = ma;
  for (int i = 0; i < 25; ++i) {
    q <<= 1;
    if (r >= mb) {
      r -= mb;
      q |= 1u;
    }
    r <<= 1;
  }
  bool sticky = r != 0u;
  if (e >= 255) return 0x7F800000u;
  if (e <= 0) {  // subnormal result: drop 1 - e more bits into the sticky bit
    const uint sh = uint(1 - e);
    if (sh >= 25u) {
      sticky = sticky || q != 0u;
      q = 0u;
    } else {
      sticky = sticky || (q & ((1u << sh) - 1u)) != 0u;
      q >>= sh;
    }
    e = 1;
  }
  uint m = q >> 1;
  if ((q & 1u) != 0u && (sticky || (m & 1u) != 0u)) m += 1u;
  // m holds the implicit bit of normals (e - 1 + 1 = e) and carries into the exponent when
  // rounding overflows the significand.
  return min((uint(e - 1) << 23) + m, 0x7F800000u);
}

// fp32 bits -> fp16 bits, nearest even (kernels::f32_to_f16).
uint f32_to_f16(uint x) {
  const uint sign = (x >> 16) & 0x8000u;
  const uint ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) return sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0u);
  if (ax >= 0x477FF000u) return sign | 0x7C00u;
  if (ax < 0x38800000u) {
    if (ax < 0x33000000u) return sign;
    const uint e = ax >> 23;
    const uint m = (ax & 0x7FFFFFu) | 0x800000u;
    const uint shift = 126u - e;
    const uint q = m >> shift;
    const uint rem = m & ((1u << shift) - 1u);
    const uint half_ulp = 1u << (shift - 1u);
    return sign | (q + ((rem > half_ulp || (rem == half_ulp && (q & 1u) != 0u)) ? 1u : 0u));
  }
  uint r = ax - 0x38000000u;
  const uint rem = r & 0x1FFFu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u) != 0u)) ++r;
  return sign | r;
}

// Four int8 codes of x (as fp32 bits) times inv, packed into one word.
uint quantise4(uint x0, uint x1, uint x2, uint x3, float inv) {
  const vec4 x = uintBitsToFloat(uvec4(x0, x1, x2, x3));
  const ivec4 c = ivec4(clamp(roundEven(x * inv), -127.0, 127.0));
  return uint(c.x & 255) | (uint(c.y & 255) << 8) | (uint(c.z & 255) << 16) | (uint(c.w & 255) << 24);
}

void main() {
  const uint head = gl_WorkGroupID.x, row = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint in0 = (row * pc.kv_heads + head) * pc.head_dim;                    // fp32 index
  const uint slot = (pc.pos0 + row) * pc.kv_heads + head;                       // cache row
  if (pc.q8 == 0u) {
    const uint words = pc.head_dim / 2u;
    for (uint i = tid; i < words; i += WG) {
      k_codes[slot * words + i] = f32_to_f16(k_in[in0 + 2u * i]) | (f32_to_f16(k_in[in0 + 2u * i + 1u]) << 16);
      v_codes[slot * words + i] = f32_to_f16(v_in[in0 + 2u * i]) | (f32_to_f16(v_in[in0 + 2u * i + 1u]) << 16);
    }
    return;
  }
  // |x| as bits orders like |x| for every non-NaN x, and any inf/NaN lands >= 0x7F800000.
  uint mk = 0u, mv = 0u;
  for (uint c = tid; c < pc.head_dim; c += WG) {
    mk = max(mk, k_in[in0 + c] & 0x7FFFFFFFu);
    mv = max(mv, v_in[in0 + c] & 0x7FFFFFFFu);
  }
  amax_k[tid] = mk;
  amax_v[tid] = mv;
  barrier();
  for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (tid < stride) {
      amax_k[tid] = max(amax_k[tid], amax_k[tid + stride]);
      amax_v[tid] = max(amax_v[tid], amax_v[tid + stride]);
    }
    barrier();
  }
  const uint ak = amax_k[0], av = amax_v[0];
  const uint kBits127 = 0x42FE0000u;  // 127.0
  const bool k_ok = ak != 0u && ak < 0x7F800000u, v_ok = av != 0u && av < 0x7F800000u;
  const float k_inv = k_ok ? uintBitsToFloat(div_rn(kBits127, ak)) : 0.0;
  const float v_inv = v_ok ? uintBitsToFloat(div_rn(kBits127, av)) : 0.0;
  const uint words = pc.head_dim / 4u;
  for (uint i = tid; i < words; i += WG) {
    const uint c = in0 + 4u * i;
    k_codes[slot * words + i] =
        k_ok ? quantise4(k_in[c], k_in[c + 1u], k_in[c + 2u], k_in[c + 3u], k_inv) : 0u;
    v_codes[slot * words + i] =
        v_ok ? quantise4(v_in[c], v_in[c + 1u], v_in[c + 2u], v_in[c + 3u], v_inv) : 0u;
  }
  if (tid == 0u) {
    // scale = amax / 127; an all-zero row 0, a row with inf/NaN a quiet NaN.
    k_scale[slot] = ak == 0u ? 0u : (ak >= 0x7F800000u ? 0x7FC00000u : div_rn(ak, kBits127));
    v_scale[slot] = av == 0u ? 0u : (av >= 0x7F800000u ? 0x7FC00000u : div_rn(av, kBits127));
  }
}
