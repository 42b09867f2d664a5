// SPDX-License-Identifier: Apache-2.0
// x[r][c] += b[c] for r < rows, c < cols (a linear's bias on each row of its output; exact in
// fp32 like the CPU's). One invocation per element over a 2D grid of workgroups.
#version 450

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) buffer X { float x[]; };           // [rows][cols]
layout(std430, binding = 1) readonly buffer B { float b[]; };  // [cols]

layout(push_constant) uniform Push {
  uint count;  // rows * cols
  uint cols;
} pc;

void main() {
  const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG +
                 gl_LocalInvocationID.x;
  if (i < pc.count) x[i] += b[i % pc.cols];
}
