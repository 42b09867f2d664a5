// SPDX-License-Identifier: Apache-2.0
// The attention with subgroup arithmetic (subgroupMax / subgroupAdd) in its reductions
// (attention.glsl); for devices that report VK_SUBGROUP_FEATURE_ARITHMETIC_BIT in compute shaders.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define EDGELLM_SUBGROUPS 1
#define EDGELLM_STORAGE 0
#include "attention.glsl"
