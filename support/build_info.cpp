// SPDX-License-Identifier: Apache-2.0
#include "build_info.hpp"

// Set by CMake on this file only; a build outside it says "unknown".
#ifndef EDGELLM_GIT_SHA
#define EDGELLM_GIT_SHA "unknown"
#endif
#ifndef EDGELLM_BUILD_FLAGS
#define EDGELLM_BUILD_FLAGS "unknown"
#endif
#ifndef EDGELLM_BUILD_TYPE
#define EDGELLM_BUILD_TYPE "unknown"
#endif

namespace edgellm::build_info {

const char* git_sha() { return EDGELLM_GIT_SHA; }
const char* build_type() { return EDGELLM_BUILD_TYPE; }
const char* flags() { return EDGELLM_BUILD_FLAGS; }

}  // namespace edgellm::build_info
