// SPDX-License-Identifier: Apache-2.0
// Compiler-warning suppressions shared by several headers, each with the one reason it exists.
#pragma once

/// EDGELLM_SUPPRESS_GCC105593_BEGIN / _END bracket a header's code that inlines SIMD
/// intrinsics (directly or through xsimd). GCC 12 reports a false -W(maybe-)uninitialized inside
/// its own AVX-512 intrinsics (`__m512 __Y = __Y;`, GCC bug 105593) wherever they are inlined
/// into a kernel; the warning names GCC's header, not ours, so it cannot be fixed at the call.
/// Other compilers: nothing.
#if defined(__GNUC__) && !defined(__clang__)
#define EDGELLM_SUPPRESS_GCC105593_BEGIN                          \
  _Pragma("GCC diagnostic push")                                  \
  _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")     \
  _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define EDGELLM_SUPPRESS_GCC105593_END _Pragma("GCC diagnostic pop")
#else
#define EDGELLM_SUPPRESS_GCC105593_BEGIN
#define EDGELLM_SUPPRESS_GCC105593_END
#endif
