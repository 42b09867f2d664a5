// SPDX-License-Identifier: Apache-2.0
// json_schema_to_gbnf: grammar text for small schemas, errors that name the keyword and its JSON
// pointer, and every fixture under tests/data/json_schemas (each checked against ajv by
// tools/check_json_schema_fixtures.js): the grammar parses, valid instances are accepted whole,
// invalid ones refused, NAME.approx.jsonl (invalid instances the grammar deliberately accepts:
// fractional number bounds) accepted and NAME.refused.jsonl (valid instances it deliberately
// refuses: leap days, exponents under bounds, member order) refused, so that a changed grammar
// shows up here; what the bundled model generated under each (NAME.generated.jsonl, made by
// tools/make_json_schema_outputs.py) is accepted whole.
#include "edgellm/constrain/json_schema.hpp"

#include "edgellm/constrain/grammar.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/constrain/grammar_matcher.hpp"
#include "support/prelude.hpp"
#include "support/test_env.hpp"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace test_json_schema {

using edgellm::constrain::GrammarMatcher;
using edgellm::constrain::json_schema_to_gbnf;
using edgellm::constrain::JsonSchemaOptions;
using edgellm::constrain::parse_gbnf;

std::string gbnf(std::string_view schema, JsonSchemaOptions o = {}) {
  auto g = json_schema_to_gbnf(schema, o);
  INFO(schema);
  REQUIRE(g.has_value());
  return *g;
}

std::string error_of(std::string_view schema) {
  auto g = json_schema_to_gbnf(schema);
  REQUIRE_FALSE(g.has_value());
  return g.error().message;
}

// A matcher factory for a schema's grammar.
struct Accepts {
  std::shared_ptr<const edgellm::constrain::Grammar> grammar;
  explicit Accepts(std::string_view schema, JsonSchemaOptions o = {}) {
    std::string text = gbnf(schema, o);
    auto g = parse_gbnf(text, "schema grammar");
    INFO(text);
    REQUIRE(g.has_value());
    grammar = *g;
  }
  bool operator()(std::string_view instance) const {
    GrammarMatcher m(grammar);
    return m.feed(instance) && m.accepting();
  }
};

std::vector<std::string> lines_of(const fs::path& p) {
  std::vector<std::string> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

TEST_CASE("json_schema_to_gbnf: grammar text for small schemas", "[constrain]") {
  CHECK(gbnf(R"({"type":"boolean"})") ==
        "root ::= boolean\nboolean ::= ( \"true\" | \"false\" ) ws\nws ::= ( \" \" | \"\\n\" [ "
        "\\t]{0,20} )?\n");
  CHECK_THAT(gbnf(R"({"type":"integer","minimum":1,"maximum":12})"),
             Contains("root ::= ( [1-9] | \"1\" [0-2] ) ws\n"));
  CHECK_THAT(gbnf(R"({"type":"integer","minimum":0})"),
             Contains("root ::= ( [0-9] | [1-9] [0-9]{1,15} ) ws\n"));
  CHECK_THAT(gbnf(R"({"type":"string","maxLength":3})"),
             Contains("root ::= \"\\\"\" char{0,3} \"\\\"\" ws\n"));
  CHECK_THAT(gbnf(R"({"enum":["a",1]})"),
             Contains("root ::= ( \"\\\"a\\\"\" ws ) | ( \"1\" ws )\n"));
  // Optional properties: chained optional suffixes, required ones mandatory, schema order.
  CHECK_THAT(gbnf(R"({"type":"object","properties":{"a":{"type":"null"},"b":{"type":"null"}},
                     "required":["b"],"additionalProperties":false})"),
             Contains("root ::= \"{\" ws ( root-a-kv \",\" ws root-b-kv | root-b-kv ) \"}\" ws\n"));
  // $ref: one rule per target, recursion through its name.
  std::string list =
      gbnf(R"({"$defs":{"l":{"type":["null","object"],"properties":{"n":{"$ref":"#/$defs/l"}},
                              "additionalProperties":false}},"$ref":"#/$defs/l"})");
  CHECK_THAT(list, Contains("root ::= l\n"));
  CHECK_THAT(list, Contains("l-object-n-kv ::= \"\\\"n\\\"\" ws \":\" ws l\n"));
}

TEST_CASE("json_schema_to_gbnf: errors name the keyword and the JSON pointer", "[constrain]") {
  CHECK_THAT(error_of(R"({"type":"object","properties":{"a":{"not":{"type":"string"}}}})"),
             Contains("unsupported keyword \"not\" at #/properties/a"));
  CHECK_THAT(error_of(R"({"type":"array","items":{"type":"string","format":"uri"}})"),
             Contains("unsupported keyword \"format\" at #/items: format \"uri\""));
  CHECK_THAT(error_of(R"({"$ref":"https://example.com/s.json"})"),
             Contains("unsupported keyword \"$ref\" at #"));
  CHECK_THAT(error_of(R"({"$ref":"#/$defs/missing"})"), Contains("does not resolve"));
  CHECK_THAT(error_of(R"J({"properties":{"a/b":{"type":"string","pattern":"(?=x)"}}})J"),
             Contains("pattern at #/properties/a~1b"));
  CHECK_THAT(error_of(R"J({"properties":{"a/b":{"type":"string","pattern":"(?=x)"}}})J"),
             Contains("lookahead"));
  CHECK_THAT(error_of(R"({"allOf":[{"type":"string"},{"type":"integer"}]})"),
             Contains("keyword \"type\" in more than one part"));
  CHECK_THAT(error_of(R"({"type":"object","required":["x"]})"),
             Contains("\"x\" is not in properties"));
  CHECK_THAT(error_of(R"({"type":"integer","minimum":5,"maximum":4})"),
             Contains("empty integer range at #"));
  CHECK_THAT(error_of(R"({"anyOf":[{"uniqueItems":true}]})"),
             Contains("\"uniqueItems\" at #/anyOf/0"));
  CHECK(json_schema_to_gbnf(std::string_view("{")).error().code == errc::format_error);
  CHECK(json_schema_to_gbnf(std::string_view(R"({"not":{}})")).error().code == errc::unsupported);
}

TEST_CASE("json_schema_to_gbnf: additional properties and strict_properties", "[constrain]") {
  const char* schema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  Accepts open(schema);
  CHECK(open(R"({"a":1,"b":"x"})"));
  CHECK(open(R"({"ab":"x"})"));
  CHECK_FALSE(open(R"({"a":"x"})"));  // a listed key is not an additional one
  Accepts strict(schema, {.strict_properties = true});
  CHECK(strict(R"({"a":1})"));
  CHECK_FALSE(strict(R"({"a":1,"b":"x"})"));
  // Members come in the schema's order (a documented restriction).
  Accepts ordered(
      R"({"properties":{"a":{"type":"null"},"b":{"type":"null"}},"additionalProperties":false})");
  CHECK(ordered(R"({"a":null,"b":null})"));
  CHECK_FALSE(ordered(R"({"b":null,"a":null})"));
  // Bounded white space.
  Accepts any("{}");
  CHECK(any("[1, 2,\n    3]"));
  CHECK_FALSE(any("[1,  2]"));
}

TEST_CASE("json_schema_to_gbnf: every fixture schema, valid and invalid instances", "[constrain]") {
  const fs::path dir = fs::path(test::source_dir()) / "tests/data/json_schemas";
  std::vector<fs::path> schemas;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.size() > 5 && n.ends_with(".json")) schemas.push_back(e.path());
  }
  std::sort(schemas.begin(), schemas.end());
  REQUIRE(schemas.size() >= 50);
  std::size_t instances = 0;
  for (const auto& path : schemas) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string stem = path.stem().string();
    INFO(stem);
    Accepts accepts(ss.str());
    for (const auto& [suffix, want] :
         {std::pair{".valid.jsonl", true}, std::pair{".invalid.jsonl", false},
          std::pair{".approx.jsonl", true}, std::pair{".refused.jsonl", false},
          std::pair{".generated.jsonl", true}}) {
      const bool generated = std::string_view(suffix) == ".generated.jsonl";
      for (const auto& line : lines_of(dir / (stem + suffix))) {
        INFO(suffix << ": " << line);
        // A generated output is a JSON string holding what the model wrote.
        std::string text = line;
        if (generated) {
          auto v = edgellm::io::json::parse(line, "generated");
          REQUIRE(v);
          REQUIRE(v->is_string());
          text = v->as_string();
        }
        CHECK(accepts(text) == want);
        ++instances;
      }
    }
  }
  CHECK(instances >= 300);
}

}  // namespace test_json_schema
