// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/io/json.hpp (the parser): RFC 8259 conformance, error positions, limits,
// robustness. The value types and the writer have their own files.
#include "edgellm/io/json.hpp"
#include "support/prelude.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <string_view>

namespace test_io_json {

namespace {

json::Value parse_ok(std::string_view text) {
  auto r = json::parse(text, "test.json");
  if (!r) FAIL("unexpected parse error: " << r.error().message << "\ninput: " << text);
  return std::move(*r);
}

std::string parse_err(std::string_view text, const json::ParseOptions& opt = {}) {
  auto r = json::parse(text, "test.json", opt);
  if (r) FAIL("expected a parse error for: " << text);
  CHECK(r.error().code == edgellm::errc::format_error);
  CHECK_THAT(r.error().message, Contains("[json::parse] test.json: at byte "));
  return r.error().message;
}

}  // namespace

TEST_CASE("json parses literals and numbers", "[io]") {
  CHECK(parse_ok("null").is_null());
  CHECK(parse_ok(" true ").as_bool());
  CHECK_FALSE(parse_ok("\tfalse\r\n").as_bool());

  const auto zero = parse_ok("0");
  CHECK(zero.is_integer());
  CHECK(zero.as_int() == 0);

  const auto neg_zero = parse_ok("-0");
  CHECK(neg_zero.is_integer());
  CHECK(std::signbit(neg_zero.as_double()));

  CHECK(parse_ok("4096").as_int() == 4096);
  CHECK(parse_ok("-17").as_int() == -17);
  CHECK(parse_ok("9223372036854775807").as_int() == std::numeric_limits<std::int64_t>::max());
  CHECK(parse_ok("-9223372036854775808").as_int() == std::numeric_limits<std::int64_t>::min());
  // 2^53 + 1 is not a double but is kept exactly as an integer.
  CHECK(parse_ok("9007199254740993").as_int() == 9007199254740993LL);

  const auto big = parse_ok("9223372036854775808");  // int64 max + 1: a double, not an integer
  CHECK_FALSE(big.is_integer());
  CHECK(big.is_number());
  CHECK(big.as_double() == 9223372036854775808.0);
  CHECK_FALSE(big.get_int().has_value());

  const auto real = parse_ok("1.0");
  CHECK(real.is_number());
  CHECK_FALSE(real.is_integer());  // written with a fraction
  CHECK(real.as_double() == 1.0);
  CHECK(parse_ok("1e3").as_double() == 1000.0);
  CHECK_FALSE(parse_ok("1e3").is_integer());
  CHECK(parse_ok("1E-2").as_double() == 0.01);
  CHECK(parse_ok("-2.5e+2").as_double() == -250.0);
  CHECK(parse_ok("1e-06").as_double() == 1e-6);
  CHECK(parse_ok("500000.0").as_double() == 500000.0);
  CHECK(parse_ok("0.1").as_double() == 0.1);
  CHECK(parse_ok("1.7976931348623157e308").as_double() == std::numeric_limits<double>::max());
  CHECK(parse_ok("1e-400").as_double() == 0.0);  // underflow rounds to zero, as elsewhere
  CHECK(parse_ok("4.9406564584124654e-324").as_double() ==
        std::numeric_limits<double>::denorm_min());

  CHECK_THAT(parse_err("1e400"), Contains("out of the range of double"));
  CHECK_THAT(parse_err("-1e99999"), Contains("out of the range of double"));
}

TEST_CASE("json rejects malformed numbers", "[io]") {
  CHECK_THAT(parse_err("01"), Contains("leading zeros"));
  CHECK_THAT(parse_err("-01"), Contains("leading zeros"));
  CHECK_THAT(parse_err("00"), Contains("leading zeros"));
  CHECK_THAT(parse_err("-"), Contains("expected a digit after '-', found end of input"));
  CHECK_THAT(parse_err("-a"), Contains("expected a digit after '-', found 'a'"));
  CHECK_THAT(parse_err("1."), Contains("expected a digit after the decimal point"));
  CHECK_THAT(parse_err("1.e3"), Contains("expected a digit after the decimal point"));
  CHECK_THAT(parse_err("1e"), Contains("expected a digit in the exponent"));
  CHECK_THAT(parse_err("1e+"), Contains("expected a digit in the exponent"));
  CHECK_THAT(parse_err(".5"), Contains("expected a value"));
  CHECK_THAT(parse_err("+1"), Contains("expected a value"));
  CHECK_THAT(parse_err("0x10"), Contains("expected end of input"));
  CHECK_THAT(parse_err("NaN"), Contains("expected a value"));
  CHECK_THAT(parse_err("Infinity"), Contains("expected a value"));
  CHECK_THAT(parse_err("-Infinity"), Contains("expected a digit after '-'"));
  CHECK_THAT(parse_err("1 2"), Contains("expected end of input"));
}

TEST_CASE("json decodes strings and escapes", "[io]") {
  CHECK(parse_ok(R"("")").as_string().empty());
  CHECK(parse_ok(R"("abc")").as_string() == "abc");
  CHECK(parse_ok(R"("\"\\\/\b\f\n\r\t")").as_string() == "\"\\/\b\f\n\r\t");
  CHECK(parse_ok(R"("\u0041\u00e9\u20AC")").as_string() == "A\xC3\xA9\xE2\x82\xAC");
  CHECK(parse_ok(R"("\u0000")").as_string() == std::string("\0", 1));
  // U+1F600 as a surrogate pair, and U+10FFFF (the largest scalar).
  CHECK(parse_ok(R"("\ud83d\ude00")").as_string() == "\xF0\x9F\x98\x80");
  CHECK(parse_ok(R"("\uDBFF\uDFFF")").as_string() == "\xF4\x8F\xBF\xBF");
  // Raw UTF-8 passes through: 2-, 3- and 4-byte sequences, incl. U+FFFF and U+10FFFF.
  const std::string raw =
      "\"\xC3\xA9 \xE2\x82\xAC \xEF\xBF\xBF \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF\"";
  CHECK(parse_ok(raw).as_string() == raw.substr(1, raw.size() - 2));
  // The GPT-2 byte-level alphabet of tokenizer.json (e.g. 'Ġ' = U+0120).
  CHECK(parse_ok(R"("\u0120the")").as_string() == "\xC4\xA0the");
}

TEST_CASE("json rejects bad escapes, surrogates and UTF-8", "[io]") {
  CHECK_THAT(parse_err(R"("\x")"), Contains("expected one of \" \\ / b f n r t u after '\\'"));
  CHECK_THAT(parse_err(R"("\u12G4")"), Contains("expected 4 hexadecimal digits after '\\u'"));
  CHECK_THAT(parse_err(R"("\u12")"), Contains("expected 4 hexadecimal digits"));
  CHECK_THAT(parse_err(R"("\ud83d")"), Contains("lone high surrogate \\uD83D"));
  CHECK_THAT(parse_err(R"("\ud83dx")"), Contains("lone high surrogate"));
  CHECK_THAT(parse_err(R"("\ud83d\n")"), Contains("lone high surrogate"));
  CHECK_THAT(parse_err(R"("\ude00")"), Contains("lone low surrogate \\uDE00"));
  CHECK_THAT(parse_err(R"("\ud83d\u0041")"),
             Contains("high surrogate \\uD83D followed by \\u0041, which is not a low surrogate"));
  CHECK_THAT(parse_err(R"("\ud83d\ud83d")"), Contains("not a low surrogate"));
  CHECK_THAT(parse_err("\"abc"), Contains("unterminated string"));
  CHECK_THAT(parse_err("\"abc\\"), Contains("expected an escape character"));
  CHECK_THAT(parse_err("\"a\tb\""), Contains("control character 0x09"));
  CHECK_THAT(parse_err(std::string("\"a\0b\"", 5)), Contains("control character 0x00"));
  CHECK_THAT(parse_err("\"a\nb\""), Contains("control character 0x0A"));

  const char* bad_utf8[] = {
      "\"\x80\"",              // lone continuation byte
      "\"\xC0\x80\"",          // overlong NUL
      "\"\xC1\xBF\"",          // overlong
      "\"\xE0\x80\x80\"",      // overlong 3-byte
      "\"\xE0\x9F\xBF\"",      // overlong 3-byte
      "\"\xED\xA0\x80\"",      // UTF-8-encoded surrogate U+D800
      "\"\xED\xBF\xBF\"",      // U+DFFF
      "\"\xF0\x80\x80\x80\"",  // overlong 4-byte
      "\"\xF0\x8F\xBF\xBF\"",  // overlong 4-byte
      "\"\xF4\x90\x80\x80\"",  // U+110000
      "\"\xF5\x80\x80\x80\"",  // invalid lead
      "\"\xFF\"",              // invalid byte
      "\"\xC3\"",              // truncated 2-byte
      "\"\xE2\x82\"",          // truncated 3-byte
      "\"\xF0\x9F\x98\"",      // truncated 4-byte
      "\"\xC3\x28\"",          // bad continuation
      "\"\xE2\x28\xA1\"",      // bad continuation
  };
  for (const char* s : bad_utf8) {
    INFO("input bytes: " << s);
    CHECK_THAT(parse_err(s), Contains("invalid UTF-8"));
  }
  // Truncated at end of input (no closing quote after the lead byte).
  CHECK_THAT(parse_err("\"\xE2"), Contains("invalid UTF-8"));
  // Non-ASCII outside strings.
  CHECK_THAT(parse_err("\xC3\xA9"), Contains("expected a value"));
}

TEST_CASE("json parses arrays and objects in order", "[io]") {
  const auto v = parse_ok(R"( { "b" : [1, 2.5, "x", null, true, {}], "a": {"n": {"m": []}},
                             "c": "z" } )");
  REQUIRE(v.is_object());
  const json::Object& o = v.as_object();
  REQUIRE(o.size() == 3);
  CHECK(o[0].key == "b");  // insertion order, not sorted
  CHECK(o[1].key == "a");
  CHECK(o[2].key == "c");
  CHECK(v.size() == 3);

  const json::Value* b = v.find("b");
  REQUIRE(b != nullptr);
  REQUIRE(b->is_array());
  REQUIRE(b->size() == 6);
  const json::Array& arr = b->as_array();
  CHECK(arr[0].as_int() == 1);
  CHECK(arr[1].as_double() == 2.5);
  CHECK(arr[2].as_string() == "x");
  CHECK(arr[3].is_null());
  CHECK(arr[4].as_bool());
  CHECK(arr[5].is_object());
  CHECK(arr[5].size() == 0);

  const json::Value* a = v.find("a");
  REQUIRE(a != nullptr);
  REQUIRE(a->find("n") != nullptr);
  CHECK(a->find("n")->find("m")->is_array());
  CHECK(v.find("missing") == nullptr);
  CHECK(arr[0].find("x") == nullptr);  // find on a non-object
  CHECK(o.contains("c"));
  CHECK_FALSE(o.contains("C"));

  std::string keys;
  for (const json::Member& m : o) keys += m.key;
  CHECK(keys == "bac");

  CHECK(parse_ok("[]").as_array().empty());
  CHECK(parse_ok("{}").as_object().empty());
  CHECK(parse_ok("[[[]]]").as_array()[0].as_array()[0].as_array().empty());
  CHECK(parse_ok(R"("top-level string")").is_string());
}

TEST_CASE("json reports duplicate keys with the key's name", "[io]") {
  CHECK_THAT(parse_err(R"({"a": 1, "b": 2, "a": 3})"), Contains("duplicate key \"a\""));
  // Nested objects are checked too, and the position is that of the object.
  const std::string nested = parse_err(R"({"x": {"dtype": "F16", "dtype": "F32"}})");
  CHECK_THAT(nested, Contains("duplicate key \"dtype\""));
  CHECK_THAT(nested, Contains("at byte 6 "));
  // Large objects use the sorting path; the reported key is the first repeated one.
  std::string big = "{";
  for (int i = 0; i < 1000; ++i)
    big += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ",";
  big += "\"k500\": 0, \"k7\": 1}";
  CHECK_THAT(parse_err(big), Contains("duplicate key \"k500\""));
  // Same keys in different objects are fine.
  parse_ok(R"({"a": {"a": 1}, "b": {"a": 2}})");

  json::ParseOptions keep;
  keep.reject_duplicate_keys = false;
  auto r = json::parse(R"({"a": 1, "a": 2})", "test.json", keep);
  REQUIRE(r.has_value());
  CHECK(r->size() == 2);
  CHECK(r->find("a")->as_int() == 2);  // the last one wins, as in Python
}

TEST_CASE("json structural errors say what was expected and where", "[io]") {
  const std::string m = parse_err("{\n  \"a\" 1}");
  CHECK_THAT(m, Contains("at byte 8 (line 2, column 7)"));
  CHECK_THAT(m, Contains("expected ':' after an object key, found '1'"));

  CHECK_THAT(parse_err(""), Contains("expected a value, found end of input"));
  CHECK_THAT(parse_err("   \n "), Contains("expected a value, found end of input"));
  CHECK_THAT(parse_err("[1, 2,]"), Contains("trailing comma before ']'"));
  CHECK_THAT(parse_err(R"({"a": 1,})"), Contains("trailing comma before '}'"));
  CHECK_THAT(parse_err("[1 2]"), Contains("expected ',' or ']' after an array element, found '2'"));
  CHECK_THAT(parse_err(R"({"a": 1 "b": 2})"),
             Contains("expected ',' or '}' after an object member, found '\"'"));
  CHECK_THAT(parse_err("{a: 1}"), Contains("expected '\"' to start an object key, found 'a'"));
  CHECK_THAT(parse_err("{1: 1}"), Contains("expected '\"' to start an object key"));
  CHECK_THAT(parse_err("[1,"), Contains("expected a value, found end of input"));
  CHECK_THAT(parse_err("[1"), Contains("expected ',' or ']'"));
  CHECK_THAT(parse_err(R"({"a")"), Contains("expected ':'"));
  CHECK_THAT(parse_err(R"({"a":)"), Contains("expected a value"));
  CHECK_THAT(parse_err("{"), Contains("expected '\"' to start an object key, found end of input"));
  CHECK_THAT(parse_err("]"), Contains("expected a value"));
  CHECK_THAT(parse_err("[] []"), Contains("expected end of input"));
  CHECK_THAT(parse_err("tru"), Contains("invalid literal; expected 'true'"));
  CHECK_THAT(parse_err("nul"), Contains("expected 'null'"));
  CHECK_THAT(parse_err("True"), Contains("expected a value"));
  CHECK_THAT(parse_err("[\x01]"), Contains("found byte 0x01"));
  CHECK_THAT(parse_err("{} \x7F"), Contains("expected end of input after the top-level value"));
  CHECK_THAT(parse_err("/* comment */ {}"), Contains("expected a value"));
  CHECK_THAT(parse_err("[1]\v"), Contains("expected end of input"));  // \v is not JSON whitespace
}

TEST_CASE("json enforces depth and size limits", "[io]") {
  const auto nest = [](std::size_t depth) {
    return std::string(depth, '[') + std::string(depth, ']');
  };
  CHECK(json::parse(nest(256), "deep").has_value());
  auto too_deep = json::parse(nest(257), "deep");
  REQUIRE_FALSE(too_deep.has_value());
  CHECK_THAT(too_deep.error().message, Contains("nesting deeper than the limit of 256"));
  CHECK_THAT(too_deep.error().message, Contains("at byte 256"));

  // Far deeper than any stack could take by recursion: still a clean error.
  auto very_deep = json::parse(std::string(1000000, '['), "deep");
  REQUIRE_FALSE(very_deep.has_value());
  CHECK_THAT(very_deep.error().message, Contains("nesting deeper"));

  std::string objs;
  for (int i = 0; i < 300; ++i) objs += "{\"a\":";
  objs += "1";
  for (int i = 0; i < 300; ++i) objs += "}";
  CHECK_FALSE(json::parse(objs, "deep").has_value());

  json::ParseOptions opt;
  opt.max_depth = 2;
  CHECK(json::parse("[[1]]", "x", opt).has_value());
  CHECK_FALSE(json::parse("[[[1]]]", "x", opt).has_value());

  opt = {};
  opt.max_bytes = 10;
  auto big = json::parse("[1,2,3,4,5,6]", "big.json", opt);
  REQUIRE_FALSE(big.has_value());
  CHECK_THAT(big.error().message,
             Contains("big.json: input of 13 bytes exceeds the 10-byte limit"));
}

TEST_CASE("json byte order mark is rejected unless allowed", "[io]") {
  CHECK_THAT(parse_err("\xEF\xBB\xBF{}"), Contains("byte order mark"));
  json::ParseOptions opt;
  opt.allow_bom = true;
  auto r = json::parse("\xEF\xBB\xBF{\"a\":1}", "bom.json", opt);
  REQUIRE(r.has_value());
  CHECK(r->find("a")->as_int() == 1);
}

TEST_CASE("json handles tokenizer-sized objects in linear time", "[io]") {
  // A 150k-entry vocab object plus a 150k-entry merges array: must parse quickly, keep order.
  constexpr int n = 150000;
  std::string text = "{\"model\":{\"vocab\":{";
  for (int i = 0; i < n; ++i) {
    if (i) text += ',';
    text += "\"tok\\u0120" + std::to_string(i) + "\":" + std::to_string(i);
  }
  text += "},\"merges\":[";
  for (int i = 0; i < n; ++i) {
    if (i) text += ',';
    text += "[\"a" + std::to_string(i) + "\",\"b\"]";
  }
  text += "]}}";
  auto r = json::parse(text, "tokenizer.json");
  REQUIRE(r.has_value());
  const json::Value* vocab = r->find("model")->find("vocab");
  REQUIRE(vocab != nullptr);
  REQUIRE(vocab->size() == static_cast<std::size_t>(n));
  CHECK(vocab->as_object()[12345].key ==
        "tok\xC4\xA0"
        "12345");
  CHECK(vocab->as_object()[12345].value.as_int() == 12345);
  CHECK(r->find("model")->find("merges")->size() == static_cast<std::size_t>(n));
}

TEST_CASE("json never crashes on mutated input", "[io]") {
  // A cheap in-process fuzz pass (the libFuzzer target goes further). Mutations are random
  // byte flips, insertions and truncations of valid documents; the parser must return either a
  // value that round-trips through dump or an error, and must never crash (run under ASan/UBSan).
  const std::string seeds[] = {
      R"({"a":[1,2.5,"x\u00e9\ud83d\ude00",null,true,{"b":{}}],"c":-0.0e-7})",
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]}})",
      R"([[[[[]]]],"\\\"",1e308,-9223372036854775808])",
  };
  std::mt19937 rng(Catch::rngSeed());
  const char alphabet[] = "{}[]\",:\\u0123456789eE+-.tfnrl \t\n\xC3\xA9\xED\xF0\x80\xBF";
  int ok = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string s = seeds[static_cast<std::size_t>(iter) % 3];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const std::size_t pos = rng() % s.size();
      switch (rng() % 4) {
        case 0:
          s[pos] = alphabet[rng() % (sizeof alphabet - 1)];
          break;
        case 1:
          s.insert(pos, 1, alphabet[rng() % (sizeof alphabet - 1)]);
          break;
        case 2:
          s.erase(pos, 1);
          break;
        default:
          s.resize(pos);
          break;
      }
    }
    auto r = json::parse(s, "fuzz");
    if (r) {
      ++ok;
      const std::string d = json::dump(*r);
      auto again = json::parse(d, "fuzz-dump");
      REQUIRE(again.has_value());
      REQUIRE(json::dump(*again) == d);
    } else {
      REQUIRE_THAT(r.error().message, Contains("fuzz: "));
    }
  }
  CHECK(ok > 0);
}

}  // namespace test_io_json
