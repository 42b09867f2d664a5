// SPDX-License-Identifier: Apache-2.0
// regex_to_gbnf / regex_grammar: GBNF text for small patterns, errors that name the construct
// and its offset, and (through GrammarMatcher) whole-match acceptance, search semantics and the
// JSON-string mode used by JSON Schema's `pattern`.
#include "edgellm/constrain/regex.hpp"

#include "edgellm/constrain/grammar.hpp"
#include "edgellm/constrain/grammar_matcher.hpp"
#include "support/prelude.hpp"

#include <string>

namespace test_regex {

using edgellm::constrain::GrammarMatcher;
using edgellm::constrain::parse_gbnf;
using edgellm::constrain::regex_grammar;
using edgellm::constrain::regex_to_gbnf;
using edgellm::constrain::RegexOptions;

std::string expr(std::string_view pattern, RegexOptions o = {}) {
  auto e = regex_to_gbnf(pattern, o);
  INFO(pattern);
  REQUIRE(e.has_value());
  return *e;
}

std::string error_of(std::string_view pattern) {
  auto e = regex_to_gbnf(pattern);
  REQUIRE_FALSE(e.has_value());
  return e.error().message;
}

// Whole-text matching of `text` against `pattern` compiled with options `o`.
bool matches(std::string_view pattern, std::string_view text, RegexOptions o = {}) {
  auto e = regex_to_gbnf(pattern, o);
  INFO(pattern);
  REQUIRE(e.has_value());
  auto g = parse_gbnf("root ::= " + *e + "\n", "regex grammar");
  INFO(*e);
  REQUIRE(g.has_value());
  GrammarMatcher m(*g);
  return m.feed(text) && m.accepting();
}

TEST_CASE("regex_to_gbnf: GBNF text for small patterns", "[constrain]") {
  CHECK(expr("abc") == "\"abc\"");
  CHECK(expr("a|bc") == "(\"a\" | \"bc\")");
  CHECK(expr("ab*") == "\"a\" [b]*");
  CHECK(expr("(?:ab)+") == "(\"ab\")+");
  CHECK(expr("[a-c0-9_]{2,4}?") == "[0-9_a-c]{2,4}");
  CHECK(expr("\\d{3}") == "[0-9]{3}");
  CHECK(expr("[^\"]") == "[^\\x22]");
  CHECK(expr("^a$") == "\"a\"");
  CHECK(expr("x", {.search = true}) == "[\\x00-\\U0010FFFF]* \"x\" [\\x00-\\U0010FFFF]*");
  CHECK(*regex_grammar("a+") == "root ::= [a]+\n");
  // JSON-string mode: characters JSON must escape are matched as their escapes.
  CHECK(expr("a\"", {.json_string = true}) == "\"a\\\\\\\"\"");
  CHECK(expr("\\n+", {.json_string = true}) == "\"\\\\n\"+");
}

TEST_CASE("regex_to_gbnf: unsupported constructs and malformed patterns", "[constrain]") {
  CHECK_THAT(error_of("(a)\\1"), Contains("backreference \\1 at offset 3"));
  CHECK_THAT(error_of("a(?=b)"), Contains("lookahead (?= / (?! at offset 1"));
  CHECK_THAT(error_of("(?<!a)b"), Contains("lookbehind"));
  CHECK_THAT(error_of("(?<n>a)"), Contains("named group"));
  CHECK_THAT(error_of("\\bword"), Contains("word boundary \\b at offset 0"));
  CHECK_THAT(error_of("a^b"), Contains("anchor ^ other than at the start at offset 1"));
  CHECK_THAT(error_of("a$b"), Contains("anchor $ other than at the end at offset 1"));
  CHECK_THAT(error_of("\\p{L}"), Contains("Unicode property"));
  CHECK_THAT(error_of("(ab"), Contains("unclosed '(' at offset 0"));
  CHECK_THAT(error_of("ab)"), Contains("unbalanced ')' at offset 2"));
  CHECK_THAT(error_of("[z-a]"), Contains("bad character range at offset 1"));
  CHECK_THAT(error_of("*a"), Contains("nothing to repeat at offset 0"));
  CHECK_THAT(error_of("a{2,1}"), Contains("n < m"));
  CHECK_THAT(error_of("a{5000}"), Contains("over 1000"));
  CHECK(regex_to_gbnf("(?=x)").error().code == errc::unsupported);
  CHECK(regex_to_gbnf("[a").error().code == errc::invalid_argument);
}

TEST_CASE("regex_to_gbnf: whole-match acceptance", "[constrain]") {
  CHECK(matches("[A-Z]{3}-\\d{2,4}", "ABC-123"));
  CHECK_FALSE(matches("[A-Z]{3}-\\d{2,4}", "ABC-1"));
  CHECK_FALSE(matches("[A-Z]{3}-\\d{2,4}", "ABC-12345"));
  CHECK(matches("(cat|dog)s?", "dogs"));
  CHECK_FALSE(matches("(cat|dog)s?", "cow"));
  CHECK(matches("a.c",
                "a\xC3\xA9"
                "c"));  // '.' is a code point, not a byte
  CHECK_FALSE(matches("a.c", "a\nc"));
  CHECK(matches("[^a-z]+", "ABC 123"));
  CHECK_FALSE(matches("[^a-z]+", "AbC"));
  CHECK(matches("\\w+\\s\\S", "snake_case1 !"));
  CHECK(matches("\\u00e9|\\x41", "\xC3\xA9"));
  CHECK(matches("\\u00e9|\\x41", "A"));
  CHECK(matches("a{2}b{1,}c{0,1}", "aabbb"));
  CHECK_FALSE(matches("a{2}b{1,}c{0,1}", "abbb"));
  CHECK(matches("(a|)b", "b"));
  CHECK(matches("[.\\]-]+", "].-"));
  CHECK(matches("^(?:ab)*?$", ""));
}

TEST_CASE("regex_to_gbnf: search semantics and JSON-string mode", "[constrain]") {
  const RegexOptions search{.search = true};
  CHECK(matches("ab+c", "xxabbcyy", search));
  CHECK_FALSE(matches("ab+c", "xxacyy", search));
  CHECK(matches("^ab", "abz", search));
  CHECK_FALSE(matches("^ab", "zab", search));
  CHECK(matches("ab$", "zab", search));
  CHECK_FALSE(matches("ab$", "abz", search));
  CHECK(matches("^a$|b", "xbx", search));
  CHECK_FALSE(matches("^a$|b", "ax", search));
  const RegexOptions json{.json_string = true};
  CHECK(matches("a\"b", "a\\\"b", json));
  CHECK_FALSE(matches("a\"b", "a\"b", json));
  CHECK(matches("[^x]+", "\\\\\\n\\u001F\\u001f", json));
  CHECK_FALSE(matches("[^x]+", "\n", json));
  CHECK(matches(".", "\\t", json));
  CHECK_FALSE(matches(".", "\\n", json));
}

}  // namespace test_regex
