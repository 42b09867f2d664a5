// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/detail/guard_exceptions.hpp: each kind of escaping exception becomes its
// error code; a value or a status passes through.
#include "edgellm/detail/guard_exceptions.hpp"

#include <catch2/catch.hpp>

#include <new>
#include <stdexcept>
#include <system_error>

namespace test_detail_guard_exceptions {

namespace {
namespace d = edgellm::detail;
}  // namespace

TEST_CASE("guard_exceptions: an escaping exception becomes an error", "[detail]") {
  using edgellm::errc;
  using edgellm::result;
  const auto run = [](auto thrower) {
    return d::guard_exceptions("f", [&]() -> result<int> {
      thrower();
      return 1;
    });
  };
  auto r = run([] { throw std::bad_alloc(); });
  REQUIRE_FALSE(r);
  CHECK(r.error().code == errc::out_of_memory);
  CHECK(r.error().message == "[f] out of memory");
  r = run([] {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
  });
  REQUIRE_FALSE(r);
  CHECK(r.error().code == errc::out_of_memory);
  r = run([] { throw std::runtime_error("boom"); });
  REQUIRE_FALSE(r);
  CHECK(r.error().code == errc::internal);
  CHECK(r.error().message == "[f] boom");
  r = run([] { throw 42; });
  REQUIRE_FALSE(r);
  CHECK(r.error().code == errc::internal);
  r = run([] {});
  REQUIRE(r);
  CHECK(*r == 1);
  edgellm::status st =
      d::guard_exceptions("g", []() -> edgellm::status { throw std::bad_alloc(); });
  REQUIRE_FALSE(st);
  CHECK(st.error().code == errc::out_of_memory);
}

}  // namespace test_detail_guard_exceptions
