// SPDX-License-Identifier: Apache-2.0
// The git sha of the last configure, in a TU of its own: a commit recompiles this line, not the
// C API (which compiles the whole library).
#ifndef EDGELLM_GIT_SHA
#define EDGELLM_GIT_SHA "unknown"
#endif

namespace edgellm::c_api {
extern const char* const git_sha;
const char* const git_sha = EDGELLM_GIT_SHA;
}  // namespace edgellm::c_api
