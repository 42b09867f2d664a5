# SPDX-License-Identifier: Apache-2.0
# ctest fixture: a clean `cmake --install` of the build tree BUILD_DIR into PREFIX.
# Usage: cmake -DPREFIX=<dir> -DBUILD_DIR=<dir> [-DCONFIG=<cfg>] -P install.cmake
file(REMOVE_RECURSE "${PREFIX}")
set(_config "")
if(CONFIG)
  set(_config --config "${CONFIG}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" ${_config}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
if(NOT EXISTS "${PREFIX}/include/edgellm/config.hpp")
  message(FATAL_ERROR "install is missing include/edgellm/config.hpp")
endif()
