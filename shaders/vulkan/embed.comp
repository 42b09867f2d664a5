// SPDX-License-Identifier: Apache-2.0
// out[t][c] = table[ids[t]][c] as fp32 for t < count, c < cols: the embedding lookup from a
// kernels::DenseMatrix table [n_rows][cols] uploaded byte for byte (fp32, fp16 or bf16), decoded
// exactly with integer operations (DenseMatrix::row's values, bit for bit). An id outside
// [0, n_rows) gives a row of NaN, so a bad id cannot pass for a token (argmax then reports n).
// One invocation per output element over a 2D grid.
#version 450

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer Table { uint table[]; };  // [n_rows][cols] elements
layout(std430, binding = 1) readonly buffer Ids { int ids[]; };       // [count]
layout(std430, binding = 2) writeonly buffer Out { float o[]; };      // [count][cols]

layout(push_constant) uniform Push {
  uint cols;
  uint count;
  uint n_rows;
  uint type;  // 0 fp32, 1 fp16, 2 bf16 (kernels::DenseType's order)
} pc;

float f16_to_f32(uint h) {
  const uint e = (h >> 10) & 31u, m = h & 1023u;
  const uint sign = (h & 0x8000u) << 16;
  if (e == 31u) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
  const float mag = float(m | (e != 0u ? 1024u : 0u)) * uintBitsToFloat((max(e, 1u) + 102u) << 23);
  return uintBitsToFloat(sign | floatBitsToUint(mag));
}

void main() {
  const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG +
                 gl_LocalInvocationID.x;
  if (i >= pc.count * pc.cols) return;
  const uint t = i / pc.cols, c = i % pc.cols;
  const int id = ids[t];
  if (id < 0 || uint(id) >= pc.n_rows) {
    o[i] = uintBitsToFloat(0x7fc00000u);  // quiet NaN
    return;
  }
  const uint e = uint(id) * pc.cols + c;
  if (pc.type == 0u) {
    o[i] = uintBitsToFloat(table[e]);
  } else {
    const uint word = table[e >> 1];
    const uint h = (e & 1u) != 0u ? word >> 16 : word & 0xffffu;
    o[i] = pc.type == 1u ? f16_to_f32(h) : uintBitsToFloat(h << 16);
  }
}
