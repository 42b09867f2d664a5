// SPDX-License-Identifier: Apache-2.0
// JsonMatcher: whole texts accepted and refused byte by byte, and agreement with io::json::parse
// (duplicate keys allowed) on texts mutated at random: a text the parser accepts is accepted
// whole and every prefix of it is viable; a text the matcher accepts whole the parser accepts.
#include "edgellm/constrain/json_matcher.hpp"

#include "edgellm/io/json.hpp"
#include "support/prelude.hpp"

#include <random>
#include <string>
#include <vector>

namespace test_json_matcher {

using edgellm::constrain::JsonMatcher;

bool whole(std::string_view text, JsonMatcher::Options o = {}) {
  JsonMatcher m(o);
  return m.feed(text) && m.done();
}

bool viable(std::string_view text, JsonMatcher::Options o = {}) {
  JsonMatcher m(o);
  return m.feed(text);
}

TEST_CASE("JsonMatcher accepts whole JSON objects", "[constrain]") {
  for (const char* text : {
           "{}", " {}", "{\"a\":1}", "{ \"a\" : [1, 2.5, -3e+2, 0, -0.0, 1E5] }",
           "{\"s\":\"x\\\"y\\\\z\\/\\b\\f\\n\\r\\t\"}", "{\"u\":\"\\u00e9\\uD83D\\uDE00\"}",
           "{\"t\":true,\"f\":false,\"n\":null}", "{\"nested\":{\"a\":[{\"b\":[]}]}}",
           "{\"utf8\":\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"}", "{\"a\":{},\"a\":[]}",
           "{\n  \"k\": \"v\"\n}"}) {
    INFO(text);
    CHECK(whole(text));
  }
}

TEST_CASE("JsonMatcher refuses what JSON does not allow, at the first bad byte", "[constrain]") {
  for (const char* text : {
           "[]", "1", "\"s\"", "{1:2}", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{,}", "{\"a\":01}",
           "{\"a\":1.}", "{\"a\":.5}", "{\"a\":-}", "{\"a\":1e}", "{\"a\":+1}", "{\"a\":tru}",
           "{\"a\":nul }", "{\"a\":\"\\x\"}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00\"}",
           "{\"a\":\"\\ud800\\u0041\"}", "{\"a\":\"\x01\"}", "{\"a\":\"\xC0\x80\"}",
           "{\"a\":\"\xED\xA0\x80\"}", "{\"a\":\"\xF4\x90\x80\x80\"}", "{\"a\":\"\xFF\"}",
           "{\"a\":[1 2]}", "{\"a\":[1,]}", "{\"a\":]}", "{}}", "{} {}", "{\"a\":1}x"}) {
    INFO(text);
    CHECK_FALSE(whole(text));
  }
  // Viable prefixes are not whole texts.
  CHECK(viable("{\"a\":[1,2"));
  CHECK_FALSE(whole("{\"a\":[1,2"));
  CHECK(viable("{\"s\":\"\\uD83D"));  // waiting for the low surrogate
  CHECK_FALSE(viable("{\"s\":\"\\uD83Dx"));
}

TEST_CASE("JsonMatcher: object_only off, white space and depth limits", "[constrain]") {
  const JsonMatcher::Options any{.object_only = false, .max_whitespace = 20};
  CHECK(whole("[1,2]", any));
  CHECK(whole("\"s\"", any));
  CHECK(whole("true", any));
  CHECK(whole("12 ", any));  // a top-level number ends at white space
  CHECK_FALSE(whole("12", any));
  CHECK(viable("12", any));
  const JsonMatcher::Options tight{.object_only = true, .max_whitespace = 3};
  CHECK(whole("{   \"a\":1}", tight));
  CHECK_FALSE(viable("{    ", tight));
  CHECK(whole("{\"a\":\"    many spaces inside a string    \"}", tight));
  std::string deep(JsonMatcher::kMaxDepth, '[');
  CHECK(viable("{\"a\":" + deep.substr(1), any));
  CHECK_FALSE(viable(deep + "[", any));
}

TEST_CASE("JsonMatcher agrees with io::json::parse on mutated texts", "[constrain]") {
  const std::vector<std::string> seeds = {
      "{\"a\":[1,-2.5e3,true,null],\"b\":{\"c\":\"d\\n\\u00e9\"}}",
      "{\"k\":\"\\uD83D\\uDE00\xC3\xA9\",\"n\":0,\"m\":[[],{}]}",
      "{ \"x\" : [ 1 , 2 ] , \"y\" : false }",
  };
  const std::string alphabet = "{}[],:\"\\ 0123456789.-+eEtrufalsn\xC3\xA9\xED\xA0ud8Dc\t\n";
  std::mt19937 rng(12345);
  const JsonMatcher::Options o{.object_only = true, .max_whitespace = 255};
  json::ParseOptions po;
  po.reject_duplicate_keys = false;
  std::size_t accepted = 0, refused = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string t = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % (t.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: t.insert(t.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        case 1: if (at < t.size()) t.erase(at, 1); break;
        default: if (at < t.size()) t[at] = c; break;
      }
    }
    const bool parsed = json::parse(t, "t", po).has_value();
    const bool object = parsed && json::parse(t, "t", po)->is_object();
    const bool trailing_ws = !t.empty() && (t.back() == ' ' || t.back() == '\n' || t.back() == '\t');
    INFO(t);
    if (parsed && object && !trailing_ws) {
      ++accepted;
      REQUIRE(whole(t, o));
      for (std::size_t n = 0; n <= t.size(); ++n) REQUIRE(viable(t.substr(0, n), o));
    } else {
      ++refused;
      if (!trailing_ws) REQUIRE_FALSE(whole(t, o));
    }
  }
  CHECK(accepted > 1000);  // the mutations keep enough valid texts to mean something
  CHECK(refused > 1000);
}

TEST_CASE("JsonMatcher::completion makes every viable prefix whole", "[constrain]") {
  const std::string texts[] = {
      "{\"a\": [1, 2.5e-3, {\"b\": \"x\\u00e9\\uD83D\\uDE00\"}], \"t\": true, \"n\": null}",
      "{\"utf8\":\"\xC3\xA9\xF0\x9F\x98\x80\", \"f\": false, \"z\": -0.0E+5}",
      "[[[\"deep\", {\"k\": [-12]}]]]", "\"top\"", "-12.5e7 ", "[1,2]"};
  for (const bool object_only : {true, false}) {
    for (const std::string& text : texts) {
      JsonMatcher m({.object_only = object_only});
      for (std::size_t i = 0; i <= text.size(); ++i) {
        const std::string closing = m.completion();
        INFO(text.substr(0, i) << " + " << closing);
        JsonMatcher whole_text = m;
        CHECK(whole_text.feed(closing));
        CHECK(whole_text.done());
        CHECK(closing.size() <= 4 * (i + 2));
        if (i == text.size() || !m.feed(static_cast<unsigned char>(text[i]))) break;
      }
    }
  }
  CHECK(JsonMatcher().completion() == "{}");
}

}  // namespace test_json_matcher
