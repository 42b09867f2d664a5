// SPDX-License-Identifier: Apache-2.0
// parse_gbnf and choices_grammar: llama.cpp's example grammars (tests/data/grammars) parse; the
// syntax's corners (newlines, comments, escapes, classes, repetition) mean what llama.cpp makes
// of them, checked through a GrammarMatcher; and each kind of mistake is an error that names
// the line and column and what was expected.
#include "edgellm/constrain/grammar.hpp"

#include "edgellm/constrain/grammar_matcher.hpp"
#include "support/prelude.hpp"
#include "support/test_env.hpp"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace test_grammar {

using edgellm::constrain::choices_grammar;
using edgellm::constrain::Grammar;
using edgellm::constrain::GrammarMatcher;
using edgellm::constrain::parse_gbnf;

std::string fixture(const std::string& name) {
  std::ifstream in(test::source_dir() + "/tests/data/grammars/" + name, std::ios::binary);
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::shared_ptr<const Grammar> compile(std::string_view text) {
  auto g = parse_gbnf(text, "test");
  INFO(text);
  if (!g) FAIL(g.error().message);
  return *g;
}

bool whole(const std::shared_ptr<const Grammar>& g, std::string_view s) {
  GrammarMatcher m(g);
  return m.feed(s) && m.accepting();
}

// The error message of parsing `text`, "" when it parses.
std::string parse_error(std::string_view text) {
  auto g = parse_gbnf(text, "test.gbnf");
  return g ? std::string() : g.error().message;
}

TEST_CASE("parse_gbnf: llama.cpp's example grammars parse", "[constrain]") {
  for (const char* name : {"arithmetic.gbnf", "c.gbnf", "chess.gbnf", "english.gbnf",
                           "japanese.gbnf", "json.gbnf", "json_arr.gbnf", "list.gbnf"}) {
    INFO(name);
    auto g = parse_gbnf(fixture(name), name);
    REQUIRE(g);
    const auto root = (*g)->find_rule("root");
    REQUIRE(root);
    CHECK((*g)->root() == *root);
    CHECK((*g)->elements().size() < 2000);
  }
}

TEST_CASE("parse_gbnf: newlines, comments and layout as llama.cpp reads them", "[constrain]") {
  // A newline after '::=' or '|', or inside parentheses, continues the rule.
  const auto g = compile(
      "# leading comment\n"
      "root ::=\n"
      "    a |   # a comment after '|'\n"
      "    ( \"b\"\n"
      "      \"c\" )\r\n"
      "\n"
      "a ::= \"x\" # trailing comment\n");
  CHECK(whole(g, "x"));
  CHECK(whole(g, "bc"));
  CHECK_FALSE(whole(g, "b"));
  // Outside parentheses a newline ends the rule, so a symbol on the next line starts a new one.
  CHECK_THAT(parse_error("root ::= \"a\"\n  \"b\"\n"), Contains("2:3"));
  // Names: letters, digits and '-'; a rule defined twice keeps its last definition.
  const auto h = compile("root ::= my-rule-2\nmy-rule-2 ::= \"p\"\nmy-rule-2 ::= \"q\"\n");
  CHECK(whole(h, "q"));
  CHECK_FALSE(whole(h, "p"));
  // Empty alternatives and an empty rule body match nothing.
  const auto e = compile("root ::= \"a\" ws \"b\"\nws ::= | \" \"\nempty ::=\n");
  CHECK(whole(e, "ab"));
  CHECK(whole(e, "a b"));
}

TEST_CASE("parse_gbnf: literals, escapes and character classes", "[constrain]") {
  const auto g = compile(
      "root ::= \"\\x41\\u00e9\\U0001F600\\t\\r\\n\\\\\\\"\\[\\]\" [\\x30-\\x39] end\n"
      "end ::= [-a] [a-] [^\\]] [\\[-\\]] \".\" .\n");
  CHECK(whole(g, "A\xC3\xA9\xF0\x9F\x98\x80\t\r\n\\\"[]7" "-a" "x" "\\" "." "\xE2\x82\xAC"));
  CHECK_FALSE(whole(g, "A\xC3\xA9\xF0\x9F\x98\x80\t\r\n\\\"[]7" "b"));  // [-a] is '-' or 'a'
  CHECK_FALSE(whole(g, "A\xC3\xA9\xF0\x9F\x98\x80\t\r\n\\\"[]7" "-a" "]"));
  // A reversed range matches nothing (as in llama.cpp); an empty negated class matches all.
  const auto r = compile("root ::= [z-a] | \"ok\" [^]\n");
  CHECK_FALSE(whole(r, "m"));
  CHECK(whole(r, "ok\xE4\xB8\x80"));
  // UTF-8 written in the grammar: literals and ranges of code points.
  const auto j = compile("root ::= \"\xE6\x97\xA5\" [\xE3\x81\x81-\xE3\x82\x9F]+\n");  // 日 [ぁ-ゟ]+
  CHECK(whole(j, "\xE6\x97\xA5\xE3\x81\x82\xE3\x82\x93"));
  CHECK_FALSE(whole(j, "\xE6\x97\xA5\xE3\x82\xA2"));  // katakana ア is outside the range
}

TEST_CASE("parse_gbnf: repetition bounds", "[constrain]") {
  const auto g = compile("root ::= \"a\"{2,4}\n");
  CHECK_FALSE(whole(g, "a"));
  CHECK(whole(g, "aa"));
  CHECK(whole(g, "aaa"));
  CHECK(whole(g, "aaaa"));
  CHECK_FALSE(whole(g, "aaaaa"));
  const auto exact = compile("root ::= (\"ab\" | \"c\"){3}\n");
  CHECK(whole(exact, "abcab"));
  CHECK_FALSE(whole(exact, "abc"));
  CHECK_FALSE(whole(exact, "cccc"));
  const auto at_least = compile("root ::= [0-9]{2,} \"x\"\n");
  CHECK_FALSE(whole(at_least, "1x"));
  CHECK(whole(at_least, "12x"));
  CHECK(whole(at_least, "1234567890x"));
  const auto at_most = compile("root ::= \"<\" \"ab\"{0,2} \">\"\n");  // a literal repeats whole
  CHECK(whole(at_most, "<>"));
  CHECK(whole(at_most, "<abab>"));
  CHECK_FALSE(whole(at_most, "<a>"));
  CHECK_FALSE(whole(at_most, "<ababab>"));
  const auto zero = compile("root ::= \"a\" \"b\"{0} \"c\" \"d\"{ 1 , 1 }\n");
  CHECK(whole(zero, "acd"));
  const auto ops = compile("root ::= \"x\"* \"y\"+ \"z\"?\n");
  CHECK(whole(ops, "y"));
  CHECK(whole(ops, "xxyyz"));
  CHECK_FALSE(whole(ops, "xz"));
  CHECK_FALSE(whole(ops, "yzz"));
}

TEST_CASE("parse_gbnf: errors name the place and what was expected", "[constrain]") {
  struct Case {
    const char* text;
    const char* at;
    const char* what;
  };
  const Case cases[] = {
      {"a ::= \"x\"\n", "1:1", "'root'"},
      {"root ::= foo\n", "1:10", "'foo' is used but never defined"},
      {"root ::= a\n\na ::= \"x\" |\n  b\n", "4:3", "'b'"},
      {"root ::= root \"a\" | \"b\"\n", "1:1", "left recursion in rule 'root'"},
      {"root ::= a\na ::= b \"x\"\nb ::= \"y\" | a \"z\"\n", ":1", "left recursion"},
      {"root ::= e root \"x\" | \"y\"\ne ::= | \"z\"\n", "1:1", "left recursion in rule 'root'"},
      {"root ::= (\"a\" | root) \"b\"\n", "1:", "left recursion in rule 'root'"},
      {"root ::= \"abc\n", "1:10", "unterminated literal"},
      {"root ::= [a-z\n", "1:10", "unterminated character class"},
      {"root ::= [a-", "1:10", "unterminated character class"},
      {"root ::= \"\\q\"\n", "1:11", "unknown escape '\\q'"},
      {"root ::= \"\\x4\"\n", "1:11", "expected 2 hex digits"},
      {"root ::= \"\\U00110000\"\n", "1:11", "above U+10FFFF"},
      {"root ::= * \"a\"\n", "1:10", "expected a symbol before the repetition"},
      {"root ::= \"a\"{2,1}\n", "1:13", "n < m"},
      {"root ::= \"a\"{x}\n", "1:14", "expected a repetition count"},
      {"root ::= \"a\"{1,2\n", "1:17", "expected '}'"},
      {"root ::= \"a\"{1;2}\n", "1:15", "expected ',' or '}'"},
      {"root ::= \"a\"{99999999}\n", "1:14", "repetition count above"},
      {"root ::= (\"a\"\n", "2:1", "expected ')'"},
      {"root = \"a\"\n", "1:6", "expected '::='"},
      {"root ::= \"a\" )\n", "1:14", "expected a newline"},
      {"root ::= \"a\"\n::= \"b\"\n", "2:1", "expected a rule name"},
      {"root ::= \"\xC3\x28\"\n", "1:11", "invalid UTF-8"},
      {"root ::= \"abcdefghijklmnopq\"{65536}\n", "1:29", "more than"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const std::string e = parse_error(c.text);
    CHECK_THAT(e, Contains("[test.gbnf] "));
    CHECK_THAT(e, Contains(std::string(c.at)));
    CHECK_THAT(e, Contains(c.what));
  }
}

TEST_CASE("parse_gbnf: deep nesting and long helper chains stay bounded", "[constrain]") {
  std::string deep = "root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')') + "\n";
  CHECK_THAT(parse_error(deep), Contains("nested deeper than"));
  std::string ok = "root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')') + "\n";
  CHECK(whole(compile(ok), "a"));
  // A long optional chain (helper rules S'(k) ::= S S'(k-1) | ) parses and matches.
  const auto chain = compile("root ::= \"a\"{0,3000} \"b\"\n");
  CHECK(whole(chain, std::string(2999, 'a') + "b"));
}

TEST_CASE("choices_grammar accepts exactly its strings", "[constrain]") {
  const std::vector<std::string> choices = {"yes",        "no",    "maybe \"so\"", "back\\slash",
                                            "tab\tnew\n", "\xC3\xA9t\xC3\xA9", "[x]", "",
                                            "a # not a comment", "del\x7F"};
  auto g = choices_grammar(choices);
  REQUIRE(g);
  for (const std::string& c : choices) {
    INFO(c);
    CHECK(whole(*g, c));
  }
  CHECK_FALSE(whole(*g, "ye"));
  CHECK_FALSE(whole(*g, "yess"));
  CHECK_FALSE(whole(*g, "maybe so"));
  GrammarMatcher m(*g);
  CHECK(m.accepting());  // "" is a choice
  REQUIRE(m.feed("ye"));
  CHECK_FALSE(m.accepting());
  CHECK(m.can_continue());
  REQUIRE(m.feed("s"));
  CHECK(m.accepting());
  CHECK_FALSE(m.can_continue());
  CHECK_FALSE(choices_grammar(std::vector<std::string>{}));
  // Prefixes of each other, and a list longer than the matcher's stack limit: the choices
  // share a trie, so a state holds one stack per branch.
  std::vector<std::string> many = {"a", "ab", "abc", "b"};
  for (int i = 0; i < 6000; ++i) many.push_back("item-" + std::to_string(i * 7919 % 100000));
  auto big = choices_grammar(many);
  REQUIRE(big);
  for (const char* c : {"a", "ab", "abc", "b", "item-0", "item-7919", "item-15838"}) {
    INFO(c);
    CHECK(whole(*big, c));
  }
  CHECK_FALSE(whole(*big, "abcd"));
  CHECK_FALSE(whole(*big, "item-1"));
  GrammarMatcher it(*big);
  REQUIRE(it.feed("item-"));
  CHECK(it.stack_count() <= 10);
  const std::vector<std::string> bad = {"ok", "\xFF"};
  const auto e = choices_grammar(bad);
  REQUIRE_FALSE(e);
  CHECK(e.error().code == errc::invalid_argument);
}

}  // namespace test_grammar
