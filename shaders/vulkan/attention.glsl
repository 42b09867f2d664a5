// SPDX-License-Identifier: Apache-2.0
// Causal GQA attention over the device KV cache (backend/vulkan/kv_cache.hpp), the math of
// cache/dense_kv_cache.hpp in fp32: query row t (position p = first_pos + t), head h, kv head
// g = h / (heads / kv_heads):
//   s_j = dot(q * scale, k_j) [* ks_j]   j = 0 .. p      (ks_j: int8 key scale)
//   out = sum_j exp(s_j - M) [vs_j] v_j / sum_j exp(s_j - M)
// One workgroup per (kv head, query row) takes the NH <= GMAX query heads of the kv head's
// group (a group of more than GMAX heads is split over ceil(group / GMAX) workgroups of equal
// size), so each key and value row is loaded once for all of them: gl_WorkGroupID =
// (g * parts + part, t). On GPUs the K/V stream is the cost, and on CPU implementations every
// storage- or shared-memory load is a per-invocation, per-component scalar access: loading a
// row once per group instead of once per head divides both by the group size (7 for Qwen2-7B).
// Online softmax over blocks of BLOCK = WG * P positions, so any length runs in fixed shared
// memory. Per block:
//   1. invocation i scores positions i, i + WG, .. (P of them) for every head, all P at once:
//      each query vec4 read from shared memory serves P keys; the scores stay in registers;
//   2. the block's max per head: each invocation's max, then (EDGELLM_SUBGROUPS) subgroupMax
//      and one shared slot per subgroup, else one shared slot per invocation; the running max M
//      moves to it and everything summed so far is rescaled by alpha = exp(M_old - M_new);
//   3. each invocation turns its scores into weights exp(s - M) [* vs_j] in w, and adds them to
//      its own running denominator (no reduction per block);
//   4. the weighted sum of values: a set of SPAN = ceil(head_dim / 4 / C) invocations covers a
//      row, invocation i of a set taking the vec4s i, i + SPAN, .. (C of them: each weight read
//      serves C vec4s); set s takes the block's positions s, s + sets, .. for every head.
// Two barriers per block (after 2's slots and after 3's weights): block b + 1 writes the slots
// and w only after its first barrier, which every invocation reaches after block b's reads. At
// the end the invocations' denominators and the sets' partial sums are added (in set order).
// With EDGELLM_STORAGE (devices with 8- and 16-bit storage) the codes load as i8vec4 / f16vec4
// and convert in one instruction; else as uint words, unpacked with bitfieldExtract /
// unpackHalf2x16.
// This file is the body: attention.comp, attention_subgroup.comp and attention_storage.comp
// include it.

layout(constant_id = 0) const uint WG = 64;  // power of two, >= MAX_HEAD_DIM / 4 / C
layout(constant_id = 1) const uint P = 4;    // positions per invocation per block
layout(constant_id = 2) const uint C = 2;    // vec4s of a value row per invocation
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

shared vec4 qs[GMAX * QS];       // [GMAX][QS] q * scale; at the end the output sums
shared float w[GMAX * BLOCK];    // [GMAX][BLOCK] the block's weights
shared float red[GMAX * WG];     // [GMAX][WG] maxima (per invocation or subgroup), then sums

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

  const uint span = (qw + C - 1u) / C, sets = WG / span, set = tid / span, lane = tid % span;
  float m_run[GMAX], l_run[GMAX];  // running max (uniform) and this invocation's denominator
  vec4 acc[C][GMAX];               // this invocation's share of the output: vec4s lane + c span
  for (uint h = 0u; h < GMAX; ++h) {
    m_run[h] = neg_inf;
    l_run[h] = 0.0;
    for (uint c = 0u; c < C; ++c) acc[c][h] = vec4(0.0);
  }
  for (uint j0 = 0u; j0 <= pos; j0 += BLOCK) {
    const uint n = min(BLOCK, pos + 1u - j0);
    // 1. scores. No branch on j < n: positions past n score position n - 1 again and are
    // dropped (every invocation then reads the same query vec4 at once).
    uint rows[P];
    float d[P][GMAX];
    for (uint k = 0u; k < P; ++k) {
      rows[k] = (pc.pos0 + j0 + min(k * WG + tid, n - 1u)) * pc.kv_heads + g;
      for (uint h = 0u; h < GMAX; ++h) d[k][h] = 0.0;
    }
    for (uint i = 0u; i < qw; ++i) {
      vec4 qv[GMAX];
      for (uint h = 0u; h < GMAX; ++h) qv[h] = h < nh ? qs[h * QS + i] : vec4(0.0);
      for (uint k = 0u; k < P; ++k) {
        const vec4 kv = load4(true, rows[k], i);
        for (uint h = 0u; h < GMAX; ++h)
          if (h < nh) d[k][h] += dot(qv[h], kv);
      }
    }
    float mx[GMAX];
    for (uint h = 0u; h < GMAX; ++h) mx[h] = neg_inf;
    for (uint k = 0u; k < P; ++k) {
      const bool valid = k * WG + tid < n;
      const float ks = pc.q8 != 0u ? k_scale[rows[k]] : 1.0;
      for (uint h = 0u; h < GMAX; ++h) {
        d[k][h] = valid ? d[k][h] * ks : neg_inf;
        mx[h] = max(mx[h], d[k][h]);
      }
    }
    // 2. the block's max
#if EDGELLM_SUBGROUPS
    for (uint h = 0u; h < GMAX; ++h) {
      if (h < nh) {
        const float m = subgroupMax(mx[h]);
        if (subgroupElect()) red[h * WG + gl_SubgroupID] = m;
      }
    }
    const uint slots = gl_NumSubgroups;
#else
    for (uint h = 0u; h < GMAX; ++h)
      if (h < nh) red[h * WG + tid] = mx[h];
    const uint slots = WG;
#endif
    barrier();
    float alpha[GMAX];
    for (uint h = 0u; h < GMAX; ++h) {
      alpha[h] = 0.0;
      if (h < nh) {
        float m = m_run[h];
        for (uint r = 0u; r < slots; ++r) m = max(m, red[h * WG + r]);
        alpha[h] = j0 == 0u ? 0.0 : exp(m_run[h] - m);
        m_run[h] = m;
      }
    }
    // 3. weights
    float lsum[GMAX];
    for (uint h = 0u; h < GMAX; ++h) lsum[h] = 0.0;
    for (uint k = 0u; k < P; ++k) {
      const uint j = k * WG + tid;
      if (j < n) {
        const float vs = pc.q8 != 0u ? v_scale[rows[k]] : 1.0;
        for (uint h = 0u; h < GMAX; ++h) {
          if (h < nh) {
            const float e = exp(d[k][h] - m_run[h]);
            lsum[h] += e;
            w[h * BLOCK + j] = e * vs;
          }
        }
      }
    }
    for (uint h = 0u; h < GMAX; ++h) {
      l_run[h] = l_run[h] * alpha[h] + lsum[h];
      for (uint c = 0u; c < C; ++c) acc[c][h] *= alpha[h];
    }
    barrier();
    // 4. values
    if (set < sets) {
      for (uint j = set; j < n; j += sets) {
        const uint row = (pc.pos0 + j0 + j) * pc.kv_heads + g;
        vec4 v[C];
        for (uint c = 0u; c < C; ++c)
          v[c] = lane + c * span < qw ? load4(false, row, lane + c * span) : vec4(0.0);
        for (uint h = 0u; h < GMAX; ++h) {
          if (h < nh) {
            const float wj = w[h * BLOCK + j];
            for (uint c = 0u; c < C; ++c) acc[c][h] += wj * v[c];
          }
        }
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
      for (uint h = 0u; h < GMAX; ++h) {
        if (h < nh) {
          for (uint c = 0u; c < C; ++c) {
            const uint i = lane + c * span;
            if (i < qw) qs[h * QS + i] = s == 0u ? acc[c][h] : qs[h * QS + i] + acc[c][h];
          }
        }
      }
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
