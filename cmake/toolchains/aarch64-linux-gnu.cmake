# SPDX-License-Identifier: Apache-2.0
# Cross toolchain: 64-bit Arm Linux with Debian's g++-aarch64-linux-gnu; tests run under QEMU.
#
#   cmake --preset aarch64        (or -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake)
#
# No -march/-mcpu here: the ISA is a preset choice, so one toolchain serves many SoCs.
#
# Target libraries come from the cross sysroot /usr/aarch64-linux-gnu (libc6-dev-arm64-cross).
# The header-only dependencies (xsimd, Catch2, and fmt used header-only) are installed by
# Debian for the host only, under /usr/include. /usr/include itself must never reach the
# cross compiler (its glibc headers would shadow the target's), so this file stages a small
# prefix in the build tree, <build>/host-header-only, holding symlinks to just those header
# folders and to the packages' CMake config files, and adds it to CMAKE_FIND_ROOT_PATH.
# Set EDGELLM_HOST_HEADER_ONLY=OFF to skip that when the sysroot already has these packages.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(EDGELLM_CROSS_TRIPLE aarch64-linux-gnu)
set(EDGELLM_CROSS_SYSROOT "/usr/${EDGELLM_CROSS_TRIPLE}" CACHE PATH "Target libraries and headers")

set(CMAKE_C_COMPILER ${EDGELLM_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${EDGELLM_CROSS_TRIPLE}-g++)

# Run target binaries (ctest, never the build) under QEMU user mode; -cpu max has dotprod, i8mm.
# CMakeLists.txt adds runs of the kernel and model tests on older CPU models
# (EDGELLM_QEMU_CPU_MODELS). A static build (-static) needs no -L, but it does no harm.
find_program(EDGELLM_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(NOT EDGELLM_QEMU_AARCH64)
  set(EDGELLM_QEMU_AARCH64 qemu-aarch64-static)  # Debian: apt-get install qemu-user-static
endif()
set(EDGELLM_QEMU_CPU max CACHE STRING "qemu-aarch64 -cpu model for ctest")
set(CMAKE_CROSSCOMPILING_EMULATOR
    "${EDGELLM_QEMU_AARCH64};-L;${EDGELLM_CROSS_SYSROOT};-cpu;${EDGELLM_QEMU_CPU}")

set(CMAKE_FIND_ROOT_PATH "${EDGELLM_CROSS_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

option(EDGELLM_HOST_HEADER_ONLY "Expose the host's header-only xsimd, Catch2 and fmt headers" ON)
if(EDGELLM_HOST_HEADER_ONLY AND NOT CMAKE_IN_TRY_COMPILE)
  set(_stage "${CMAKE_BINARY_DIR}/host-header-only")
  # Header folders: linked whole. Config files: linked one by one into real folders that
  # mirror the host layout below /usr, so each package computes its prefix as the stage (a
  # linked folder would resolve back to /usr, whose include dir is exactly what must not leak).
  foreach(_dir xsimd catch2 fmt)
    if(IS_DIRECTORY "/usr/include/${_dir}" AND NOT EXISTS "${_stage}/include/${_dir}")
      file(MAKE_DIRECTORY "${_stage}/include")
      file(CREATE_LINK "/usr/include/${_dir}" "${_stage}/include/${_dir}" SYMBOLIC)
    endif()
  endforeach()
  file(GLOB _configs
       "/usr/lib/*/cmake/xsimd/xsimd*.cmake"       # Debian: lib/x86_64-linux-gnu/cmake/xsimd
       "/usr/lib/cmake/xsimd/xsimd*.cmake"
       "/usr/share/cmake/xsimd/xsimd*.cmake"
       "/usr/lib/cmake/Catch2/*.cmake"
       "/usr/share/cmake/Catch2/*.cmake")
  # Catch2Targets-<config>.cmake names the host's compiled Catch2WithMain; leave it out.
  list(FILTER _configs EXCLUDE REGEX "/Catch2Targets-[^/]*\\.cmake$")
  foreach(_config IN LISTS _configs)
    string(REGEX REPLACE "^/usr/" "" _rel "${_config}")
    # The host's multiarch folder becomes the target's, so find_package searches it.
    string(REGEX REPLACE "^lib/[a-z0-9_]+-linux-gnu[a-z0-9_]*/" "lib/${EDGELLM_CROSS_TRIPLE}/"
           _rel "${_rel}")
    get_filename_component(_rel_dir "${_rel}" DIRECTORY)
    if(NOT EXISTS "${_stage}/${_rel}")
      file(MAKE_DIRECTORY "${_stage}/${_rel_dir}")
      file(CREATE_LINK "${_config}" "${_stage}/${_rel}" SYMBOLIC)
    endif()
  endforeach()
  list(APPEND CMAKE_FIND_ROOT_PATH "${_stage}")
  unset(_stage)
  unset(_configs)
endif()
