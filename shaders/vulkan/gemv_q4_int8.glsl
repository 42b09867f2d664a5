// SPDX-License-Identifier: Apache-2.0
// y = x W^T for one activation row (decode) with int8 activations (W4A8): the CPU fast path's
// math, kernels::reference::gemm_q4_fast. W is the packed int4 matrix of gemv_q4.glsl (same
// buffer, same tiles: byte j of a code word = low nibble input 8b + j, high nibble 8b + 4 + j);
// x comes quantised by quantize_q8.comp (binding 1: q words in input order, then the fp32
// scale dx and the int32 sum of q per group). Per row r and group g:
//   t = sum_{k in g} q[r][k] xq[k] - z[r][g] sum_g xq   (exact int32: |t| <= 15 * 127 * 2 G)
//   y[r] = sum_g float(t) * (s[r][g] * dx[g])           (fp32; fma per group)
// The codes are 0..15, so (word & 0x0f0f0f0f) and ((word >> 4) & 0x0f0f0f0f) are four int8
// lanes each, signed or not: with EDGELLM_INT_DOT (gemv_q4_int8_dot.comp) each pair of words is
// one OpSDotAccSat (SPV_KHR_integer_dot_product, packed 4x8-bit: DP4A-style hardware);
// without, the same sum by four int multiply-adds (any device).
// Work split as gemv_q4.glsl: one workgroup per TR 16-row tiles, invocation i takes the groups
// i, i + WG, ... of all TR * 16 rows; the fp32 partials of each row are summed in shared memory
// (in another order than the CPU's single chain over g: the result differs by fp32 rounding).
// This file is the body: gemv_q4_int8.comp and gemv_q4_int8_dot.comp include it.

layout(constant_id = 0) const uint WG = 64;  // power of two, >= 16; from the device's limits
layout(local_size_x_id = 0) in;

const uint TR = 2u;          // 16-row tiles per workgroup
const uint ROWS = 16u * TR;  // rows per invocation

layout(std430, binding = 0) readonly buffer Weights { uvec4 w[]; };
layout(std430, binding = 1) readonly buffer A { uint a[]; };  // quantize_q8.comp's output
layout(std430, binding = 2) writeonly buffer Y { float y[]; };  // [n] from y_offset

layout(push_constant) uniform Push {
  uint n;         // output rows
  uint n_groups;  // k / G
  uint blocks;    // G / 8: code words per row of a tile (G = 32, 64 or 128)
  uint tiles_x;   // workgroups along x of a 2D dispatch (workgroup = y * tiles_x + x)
  uint y_offset;  // floats: where y starts in its buffer
} pc;

shared float partial[ROWS][WG];

#if EDGELLM_INT_DOT
// OpSDotAccSat (4453) with PackedVectorFormat4x8Bit (0): acc + the dot of the four signed bytes
// of a and b (saturating; |t| stays far below 2^31). Capabilities DotProduct (6019) and
// DotProductInput4x8BitPacked (6018); glslc of 2023 has no GL_EXT_integer_dot_product, so the
// instruction is declared through GL_EXT_spirv_intrinsics.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4453)
int sdot_acc_sat(int a, int b, int acc, spirv_literal int packed_vector_format);
int dot4(uint codes, uint xq, int acc) { return sdot_acc_sat(int(codes), int(xq), acc, 0); }
#else
int dot4(uint codes, uint xq, int acc) {
  const int v = int(xq);
  acc += int(codes & 0xffu) * bitfieldExtract(v, 0, 8);
  acc += int((codes >> 8) & 0xffu) * bitfieldExtract(v, 8, 8);
  acc += int((codes >> 16) & 0xffu) * bitfieldExtract(v, 16, 8);
  acc += int(codes >> 24) * bitfieldExtract(v, 24, 8);
  return acc;
}
#endif

void main() {
  const uint tile0 = (gl_WorkGroupID.y * pc.tiles_x + gl_WorkGroupID.x) * TR;
  const uint tid = gl_LocalInvocationID.x;
  const uint n_tiles = (pc.n + 15u) / 16u;
  const uint tile_vecs = 4u + 4u * pc.blocks;  // 64-byte header + 16 rows x G / 2 bytes
  const uint qwords = pc.n_groups * pc.blocks * 2u;  // q words of x; then scales, then sums
  float acc[ROWS];
  for (uint r = 0u; r < ROWS; ++r) acc[r] = 0.0;
  for (uint g = tid; g < pc.n_groups; g += WG) {
    uint tb[TR];  // first uvec4 of tile (tile0 + t, g); tiles past n read the last one
    int zero[ROWS];
    for (uint t = 0u; t < TR; ++t) {
      tb[t] = (min(tile0 + t, n_tiles - 1u) * pc.n_groups + g) * tile_vecs;
      const uvec4 zeros = w[tb[t] + 2u];
      for (uint r = 0u; r < 16u; ++r)
        zero[16u * t + r] = int((zeros[r / 4u] >> (8u * (r % 4u))) & 15u);
    }
    int dot[ROWS];  // sum of q x_q over the group, per row
    for (uint r = 0u; r < ROWS; ++r) dot[r] = 0;
    for (uint b = 0u; b < pc.blocks; ++b) {
      const uint xi = (g * pc.blocks + b) * 2u;
      const uint xlo = a[xi], xhi = a[xi + 1u];  // inputs 8b..8b+3, 8b+4..8b+7 of the group
      for (uint t = 0u; t < TR; ++t) {
        for (uint i = 0u; i < 4u; ++i) {
          const uvec4 q4 = w[tb[t] + 4u + 4u * b + i];
          for (uint c = 0u; c < 4u; ++c) {
            const uint r = 16u * t + 4u * i + c;
            int d = dot4(q4[c] & 0x0f0f0f0fu, xlo, dot[r]);
            dot[r] = dot4((q4[c] >> 4) & 0x0f0f0f0fu, xhi, d);
          }
        }
      }
    }
    const float dx = uintBitsToFloat(a[qwords + g]);
    const int xsum = int(a[qwords + pc.n_groups + g]);
    for (uint t = 0u; t < TR; ++t) {
      const uvec4 s01 = w[tb[t]], s23 = w[tb[t] + 1u];  // fp16 scales of rows 0..7, 8..15
      for (uint r = 0u; r < 16u; ++r) {
        const uint word = r < 8u ? s01[r / 2u] : s23[(r - 8u) / 2u];
        precise const float sdx = unpackHalf2x16(word)[r & 1u] * dx;
        const uint row = 16u * t + r;
        acc[row] = fma(float(dot[row] - zero[row] * xsum), sdx, acc[row]);
      }
    }
  }
  for (uint r = 0u; r < ROWS; ++r) partial[r][tid] = acc[r];
  barrier();
  for (uint r = tid; r < ROWS; r += WG) {  // WG may be below ROWS
    float total = 0.0;
    for (uint i = 0u; i < WG; ++i) total += partial[r][i];
    const uint row = tile0 * 16u + r;
    if (row < pc.n) y[pc.y_offset + row] = total;
  }
}
