// SPDX-License-Identifier: Apache-2.0
// Causal GQA attention over the device KV cache (backend/vulkan/kv_cache.hpp), the math of
// cache/dense_kv_cache.hpp in fp32: query row t (position p = first_pos + t), head h, kv head
// g = h / (heads / kv_heads):
//   s_j = dot(q * scale, k_j) [* ks_j]   j = 0 .. p      (ks_j: int8 key scale)
//   out = sum_j exp(s_j - M) [vs_j] v_j / sum_j exp(s_j - M)
// computed by online softmax over blocks of WG positions, so any length runs in fixed shared
// memory: per block, invocation i scores position j0 + i; the block's max updates the running
// max M, and the running sum l and output o are rescaled by exp(M_old - M_new). The weighted
// sum of values splits the WG invocations into `sets` of head_dim / 4 (one vec4 of
// coordinates each); set s takes the block's positions s, s + sets, ...; the sets' partial
// sums are added at the end.
// One workgroup per (head, row): gl_WorkGroupID = (h, t).
#version 450

layout(constant_id = 0) const uint WG = 64;  // power of two, >= head_dim / 4
layout(local_size_x_id = 0) in;

const uint MAX_HEAD_DIM = 256u;

layout(std430, binding = 0) readonly buffer KCodes { uint k_codes[]; };  // [layers][capacity][kv_heads][head_dim / per_word]
layout(std430, binding = 1) readonly buffer VCodes { uint v_codes[]; };
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

shared vec4 qs[MAX_HEAD_DIM / 4u];  // q * scale
shared float w[WG];                 // the block's weights exp(s_j - M) [* vs_j]
shared float red[WG];               // reductions
shared vec4 part[WG];               // the sets' output sums

// Coordinates 4i .. 4i + 3 of cache row `row` (row = position * kv_heads + kv head).
vec4 load4(bool key, uint row, uint i) {
  if (pc.q8 != 0u) {
    const int word = int(key ? k_codes[row * (pc.head_dim / 4u) + i] : v_codes[row * (pc.head_dim / 4u) + i]);
    return vec4(bitfieldExtract(word, 0, 8), bitfieldExtract(word, 8, 8),
                bitfieldExtract(word, 16, 8), bitfieldExtract(word, 24, 8));
  }
  const uint at = row * (pc.head_dim / 2u) + 2u * i;
  const uint lo = key ? k_codes[at] : v_codes[at];
  const uint hi = key ? k_codes[at + 1u] : v_codes[at + 1u];
  return vec4(unpackHalf2x16(lo), unpackHalf2x16(hi));
}

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint g = h / (pc.heads / pc.kv_heads);
  const uint pos = pc.first_pos + t;
  const uint qw = pc.head_dim / 4u;  // vec4s per row
  const uint q0 = (t * pc.heads + h) * qw;
  for (uint i = tid; i < qw; i += WG) qs[i] = q[q0 + i] * pc.scale;
  barrier();

  const uint sets = WG / qw, set = tid / qw, lane = tid % qw;
  float m_run = uintBitsToFloat(0xFF800000u);  // -inf
  float l_run = 0.0;
  vec4 acc = vec4(0.0);
  for (uint j0 = 0u; j0 <= pos; j0 += WG) {
    const uint n = min(WG, pos + 1u - j0);
    const uint row = (pc.pos0 + j0 + tid) * pc.kv_heads + g;
    float s = uintBitsToFloat(0xFF800000u);
    if (tid < n) {
      float d = 0.0;
      for (uint i = 0u; i < qw; ++i) d += dot(qs[i], load4(true, row, i));
      s = pc.q8 != 0u ? d * k_scale[row] : d;
    }
    red[tid] = s;
    barrier();
    for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {
      if (tid < stride) red[tid] = max(red[tid], red[tid + stride]);
      barrier();
    }
    const float m_new = max(m_run, red[0]);
    const float alpha = j0 == 0u ? 0.0 : exp(m_run - m_new);
    barrier();  // everyone has read red[0]
    float e = 0.0, we = 0.0;
    if (tid < n) {  // (a branch, not a select: row is past the cache for tid >= n)
      e = exp(s - m_new);
      we = pc.q8 != 0u ? e * v_scale[row] : e;
    }
    red[tid] = e;
    w[tid] = we;
    barrier();
    for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {
      if (tid < stride) red[tid] += red[tid + stride];
      barrier();
    }
    l_run = l_run * alpha + red[0];
    acc *= alpha;
    if (set < sets) {
      for (uint j = set; j < n; j += sets)
        acc += w[j] * load4(false, (pc.pos0 + j0 + j) * pc.kv_heads + g, lane);
    }
    m_run = m_new;
    barrier();  // w and red are rewritten by the next block
  }
  if (set < sets) part[tid] = acc;
  barrier();
  if (tid < qw) {
    vec4 sum = part[tid];
    for (uint k = 1u; k < sets; ++k) sum += part[k * qw + tid];
    o[q0 + tid] = sum / l_run;
  }
}
