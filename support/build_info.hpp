// SPDX-License-Identifier: Apache-2.0
// What the tools' --version and the benches' JSON rows say about the build: the git commit of
// the last configure, the build type and the compiler flags. Defined in build_info.cpp, the one
// translation unit that sees them, so a commit recompiles that file and relinks the programs
// instead of recompiling every tool and bench.
#pragma once

namespace edgellm::build_info {

const char* git_sha();     ///< short sha, or "unknown" outside a git checkout
const char* build_type();  ///< CMAKE_BUILD_TYPE
const char* flags();       ///< the compiler flags, the target ISA among them

}  // namespace edgellm::build_info
