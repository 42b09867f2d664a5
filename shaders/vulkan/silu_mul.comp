// SPDX-License-Identifier: Apache-2.0
// g[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i] for i < count (kernels::silu_mul).
// exp(-g) overflows to +inf for g < -88.7, where the quotient is the correct limit -0.
// One invocation per element over a 2D grid of workgroups.
#version 450

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) buffer G { float g[]; };           // [count]
layout(std430, binding = 1) readonly buffer U { float u[]; };  // [count]

layout(push_constant) uniform Push { uint count; } pc;

void main() {
  const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG +
                 gl_LocalInvocationID.x;
  if (i >= pc.count) return;
  const float v = g[i];
  g[i] = v / (1.0 + exp(-v)) * u[i];
}
