// SPDX-License-Identifier: Apache-2.0
// y = x W^T for one activation row (decode), W the packed int4 matrix of kernels/formats.hpp
// uploaded byte for byte: tiles of 16 rows x G inputs (G = 32, 64 or 128), 64 + 8 G bytes =
// 4 + G / 2 uvec4s each, tile (t, g) at uvec4 (t * n_groups + g) * (4 + G / 2). In a tile:
// uvec4s 0..1 the 16 fp16 scales, uvec4 2 the 16 zero bytes, uvec4 4 + 4 b + i the code words of
// rows 4i..4i+3, inputs 8b..8b+7 (byte j: low nibble input 8b + j, high nibble input 8b + 4 + j).
// w = (q - z) * s, accumulated in fp32.
// One workgroup per TR consecutive 16-row tiles; invocation i takes the groups i, i + WG, ... of
// all TR * 16 rows, so each x value it loads serves TR * 16 rows and each weight load is a uvec4
// (on CPU implementations every buffer load is a per-invocation scalar access: fewer, wider loads
// are what makes the stream fast). Nibbles are unpacked four at a time: the bytes of
// (q & 0x0f0f0f0f) + (16 - z) * 0x01010101 hold q - z + 16 in [1, 31] (no carry between bytes);
// byte j is converted in place (value * 2^8j, exact) and multiplied with x * 2^-8j (exact), so a
// code costs an AND, a conversion and an FMA. The +16 bias is taken out per group as 16 * sum x,
// summed in the same order as the codes, so a group with every q = z gives exactly 0.
// Then a shared-memory sum over the WG partial sums of each row; with EDGELLM_SUBGROUPS (the
// gemv_q4_subgroup.comp build, for devices with subgroup arithmetic) each subgroup first adds
// its lanes (subgroupAdd), so the shared sum runs over one partial per subgroup.
// This file is the body: gemv_q4.comp and gemv_q4_subgroup.comp include it.

layout(constant_id = 0) const uint WG = 64;  // power of two, >= 16; from the device's limits
layout(local_size_x_id = 0) in;

const uint TR = 2u;          // 16-row tiles per workgroup
const uint ROWS = 16u * TR;  // rows per invocation

layout(std430, binding = 0) readonly buffer Weights { uvec4 w[]; };
layout(std430, binding = 1) readonly buffer X { vec4 x[]; };  // [k / 4] from x_offset
layout(std430, binding = 2) writeonly buffer Y { float y[]; };  // [n] from y_offset

layout(push_constant) uniform Push {
  uint n;         // output rows
  uint n_groups;  // k / G
  uint blocks;    // G / 8: code words per row of a tile (G = 32, 64 or 128)
  uint tiles_x;   // workgroups along x of a 2D dispatch (workgroup = y * tiles_x + x)
  uint x_offset;  // vec4s: where x starts in its buffer (a row of a [rows][k] activation)
  uint y_offset;  // floats: where y starts in its buffer
} pc;

shared float partial[ROWS][WG];

void main() {
  const uint tile0 = (gl_WorkGroupID.y * pc.tiles_x + gl_WorkGroupID.x) * TR;
  const uint tid = gl_LocalInvocationID.x;
  const uint n_tiles = (pc.n + 15u) / 16u;
  const uint tile_vecs = 4u + 4u * pc.blocks;  // 64-byte header + 16 rows x G / 2 bytes
  // Byte j of a code word's unpacked nibbles is scaled by 2^8j; x is scaled back by 2^-8j.
  const vec4 unscale = vec4(1.0, 1.0 / 256.0, 1.0 / 65536.0, 1.0 / 16777216.0);
  float acc[ROWS];
  for (uint r = 0u; r < ROWS; ++r) acc[r] = 0.0;
  for (uint g = tid; g < pc.n_groups; g += WG) {
    uint tb[TR];     // first uvec4 of tile (tile0 + t, g); tiles past n read the last one
    uint bias[ROWS];  // (16 - z) in every byte
    for (uint t = 0u; t < TR; ++t) {
      tb[t] = (min(tile0 + t, n_tiles - 1u) * pc.n_groups + g) * tile_vecs;
      const uvec4 zeros = w[tb[t] + 2u];
      for (uint r = 0u; r < 16u; ++r)
        bias[16u * t + r] = (16u - ((zeros[r / 4u] >> (8u * (r % 4u))) & 15u)) * 0x01010101u;
    }
    float sum[ROWS];  // sum of (q - z + 16) x over the group, per row
    for (uint r = 0u; r < ROWS; ++r) sum[r] = 0.0;
    float xsum = 0.0;  // sum of x over the group, in the order of the codes
    for (uint b = 0u; b < pc.blocks; ++b) {
      const uint xi = pc.x_offset + (g * pc.blocks + b) * 2u;
      const vec4 xlo = x[xi], xhi = x[xi + 1u];
      xsum = ((((((((xsum + xlo.x) + xlo.y) + xlo.z) + xlo.w) + xhi.x) + xhi.y) + xhi.z) + xhi.w);
      const vec4 slo = xlo * unscale, shi = xhi * unscale;
      for (uint t = 0u; t < TR; ++t) {
        for (uint i = 0u; i < 4u; ++i) {
          const uvec4 q4 = w[tb[t] + 4u + 4u * b + i];
          for (uint c = 0u; c < 4u; ++c) {
            const uint r = 16u * t + 4u * i + c;
            const uint lo = (q4[c] & 0x0f0f0f0fu) + bias[r];
            const uint hi = ((q4[c] >> 4) & 0x0f0f0f0fu) + bias[r];
            float s = sum[r];
            s = fma(float(int(lo & 0xffu)), slo.x, s);
            s = fma(float(int(lo & 0xff00u)), slo.y, s);
            s = fma(float(int(lo & 0xff0000u)), slo.z, s);
            s = fma(float(int(lo & 0xff000000u)), slo.w, s);
            s = fma(float(int(hi & 0xffu)), shi.x, s);
            s = fma(float(int(hi & 0xff00u)), shi.y, s);
            s = fma(float(int(hi & 0xff0000u)), shi.z, s);
            s = fma(float(int(hi & 0xff000000u)), shi.w, s);
            sum[r] = s;
          }
        }
      }
    }
    for (uint t = 0u; t < TR; ++t) {
      const uvec4 s01 = w[tb[t]], s23 = w[tb[t] + 1u];  // fp16 scales of rows 0..7, 8..15
      for (uint r = 0u; r < 16u; ++r) {
        const uint word = r < 8u ? s01[r / 2u] : s23[(r - 8u) / 2u];
        const float s = unpackHalf2x16(word)[r & 1u];
        acc[16u * t + r] += s * (sum[16u * t + r] - 16.0 * xsum);
      }
    }
  }
#if EDGELLM_SUBGROUPS
  // Each subgroup sums its lanes; its first active lane stores the sum.
  for (uint r = 0u; r < ROWS; ++r) {
    const float s = subgroupAdd(acc[r]);
    if (subgroupElect()) partial[r][gl_SubgroupID] = s;
  }
  const uint parts = gl_NumSubgroups;
#else
  for (uint r = 0u; r < ROWS; ++r) partial[r][tid] = acc[r];
  const uint parts = WG;
#endif
  barrier();
  for (uint r = tid; r < ROWS; r += WG) {  // WG may be below ROWS
    float total = 0.0;
    for (uint i = 0u; i < parts; ++i) total += partial[r][i];
    const uint row = tile0 * 16u + r;
    if (row < pc.n) y[pc.y_offset + row] = total;
  }
}
