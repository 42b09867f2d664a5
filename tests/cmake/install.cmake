# SPDX-License-Identifier: Apache-2.0
# ctest fixture: a clean `cmake --install` of the build tree BUILD_DIR into PREFIX; when TOOL
# names a built command-line tool, also checks that it is installed and runs, and that the
# `tools` component alone installs the tools and no headers (into PREFIX-tools).
# Usage: cmake -DPREFIX=<dir> -DBUILD_DIR=<dir> [-DCONFIG=<cfg>] [-DTOOL=<name>] -P install.cmake
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
if(TOOL)
  if(NOT EXISTS "${PREFIX}/bin/${TOOL}")
    message(FATAL_ERROR "install is missing bin/${TOOL}")
  endif()
  execute_process(COMMAND "${PREFIX}/bin/${TOOL}" --version
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "${TOOL}")
    message(FATAL_ERROR "installed ${TOOL} --version: exit ${rc}, output '${out}${err}'")
  endif()
  set(_tools_prefix "${PREFIX}-tools")
  file(REMOVE_RECURSE "${_tools_prefix}")
  execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${_tools_prefix}"
                          --component tools ${_config}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake --install --component tools failed: ${rc}")
  endif()
  if(NOT EXISTS "${_tools_prefix}/bin/${TOOL}" OR EXISTS "${_tools_prefix}/include")
    message(FATAL_ERROR "the tools component must install bin/${TOOL} and no headers")
  endif()
  file(REMOVE_RECURSE "${_tools_prefix}")
endif()
