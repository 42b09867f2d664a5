// SPDX-License-Identifier: Apache-2.0
// y[j][r] = sum_c x[j][c] W[r][c] for the m (<= 8) rows j of x and the n rows r of a dense fp16
// W [n][k] (kernels::DenseMatrix's row-major layout, uploaded byte for byte; the lm_head path).
// fp16 is decoded exactly with integer operations (no fp16 arithmetic or storage feature, no
// flushing of subnormal weights), products accumulated in fp32.
// One workgroup per output row r (a 2D grid for n beyond maxComputeWorkGroupCount[0]);
// invocation i takes W's words i, i + WG, ... of the row (2 elements each when k is even, so
// every row starts on a word; elementwise addressing otherwise), then a shared-memory tree sum
// of the m partial sums.
#version 450

layout(constant_id = 0) const uint WG = 64;  // power of two, >= 8; from the device's limits
layout(local_size_x_id = 0) in;

const uint MAX_M = 8u;

layout(std430, binding = 0) readonly buffer Wt { uint w[]; };   // [n][k] fp16, 2 per word
layout(std430, binding = 1) readonly buffer X { float x[]; };   // [..][k], rows from x_offset
layout(std430, binding = 2) writeonly buffer Y { float y[]; };  // [..][n], rows from y_offset

layout(push_constant) uniform Push {
  uint n;
  uint k;
  uint m;         // rows of x, 1 .. MAX_M
  uint x_offset;  // floats: the first row's start in x
  uint y_offset;  // floats: the first row's start in y
} pc;

shared float partial[MAX_M * WG];  // [m][WG]

// fp16 bits -> fp32, exact: (implicit bit + mantissa) times a normal power of two.
float f16_to_f32(uint h) {
  const uint e = (h >> 10) & 31u, m = h & 1023u;
  const uint sign = (h & 0x8000u) << 16;
  if (e == 31u) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
  const float mag = float(m | (e != 0u ? 1024u : 0u)) * uintBitsToFloat((max(e, 1u) + 102u) << 23);
  return uintBitsToFloat(sign | floatBitsToUint(mag));
}

void main() {
  const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (row >= pc.n) return;  // uniform per workgroup
  const uint tid = gl_LocalInvocationID.x;
  float acc[MAX_M];
  for (uint j = 0u; j < MAX_M; ++j) acc[j] = 0.0;
  if ((pc.k & 1u) == 0u) {
    const uint half_k = pc.k / 2u;
    const uint wbase = row * half_k;
    for (uint p = tid; p < half_k; p += WG) {
      const uint word = w[wbase + p];
      const float w0 = f16_to_f32(word & 0xffffu), w1 = f16_to_f32(word >> 16);
      for (uint j = 0u; j < MAX_M; ++j) {
        if (j < pc.m) {
          const uint xi = pc.x_offset + j * pc.k + 2u * p;
          acc[j] += x[xi] * w0 + x[xi + 1u] * w1;
        }
      }
    }
  } else {
    for (uint c = tid; c < pc.k; c += WG) {
      const uint e = row * pc.k + c;
      const uint word = w[e >> 1];
      const float wv = f16_to_f32((e & 1u) != 0u ? word >> 16 : word & 0xffffu);
      for (uint j = 0u; j < MAX_M; ++j)
        if (j < pc.m) acc[j] += x[pc.x_offset + j * pc.k + c] * wv;
    }
  }
  for (uint j = 0u; j < MAX_M; ++j) partial[j * WG + tid] = acc[j];
  barrier();
  for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (tid < stride)
      for (uint j = 0u; j < MAX_M; ++j)
        if (j < pc.m) partial[j * WG + tid] += partial[j * WG + tid + stride];
    barrier();
  }
  if (tid < pc.m) y[pc.y_offset + tid * pc.n + row] = partial[tid * WG];
}
