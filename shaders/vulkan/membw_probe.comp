// SPDX-License-Identifier: Apache-2.0
// Bandwidth probe: every invocation reads uvec4s of a buffer with a grid stride and folds them
// into one word per workgroup, so the reads cannot be optimised away. Bytes read / time is the
// device's streaming read bandwidth, the ceiling the GEMV shaders are measured against.
#version 450

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer Src { uvec4 src[]; };
layout(std430, binding = 1) writeonly buffer Dst { uint dst[]; };  // [workgroups]

layout(push_constant) uniform Push {
  uint count;    // uvec4s in src
  uint threads;  // invocations in the dispatch
} pc;

shared uint folded[WG];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  uvec4 acc = uvec4(0);
  for (uint i = gl_GlobalInvocationID.x; i < pc.count; i += pc.threads) acc ^= src[i];
  folded[tid] = acc.x ^ acc.y ^ acc.z ^ acc.w;
  barrier();
  for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (tid < stride) folded[tid] ^= folded[tid + stride];
    barrier();
  }
  if (tid == 0u) dst[gl_WorkGroupID.x] = folded[0];
}
