// SPDX-License-Identifier: Apache-2.0
// Causal GQA attention over the device KV cache (backend/vulkan/kv_cache.hpp), the math of
// cache/dense_kv_cache.hpp in fp32: query row t (position p = first_pos + t), head h, kv head
// g = h / (heads / kv_heads):
//   s_j = dot(q * scale, k_j) [* ks_j]   j = 0 .. p      (ks_j: int8 key scale)
//   out = sum_j exp(s_j - M) [vs_j] v_j / sum_j exp(s_j - M)
// One workgroup per (kv head, query row) takes the NH <= GMAX query heads of the kv head's
// group (a group of more than GMAX heads is split over ceil(group / GMAX) workgroups of equal
// size), so each key and value row is loaded once for all of them: gl_WorkGroupID =
// (g * parts + part, t). On CPU implementations every storage-buffer load is a per-invocation
// scalar access, and on GPUs the K/V stream is the cost: loading a row once per group instead of
// once per head divides both by the group size (7 for Qwen2-7B).
// Online softmax over blocks of BLOCK = WG * P positions, so any length runs in fixed shared
// memory. Per block:
//   1. invocation i scores positions i, i + WG, .. (P of them) for every head: each vec4 of a
//      key row is loaded once and dotted with the NH queries; the raw scores go to w;
//   2. the block's max per head: each invocation's max, then (EDGELLM_SUBGROUPS) subgroupMax
//      and one shared slot per subgroup, else one shared slot per invocation; the running max M
//      moves to it and everything summed so far is rescaled by alpha = exp(M_old - M_new);
//   3. each invocation turns its own scores into weights exp(s - M) (and adds them to its own
//      running denominator: no reduction per block), [* vs_j] into w;
//   4. the weighted sum of values: the WG invocations form `sets` of head_dim / 4 (one vec4 of
//      coordinates each); set s takes the block's positions s, s + sets, .. for every head.
// Two barriers per block: w and the max slots alternate between two halves by block parity, so
// block b + 2 rewrites a half only after every invocation passed block b + 1's barriers. At the
// end the invocations' denominators and the sets' partial sums are added (in that order).
// With EDGELLM_STORAGE (devices with 8- and 16-bit storage) the codes load as i8vec4 / f16vec4
// and convert in one instruction; else as uint words, unpacked with bitfieldExtract /
// unpackHalf2x16.
// This file is the body: attention.comp, attention_subgroup.comp and attention_storage.comp
// include it.

layout(constant_id = 0) const uint WG = 64;  // power of two, >= head_dim / 4
layout(constant_id = 1) const uint P = 4;    // positions per invocation per block
layout(local_size_x_id = 0) in;

const uint MAX_HEAD_DIM = 256u;
const uint QS = MAX_HEAD_DIM / 4u;  // vec4 stride of a head in qs
const uint GMAX = 8u;               // query heads per workgroup
const uint BLOCK = WG * P;          // positions per block

// Codes: [layers][capacity][kv_heads][head_dim] int8 (4 a uint word) or fp16 (2 a word).
#if EDGELLM_STORAGE
layout(std430, binding = 0) readonly buffer KCodesB { i8vec4 k_b[]; };
layout(std430, binding = 0) readonly buffer KCodesH { f16vec4 k_h[]; };
layout(std430, binding = 1) readonly buffer VCodesB { i8vec4 v_b[]; };
layout(std430, binding = 1) readonly buffer VCodesH { f16vec4 v_h[]; };
#else
layout(std430, binding = 0) readonly buffer KCodesB { uint k_b[]; };
layout(std430, binding = 0) readonly buffer KCodesH { uvec2 k_h[]; };
layout(std430, binding = 1) readonly buffer VCodesB { uint v_b[]; };
layout(std430, binding = 1) readonly buffer VCodesH { uvec2 v_h[]; };
#endif
layout(std430, binding = 2) readonly buffer KScale { float k_scale[]; };  // [layers][capacity][kv_heads] (int8)
layout(std430, binding = 3) readonly buffer VScale { float v_scale[]; };
layout(std430, binding = 4) readonly buffer Q { vec4 q[]; };     // [rows][heads][head_dim / 4]
layout(std430, binding = 5) writeonly buffer Out { vec4 o[]; };  // [rows][heads][head_dim / 4]

layout(push_constant) uniform Push {
  uint pos0;       // layer * capacity: the cache position of the layer's position 0
  uint first_pos;  // position of query row 0
  uint heads;
  uint kv_heads;
  uint head_dim;   // a multiple of 4, <= MAX_HEAD_DIM
  uint q8;         // 1: int8 codes + scales, 0: fp16
  float scale;     // cache::attention_scale(head_dim)
} pc;

shared vec4 qs[GMAX * QS];           // [GMAX][QS] q * scale; at the end the output sums
shared float w[2u * GMAX * BLOCK];   // [parity][GMAX][BLOCK] scores, then weights
shared float red[2u * GMAX * WG];    // [parity][GMAX][WG] maxima (per invocation or subgroup)

// Coordinates 4i .. 4i + 3 of cache row `row` (row = position * kv_heads + kv head).
vec4 load4(bool key, uint row, uint i) {
  const uint at = row * (pc.head_dim / 4u) + i;
#if EDGELLM_STORAGE
  if (pc.q8 != 0u) return vec4(ivec4(key ? k_b[at] : v_b[at]));
  return vec4(key ? k_h[at] : v_h[at]);
#else
  if (pc.q8 != 0u) {
    const int word = int(key ? k_b[at] : v_b[at]);
    return vec4(bitfieldExtract(word, 0, 8), bitfieldExtract(word, 8, 8),
                bitfieldExtract(word, 16, 8), bitfieldExtract(word, 24, 8));
  }
  const uvec2 words = key ? k_h[at] : v_h[at];
  return vec4(unpackHalf2x16(words.x), unpackHalf2x16(words.y));
#endif
}

void main() {
  const uint tid = gl_LocalInvocationID.x, t = gl_WorkGroupID.y;
  const uint group = pc.heads / pc.kv_heads;
  const uint parts = (group + GMAX - 1u) / GMAX, per = (group + parts - 1u) / parts;
  const uint g = gl_WorkGroupID.x / parts, part = gl_WorkGroupID.x % parts;
  const uint h0 = g * group + part * per;        // the workgroup's first query head
  const uint nh = min(per, group - part * per);  // and its number of heads, 1 .. GMAX
  const uint pos = pc.first_pos + t;
  const uint qw = pc.head_dim / 4u;  // vec4s per row
  const float neg_inf = uintBitsToFloat(0xFF800000u);
  for (uint i = tid; i < nh * qw; i += WG)
    qs[(i / qw) * QS + i % qw] = q[(t * pc.heads + h0) * qw + i] * pc.scale;
  barrier();

  const uint sets = WG / qw, set = tid / qw, lane = tid % qw;
  float m_run[GMAX], l_run[GMAX];  // running max (uniform) and this invocation's denominator
  vec4 acc[GMAX];                  // this invocation's share of the output (sets < WG / qw: 0)
  for (uint h = 0u; h < GMAX; ++h) {
    m_run[h] = neg_inf;
    l_run[h] = 0.0;
    acc[h] = vec4(0.0);
  }
  uint half_ = 0u;
  for (uint j0 = 0u; j0 <= pos; j0 += BLOCK, half_ ^= 1u) {
    const uint n = min(BLOCK, pos + 1u - j0);
    const uint wb = half_ * GMAX * BLOCK, rb = half_ * GMAX * WG;
    // 1. scores
    float mx[GMAX];
    for (uint h = 0u; h < GMAX; ++h) mx[h] = neg_inf;
    for (uint k = 0u; k < P; ++k) {
      const uint j = k * WG + tid;
      if (j < n) {  // (a branch, not a select: row is past the cache for j >= n)
        const uint row = (pc.pos0 + j0 + j) * pc.kv_heads + g;
        float d[GMAX];
        for (uint h = 0u; h < GMAX; ++h) d[h] = 0.0;
        for (uint i = 0u; i < qw; ++i) {
          const vec4 kv = load4(true, row, i);
          for (uint h = 0u; h < GMAX; ++h)
            if (h < nh) d[h] += dot(qs[h * QS + i], kv);
        }
        const float ks = pc.q8 != 0u ? k_scale[row] : 1.0;
        for (uint h = 0u; h < GMAX; ++h) {
          if (h < nh) {
            w[wb + h * BLOCK + j] = d[h] * ks;
            mx[h] = max(mx[h], d[h] * ks);
          }
        }
      }
    }
    // 2. the block's max
#if EDGELLM_SUBGROUPS
    for (uint h = 0u; h < GMAX; ++h) {
      if (h < nh) {
        const float m = subgroupMax(mx[h]);
        if (subgroupElect()) red[rb + h * WG + gl_SubgroupID] = m;
      }
    }
    const uint slots = gl_NumSubgroups;
#else
    for (uint h = 0u; h < GMAX; ++h)
      if (h < nh) red[rb + h * WG + tid] = mx[h];
    const uint slots = WG;
#endif
    barrier();
    float alpha[GMAX];
    for (uint h = 0u; h < GMAX; ++h) {
      alpha[h] = 0.0;
      if (h < nh) {
        float m = m_run[h];
        for (uint r = 0u; r < slots; ++r) m = max(m, red[rb + h * WG + r]);
        alpha[h] = j0 == 0u ? 0.0 : exp(m_run[h] - m);
        m_run[h] = m;
      }
    }
    // 3. weights (each invocation rewrites only its own positions: no barrier before)
    float lsum[GMAX];
    for (uint h = 0u; h < GMAX; ++h) lsum[h] = 0.0;
    for (uint k = 0u; k < P; ++k) {
      const uint j = k * WG + tid;
      if (j < n) {
        const float vs = pc.q8 != 0u ? v_scale[(pc.pos0 + j0 + j) * pc.kv_heads + g] : 1.0;
        for (uint h = 0u; h < GMAX; ++h) {
          if (h < nh) {
            const float e = exp(w[wb + h * BLOCK + j] - m_run[h]);
            lsum[h] += e;
            w[wb + h * BLOCK + j] = e * vs;
          }
        }
      }
    }
    for (uint h = 0u; h < GMAX; ++h) {
      l_run[h] = l_run[h] * alpha[h] + lsum[h];
      acc[h] *= alpha[h];
    }
    barrier();
    // 4. values
    if (set < sets) {
      for (uint j = set; j < n; j += sets) {
        const vec4 v = load4(false, (pc.pos0 + j0 + j) * pc.kv_heads + g, lane);
        for (uint h = 0u; h < GMAX; ++h)
          if (h < nh) acc[h] += w[wb + h * BLOCK + j] * v;
      }
    }
  }
  // Every invocation is past the last block's second barrier: done with qs and red.
#if EDGELLM_SUBGROUPS
  for (uint h = 0u; h < GMAX; ++h) {
    if (h < nh) {
      const float l = subgroupAdd(l_run[h]);
      if (subgroupElect()) red[h * WG + gl_SubgroupID] = l;
    }
  }
  const uint slots = gl_NumSubgroups;
#else
  for (uint h = 0u; h < GMAX; ++h)
    if (h < nh) red[h * WG + tid] = l_run[h];
  const uint slots = WG;
#endif
  for (uint s = 0u; s < sets; ++s) {  // the sets' partial sums, in set order
    if (set == s) {
      for (uint h = 0u; h < GMAX; ++h)
        if (h < nh) qs[h * QS + lane] = s == 0u ? acc[h] : qs[h * QS + lane] + acc[h];
    }
    barrier();
  }
  for (uint i = tid; i < nh * qw; i += WG) {
    const uint h = i / qw;
    float l = 0.0;
    for (uint r = 0u; r < slots; ++r) l += red[h * WG + r];
    o[(t * pc.heads + h0) * qw + i] = qs[h * QS + i % qw] / l;
  }
}
