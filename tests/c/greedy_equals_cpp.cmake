# SPDX-License-Identifier: Apache-2.0
# ctest c_api.greedy_equals_cpp: the C example (C API) streams exactly the text edgellm-generate
# (the C++ Session) prints for the same model, prompt and greedy settings.
# Usage: cmake -DC_EXAMPLE=<exe> -DCPP_TOOL=<edgellm-generate> -DMODEL=<dir> -DPROMPT=<text>
#              -DTOKENS=<n> -P greedy_equals_cpp.cmake
cmake_minimum_required(VERSION 3.21)
execute_process(COMMAND "${C_EXAMPLE}" "${MODEL}" "${PROMPT}" "${TOKENS}"
                OUTPUT_VARIABLE _c RESULT_VARIABLE _c_rc ERROR_VARIABLE _c_err)
# The C API's default lm_head is the stored one (edgellm_engine_options.lm_head NULL), the CLI's
# int8: the same lm_head on both sides, or a near tie may part them.
execute_process(COMMAND "${CPP_TOOL}" --model "${MODEL}" --prompt "${PROMPT}" -n "${TOKENS}"
                        --greedy --threads 1 --lm-head f16
                OUTPUT_VARIABLE _cpp RESULT_VARIABLE _cpp_rc ERROR_VARIABLE _cpp_err)
if(NOT _c_rc EQUAL 0)
  message(FATAL_ERROR "${C_EXAMPLE} failed (${_c_rc}): ${_c_err}")
endif()
if(NOT _cpp_rc EQUAL 0)
  message(FATAL_ERROR "${CPP_TOOL} failed (${_cpp_rc}): ${_cpp_err}")
endif()
string(LENGTH "${PROMPT}" _n_prompt)
string(LENGTH "${_c}" _n_c)
if(NOT _c STREQUAL _cpp OR NOT _n_c GREATER _n_prompt)
  message(FATAL_ERROR "C API and C++ Session differ:\n  C:   [${_c}]\n  C++: [${_cpp}]")
endif()
message(STATUS "same ${_n_c} bytes of text from the C API and the C++ Session: ${_c}")
