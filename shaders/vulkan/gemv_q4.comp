// SPDX-License-Identifier: Apache-2.0
// The portable int4 GEMV: no subgroup operations (gemv_q4.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define EDGELLM_SUBGROUPS 0
#include "gemv_q4.glsl"
