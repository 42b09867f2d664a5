// SPDX-License-Identifier: Apache-2.0
// Version macros and build switches shared by every edgellm header.
#pragma once

#include <cstdio>
#include <cstdlib>

#define EDGELLM_VERSION_MAJOR 0
#define EDGELLM_VERSION_MINOR 1
#define EDGELLM_VERSION_PATCH 0

/// EDGELLM_ASSERT(cond, msg): hot-path precondition check. On in debug builds (no NDEBUG) or
/// when EDGELLM_ENABLE_ASSERTS is defined; prints file:line and the message, then aborts.
/// Fallible operations (files, shapes, capacities) return edgellm::result instead.
#if !defined(NDEBUG) || defined(EDGELLM_ENABLE_ASSERTS)
#define EDGELLM_ASSERT(cond, msg)                                                        \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: edgellm assertion failed: %s (%s)\n", __FILE__,       \
                   __LINE__, msg, #cond);                                                \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)
#else
#define EDGELLM_ASSERT(cond, msg) ((void)0)
#endif

#if defined(__GNUC__) || defined(__clang__)
#define EDGELLM_RESTRICT __restrict__
#define EDGELLM_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define EDGELLM_RESTRICT
#define EDGELLM_ALWAYS_INLINE inline
#endif

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
/// Hand-written x86 microkernels (AVX2, AVX-VNNI, AVX-512 VNNI) compiled with per-function
/// target attributes and chosen at run time from CPUID; no -m flags needed by the host.
#define EDGELLM_X86_MICROKERNELS 1
#else
#define EDGELLM_X86_MICROKERNELS 0
#endif
