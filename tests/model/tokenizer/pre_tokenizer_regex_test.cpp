// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/tokenizer/pre_tokenizer_regex.hpp: the hand-written matchers of the
// Qwen2, Llama-3 and GPT-2 Split regexes against hand-checked vectors and against Python's regex
// module on the whole corpus (tests/data/tokenizer/regex_splits.json).
#include "edgellm/model/tokenizer/pre_tokenizer_regex.hpp"

#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace test_model_tokenizer_pre_tokenizer_regex {

namespace {

namespace json = edgellm::io::json;
namespace tok = edgellm::model::detail::tok;

json::Value load_json(const std::string& name) {
  auto text =
      edgellm::io::read_text_file(edgellm::test::source_dir() + "/tests/data/tokenizer/" + name);
  REQUIRE(text.has_value());
  auto v = json::parse(*text, name);
  REQUIRE(v.has_value());
  return std::move(*v);
}

/// Printable form of a string for failure messages.
std::string show(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s.substr(0, 120)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + (s.size() > 120 ? "\"..." : "\"");
}

}  // namespace

TEST_CASE("pre-tokenizer regexes split like Python's regex module", "[tokenizer]") {
  // formats.md §4.1 vectors for the Qwen2 regex.
  const auto split = [](std::string_view s) { return tok::regex_split(tok::SplitRegex::qwen2, s); };
  using V = std::vector<std::string_view>;
  CHECK(split("Hello world") == V{"Hello", " world"});
  CHECK(split("I'M don't 2024!!") == V{"I", "'M", " don", "'t", " ", "2", "0", "2", "4", "!!"});
  CHECK(split("a   b") == V{"a", "  ", " b"});
  CHECK(split("x\n\n  y") == V{"x", "\n\n", " ", " y"});
  CHECK(split("Hello,world") == V{"Hello", ",world"});
  CHECK(split("  foo  \n") == V{" ", " foo", "  \n"});
  CHECK(split("价格是12元。") == V{"价格是", "1", "2", "元", "。"});
  CHECK(split("end.\n") == V{"end", ".\n"});
  CHECK(split("") == V{});
  CHECK(tok::regex_split(tok::SplitRegex::llama3, "x 2024!") == V{"x", " ", "202", "4", "!"});
  CHECK(tok::regex_split(tok::SplitRegex::gpt2, "I'M 2024 x") == V{"I", "'", "M", " 2024", " x"});

  // Every corpus string against the regex module's findall.
  const json::Value corpus = load_json("corpus.json");
  const json::Value splits = load_json("regex_splits.json");
  const std::pair<const char*, tok::SplitRegex> kinds[] = {{"qwen2", tok::SplitRegex::qwen2},
                                                           {"llama3", tok::SplitRegex::llama3},
                                                           {"gpt2", tok::SplitRegex::gpt2}};
  for (const auto& [name, kind] : kinds) {
    const json::Array& want_all = splits.find(name)->as_array();
    REQUIRE(want_all.size() == corpus.size());
    for (std::size_t i = 0; i < want_all.size(); ++i) {
      const std::string& text = corpus.as_array()[i].as_string();
      INFO(name << " on " << show(text));
      std::vector<std::string> want, got;
      for (const json::Value& p : want_all[i].as_array()) want.push_back(p.as_string());
      for (const std::string_view p : tok::regex_split(kind, text)) got.emplace_back(p);
      CHECK(got == want);
    }
  }
  CHECK(tok::recognize_split_regex(tok::kQwen2Pattern) == tok::SplitRegex::qwen2);
  CHECK(!tok::recognize_split_regex("\\s+"));
}

TEST_CASE("pre-tokenizer regexes: recognised patterns and spans", "[tokenizer]") {
  CHECK(tok::recognize_split_regex(tok::kLlama3Pattern) == tok::SplitRegex::llama3);
  CHECK(tok::recognize_split_regex(tok::kGpt2Pattern) == tok::SplitRegex::gpt2);
  // One character off is another regex.
  std::string almost(tok::kQwen2Pattern);
  almost.back() = '*';
  CHECK(!tok::recognize_split_regex(almost));

  // The matches tile the text: byte spans, contiguous, covering every byte (multi-byte included).
  const std::string_view text = "d\xC3\xA9j\xC3\xA0 vu, 42\n";
  std::vector<tok::Span> spans;
  tok::regex_find_all(tok::SplitRegex::qwen2, text, spans);
  REQUIRE(!spans.empty());
  std::size_t at = 0;
  for (const tok::Span& s : spans) {
    CHECK(s.begin == at);
    CHECK(s.end > s.begin);
    at = s.end;
  }
  CHECK(at == text.size());
  // regex_find_all appends.
  tok::regex_find_all(tok::SplitRegex::qwen2, "x", spans);
  CHECK(spans.back().begin == 0);
  CHECK(spans.back().end == 1);
}

}  // namespace test_model_tokenizer_pre_tokenizer_regex
