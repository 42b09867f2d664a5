// SPDX-License-Identifier: Apache-2.0
// Chat templates: the renderings of real templates equal @huggingface/jinja's byte for byte
// (tests/data/chat_templates, made by tools/make_chat_template_fixtures.mjs), raise_exception
// reaches the caller, unsupported and malformed templates fail with line:column, and the
// Jinja details chat templates rely on (whitespace control, loop variables, namespaces,
// slicing, undefined) behave as in Python's Jinja2; a rendered Llama 3 / Qwen3 chat encodes to
// the ids of the real tokenizers, special tokens included (tests/data/tokenizer/real).
#include "edgellm/model/chat_template.hpp"

#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/model/tokenizer.hpp"
#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace test_model_chat_template {

namespace {

namespace json = edgellm::io::json;
using edgellm::errc;
using edgellm::model::ChatMessage;
using edgellm::model::ChatRenderOptions;
using edgellm::model::ChatTemplate;

std::string fixture_dir() { return edgellm::test::source_dir() + "/tests/data/chat_templates"; }

json::Value read_json(const std::string& path) {
  auto text = edgellm::io::read_text_file(path);
  REQUIRE(text.has_value());
  auto v = json::parse(*text, path);
  REQUIRE(v.has_value());
  return std::move(*v);
}

/// Renders `src` with the given messages and options; fails the test on an error.
std::string render(std::string_view src, const std::vector<ChatMessage>& msgs, ChatRenderOptions opt = {}) {
  auto t = ChatTemplate::parse(src, "t");
  if (!t) FAIL(t.error().message);
  auto out = t->render(msgs, opt);
  if (!out) FAIL(out.error().message);
  return *out;
}

edgellm::error render_error(std::string_view src, const std::vector<ChatMessage>& msgs = {}) {
  auto t = ChatTemplate::parse(src, "t");
  if (!t) return t.error();
  auto out = t->render(msgs);
  REQUIRE_FALSE(out.has_value());
  return out.error();
}

std::string eval(std::string_view expr) { return render("{{ " + std::string(expr) + " }}", {}); }

}  // namespace

TEST_CASE("Chat templates render as @huggingface/jinja does", "[chat_template]") {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(fixture_dir()))
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 8);
  std::size_t checked = 0, errors = 0;
  for (const std::string& file : files) {
    const json::Value doc = read_json(file);
    const json::Object& o = doc.as_object();
    const std::string family = o.find("family")->as_string();
    auto t = ChatTemplate::parse(o.find("chat_template")->as_string(), family);
    if (!t) FAIL(t.error().message);
    for (const json::Value& c : o.find("cases")->as_array()) {
      const json::Object& co = c.as_object();
      INFO(family << " / " << co.find("name")->as_string());
      ChatRenderOptions opt;
      opt.add_generation_prompt = co.find("add_generation_prompt")->as_bool();
      for (const char* tok : {"bos_token", "eos_token"}) {
        const json::Value* v = o.find(tok);
        std::string s = v && v->is_string() ? v->as_string() : std::string();
        (tok[0] == 'b' ? opt.bos_token : opt.eos_token) = s;
      }
      if (const json::Value* vars = co.find("variables"))
        for (const auto& m : vars->as_object()) opt.variables.emplace_back(m.key, m.value);
      auto out = t->render_json(*co.find("messages"), opt);
      if (const json::Value* expected = co.find("expected")) {
        if (!out) FAIL(out.error().message);
        CHECK(*out == expected->as_string());
      } else {
        REQUIRE_FALSE(out.has_value());
        CHECK(out.error().code == errc::invalid_argument);
        CHECK_THAT(out.error().message, Catch::Contains(co.find("expected_error")->as_string()));
        CHECK_THAT(out.error().message, Catch::Contains(", column "));
        ++errors;
      }
      ++checked;
    }
  }
  CHECK(checked >= 48);
  CHECK(errors >= 3);
}

TEST_CASE("Chat template semantics match Python's Jinja2 as transformers configures it", "[chat_template]") {
  // tests/data/chat_templates/semantics/python_jinja2.json: tools/make_chat_template_semantics.py.
  const json::Value cases = read_json(fixture_dir() + "/semantics/python_jinja2.json");
  const std::vector<ChatMessage> msgs = {{"system", "S"}, {"user", "hello"}};
  ChatRenderOptions opt;
  opt.add_generation_prompt = false;
  std::size_t n = 0;
  for (const json::Value& c : cases.as_array()) {
    const json::Object& o = c.as_object();
    const std::string& src = o.find("template")->as_string();
    INFO(src);
    auto t = ChatTemplate::parse(src, "case");
    if (const json::Value* expected = o.find("expected")) {
      if (!t) FAIL(t.error().message);
      auto out = t->render(msgs, opt);
      if (!out) FAIL(out.error().message);
      CHECK(*out == expected->as_string());
    } else {
      CHECK_FALSE((t.has_value() && t->render(msgs, opt).has_value()));
    }
    ++n;
  }
  CHECK(n >= 80);
}

TEST_CASE("ChatTemplate::load reads tokenizer_config.json", "[chat_template]") {
  const auto dir = std::filesystem::temp_directory_path() / "edgellm_chat_template_test";
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& text) {
    std::ofstream(dir / "tokenizer_config.json", std::ios::binary) << text;
  };
  write(R"({"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>",
           "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}D{{ eos_token }}"}]})");
  auto t = ChatTemplate::load(dir.string());
  if (!t) FAIL(t.error().message);
  CHECK(t->bos_token() == "<s>");
  CHECK(*t->render({}) == "<s>D</s>");

  write(R"({"eos_token": "</s>"})");
  auto none = ChatTemplate::find(dir.string());
  REQUIRE(none.has_value());
  CHECK_FALSE(none->has_value());
  CHECK_FALSE(ChatTemplate::load(dir.string()).has_value());

  write(R"({"chat_template": "{% if %}"})");
  auto bad = ChatTemplate::find(dir.string());
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code == errc::format_error);

  std::filesystem::remove(dir / "tokenizer_config.json");
  auto absent = ChatTemplate::find(dir.string());
  REQUIRE(absent.has_value());
  CHECK_FALSE(absent->has_value());
  std::filesystem::remove_all(dir);
  CHECK(ChatTemplate::find(dir.string()).error().code == errc::io_error);
}

TEST_CASE("Chat template errors name the construct and its line:column", "[chat_template]") {
  SECTION("unsupported constructs") {
    const struct {
      const char* src;
      const char* what;
    } cases[] = {
        {"ok\n  {{ x | wordwrap }}", "line 2, column 10: the filter 'wordwrap' is not supported"},
        {"{% if x is prime %}{% endif %}", "line 1, column 12: the test 'prime' is not supported"},
        {"a\n{% raw %}{% endraw %}", "line 2, column 4: the '{% raw %}' statement is not supported"},
        {"{% for x in xs recursive %}{% endfor %}", "the loops are not supported"},
        {"{{ 'a'.format(1) }}", "line 1, column 7: the method 'format' of a string is not supported"},
    };
    for (const auto& c : cases) {
      INFO(c.src);
      const auto e = render_error(c.src, {{"user", "u"}});
      CHECK(e.code == errc::unsupported);
      if (std::string(c.what) != "the loops are not supported")
        CHECK_THAT(e.message, Catch::Contains(c.what));
      else
        CHECK_THAT(e.message, Catch::Contains("recursive loops are not supported"));
    }
  }
  SECTION("malformed templates") {
    const struct {
      const char* src;
      const char* what;
    } cases[] = {
        {"{% if x %}never closed", "line 1, column 1: '{% if %}' is never closed"},
        {"{{ 'abc }}", "line 1, column 4: unterminated string literal"},
        {"x\n{{ 1 + }}", "line 2, column 8: expected an expression, found '}}'"},
        {"{% for x in %}{% endfor %}", "expected an expression"},
        {"{% endif %}", "unexpected '{% endif %}'"},
        {"{% if a %}{% endfor %}", "expected '{% endif %}', found '{% endfor %}'"},
        {"{{ a }", "unclosed expression tag"},
        {"{# x", "unclosed comment"},
        {"{% frobnicate %}", "unknown statement '{% frobnicate %}'"},
        {"{% break %}", "'break' outside a loop"},
        {"{{ a $ b }}", "unexpected character '$'"},
    };
    for (const auto& c : cases) {
      INFO(c.src);
      auto t = ChatTemplate::parse(c.src, "t");
      REQUIRE_FALSE(t.has_value());
      CHECK(t.error().code == errc::format_error);
      CHECK_THAT(t.error().message, Catch::Contains(c.what));
      CHECK_THAT(t.error().message, Catch::Contains("[chat_template] t: line "));
    }
  }
  SECTION("runtime errors") {
    CHECK_THAT(render_error("\n  {{ raise_exception('no ' ~ 1) }}").message,
               Catch::Contains("line 2, column 6: the template raised an exception: no 1"));
    CHECK_THAT(render_error("{{ foo.bar }}").message, Catch::Contains("'foo' is undefined"));
    CHECK_THAT(render_error("{{ 'a' + 1 }}").message, Catch::Contains("'+' is not supported between a string and a int"));
    CHECK_THAT(render_error("{{ 1 // 0 }}").message, Catch::Contains("division by zero"));
    CHECK_THAT(render_error("{{ nope() }}").message, Catch::Contains("'nope' is undefined"));
  }
  SECTION("limits: no crash, no hang") {
    std::string deep(5000, '(');
    CHECK(ChatTemplate::parse("{{ " + deep + "1" + std::string(5000, ')') + " }}").error().code == errc::format_error);
    std::string nested;
    for (int i = 0; i < 300; ++i) nested += "{% if x %}";
    CHECK(ChatTemplate::parse(nested).error().code == errc::format_error);
    CHECK(render_error("{{ 'x' * 100000000000 }}").code == errc::capacity_exceeded);
    CHECK(render_error("{% set ns = namespace(v=[]) %}{% for i in range(100) %}{% set ns.v = [ns.v] %}{% endfor %}")
              .code == errc::capacity_exceeded);
    CHECK(render_error("{% set ns = namespace() %}{% set ns.me = ns %}").code == errc::unsupported);
    CHECK(render_error("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}").code == errc::capacity_exceeded);
    ChatRenderOptions small;
    small.max_output_bytes = 10;
    auto t = ChatTemplate::parse("{% for i in range(20) %}ab{% endfor %}");
    REQUIRE(t.has_value());
    CHECK(t->render({}, small).error().code == errc::capacity_exceeded);
    ChatRenderOptions few;
    few.max_loop_iterations = 1000;
    auto loops = ChatTemplate::parse("{% for i in range(30) %}{% for j in range(100) %}{% endfor %}{% endfor %}");
    REQUIRE(loops.has_value());
    CHECK(loops->render({}, few).error().code == errc::capacity_exceeded);
    CHECK(ChatTemplate::parse("{{ range(5000) | length }}")->render({}, few).error().code == errc::capacity_exceeded);
    // Lists that double each iteration stop at the iteration limit, not at the memory's end.
    CHECK(render_error("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}")
              .code == errc::capacity_exceeded);
    CHECK(render_error("{% set ns = namespace(l=[1, 2]) %}{% for i in range(64) %}{% set ns.l = ns.l * 2 %}{% endfor %}")
              .code == errc::capacity_exceeded);
  }
}

TEST_CASE("Chat template Jinja semantics follow Python's Jinja2 with trim/lstrip_blocks", "[chat_template]") {
  SECTION("whitespace control") {
    CHECK(render("a  {{- 'b' -}}  c", {}) == "abc");
    CHECK(render("a\n  {% if true %}\n    x\n  {% endif %}\nb", {}) == "a\n    x\nb");
    CHECK(render("a {% if true %}x{% endif %} b", {}) == "a x b");
    CHECK(render("a\n  {%+ if true %}x{% endif %}", {}) == "a\n  x");
    CHECK(render("a\n{# note #}\nb", {}) == "a\nb");
    CHECK(render("{% if true -%}\n\n  x  {%- endif %}", {}) == "x");
    CHECK(render("{{ 'a' }}\n{{ 'b' }}", {}) == "a\nb");
  }
  SECTION("loops") {
    CHECK(render("{% for m in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}"
                 "{{ loop.length }}{{ loop.revindex }}|{% endfor %}",
                 {{"user", "a"}, {"assistant", "b"}}) == "01TrueFalse22|12FalseTrue21|");
    CHECK(render("{% for x in [] %}a{% else %}empty{% endfor %}", {}) == "empty");
    CHECK(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", {}) == "a=1;b=2;");
    CHECK(render("{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}", {}) == "2242");
    CHECK(render("{% for x in range(5) %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif %}"
                 "{{ x }}{% endfor %}",
                 {}) == "02");
    // Assignments inside a loop do not leak; namespaces carry state out.
    CHECK(render("{% set x = 1 %}{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set x = i %}"
                 "{% set ns.n = ns.n + i %}{% endfor %}{{ x }} {{ ns.n }}",
                 {}) == "1 3");
  }
  SECTION("slicing, indexing, strings") {
    CHECK(eval("[1,2,3,4][::-1]") == "[4, 3, 2, 1]");
    CHECK(eval("[1,2,3,4][1:]") == "[2, 3, 4]");
    CHECK(eval("[1,2,3,4][-2]") == "3");
    CHECK(eval("'héllo'[1:3]") == "él");
    CHECK(eval("'héllo'[::-1]") == "olléh");
    CHECK(eval("'héllo' | length") == "5");
    CHECK(eval("'a</think>b'.split('</think>')[-1]") == "b");
    CHECK(eval("'  a b  '.split()") == "['a', 'b']");
    CHECK(eval("'\\n\\nx\\n'.lstrip('\\n')") == "x\n");
    CHECK(eval("'xxaxx'.strip('x')") == "a");
    CHECK(eval("'abc'.startswith(('x', 'a'))") == "True");
    CHECK(eval("'Hello World' | lower | replace('o', '0')") == "hell0 w0rld");
    CHECK(eval("'hello world' | title") == "Hello World");
    CHECK(eval("'a' ~ 1 ~ none") == "a1None");
  }
  SECTION("values and operators") {
    CHECK(eval("7 // 2") == "3");
    CHECK(eval("-7 // 2") == "-4");
    CHECK(eval("-7 % 3") == "2");
    CHECK(eval("7 / 2") == "3.5");
    CHECK(eval("4 / 2") == "2.0");
    CHECK(eval("2 ** 10") == "1024");
    CHECK(eval("1 < 2 < 3") == "True");
    CHECK(eval("'b' in 'abc' and 'x' not in ['a']") == "True");
    CHECK(eval("0 or 'x'") == "x");
    CHECK(eval("'yes' if [] else 'no'") == "no");
    CHECK(eval("{'a': [1, 'b', none, true]} | tojson") == R"({"a": [1, "b", null, true]})");
    CHECK(eval("{'b': 1, 'a': {'c': 'é\"'}} | tojson(indent=2)") == "{\n  \"b\": 1,\n  \"a\": {\n    \"c\": \"é\\\"\"\n  }\n}");
    CHECK(eval("{'a': 1}.get('b', 2)") == "2");
    CHECK(eval("[{'r': 'u'}, {'r': 'a'}, {'r': 'u'}] | selectattr('r', 'equalto', 'u') | list | length") == "2");
    CHECK(eval("[{'r': 'u'}, {'r': 'a'}] | map(attribute='r') | join(',')") == "u,a");
    CHECK(eval("[3, 1, 2] | sort | first") == "1");
    CHECK(eval("'x\\ny' | indent(2)") == "x\n  y");
  }
  SECTION("undefined") {
    CHECK(eval("nothing") == "");
    CHECK(eval("nothing is defined") == "False");
    CHECK(eval("nothing | default('d')") == "d");
    CHECK(eval("{'a': 1}.b is defined") == "False");
    CHECK(render("{% if not tools %}no tools{% endif %}{% for t in tools %}x{% endfor %}", {}) == "no tools");
    CHECK(eval("nothing | length") == "0");
  }
  SECTION("macros and set blocks") {
    CHECK(render("{% macro hi(name, p='!') %}hi {{ name }}{{ p }}{% endmacro %}{{ hi('a') }} {{ hi('b', p='?') }}", {}) ==
          "hi a! hi b?");
    CHECK(render("{% set x %}a{{ 1 + 1 }}{% endset %}[{{ x }}]", {}) == "[a2]");
  }
  SECTION("globals") {
    ChatRenderOptions opt;
    opt.now = 86400 * 365;  // 1971-01-01
    opt.variables.emplace_back("extra", json::Value(false));
    const std::string out = render("{{ strftime_now('%Y') }} {{ extra is false }} {{ add_generation_prompt }}", {}, opt);
    CHECK((out == "1971 True True" || out == "1970 True True"));  // local time zone
  }
}

TEST_CASE("Chat template integer arithmetic is checked, never wrapped", "[chat_template]") {
  // Python's ints are unbounded, a template's are int64_t: a result outside it is an error
  // naming the operation (2 ** 64 used to render 0; range() near INT64_MAX overflowed, which
  // is undefined behaviour: run under -fsanitize=undefined).
  const auto overflows = [](std::string_view expr, std::string_view names) {
    const edgellm::error e = render_error("{{ " + std::string(expr) + " }}");
    INFO(expr << " -> " << e.message);
    CHECK(e.code == errc::out_of_range);
    CHECK(e.message.find("integer overflow in " + std::string(names)) != std::string::npos);
  };
  SECTION("operators") {
    overflows("2 ** 64", "2 ** 64");
    overflows("2 ** 63", "2 ** 63");
    overflows("3 ** 1000000000000", "3 ** 1000000000000");
    overflows("9223372036854775807 + 1", "9223372036854775807 + 1");
    overflows("-9223372036854775807 - 2", "-9223372036854775807 - 2");
    overflows("4611686018427387904 * 2", "4611686018427387904 * 2");
    overflows("(-9223372036854775807 - 1) // -1", "-9223372036854775808 // -1");
    overflows("-(-9223372036854775807 - 1)", "-(-9223372036854775808)");
    overflows("(-9223372036854775807 - 1) | abs", "abs(-9223372036854775808)");
    overflows("[9223372036854775807, 1] | sum", "9223372036854775807 + 1");
    overflows("1e19 | int", "int(1e+19)");
    overflows("'99999999999999999999' | int", "int('99999999999999999999')");
    // Line and column come first, as for every render error.
    CHECK(render_error("{{ 2 ** 64 }}").message.find("line 1, column") != std::string::npos);
    // Up to the limits the results are exact.
    CHECK(eval("2 ** 62") == "4611686018427387904");
    CHECK(eval("(-2) ** 63") == "-9223372036854775808");
    CHECK(eval("1 ** 1000000000000000000") == "1");
    CHECK(eval("(-1) ** 1000000000000000001") == "-1");
    CHECK(eval("0 ** 0") == "1");
    CHECK(eval("2 ** -1") == "0.5");
    CHECK(eval("9223372036854775806 + 1") == "9223372036854775807");
    CHECK(eval("-9223372036854775807 - 1") == "-9223372036854775808");
    CHECK(eval("(-9223372036854775807 - 1) % -1") == "0");
    CHECK(eval("(-9223372036854775807 - 1) // 1") == "-9223372036854775808");
    CHECK(eval("[9223372036854775806, 1] | sum") == "9223372036854775807");
    CHECK(eval("-9.5 | int") == "-9");
    CHECK(eval("'nan' | float | int(7)") == "7");  // the default, as Jinja2's int filter
  }
  SECTION("range() and slices near the int64_t bounds") {
    CHECK(eval("range(9223372036854775806, 9223372036854775807, 2) | list") ==
          "[9223372036854775806]");
    CHECK(eval("range(9223372036854775805, 9223372036854775807) | list") ==
          "[9223372036854775805, 9223372036854775806]");
    CHECK(eval("range(-9223372036854775807, -9223372036854775807 - 1, -5) | list") ==
          "[-9223372036854775807]");
    CHECK(eval("range(0, 9223372036854775807, 4611686018427387904) | list") ==
          "[0, 4611686018427387904]");
    CHECK(eval("range(9223372036854775807, 0, -9223372036854775807 - 1) | list") ==
          "[9223372036854775807]");
    CHECK(eval("range(3, 0, -1) | list") == "[3, 2, 1]");
    CHECK(render_error("{{ range(-9223372036854775807, 9223372036854775807) | length }}").code ==
          errc::capacity_exceeded);
    CHECK(eval("[1, 2, 3][1::9223372036854775807]") == "[2]");
    CHECK(eval("'abc'[2::-9223372036854775807 - 1]") == "c");
    CHECK(eval("[1, 2, 3][-9223372036854775807 - 1:9223372036854775807]") == "[1, 2, 3]");
  }
}

TEST_CASE("ChatTemplate::chatml renders ChatML, the fallback format", "[chat_template]") {
  auto t = ChatTemplate::chatml();
  REQUIRE(t.has_value());
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi"}};
  auto prompt = t->render(msgs);
  REQUIRE(prompt.has_value());
  CHECK(*prompt ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n");
  ChatRenderOptions opt;
  opt.add_generation_prompt = false;
  prompt = t->render(msgs, opt);
  REQUIRE(prompt.has_value());
  CHECK(*prompt == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  auto tok = edgellm::model::Tokenizer::load(edgellm::test::source_dir() +
                                             "/tests/data/tokenizer/qwen2_bytelevel.json");
  REQUIRE(tok.has_value());
  edgellm::model::EncodeOptions eo;
  eo.parse_special = true;
  auto ids = tok->encode(*prompt, eo);
  REQUIRE(ids.has_value());
  CHECK(ids->front() == *tok->token_to_id("<|im_start|>"));
}

TEST_CASE("A rendered Qwen ChatML prompt encodes its markers as special tokens", "[chat_template]") {
  // The test tokenizer of tests/data/tokenizer gives <|im_start|> and <|im_end|> their own ids,
  // as the real Qwen2 vocabulary does (151644, 151645).
  const json::Value doc = read_json(fixture_dir() + "/qwen3.json");
  auto t = ChatTemplate::parse(doc.as_object().find("chat_template")->as_string(), "qwen3");
  REQUIRE(t.has_value());
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi"}};
  auto prompt = t->render(msgs);
  REQUIRE(prompt.has_value());
  auto tok = edgellm::model::Tokenizer::load(edgellm::test::source_dir() + "/tests/data/tokenizer/qwen2_bytelevel.json");
  REQUIRE(tok.has_value());
  const auto start = tok->token_to_id("<|im_start|>");
  const auto end = tok->token_to_id("<|im_end|>");
  REQUIRE(start.has_value());
  REQUIRE(end.has_value());
  edgellm::model::EncodeOptions eo;
  eo.parse_special = true;
  auto ids = tok->encode(*prompt, eo);
  REQUIRE(ids.has_value());
  CHECK(std::count(ids->begin(), ids->end(), *start) == 3);
  CHECK(std::count(ids->begin(), ids->end(), *end) == 2);
  CHECK(ids->front() == *start);
}

TEST_CASE("A rendered Llama 3 / Qwen3 chat encodes to the real tokenizers' ids",
          "[chat_template]") {
  // tests/data/tokenizer/real/<family>: the real tokenizer.json (all added tokens, real ids)
  // reduced to the vocabulary the conversation needs, the real tokenizer_config.json, and the
  // rendering and ids that @huggingface/jinja and the FULL tokenizer give
  // (tools/make_real_tokenizer_fixtures.mjs). Encoded as edgellm-generate --chat does.
  const struct {
    const char* family;
    std::vector<std::int32_t> special;  // must appear: the markers of the template
  } families[] = {
      {"llama3", {128000, 128006, 128007, 128009}},  // begin_of_text, start/end_header_id, eot_id
      {"qwen3", {151644, 151645}},                   // im_start, im_end
  };
  for (const auto& f : families) {
    INFO(f.family);
    const std::string dir = edgellm::test::source_dir() + "/tests/data/tokenizer/real/" + f.family;
    const json::Value chat = read_json(dir + "/chat.json");
    const json::Object& o = chat.as_object();
    auto t = ChatTemplate::load(dir);
    if (!t) FAIL(t.error().message);
    auto tok = edgellm::model::Tokenizer::load(dir + "/tokenizer.json");
    if (!tok) FAIL(tok.error().message);

    ChatRenderOptions opt;
    opt.add_generation_prompt = o.find("add_generation_prompt")->as_bool();
    auto prompt = t->render_json(*o.find("messages"), opt);
    if (!prompt) FAIL(prompt.error().message);
    CHECK(*prompt == o.find("expected")->as_string());

    edgellm::model::EncodeOptions eo;
    eo.add_special = false;
    eo.parse_special = true;
    auto ids = tok->encode(*prompt, eo);
    REQUIRE(ids.has_value());
    std::vector<std::int32_t> expected;
    for (const json::Value& v : o.find("expected_ids")->as_array())
      expected.push_back(static_cast<std::int32_t>(*v.get_int()));
    CHECK(*ids == expected);
    for (const json::Member& m : o.find("special_ids")->as_object()) {
      CHECK(tok->token_to_id(m.key) == static_cast<std::int32_t>(*m.value.get_int()));
    }
    for (const std::int32_t id : f.special) {
      INFO("special id " << id);
      CHECK(std::count(ids->begin(), ids->end(), id) >= 1);
    }
    // Without parse_special the markers are text: no special id comes out.
    eo.parse_special = false;
    auto plain = tok->encode(*prompt, eo);
    REQUIRE(plain.has_value());
    for (const std::int32_t id : f.special)
      CHECK(std::count(plain->begin(), plain->end(), id) == 0);
  }
}

}  // namespace test_model_chat_template
