// SPDX-License-Identifier: Apache-2.0
// The W4A8 int4 GEMV with packed 4x8-bit integer dot products (gemv_q4_int8.glsl); for devices
// that report shaderIntegerDotProduct (Vulkan 1.3 or VK_KHR_shader_integer_dot_product).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_spirv_intrinsics : require
#define EDGELLM_INT_DOT 1
#include "gemv_q4_int8.glsl"
