// SPDX-License-Identifier: Apache-2.0
// The int4 GEMV with subgroup arithmetic (subgroupAdd) in its final sum (gemv_q4.glsl); for
// devices that report VK_SUBGROUP_FEATURE_ARITHMETIC_BIT in compute shaders.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define EDGELLM_SUBGROUPS 1
#include "gemv_q4.glsl"
