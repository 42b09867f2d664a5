// SPDX-License-Identifier: Apache-2.0
// The one main() of edgellm_tests: Catch2 2.13's generated runner.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
