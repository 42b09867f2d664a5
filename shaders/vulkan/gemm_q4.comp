// SPDX-License-Identifier: Apache-2.0
// Y = X W^T for m activation rows (prefill), W the packed int4 matrix of kernels/formats.hpp in
// the layout gemv_q4.comp reads (tiles of 16 rows x G inputs, G = 32, 64 or 128, 16 + 2 G words
// each, tile (t, g) at word (t * n_groups + g) * (16 + 2 G): fp16 scales in words 0..7, zero bytes in words 8..11, codes
// of row r for inputs 8b..8b+7 in word 16 + 16 b + r). w = (q - z) * s, fp32 accumulation:
// per group sum_c (q_c - z) x_c, then acc += s * group_sum.
// One workgroup per (16-row weight tile, MT activation rows): each weight word is unpacked once
// and used for the MT rows, so a tile is read ceil(m / MT) times instead of m. Invocation i
// takes weight row i % 16 and the groups i / 16, i / 16 + WG / 16, ...; the WG / 16 partial sums
// of each (row, activation row) are added in shared memory. Rows of the last activation tile
// past m, and weight rows past n, are computed on clamped indices and not written.
#version 450

layout(constant_id = 0) const uint WG = 64;  // power of two, >= 16
layout(local_size_x_id = 0) in;

const uint MT = 8u;  // activation rows per workgroup

layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 1) readonly buffer X { vec4 x[]; };    // [m][k / 4]
layout(std430, binding = 2) writeonly buffer Y { float y[]; };  // [m][n]

layout(push_constant) uniform Push {
  uint n;         // output columns (weight rows)
  uint n_groups;  // k / G
  uint blocks;    // G / 8: code words per row of a tile (G = 32, 64 or 128)
  uint m;         // activation rows
} pc;

shared float partial[MT][WG];

void main() {
  const uint tile = gl_WorkGroupID.x;
  const uint m0 = gl_WorkGroupID.y * MT;
  const uint tid = gl_LocalInvocationID.x;
  const uint r = tid % 16u;
  const uint k4 = pc.n_groups * 2u * pc.blocks;  // vec4s per activation row
  // Activation rows past m read row m - 1 (in bounds; their results are dropped).
  uint xrow[MT];
  for (uint i = 0u; i < MT; ++i) xrow[i] = min(m0 + i, pc.m - 1u) * k4;
  float acc[MT];
  for (uint i = 0u; i < MT; ++i) acc[i] = 0.0;
  const uint tile_words = 16u + 16u * pc.blocks;  // 64-byte header + 16 rows x G / 2 bytes
  const uint base = tile * pc.n_groups * tile_words;
  for (uint g = tid / 16u; g < pc.n_groups; g += WG / 16u) {
    const uint tw = base + g * tile_words;
    const float s = unpackHalf2x16(w[tw + (r >> 1)])[r & 1u];
    const float z = float((w[tw + 8u + (r >> 2)] >> (8u * (r & 3u))) & 15u);
    float gsum[MT];
    for (uint i = 0u; i < MT; ++i) gsum[i] = 0.0;
    for (uint b = 0u; b < pc.blocks; ++b) {
      const uint q = w[tw + 16u + 16u * b + r];
      const vec4 lo = vec4(q & 15u, (q >> 8) & 15u, (q >> 16) & 15u, (q >> 24) & 15u) - z;
      const vec4 hi = vec4((q >> 4) & 15u, (q >> 12) & 15u, (q >> 20) & 15u, (q >> 28) & 15u) - z;
      const uint xi = g * 2u * pc.blocks + 2u * b;
      for (uint i = 0u; i < MT; ++i)
        gsum[i] += dot(lo, x[xrow[i] + xi]) + dot(hi, x[xrow[i] + xi + 1u]);
    }
    for (uint i = 0u; i < MT; ++i) acc[i] += s * gsum[i];
  }
  for (uint i = 0u; i < MT; ++i) partial[i][tid] = acc[i];
  barrier();
  for (uint stride = WG / 2u; stride >= 16u; stride /= 2u) {
    if (tid < stride)
      for (uint i = 0u; i < MT; ++i) partial[i][tid] += partial[i][tid + stride];
    barrier();
  }
  // Output o = 16 i + j: weight row j of activation row i.
  for (uint o = tid; o < 16u * MT; o += WG) {
    const uint row = tile * 16u + (o % 16u), i = o / 16u;
    if (row < pc.n && m0 + i < pc.m) y[(m0 + i) * pc.n + row] = partial[i][o % 16u];
  }
}
