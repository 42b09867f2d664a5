// SPDX-License-Identifier: Apache-2.0
// The portable attention: no subgroup operations, codes loaded as uint words (attention.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define EDGELLM_SUBGROUPS 0
#define EDGELLM_STORAGE 0
#include "attention.glsl"
