// SPDX-License-Identifier: Apache-2.0
// Activations to int8 per group of G inputs for the W4A8 GEMV (gemv_q4_int8.glsl), bit for bit
// the CPU's kernels::reference::quantize_activations_q8: amax = max |x| over the group,
// inv = 127 / amax (0 when amax = 0), q = roundEven(x * inv), scale = amax / 127, sum = sum q;
// a group holding a NaN or an infinity gets q = 0, sum = 0 and scale = the quiet NaN 0x7fc00000.
// Exactness: amax is taken on the bit patterns (|x| orders as its unsigned bits, so denormal
// modes and NaN-max rules do not enter); both divisions run in integer arithmetic with
// round-to-nearest-even (Vulkan only bounds OpFDiv to 2.5 ulp); x * inv is one correctly
// rounded fp32 multiply (`precise`, so it is neither fused nor reassociated). The one
// difference left is a device that flushes denormal x in x * inv (the CPU does not).
// One workgroup per group; invocation i packs the words i, i + WG, ... of the group.
// Output, one uint array (the GEMV's binding 1):
//   [0, k / 4)                 q: word 2b + h of group g holds inputs 8b + 4h .. 8b + 4h + 3 of
//                              the group, byte j = input 8b + 4h + j (int8, two's complement):
//                              the input order, which pairs word 2b with the low nibbles of
//                              code block b and word 2b + 1 with its high nibbles
//   [k / 4, k / 4 + ng)        scale: fp32 bits of amax / 127 per group
//   [k / 4 + ng, k / 4 + 2 ng) sum of the group's q (int32)
#version 450

layout(constant_id = 0) const uint WG = 32;  // power of two; from the device's limits
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { uint x[]; };  // fp32 bits [k] from x_offset
layout(std430, binding = 1) writeonly buffer A { uint a[]; };  // see above

layout(push_constant) uniform Push {
  uint n_groups;  // k / G
  uint group;     // G: 32, 64 or 128
  uint x_offset;  // floats: where x starts in its buffer (a row of a [rows][k] activation)
} pc;

shared uint red[WG];

// Exponent field and 24-bit significand (implicit bit set) of a positive finite fp32, with a
// denormal normalised so that bit 23 is set and the exponent goes below 1.
void unpack_positive(uint bits, out int e, out uint m) {
  e = int(bits >> 23);
  m = bits & 0x7fffffu;
  if (e == 0) {
    const int s = 23 - findMSB(m);
    m <<= uint(s);
    e = 1 - s;
  } else {
    m |= 0x800000u;
  }
}

// fp32 bits of a / b rounded to nearest even, for positive finite a and b (denormal inputs and
// results included, overflow to +inf): 26 quotient bits by restoring division, then the
// remainder as the sticky bit.
uint div_rn(uint a, uint b) {
  int ea, eb;
  uint ma, mb;
  unpack_positive(a, ea, ma);
  unpack_positive(b, eb, mb);
  int e = ea - eb + 127;  // biased exponent of the quotient, with ma >= mb
  if (ma < mb) {
    ma <<= 1;
    e -= 1;
  }
  uint q = 0u, rem = ma;  // rem < 2 mb < 2^25 throughout
  for (int i = 0; i < 26; ++i) {
    q <<= 1;
    if (rem >= mb) {
      rem -= mb;
      q |= 1u;
    }
    rem <<= 1;
  }
  // a / b = (q + rem / mb) * 2^(e - 152), q in [2^25, 2^26).
  if (e >= 255) return 0x7f800000u;
  const uint shift = uint(min(e >= 1 ? 2 : 3 - e, 30));  // to 24 bits, or to a denormal
  uint mant = q >> shift;
  const uint halfway = 1u << (shift - 1u);
  const uint low = q & ((halfway << 1) - 1u);
  if (low > halfway || (low == halfway && (rem != 0u || (mant & 1u) != 0u))) mant += 1u;
  // A normal result adds its exponent to the significand (a carry out of it moves the
  // exponent up, to +inf at the top); a denormal one is its significand.
  if (e < 1) return mant;
  return (uint(e - 1) << 23) + mant;
}

void main() {
  const uint g = gl_WorkGroupID.x;
  const uint tid = gl_LocalInvocationID.x;
  const uint words = pc.group / 4u;
  const uint base = pc.x_offset + g * pc.group;
  uint m = 0u;  // max of |x| bits; 0x7f800000 and above: an infinity or a NaN
  for (uint i = tid; i < words; i += WG)
    for (uint j = 0u; j < 4u; ++j) m = max(m, x[base + 4u * i + j] & 0x7fffffffu);
  red[tid] = m;
  barrier();
  uint amax = 0u;
  for (uint i = 0u; i < WG; ++i) amax = max(amax, red[i]);
  barrier();  // every invocation has read red before it is reused for the sums
  const bool finite = amax < 0x7f800000u;
  const float inv = finite && amax != 0u ? uintBitsToFloat(div_rn(0x42fe0000u, amax)) : 0.0;
  int sum = 0;
  for (uint i = tid; i < words; i += WG) {
    uint packed = 0u;
    for (uint j = 0u; j < 4u; ++j) {
      precise float p = uintBitsToFloat(x[base + 4u * i + j]) * inv;
      const int q = finite ? int(roundEven(p)) : 0;
      sum += q;
      packed |= (uint(q) & 0xffu) << (8u * j);
    }
    a[g * words + i] = packed;
  }
  red[tid] = uint(sum);
  barrier();
  if (tid == 0u) {
    int total = 0;
    for (uint i = 0u; i < WG; ++i) total += int(red[i]);
    const uint qwords = pc.n_groups * words;
    // amax / 127 (0x42fe0000 = 127.0); amax = 0 gives scale 0 like the CPU's 0 / 127.
    a[qwords + g] = !finite ? 0x7fc00000u : amax == 0u ? 0u : div_rn(amax, 0x42fe0000u);
    a[qwords + pc.n_groups + g] = uint(total);
  }
}
