// SPDX-License-Identifier: Apache-2.0
// The attention with subgroup arithmetic and 8/16-bit storage: codes load as i8vec4 / f16vec4
// (attention.glsl); for devices with storageBuffer8BitAccess, storageBuffer16BitAccess and
// subgroup arithmetic in compute shaders.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require
#define EDGELLM_SUBGROUPS 1
#define EDGELLM_STORAGE 1
#include "attention.glsl"
