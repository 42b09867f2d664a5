// SPDX-License-Identifier: Apache-2.0
// y = x W^T for one activation row (decode), W the packed int4 matrix of kernels/formats.hpp
// uploaded byte for byte: tiles of 16 rows x G inputs (G = 32, 64 or 128), 64 + 8 G bytes =
// 16 + 2 G words each, tile (t, g) at word (t * n_groups + g) * (16 + 2 G). In a tile: words
// 0..7 the 16 fp16 scales, words 8..11
// the 16 zero bytes, words 16 + 16 b + r the codes of row r, inputs 8b..8b+7 (byte j: low nibble
// input 8b + j, high nibble input 8b + 4 + j). w = (q - z) * s, accumulated in fp32.
// One workgroup per 16-row tile; invocation i takes row i % 16 and the groups i / 16,
// i / 16 + WG / 16, ...: its scale and zero once per group, then the group's 16 code words. The
// 16 invocations of one group read 16 consecutive words per block and share its G x values.
// Then a shared-memory sum over the WG / 16 partial sums of each row.
#version 450

layout(constant_id = 0) const uint WG = 64;  // power of two, >= 16; from the device's limits
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 1) readonly buffer X { vec4 x[]; };  // [k / 4] from x_offset
layout(std430, binding = 2) writeonly buffer Y { float y[]; };  // [n] from y_offset

layout(push_constant) uniform Push {
  uint n;         // output rows
  uint n_groups;  // k / G
  uint blocks;    // G / 8: code words per row of a tile (G = 32, 64 or 128)
  uint tiles_x;   // workgroups along x of a 2D dispatch (tile = y * tiles_x + x)
  uint x_offset;  // vec4s: where x starts in its buffer (a row of a [rows][k] activation)
  uint y_offset;  // floats: where y starts in its buffer
} pc;

shared float partial[WG];

void main() {
  const uint tile = gl_WorkGroupID.y * pc.tiles_x + gl_WorkGroupID.x;
  const uint tid = gl_LocalInvocationID.x;
  const uint r = tid % 16u;
  float acc = 0.0;
  if (tile * 16u < pc.n) {
    const uint tile_words = 16u + 16u * pc.blocks;  // 64-byte header + 16 rows x G / 2 bytes
    const uint base = tile * pc.n_groups * tile_words;
    for (uint g = tid / 16u; g < pc.n_groups; g += WG / 16u) {
      const uint tw = base + g * tile_words;
      const float s = unpackHalf2x16(w[tw + (r >> 1)])[r & 1u];
      const float z = float((w[tw + 8u + (r >> 2)] >> (8u * (r & 3u))) & 15u);
      float group_sum = 0.0;  // sum of (q - z) x over the group's G inputs
      for (uint b = 0u; b < pc.blocks; ++b) {
        const uint q = w[tw + 16u + 16u * b + r];
        const uint xi = pc.x_offset + g * 2u * pc.blocks + 2u * b;
        const vec4 qlo = vec4(q & 15u, (q >> 8) & 15u, (q >> 16) & 15u, (q >> 24) & 15u);
        const vec4 qhi = vec4((q >> 4) & 15u, (q >> 12) & 15u, (q >> 20) & 15u, (q >> 28) & 15u);
        group_sum += dot(qlo - z, x[xi]) + dot(qhi - z, x[xi + 1u]);
      }
      acc += s * group_sum;
    }
  }
  partial[tid] = acc;
  barrier();
  for (uint stride = WG / 2u; stride >= 16u; stride /= 2u) {
    if (tid < stride) partial[tid] += partial[tid + stride];
    barrier();
  }
  const uint row = tile * 16u + tid;
  if (tid < 16u && row < pc.n) y[pc.y_offset + row] = partial[tid];
}
