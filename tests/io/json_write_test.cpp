// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/io/json_write.hpp: string escaping, dump (round trip through the parser)
// and describe.
#include "edgellm/io/json_write.hpp"

#include "edgellm/io/json.hpp"
#include "support/prelude.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <string_view>

namespace test_io_json_write {

namespace {

json::Value parse_ok(std::string_view text) {
  auto r = json::parse(text, "test.json");
  if (!r) FAIL("unexpected parse error: " << r.error().message << "\ninput: " << text);
  return std::move(*r);
}

}  // namespace

TEST_CASE("json escape quotes, escapes control characters and keeps UTF-8", "[io]") {
  CHECK(json::escape("") == R"("")");
  CHECK(json::escape("plain text") == R"("plain text")");
  CHECK(json::escape("a\"b\\c") == R"("a\"b\\c")");
  CHECK(json::escape("\n\t\r\b\f") == R"("\n\t\r\b\f")");
  CHECK(json::escape(std::string_view("\x00\x01\x1f", 3)) == R"("\u0000\u0001\u001f")");
  CHECK(json::escape("/ \xC3\xA9 \x7f") == "\"/ \xC3\xA9 \x7f\"");  // '/' and DEL as is
  std::string out = "x=";
  json::append_escaped(out, "q\"");
  CHECK(out == R"(x="q\"")");
  // Whatever the bytes, the parser reads back what was escaped.
  for (std::string_view s : {std::string_view("tab\there"), std::string_view("\x01\x02\"\\")}) {
    const json::Value v = parse_ok(json::escape(s));
    CHECK(v.as_string() == s);
  }
}

TEST_CASE("json dump round-trips", "[io]") {
  const char* inputs[] = {
      R"({"a":[1,-2,3.25,1e-06,1e+300,-0.0,9223372036854775807],"b":{"c":null,"d":true}})",
      R"(["\u0000\u001f\"\\\n\t\r\b\f/","\u00e9\ud83d\ude00"])",
      R"([0.1,0.2,0.30000000000000004,123456789012345678901234567890])",
      R"("")",
      "[]",
  };
  for (const char* in : inputs) {
    INFO(in);
    const json::Value v = parse_ok(in);
    const std::string once = json::dump(v);
    const json::Value w = parse_ok(once);
    CHECK(json::dump(w) == once);
  }
  CHECK(json::dump(parse_ok("[1.0, 2, 1e2]")) == "[1.0,2,100.0]");
  CHECK(json::dump(parse_ok(R"("\u0001")")) == R"("\u0001")");
}

TEST_CASE("json describe is short and safe", "[io]") {
  CHECK(json::describe(parse_ok(R"("abc")")) == R"("abc")");
  CHECK(json::describe(parse_ok("[1,2,3]")) == "an array of 3 elements");
  CHECK(json::describe(parse_ok(R"({"a":1})")) == "an object with 1 members");
  CHECK(json::describe(parse_ok("12")) == "12");
  CHECK(json::describe(parse_ok("null")) == "null");
  // Long strings are cut on a character boundary: 59 ASCII bytes then 2-byte characters.
  std::string s = std::string(59, 'a');
  for (int i = 0; i < 10; ++i) s += "\xC3\xA9";
  const std::string d = json::describe(json::Value(s));
  CHECK(d == "\"" + std::string(59, 'a') + "\"...");
}

}  // namespace test_io_json_write
