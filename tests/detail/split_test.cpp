// SPDX-License-Identifier: Apache-2.0
#include "edgellm/detail/split.hpp"

#include <catch2/catch.hpp>

#include <string_view>
#include <vector>

namespace test_detail_split {

using edgellm::detail::split_list;
using Items = std::vector<std::string_view>;

TEST_CASE("split_list keeps every item, empty ones included", "[detail]") {
  REQUIRE(split_list("1,2,4") == Items{"1", "2", "4"});
  REQUIRE(split_list("one") == Items{"one"});
  REQUIRE(split_list("") == Items{""});
  REQUIRE(split_list("a,,b") == Items{"a", "", "b"});
  REQUIRE(split_list("a,") == Items{"a", ""});
  REQUIRE(split_list(",a") == Items{"", "a"});
  REQUIRE(split_list("x;y", ';') == Items{"x", "y"});
}

}  // namespace test_detail_split
