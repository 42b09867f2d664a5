// SPDX-License-Identifier: Apache-2.0
// RoPE (rotate_half, kernels::rope with kernels::rope_tables' angles) in place on
// v [rows][heads][head_dim] for positions first_pos + t:
//   angle = float(first_pos + t) * inv_freq[i]   (one fp32 product, as HF and the CPU)
//   v[i] = a cos - b sin,  v[i + half] = b cos + a sin   (a = v[i], b = v[i + half]).
// One invocation per pair (t, h, i). sin / cos are computed here, not by the GLSL built-ins,
// whose Vulkan precision is only 2^-11 absolute and only inside [-pi, pi]: a Cody-Waite
// reduction by pi/2 (a 4-part split, the first three parts 7 bits or fewer so that k * part is
// exact for k < 2^17) and Taylor polynomials on [-pi/4, pi/4] (next terms < 2e-9). So the angles
// of positions up to ~2e5 (at inv_freq <= 1) get sin / cos within ~1e-7 of the true values.
#version 450

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) buffer V { float v[]; };                  // [rows][heads][head_dim]
layout(std430, binding = 1) readonly buffer Freq { float inv_freq[]; };  // [head_dim / 2]

layout(push_constant) uniform Push {
  uint rows;
  uint heads;
  uint half_dim;   // head_dim / 2
  uint first_pos;
} pc;

// pi/2 = P1 + P2 + P3 + P4 (to 5e-15); P1..P3 have <= 7 significant bits.
const float P1 = 1.5625;
const float P2 = 0.0081787109375;
const float P3 = 0.00011730194091796875;
const float P4 = 3.1391647326017846e-07;
const float TWO_OVER_PI = 0.6366197466850281;

void sin_cos(float a, out float s, out float c) {
  const float k = roundEven(a * TWO_OVER_PI);
  // precise: no reassociation or fused contraction that would undo the exact first steps.
  precise float r = a - k * P1;
  r = r - k * P2;
  r = r - k * P3;
  r = r - k * P4;
  const float r2 = r * r;
  const float sr = r + r * r2 * (-1.0 / 6.0 + r2 * (1.0 / 120.0 + r2 * (-1.0 / 5040.0 +
                                                                       r2 * (1.0 / 362880.0))));
  const float cr = 1.0 - 0.5 * r2 + r2 * r2 * (1.0 / 24.0 + r2 * (-1.0 / 720.0 + r2 *
                                               (1.0 / 40320.0 + r2 * (-1.0 / 3628800.0))));
  const uint q = uint(int(k)) & 3u;  // angle = r + q pi/2 (mod 2 pi)
  s = q == 0u ? sr : q == 1u ? cr : q == 2u ? -sr : -cr;
  c = q == 0u ? cr : q == 1u ? -sr : q == 2u ? -cr : sr;
}

void main() {
  const uint p = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG +
                 gl_LocalInvocationID.x;
  const uint per_row = pc.heads * pc.half_dim;
  if (p >= pc.rows * per_row) return;
  const uint t = p / per_row;
  const uint h = (p % per_row) / pc.half_dim;
  const uint i = p % pc.half_dim;
  const float angle = float(pc.first_pos + t) * inv_freq[i];
  float s, c;
  sin_cos(angle, s, c);
  const uint base = (t * pc.heads + h) * 2u * pc.half_dim;
  const float a = v[base + i], b = v[base + i + pc.half_dim];
  v[base + i] = a * c - b * s;
  v[base + i + pc.half_dim] = b * c + a * s;
}
