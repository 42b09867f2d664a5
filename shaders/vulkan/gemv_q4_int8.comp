// SPDX-License-Identifier: Apache-2.0
// The W4A8 int4 GEMV with plain int multiply-adds, for any device (gemv_q4_int8.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define EDGELLM_INT_DOT 0
#include "gemv_q4_int8.glsl"
