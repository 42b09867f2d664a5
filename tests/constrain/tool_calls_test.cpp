// SPDX-License-Identifier: Apache-2.0
// Tool calls: the tools array's errors, the format of the real chat templates, replies parsed in
// each family's form, the call grammar, and on the bundled model (its weights and tokenizer,
// rendered with the real templates of tests/data/chat_templates): forced calls whose arguments
// validate against the tool's schema, and the lazy constraint that leaves free text alone and
// holds a call to the schema once the model opens one.
#include "edgellm/constrain/tool_calls.hpp"

#include "edgellm/constrain/grammar_matcher.hpp"
#include "edgellm/constrain/json_schema.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/model/chat_template.hpp"
#include "edgellm/session.hpp"
#include "support/bundled_engine.hpp"
#include "support/prelude.hpp"
#include "support/test_env.hpp"

#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace test_tool_calls {

using namespace edgellm;
using namespace edgellm::constrain;

constexpr const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "description": "the city's name"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
      "required": ["city"]}}},
  {"type": "function", "function": {"name": "search_verses",
    "description": "Find Bible verses about a topic",
    "parameters": {"type": "object", "properties": {
      "topic": {"type": "string"},
      "limit": {"type": "integer", "minimum": 1, "maximum": 10}},
      "required": ["topic", "limit"]}}}
])";

json::Value tools_json() {
  auto v = json::parse(kTools, "tools");
  REQUIRE(v);
  return *v;
}

std::vector<Tool> tools() {
  auto t = parse_tools(tools_json());
  REQUIRE(t);
  return *t;
}

json::Value fixture(const std::string& family) {
  std::ifstream in(test::source_dir() + "/tests/data/chat_templates/" + family + ".json");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  auto v = json::parse(ss.str(), family);
  REQUIRE(v);
  return *v;
}

std::string template_source(const std::string& family) {
  return fixture(family).find("chat_template")->as_string();
}

// True when `arguments` is valid against `schema`: the schema's grammar accepts the text, and it
// parses as an object holding the required keys.
bool validates(const std::string& arguments, const std::string& schema) {
  auto gbnf = json_schema_to_gbnf(std::string_view(schema), {.strict_properties = true});
  REQUIRE(gbnf);
  auto g = parse_gbnf(*gbnf);
  REQUIRE(g);
  GrammarMatcher m(*g);
  if (!m.feed(arguments) || !m.accepting()) return false;
  auto v = json::parse(arguments, "arguments");
  auto s = json::parse(schema, "schema");
  REQUIRE(s);
  if (!v || !v->is_object()) return false;
  if (const json::Value* req = s->find("required"))
    for (const json::Value& k : req->as_array())
      if (!v->find(k.as_string())) return false;
  return true;
}

TEST_CASE("parse_tools reads OpenAI's array and names the index and field of errors", "[constrain]") {
  const std::vector<Tool> t = tools();
  REQUIRE(t.size() == 2);
  CHECK(t[0].name == "get_weather");
  CHECK(t[0].description == "The current weather in a city");
  CHECK_THAT(t[0].parameters, Contains("\"enum\":[\"celsius\",\"fahrenheit\"]"));
  auto bare = parse_tools(*json::parse(R"([{"function": {"name": "f"}}])", "t"));
  REQUIRE(bare);  // "type" may be left out; no parameters: an object without properties
  CHECK((*bare)[0].parameters == R"({"type":"object","properties":{}})");

  const std::pair<const char*, const char*> bad[] = {
      {R"({"a": 1})", "tools: expected an array"},
      {R"([1])", "tools[0]: expected an object"},
      {R"([{"type": "code"}])", "tools[0].type: \"code\" is not \"function\""},
      {R"([{"type": "function"}])", "tools[0].function: missing"},
      {R"([{"function": {"name": "a"}}, {"function": {"name": "b"}}, {"function": {}}])",
       "tools[2].function.name: missing"},
      {R"([{"function": {"name": 3}}])", "tools[0].function.name: expected a string"},
      {R"([{"function": {"name": "a b"}}])", "tools[0].function.name: \"a b\" is not 1 to 64"},
      {R"([{"function": {"name": "a"}}, {"function": {"name": "a"}}])",
       "tools[1].function.name: \"a\" is named twice"},
      {R"([{"function": {"name": "a", "description": 1}}])", "tools[0].function.description"},
      {R"([{"function": {"name": "a", "parameters": []}}])",
       "tools[0].function.parameters: expected a JSON Schema object"},
  };
  for (const auto& [text, message] : bad) {
    INFO(text);
    auto r = parse_tools(*json::parse(text, "t"));
    REQUIRE_FALSE(r);
    CHECK(r.error().code == errc::invalid_argument);
    CHECK_THAT(r.error().message, Contains(message));
  }
  // A schema the compiler refuses names the tool.
  auto odd = parse_tools(*json::parse(
      R"([{"function": {"name": "a"}}, {"function": {"name": "b", "parameters": {"not": {}}}}])", "t"));
  REQUIRE(odd);
  auto g = ToolCallGrammar::compile(*odd, {});
  REQUIRE_FALSE(g);
  CHECK_THAT(g.error().message, Contains("tools[1].function.parameters"));
  CHECK_THAT(g.error().message, Contains("not"));
  CHECK_FALSE(ToolCallGrammar::compile(*odd, {.choice = {ToolChoice::Mode::none, {}}}));
  auto unknown = ToolCallGrammar::compile(tools(), {.choice = parse_tool_choice("nope")});
  REQUIRE_FALSE(unknown);
  CHECK_THAT(unknown.error().message, Contains("no tool named \"nope\""));
}

TEST_CASE("detect_tool_call_format on the real chat templates", "[constrain]") {
  CHECK(detect_tool_call_format(template_source("qwen2_5")) == ToolCallFormat::qwen);
  CHECK(detect_tool_call_format(template_source("qwen3")) == ToolCallFormat::qwen);
  CHECK(detect_tool_call_format(template_source("llama3_2")) == ToolCallFormat::llama3);
  // Without tool support in their text: no format.
  for (const char* f : {"llama2", "llama3", "llama3_1", "mistral", "gemma3", "phi3", "deepseek_v3"}) {
    INFO(f);
    CHECK_FALSE(detect_tool_call_format(template_source(f)));
  }
  CHECK(detect_tool_call_format("{{ '[TOOL_CALLS] ' + tool_calls | tojson }}") == ToolCallFormat::mistral);
}

TEST_CASE("parse_tool_calls reads each family's replies", "[constrain]") {
  using F = ToolCallFormat;
  SECTION("qwen") {
    auto one = parse_tool_calls(
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", F::qwen);
    REQUIRE(one.calls.size() == 1);
    CHECK(one.calls[0].name == "get_weather");
    CHECK(one.calls[0].arguments == R"({"city":"Paris"})");
    CHECK(one.text.empty());
    auto two = parse_tool_calls(
        "Let me look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"y\\\": [2]}\"}\n</tool_call>",
        F::qwen);
    REQUIRE(two.calls.size() == 2);
    CHECK(two.text == "Let me look.");
    CHECK(two.calls[1].name == "b");
    CHECK(two.calls[1].arguments == R"({"y":[2]})");  // arguments given as a string of JSON
    auto bad = parse_tool_calls(
        "Hi <tool_call>{\"name\": \"a\", \"arguments\": {</tool_call> then "
        "<tool_call>{\"name\": \"c\", \"arguments\": {}}</tool_call> bye",
        F::qwen);
    REQUIRE(bad.calls.size() == 1);
    CHECK(bad.calls[0].name == "c");
    CHECK(bad.text == "Hi <tool_call>{\"name\": \"a\", \"arguments\": {</tool_call> then  bye");
    auto unclosed = parse_tool_calls("<tool_call>\n{\"name\": \"a\", \"arguments\": {}}", F::qwen);
    CHECK(unclosed.calls.size() == 1);
    auto none = parse_tool_calls("just text", F::qwen);
    CHECK(none.calls.empty());
    CHECK(none.text == "just text");
  }
  SECTION("llama3") {
    auto one = parse_tool_calls(" {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", \"unit\": \"celsius\"}}", F::llama3);
    REQUIRE(one.calls.size() == 1);
    CHECK(one.calls[0].arguments == R"({"city":"Rome","unit":"celsius"})");
    CHECK(one.text.empty());
    auto two = parse_tool_calls("<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"z\": null}} done", F::llama3);
    REQUIRE(two.calls.size() == 2);
    CHECK(two.calls[1].arguments == R"({"z":null})");
    CHECK(two.text == "done");
    auto text = parse_tool_calls("The answer is {\"name\": \"a\", \"parameters\": {}}", F::llama3);
    CHECK(text.calls.empty());  // a call is the reply's start, not an object in the text
    auto bad = parse_tool_calls("{\"name\": \"a\", \"parameters\": 3}", F::llama3);
    CHECK(bad.calls.empty());
    CHECK(bad.text == "{\"name\": \"a\", \"parameters\": 3}");
  }
  SECTION("mistral") {
    auto two = parse_tool_calls(
        "Sure. [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"s\": \"]}\"}}, {\"name\": \"b\", \"arguments\": {}}]",
        F::mistral);
    REQUIRE(two.calls.size() == 2);
    CHECK(two.calls[0].arguments == R"({"s":"]}"})");
    CHECK(two.text == "Sure.");
    auto one = parse_tool_calls("[TOOL_CALLS]{\"name\": \"a\", \"arguments\": {}}", F::mistral);
    CHECK(one.calls.size() == 1);
    auto bad = parse_tool_calls("[TOOL_CALLS] [{\"name\": \"a\"}, {\"arguments\": {}}]", F::mistral);
    CHECK(bad.calls.empty());
    CHECK(bad.text == "[TOOL_CALLS] [{\"name\": \"a\"}, {\"arguments\": {}}]");
  }
}

TEST_CASE("The call grammar holds names and arguments to the tools", "[constrain]") {
  const auto accepts = [](const ToolCallGrammar& g, const std::string& reply) {
    ToolCallMatcher m = g.start_state();
    return m.feed(reply) && m.accepting();
  };
  const std::string weather = R"({"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}})";
  const std::string verses = R"({"name": "search_verses", "arguments": {"topic": "light", "limit": 3}})";
  auto forced = ToolCallGrammar::compile(tools(), {.format = ToolCallFormat::qwen,
                                                   .choice = {ToolChoice::Mode::required, {}}});
  REQUIRE(forced);
  const ToolCallGrammar& q = **forced;
  INFO(q.gbnf());
  CHECK(accepts(q, "<tool_call>\n" + weather + "\n</tool_call>"));
  CHECK(accepts(q, "<tool_call>\n" + weather + "\n</tool_call>\n<tool_call>\n" + verses + "\n</tool_call>"));
  CHECK_FALSE(accepts(q, "Hello"));  // forced: no text first
  CHECK_FALSE(accepts(q, "<tool_call>\n" + weather));  // not closed
  CHECK_FALSE(accepts(q, R"(<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris", "unit": "kelvin"}}
</tool_call>)"));
  CHECK_FALSE(accepts(q, R"(<tool_call>
{"name": "search_verses", "arguments": {"topic": "light", "limit": 11}}
</tool_call>)"));
  CHECK_FALSE(accepts(q, R"(<tool_call>
{"name": "get_weather", "arguments": {"unit": "celsius"}}
</tool_call>)"));  // city is required
  CHECK_FALSE(accepts(q, R"(<tool_call>
{"name": "launch", "arguments": {}}
</tool_call>)"));

  auto named = ToolCallGrammar::compile(tools(), {.format = ToolCallFormat::llama3,
                                                  .choice = parse_tool_choice("search_verses")});
  REQUIRE(named);
  CHECK(accepts(**named, R"({"name": "search_verses", "parameters": {"topic": "light", "limit": 3}})"));
  CHECK_FALSE(accepts(**named, R"({"name": "get_weather", "parameters": {"city": "Paris"}})"));

  auto lazy = ToolCallGrammar::compile(tools(), {.format = ToolCallFormat::qwen});
  REQUIRE(lazy);
  CHECK(accepts(**lazy, ""));
  CHECK(accepts(**lazy, "No call: <tool_ but not a call"));
  CHECK(accepts(**lazy, "Let me check. <<tool_call>\n" + weather + "\n</tool_call>"));
  CHECK_FALSE(accepts(**lazy, "Let me check. <tool_call>\n" + weather));  // opened: must close
  {
    ToolCallMatcher m = (*lazy)->start_state();
    CHECK(m.feed("text <tool_call>"));
    CHECK(m.in_call());
    CHECK_FALSE(m.feed("\n{\"name\": \"get_time\""));
    CHECK(m.feed("\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}\n</tool_call>"));
    CHECK(m.accepting());
    CHECK_FALSE(m.feed(" more text"));  // after a call: another call or the stop
  }
  auto llama = ToolCallGrammar::compile(tools(), {.format = ToolCallFormat::llama3});
  REQUIRE(llama);
  CHECK(accepts(**llama, "It is sunny {\"name\": 1}"));  // not at the start: text
  CHECK(accepts(**llama, "\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}"));
  CHECK_FALSE(accepts(**llama, "{\"name\": \"get_weather\", \"parameters\": {}}"));
  auto mistral = ToolCallGrammar::compile(tools(), {.format = ToolCallFormat::mistral});
  REQUIRE(mistral);
  CHECK(accepts(**mistral, "ok [TOOL_CALLS] [" + weather + ", " + verses + "]"));
  CHECK_FALSE(accepts(**mistral, "[TOOL_CALLS] [" + weather + ",]"));
  auto single = ToolCallGrammar::compile(tools(), {.format = ToolCallFormat::mistral, .parallel = false});
  REQUIRE(single);
  CHECK_FALSE(accepts(**single, "[TOOL_CALLS] [" + weather + ", " + verses + "]"));
}

// ---- the real templates with the bundled model's weights and tokenizer ----

std::shared_ptr<const Engine> engine() { return test::bundled_engine(); }

struct Family {
  const char* fixture;
  ToolCallFormat format;
};
constexpr Family kFamilies[] = {{"qwen2_5", ToolCallFormat::qwen},
                                {"qwen3", ToolCallFormat::qwen},
                                {"llama3_2", ToolCallFormat::llama3}};

// The conversation with the tools, rendered by the real template.
std::string render(const std::string& family) {
  const json::Value doc = fixture(family);
  auto t = model::ChatTemplate::parse(doc.find("chat_template")->as_string(), family);
  REQUIRE(t);
  const auto messages = json::parse(
      R"([{"role": "system", "content": "You are a helpful assistant."},
          {"role": "user", "content": "What is the weather in Paris?"}])", "messages");
  REQUIRE(messages);
  model::ChatRenderOptions o;
  o.variables.emplace_back("tools", tools_json());
  o.variables.emplace_back("date_string", json::Value("04 Dec 2026"));
  if (const json::Value* b = doc.find("bos_token"); b && b->is_string()) o.bos_token = b->as_string();
  auto text = t->render_json(*messages, o);
  REQUIRE(text);
  return *text;
}

// The prompt for a generation: the rendering's ids, or under sanitizers and emulation (small
// scale) their last 64 (the prefill of a whole tools prompt dominates there; what is checked,
// the call, does not depend on the system text before it).
std::vector<std::int32_t> prompt_ids(const std::string& text) {
  auto ids = engine()->tokenizer()->encode(text, {.add_special = false, .parse_special = true});
  REQUIRE(ids);
  const std::size_t keep = edgellm::test::scaled<std::size_t>(ids->size(), 64);
  if (ids->size() > keep) ids->erase(ids->begin(), ids->end() - static_cast<std::ptrdiff_t>(keep));
  return std::move(*ids);
}

std::vector<std::int32_t> stops() {
  std::vector<std::int32_t> s(engine()->eos_ids().begin(), engine()->eos_ids().end());
  if (auto id = engine()->tokenizer()->token_to_id("<|im_end|>")) s.push_back(*id);
  return s;
}

struct Reply {
  std::string text;
  decode::StopReason stop;
};

Reply generate(Session& session, std::span<const std::int32_t> prompt, ToolCallConstraint& c,
               std::size_t max_new, decode::LogitsProcessor* outer = nullptr) {
  GenerateOptions go;
  go.max_new_tokens = max_new;
  go.stop_ids = stops();
  go.logits_processor = outer ? outer : &c;
  auto out = session.generate(prompt, go);
  REQUIRE(out);
  return {engine()->tokenizer()->decode(out->tokens, false), out->stats.stop};
}

const Tool& tool_named(const std::vector<Tool>& ts, const std::string& name) {
  for (const Tool& t : ts)
    if (t.name == name) return t;
  FAIL("no tool " << name);
  return ts.front();
}

TEST_CASE("Real templates render the tools; forced calls on the bundled model validate", "[constrain]") {
  const std::vector<Tool> ts = tools();
  const auto trie = TokenTrie::build(*engine()->tokenizer(), engine()->config().vocab_size);
  REQUIRE(trie);
  for (const Family& f : kFamilies) {
    INFO(f.fixture);
    const std::string prompt_text = render(f.fixture);
    CHECK_THAT(prompt_text, Contains("\"name\": \"get_weather\""));
    CHECK_THAT(prompt_text, Contains("\"name\": \"search_verses\""));
    CHECK_THAT(prompt_text, Contains("The current weather in a city"));
    CHECK_THAT(prompt_text, Contains("fahrenheit"));
    CHECK_THAT(prompt_text, Contains("What is the weather in Paris?"));
    if (f.format == ToolCallFormat::qwen) CHECK_THAT(prompt_text, Contains("<tools>"));
    if (f.format == ToolCallFormat::llama3) CHECK_THAT(prompt_text, Contains("\"parameters\""));

    const auto prompt = std::make_optional(prompt_ids(prompt_text));
    auto session = Session::create(engine(), {});
    REQUIRE(session);
    // Required (greedy, then sampled), then the named tool (sampled, another seed); under
    // sanitizers and emulation (small scale) the greedy run alone.
    for (int run = 0; run < edgellm::test::scaled(3, 1); ++run) {
      INFO("run " << run);
      const ToolChoice choice = run < 2 ? ToolChoice{ToolChoice::Mode::required, {}}
                                        : parse_tool_choice("search_verses");
      auto g = ToolCallGrammar::compile(ts, {.format = f.format, .choice = choice});
      REQUIRE(g);
      decode::SamplingOptions so;
      so.temperature = run == 0 ? 0.0f : 1.0f;
      so.seed = static_cast<std::uint64_t>(run);
      REQUIRE(session->set_sampling(so));
      constexpr std::size_t kMax = 96;
      auto c = (*g)->start(*trie, stops(), prompt->size(), kMax);
      REQUIRE(c);
      const Reply r = generate(*session, *prompt, **c, kMax);
      INFO(r.text);
      CHECK(r.stop == decode::StopReason::eos);  // the budget closes the call in time
      const ParsedReply p = parse_tool_calls(r.text, f.format);
      REQUIRE(p.calls.size() >= 1);
      CHECK(p.text.empty());
      for (const ToolCall& call : p.calls) {
        INFO(call.name << " " << call.arguments);
        if (run == 2) CHECK(call.name == "search_verses");
        CHECK(validates(call.arguments, tool_named(ts, call.name).parameters));
      }
    }
  }
}

// Leaves the logits to `inner`, except that generated tokens [at, at + forced.size()) are forced
// to `forced`: the model "opens a call" at a chosen point.
struct ForceAt final : decode::LogitsProcessor {
  decode::LogitsProcessor* inner;
  std::size_t prompt, at;
  std::vector<std::int32_t> forced;
  status apply(std::span<float> logits, std::span<const std::int32_t> history) override {
    if (auto st = inner->apply(logits, history); !st) return st;
    const std::size_t k = history.size() - prompt;
    if (k < at || k >= at + forced.size()) return {};
    const auto id = static_cast<std::size_t>(forced[k - at]);
    INFO("forcing token " << id << " at " << k);
    REQUIRE(logits[id] > -std::numeric_limits<float>::infinity());  // the constraint allows it
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (i != id) logits[i] = -std::numeric_limits<float>::infinity();
    return {};
  }
};

TEST_CASE("The lazy constraint: free text untouched, a call opened is held to the schema", "[constrain]") {
  const std::vector<Tool> ts = tools();
  const auto trie = TokenTrie::build(*engine()->tokenizer(), engine()->config().vocab_size);
  REQUIRE(trie);
  constexpr std::size_t kMax = 96;
  for (const Family& f : {kFamilies[0], kFamilies[2]}) {
    INFO(f.fixture);
    const auto prompt = std::make_optional(prompt_ids(render(f.fixture)));
    auto session = Session::create(engine(), {});
    REQUIRE(session);
    REQUIRE(session->set_sampling({.temperature = 0.0f}));
    auto g = ToolCallGrammar::compile(ts, {.format = f.format});
    REQUIRE(g);
    // No trigger: the same tokens as without a constraint.
    auto c = (*g)->start(*trie, stops(), prompt->size(), 0);
    REQUIRE(c);
    GenerateOptions plain;
    plain.max_new_tokens = 8;
    plain.stop_ids = stops();
    auto free_run = session->generate(*prompt, plain);
    REQUIRE(free_run);
    GenerateOptions lazy = plain;
    lazy.logits_processor = c->get();
    auto lazy_run = session->generate(*prompt, lazy);
    REQUIRE(lazy_run);
    CHECK(lazy_run->tokens == free_run->tokens);

    // The model opens a call after 3 tokens of text (Llama 3: at the start), by bytes: the
    // KJV tokenizer has no marker token.
    const std::string trigger = f.format == ToolCallFormat::qwen ? "<tool_call>" : "{";
    auto ids = engine()->tokenizer()->encode(trigger, {.add_special = false, .parse_special = false});
    REQUIRE(ids);
    for (std::uint64_t seed : {1u}) {
      INFO("seed " << seed);
      REQUIRE(session->set_sampling({.temperature = 1.0f, .seed = seed}));
      auto lc = (*g)->start(*trie, stops(), prompt->size(), kMax);
      REQUIRE(lc);
      ForceAt force;
      force.inner = lc->get();
      force.prompt = prompt->size();
      force.at = f.format == ToolCallFormat::qwen ? 3 : 0;
      force.forced = *ids;
      const Reply r = generate(*session, *prompt, **lc, kMax, &force);
      INFO(r.text);
      CHECK(r.stop == decode::StopReason::eos);
      const ParsedReply p = parse_tool_calls(r.text, f.format);
      REQUIRE(p.calls.size() >= 1);
      for (const ToolCall& call : p.calls) {
        INFO(call.arguments);
        CHECK(validates(call.arguments, tool_named(ts, call.name).parameters));
      }
    }
    // A prompt that already opened the call (a reply prefix): the arguments are held from there.
    if (f.format == ToolCallFormat::qwen) {
      const std::string opened = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
      const auto p2 = std::make_optional(prompt_ids(render(f.fixture) + opened));
      REQUIRE(session->set_sampling({.temperature = 0.0f}));
      auto pc = (*g)->start(*trie, stops(), p2->size(), kMax, opened);
      REQUIRE(pc);
      CHECK((*pc)->state_after(*p2)->in_call());
      const Reply r = generate(*session, *p2, **pc, kMax);
      INFO(r.text);
      const ParsedReply p = parse_tool_calls(opened + r.text, f.format);
      REQUIRE(p.calls.size() >= 1);
      CHECK(p.calls[0].name == "get_weather");
      CHECK(validates(p.calls[0].arguments, tool_named(ts, "get_weather").parameters));
      CHECK_FALSE((*g)->start(*trie, stops(), p2->size(), kMax, "<tool_call>\nnope"));
    }
  }
}

TEST_CASE("tool_call_trie keeps special marker tokens as their text", "[constrain]") {
  // The bundled tokenizer's markers are plain bytes: the same tokens as TokenTrie::build.
  auto plain = TokenTrie::build(*engine()->tokenizer(), engine()->config().vocab_size);
  auto tool = tool_call_trie(*engine()->tokenizer(), engine()->config().vocab_size, ToolCallFormat::qwen);
  REQUIRE(plain);
  REQUIRE(tool);
  CHECK((*tool)->size() == (*plain)->size());
  // A vocabulary where "<tool_call>" is one token (as in Qwen's): the trigger completes inside it.
  std::vector<std::pair<std::int32_t, std::string>> vocab = {
      {0, "<tool_call>"}, {1, "\n"}, {2, "{\"name\": \"get_weather\", \"arguments\": "},
      {3, "{\"city\": \"Ur\"}"}, {4, "}"}, {5, "</tool_call>"}, {6, "Hi"}, {7, "x"}};
  auto trie = TokenTrie::from_tokens(9, vocab);
  auto g = ToolCallGrammar::compile(tools(), {.format = ToolCallFormat::qwen});
  REQUIRE(g);
  auto c = (*g)->start(trie, {8}, 0, 0);
  REQUIRE(c);
  const auto allowed = [&](std::vector<std::int32_t> history) {
    auto s = (*c)->state_after(history);
    REQUIRE(s);
    const TokenMask& m = (*c)->mask_for(*s);
    std::vector<std::int32_t> ids;
    for (std::int32_t i = 0; i < 9; ++i)
      if (mask_allows(m, static_cast<std::size_t>(i)) || (i == 8 && s->accepting())) ids.push_back(i);
    return ids;
  };
  CHECK(allowed({6}).size() == 9);  // free text: everything, the stop included
  CHECK(allowed({6, 0}) == std::vector<std::int32_t>{1});
  CHECK(allowed({6, 0, 1}) == std::vector<std::int32_t>{2});
  CHECK(allowed({6, 0, 1, 2}) == std::vector<std::int32_t>{3});
  CHECK(allowed({6, 0, 1, 2, 3, 4, 1}) == std::vector<std::int32_t>{5});
  CHECK(allowed({6, 0, 1, 2, 3, 4, 1, 5}) == std::vector<std::int32_t>{0, 1, 8});
}

}  // namespace test_tool_calls
