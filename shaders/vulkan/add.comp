// SPDX-License-Identifier: Apache-2.0
// x[i] += y[i] for i < count (the residual add, kernels::add; exact in fp32 like the CPU's).
// One invocation per element over a 2D grid of workgroups.
#version 450

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) buffer X { float x[]; };           // [count]
layout(std430, binding = 1) readonly buffer Y { float y[]; };  // [count]

layout(push_constant) uniform Push { uint count; } pc;

void main() {
  const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG +
                 gl_LocalInvocationID.x;
  if (i < pc.count) x[i] += y[i];
}
