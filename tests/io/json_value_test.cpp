// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/io/json_value.hpp: construction from C++ types and the checked accessors.
#include "edgellm/io/json_value.hpp"

#include "edgellm/io/json_write.hpp"
#include "support/prelude.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace test_io_json_value {

TEST_CASE("json checked accessors never misbehave on the wrong type", "[io]") {
  json::Object o;
  o.append("s", "x");
  o.append("i", 3);
  o.append("d", 0.5);
  o.append("b", false);
  o.append("n", nullptr);
  const json::Value v = std::move(o);
  const json::Value& s = *v.find("s");
  CHECK_FALSE(s.get_int());
  CHECK_FALSE(s.get_double());
  CHECK_FALSE(s.get_bool());
  CHECK(s.get_array() == nullptr);
  CHECK(s.get_object() == nullptr);
  CHECK(s.get_number() == nullptr);
  CHECK(s.size() == 0);
  REQUIRE(s.get_string() != nullptr);
  CHECK(*s.get_string() == "x");
  CHECK(*v.find("i")->get_int() == 3);
  CHECK(*v.find("i")->get_double() == 3.0);
  CHECK_FALSE(v.find("d")->get_int());
  CHECK(*v.find("d")->get_double() == 0.5);
  CHECK(*v.find("b")->get_bool() == false);
  CHECK(v.find("n")->is_null());
  CHECK(v.find("n")->type() == json::Type::null);
  CHECK(std::string(json::to_string(v.type())) == "object");
}

TEST_CASE("json Value converts from C++ types without surprises", "[io]") {
  const json::Value s = "text";  // a string, not a bool
  CHECK(s.is_string());
  const json::Value i = 42;
  CHECK(i.is_integer());
  CHECK(i.as_int() == 42);
  const json::Value u = std::uint64_t{18446744073709551615ULL};
  CHECK(u.is_number());
  CHECK_FALSE(u.is_integer());
  const json::Value d = 2.0;
  CHECK(d.is_number());
  CHECK_FALSE(d.is_integer());
  const json::Value b = true;
  CHECK(b.is_bool());
  const json::Value n = nullptr;
  CHECK(n.is_null());
  const json::Value def;
  CHECK(def.is_null());

  json::Object o;
  o.append("k", json::Array{1, "two", 3.5, false, nullptr});
  o.append("k2", json::Object{});
  const json::Value v = std::move(o);
  CHECK(json::dump(v) == R"({"k":[1,"two",3.5,false,null],"k2":{}})");
  const json::Value copy = v;  // deep copy
  CHECK(json::dump(copy) == json::dump(v));
}

}  // namespace test_io_json_value
