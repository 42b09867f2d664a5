// SPDX-License-Identifier: Apache-2.0
// GrammarMatcher: sentences of llama.cpp's example grammars accepted whole with every prefix
// viable (and a shortest completion from every prefix that really completes), wrong ones
// refused; json.gbnf agrees with JsonMatcher where the two define the same language; UTF-8
// decoded strictly with early refusal of a code point's first byte; canonical states (equal
// after different paths, hash included); and the limits on stacks and depth.
#include "edgellm/constrain/grammar_matcher.hpp"

#include "edgellm/constrain/json_matcher.hpp"
#include "support/prelude.hpp"
#include "support/test_env.hpp"

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace test_grammar_matcher {

using edgellm::constrain::Grammar;
using edgellm::constrain::GrammarMatcher;
using edgellm::constrain::JsonMatcher;
using edgellm::constrain::parse_gbnf;
using GrammarPtr = std::shared_ptr<const Grammar>;

GrammarPtr load(const std::string& name) {
  std::ifstream in(test::source_dir() + "/tests/data/grammars/" + name, std::ios::binary);
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  auto g = parse_gbnf(ss.str(), name);
  if (!g) FAIL(g.error().message);
  return *g;
}

GrammarPtr compile(std::string_view text) {
  auto g = parse_gbnf(text, "test");
  INFO(text);
  if (!g) FAIL(g.error().message);
  return *g;
}

bool whole(const GrammarPtr& g, std::string_view s) {
  GrammarMatcher m(g);
  return m.feed(s) && m.accepting();
}

bool viable(const GrammarPtr& g, std::string_view s) {
  GrammarMatcher m(g);
  return m.feed(s);
}

// `s` is a sentence: accepted byte by byte, and from every prefix the shortest completion
// leads to an accepting state.
void check_sentence(const GrammarPtr& g, std::string_view s) {
  INFO(s);
  GrammarMatcher m(g);
  for (std::size_t i = 0; i <= s.size(); ++i) {
    INFO("after " << i << " bytes");
    const auto tail = m.shortest_completion();
    REQUIRE(tail);
    GrammarMatcher done = m;
    REQUIRE(done.feed(*tail));
    CHECK(done.accepting());
    if (i < s.size()) REQUIRE(m.advance(static_cast<unsigned char>(s[i])));
  }
  CHECK(m.accepting());
}

struct FixtureCase {
  const char* file;
  std::vector<std::string> good;
  std::vector<std::string> bad;  // not whole sentences (most are refused at some byte)
};

TEST_CASE("GrammarMatcher: llama.cpp's example grammars constrain", "[constrain]") {
  const std::vector<FixtureCase> cases = {
      {"arithmetic.gbnf",
       {"1+2=3\n", "(a *b)= x1\nc=2\n", "( x_1 )/y=\t7\n"},
       {"1+=2\n", "=1\n", "A=1\n", "1=2"}},
      {"c.gbnf",
       {"", "int main(){return 0;}", "int f(int x){x = x+1;return x;}float g(){}",
        "char c(){while(a<b){a = a+1;}// done\n}", "int h(){/* a * b */if(x==1){y = f(1, 2);}}"},
       {"int main(){return 0}", "intmain(){}", "int main()", "int 9(){}"}},
      {"chess.gbnf",
       {"1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n3. O-O-O Qxd8+\n"},
       {"1. e9 e5\n", "1. e4 e5\n", "2. e4 e5\n1. e4 e5\n", "1. e4  e5\n2. a3 a6\n"}},
      {"english.gbnf",
       {"Hello, world!", "a\tb\nc", "x"},
       {"", "Hello  world", "h\xC3\xA9llo", "end "}},
      {"japanese.gbnf",
       {"\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF \xE4\xB8\x96\xE7\x95\x8C",
        "\xE3\x82\xAB\xE3\x83\xBC\xE3\x80\x81"},
       {"hello", "\xE3\x81\x93 ", "\xEF\xBD\x81"}},
      {"json.gbnf",
       {"{}", "{\"a\": [1, 2.5, \"x\"], \"b\": {\"c\": null}}",
        "{\n  \"k\": true,\n\t\"e\": \"\\u00e9\\n\"\n} ", "{\"n\":-0.5e-1}"},
       {"[1]", "{\"a\":01}", "{\"a\" 1}", "{\"a\":1,}", "{\"a\":\"\x01\"}", "{}  "}},
      {"json_arr.gbnf",
       {"[\n1,\n2]", "[\n{\"a\": 1},\n\"s\"]", "[\n]"},
       {"[1,2]", "[\n1,2]", "[\n1]\n"}},
      {"list.gbnf",
       {"- apples\n- pears\n", "- \xC3\xA9t\xC3\xA9\n"},
       {"- \n", "* x\n", "- a", "- a\xE2\x80\xA8" "b\n"}},
  };
  for (const FixtureCase& c : cases) {
    INFO(c.file);
    const GrammarPtr g = load(c.file);
    for (const std::string& s : c.good) check_sentence(g, s);
    for (const std::string& s : c.bad) {
      INFO(s);
      CHECK_FALSE(whole(g, s));
    }
  }
  // Refused at the first byte that no sentence continues with.
  const GrammarPtr chess = load("chess.gbnf");
  CHECK(viable(chess, "1. e4 e5\n2"));
  CHECK_FALSE(viable(chess, "1. e4 e5\n0"));
  CHECK_FALSE(viable(chess, "1. e4 e5 "));
}

// The languages of json.gbnf and JsonMatcher differ in white space (json.gbnf: one space, or
// a newline and up to 20 tabs or spaces), numbers (json.gbnf: at most 16 integer digits, an
// odd exponent rule), escapes (json.gbnf: no "\/", \u without surrogate pairing) and DEL in
// strings. On texts free of those they must agree.
bool outside_common_language(const std::string& t) {
  int digits = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    digits = (c >= '0' && c <= '9') ? digits + 1 : 0;
    if (digits > 15) return true;
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == 0x7F) return true;
    if (c == '\\' && i + 1 < t.size() && (t[i + 1] == '/' || t[i + 1] == 'u')) return true;
    if ((c == 'e' || c == 'E') && i + 1 < t.size()) {
      std::size_t j = i + 1;
      if (t[j] == '+' || t[j] == '-') ++j;
      if (j < t.size() && t[j] >= '0' && t[j] <= '9') return true;
    }
  }
  return false;
}

TEST_CASE("GrammarMatcher: json.gbnf agrees with JsonMatcher on mutated texts", "[constrain]") {
  const GrammarPtr g = load("json.gbnf");
  const std::vector<std::string> seeds = {
      "{\"a\":[1,-2.5,true,null],\"b\":{\"c\":\"d\\n\xC3\xA9\"}}",
      "{\"k\":\"x\\\"y\",\"n\":0,\"m\":[[],{}],\"f\":false}",
      "{\"x\":[{\"y\":[-0,10.25]},\"\\t\"]}",
  };
  const std::string alphabet = "{}[],:\"\\0123456789.-+truefalsn\xC3\xA9\xED\xA0\xF0\x9F\x98\x80" "bx";
  std::mt19937 rng(4242);
  const JsonMatcher::Options o{.object_only = true, .max_whitespace = 255};
  const int rounds = test::test_scale() == test::scale::small ? 1500 : 6000;
  std::size_t compared = 0, accepted = 0;
  for (int round = 0; round < rounds; ++round) {
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
    if (outside_common_language(t)) continue;
    ++compared;
    INFO(t);
    JsonMatcher jm(o);
    GrammarMatcher gm(g);
    // Byte by byte: the same prefix is the first one refused.
    bool json_alive = true, grammar_alive = true;
    for (const char ch : t) {
      json_alive = json_alive && jm.feed(static_cast<unsigned char>(ch));
      grammar_alive = grammar_alive && gm.advance(static_cast<unsigned char>(ch));
      REQUIRE(json_alive == grammar_alive);
      if (!json_alive) break;
    }
    if (json_alive) {
      REQUIRE(jm.done() == gm.accepting());
      accepted += jm.done() ? 1 : 0;
    }
  }
  CHECK(compared > static_cast<std::size_t>(rounds) / 4);
  CHECK(accepted > static_cast<std::size_t>(rounds) / 50);
}

TEST_CASE("GrammarMatcher: UTF-8 decoded strictly, first bytes refused early", "[constrain]") {
  // [α-ω]: U+03B1..U+03C9, bytes CE B1 .. CF 89.
  const GrammarPtr greek = compile("root ::= [\\u03b1-\\u03c9]+ \"!\"\n");
  GrammarMatcher m(greek);
  CHECK(m.feed("\xCE\xB1\xCF\x89!"));
  CHECK(m.accepting());
  GrammarMatcher start(greek);
  GrammarMatcher probe = start;
  CHECK_FALSE(probe.advance(0xC3));  // no code point of the class starts with C3
  probe = start;
  CHECK(probe.advance(0xCE));
  CHECK(probe.can_continue());
  CHECK_FALSE(probe.accepting());
  CHECK_FALSE(probe.advance(0x80));  // U+0380 is below the range
  probe = start;
  CHECK_FALSE(probe.advance('a'));

  // Invalid UTF-8 is refused even where '.' or a negated class takes anything.
  const GrammarPtr any = compile("root ::= (. | [^a])*\n");
  for (const char* bad : {"\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80",
                          "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF", "\xC3" "A"}) {
    INFO(bad);
    CHECK_FALSE(viable(any, bad));
  }
  for (const char* good : {"\xC2\x80", "\xDF\xBF", "\xE0\xA0\x80", "\xED\x9F\xBF", "\xEE\x80\x80",
                           "\xF0\x90\x80\x80", "\xF4\x8F\xBF\xBF", "plain"}) {
    INFO(good);
    CHECK(whole(any, good));
  }
  GrammarMatcher half(any);
  CHECK(half.feed("\xF0\x9F\x98"));
  CHECK_FALSE(half.accepting());  // a code point is half read
  CHECK(half.can_continue());

  // Negated classes with non-ASCII members, literals with multi-byte code points.
  const GrammarPtr neg = compile("root ::= [^\\u00e9\xE2\x82\xAC] \"\xF0\x9F\x98\x80\"\n");
  CHECK(whole(neg, "e\xF0\x9F\x98\x80"));
  CHECK(whole(neg, "\xC3\xA8\xF0\x9F\x98\x80"));  // è
  CHECK_FALSE(viable(neg, "\xC3\xA9"));             // é
  CHECK_FALSE(viable(neg, "\xE2\x82\xAC"));         // €
  CHECK(viable(neg, "\xE2\x82"));                   // another U+20xx may follow
  CHECK_FALSE(whole(neg, "e\xF0\x9F\x98\x81"));
}

TEST_CASE("GrammarMatcher: feed is all or nothing; accepting and can_continue", "[constrain]") {
  const GrammarPtr g = compile("root ::= \"ab\" \"c\"?\n");
  GrammarMatcher m(g);
  CHECK_FALSE(m.accepting());
  CHECK(m.can_continue());
  CHECK_FALSE(m.feed("ax"));
  CHECK(m == GrammarMatcher(g));  // unchanged
  CHECK(m.feed("ab"));
  CHECK(m.accepting());
  CHECK(m.can_continue());
  CHECK(m.feed("c"));
  CHECK(m.accepting());
  CHECK_FALSE(m.can_continue());
  CHECK_FALSE(m.in_string_body());
  CHECK_FALSE(m.feed("c"));
}

TEST_CASE("GrammarMatcher: equal states after different paths, hash included", "[constrain]") {
  const GrammarPtr g = compile("root ::= (\"a\" | \"b\" | \"ab\") \"c\" x\nx ::= \"d\"*\n");
  GrammarMatcher p(g), q(g);
  REQUIRE(p.feed("ac"));
  REQUIRE(q.feed("abc"));
  CHECK(p == q);
  CHECK(p.hash() == q.hash());
  REQUIRE(p.feed("dd"));  // d* again: the same state
  CHECK(p == q);
  CHECK(p.hash() == q.hash());
  GrammarMatcher r(g), s(g);
  REQUIRE(r.feed("a"));
  REQUIRE(s.feed("b"));
  CHECK_FALSE(r == s);  // "a" may go on with "b", "b" may not
  const GrammarPtr json = load("json.gbnf");
  const std::vector<std::pair<std::string, std::string>> same = {
      {"{\"a\":1,", "{\"bcd\":[{}],"},
      {"{\"x\":", "{\"yyy\":"},
      {"{\"x\":1,\"y\":", "{\"yy\":[1],\"z\":"},
      {"{\"a\":[1,", "{\"a\":[\"s\",{},"},
      {"{\"s\":\"ab", "{\"s\":\"\\n\xC3\xA9"},
  };
  for (const auto& [a, b] : same) {
    INFO(a << " vs " << b);
    GrammarMatcher x(json), y(json);
    REQUIRE(x.feed(a));
    REQUIRE(y.feed(b));
    CHECK(x == y);
    CHECK(x.hash() == y.hash());
  }
  GrammarMatcher obj(json), arr(json);
  REQUIRE(obj.feed("{\"a\":{"));
  REQUIRE(arr.feed("{\"a\":["));
  CHECK_FALSE(obj == arr);
  CHECK(obj.hash() != arr.hash());
  // Copies (into reused capacity) are equal to their source.
  GrammarMatcher pool(json);
  REQUIRE(pool.feed("{\"long\":[[[[1,2,3"));
  pool = obj;
  CHECK(pool == obj);
  CHECK(pool.hash() == obj.hash());
}

TEST_CASE("GrammarMatcher: shortest_completion", "[constrain]") {
  const GrammarPtr json = load("json.gbnf");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "{}"},
      {"{", "}"},
      {"{\"a", "\":0}"},
      {"{\"a\":[", "]}"},
      {"{\"a\":[{\"b\":tr", "ue}]}"},
      {"{\"a\":\"\\u00", "00\"}"},
      {"{}", ""},
  };
  for (const auto& [prefix, tail] : cases) {
    INFO(prefix);
    GrammarMatcher m(json);
    REQUIRE(m.feed(prefix));
    const auto c = m.shortest_completion();
    REQUIRE(c);
    CHECK(*c == tail);
    CHECK(m.completion() == tail);
  }
  // In the middle of a code point: the smallest one of the grammar that it can become.
  const GrammarPtr accents = compile("root ::= \"\xC3\xBC\" | \"\xC3\xA9\" \"x\" | \"\xE2\x82\xAC\"\n");
  GrammarMatcher m(accents);
  REQUIRE(m.advance(0xC3));
  const auto c = m.shortest_completion();
  REQUIRE(c);
  CHECK(*c == "\xBC");
  // A state from which no sentence ends.
  const GrammarPtr endless = compile("root ::= \"a\" x | \"b\"\nx ::= \"b\" x\n");
  GrammarMatcher e(endless);
  REQUIRE(e.feed("a"));
  CHECK_FALSE(e.shortest_completion());
  CHECK(e.completion().empty());
}

TEST_CASE("GrammarMatcher: depth and stack limits refuse instead of growing", "[constrain]") {
  const GrammarPtr nest = compile("root ::= \"(\" root \")\" | \"x\"\n");
  CHECK(whole(nest, "((x))"));
  GrammarMatcher m(nest);
  std::size_t opened = 0;
  while (opened < 2000 && m.advance('(')) ++opened;
  CHECK(opened > 300);
  CHECK(opened < GrammarMatcher::kMaxDepth + 2);
  // Ambiguity: every split of a run of 'a's into pieces is a stack, but equal stacks merge.
  const GrammarPtr amb = compile("root ::= x*\nx ::= \"a\" | \"aa\" | \"aaa\"\n");
  GrammarMatcher a(amb);
  REQUIRE(a.feed(std::string(200, 'a')));
  CHECK(a.accepting());
  CHECK(a.stack_count() < 8);
  // A long nullable chain expands within the step limit or is refused, never crashes.
  const GrammarPtr chain = compile("root ::= (\"a\"?){0,2000} \"b\"\n");
  GrammarMatcher c(chain);
  const bool took = c.feed("aab");
  CHECK((!took || c.accepting()));
}

}  // namespace test_grammar_matcher
