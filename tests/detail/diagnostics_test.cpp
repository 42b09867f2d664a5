// SPDX-License-Identifier: Apache-2.0
#include "edgellm/detail/diagnostics.hpp"

#include <catch2/catch.hpp>

// The pair brackets declarations at namespace scope, as the kernel headers use it, and leaves
// the diagnostic state as it found it (an unbalanced push would fail this file at -Werror).
EDGELLM_SUPPRESS_GCC105593_BEGIN
namespace test_detail_diagnostics {
inline int bracketed() { return 1; }
}  // namespace test_detail_diagnostics
EDGELLM_SUPPRESS_GCC105593_END

namespace test_detail_diagnostics {

TEST_CASE("EDGELLM_SUPPRESS_GCC105593_BEGIN/_END bracket code without changing it", "[detail]") {
  CHECK(bracketed() == 1);
}

}  // namespace test_detail_diagnostics
