// SPDX-License-Identifier: Apache-2.0
// RMSNorm of rows [r0, r1) of x [rows][cols] fp32 (kernels::rms_norm's math):
//   out[r][c] = (x[r][c] * inv) * w[c],  inv = 1 / sqrt(sum(x[r]^2) / cols + eps).
// One workgroup per row (row = r0 + linear workgroup id of a 2D grid); invocation i sums the
// squares of columns i, i + WG, ... in fp32, then a shared-memory tree sum. out may alias x: each
// invocation writes only the columns it read, after the sum.
#version 450

layout(constant_id = 0) const uint WG = 64;  // power of two; from the device's limits
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };  // [rows][cols]
layout(std430, binding = 1) readonly buffer W { float w[]; };  // [cols]
layout(std430, binding = 2) buffer Out { float o[]; };         // [rows][cols]

layout(push_constant) uniform Push {
  uint cols;
  uint r0;   // first row
  uint r1;   // one past the last row
  float eps;
} pc;

shared float partial[WG];

void main() {
  const uint row = pc.r0 + gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (row >= pc.r1) return;  // the partial last line of a 2D grid: uniform per workgroup
  const uint tid = gl_LocalInvocationID.x;
  const uint base = row * pc.cols;
  float ss = 0.0;
  for (uint c = tid; c < pc.cols; c += WG) ss += x[base + c] * x[base + c];
  partial[tid] = ss;
  barrier();
  for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (tid < stride) partial[tid] += partial[tid + stride];
    barrier();
  }
  const float inv = 1.0 / sqrt(partial[0] / float(pc.cols) + pc.eps);
  for (uint c = tid; c < pc.cols; c += WG) o[base + c] = (x[base + c] * inv) * w[c];
}
