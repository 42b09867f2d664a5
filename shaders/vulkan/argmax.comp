// SPDX-License-Identifier: Apache-2.0
// out[row] = the lowest index of the largest of x[row][0 .. n), for rows of x [rows][n] (logits);
// n when any of them is NaN or +inf (a broken model: decode::Sampler's greedy path treats them
// the same way and reports an error). -0 and +0 are equal; -inf is an ordinary value.
// Floats are compared as order-preserving uint keys (exact, free of the device's NaN and
// comparison rules); NaN and +inf get the key 0xffffffff, above every finite value.
// Two passes of this shader over the same buffers:
//   pass 0, grid (groups, rows): workgroup g scans x[row][g chunk .. (g + 1) chunk) and writes
//           its best (key, index) to partial[row][g];
//   pass 1, grid (1, rows): one workgroup reduces partial[row][0 .. groups) (groups <= WG).
#version 450

layout(constant_id = 0) const uint WG = 64;  // power of two; from the device's limits
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };    // [rows][n]
layout(std430, binding = 1) buffer Partial { uvec2 partial[]; };  // [rows][groups] (key, index)
layout(std430, binding = 2) writeonly buffer Out { uint o[]; };  // [rows]

layout(push_constant) uniform Push {
  uint n;
  uint groups;  // pass-0 workgroups per row, <= WG
  uint chunk;   // elements per pass-0 workgroup
  uint pass;
} pc;

const uint BAD = 0xffffffffu;

shared uint keys[WG];
shared uint idxs[WG];

uint key_of(float v) {
  uint b = floatBitsToUint(v);
  if ((b & 0x7fffffffu) > 0x7f800000u || b == 0x7f800000u) return BAD;  // NaN, +inf
  if (b == 0x80000000u) b = 0u;                                          // -0 -> +0
  return (b >> 31) != 0u ? ~b : b | 0x80000000u;
}

// (k2, i2) beats (k1, i1): a larger key, or the same key at a lower index.
bool better(uint k2, uint i2, uint k1, uint i1) { return k2 > k1 || (k2 == k1 && i2 < i1); }

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint row = gl_WorkGroupID.y;
  // Empty slots: key 0 (below every real key, the NaN ones aside), index past every real one.
  uint best_k = 0u, best_i = 0xffffffffu;
  if (pc.pass == 0u) {
    const uint begin = gl_WorkGroupID.x * pc.chunk;
    const uint end = min(pc.n, begin + pc.chunk);
    for (uint i = begin + tid; i < end; i += WG) {
      const uint k = key_of(x[row * pc.n + i]);
      if (k > best_k) {  // increasing i: ties keep the first
        best_k = k;
        best_i = i;
      }
    }
  } else if (tid < pc.groups) {
    const uvec2 p = partial[row * pc.groups + tid];
    best_k = p.x;
    best_i = p.y;
  }
  keys[tid] = best_k;
  idxs[tid] = best_i;
  barrier();
  for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (tid < stride && better(keys[tid + stride], idxs[tid + stride], keys[tid], idxs[tid])) {
      keys[tid] = keys[tid + stride];
      idxs[tid] = idxs[tid + stride];
    }
    barrier();
  }
  if (tid != 0u) return;
  if (pc.pass == 0u)
    partial[row * pc.groups + gl_WorkGroupID.x] = uvec2(keys[0], idxs[0]);
  else
    o[row] = keys[0] == BAD ? pc.n : idxs[0];
}
