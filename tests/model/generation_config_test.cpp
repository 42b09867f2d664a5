// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/generation_config.hpp: the sampling defaults of generation_config.json
// (set keys only), eos ids as an int or a list, errors naming the file and the key, and a
// directory without the file giving no defaults.
#include "edgellm/model/generation_config.hpp"

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace test_model_generation_config {

namespace {

using Catch::Matchers::Contains;
using edgellm::errc;
using edgellm::model::GenerationConfig;
using edgellm::model::load_generation_config;
using edgellm::model::parse_generation_config;
using edgellm::test::TempDir;

// Qwen2.5-7B-Instruct's generation_config.json.
constexpr const char* kQwen25 = R"({
  "bos_token_id": 151643,
  "pad_token_id": 151643,
  "do_sample": true,
  "eos_token_id": [151645, 151643],
  "repetition_penalty": 1.05,
  "temperature": 0.7,
  "top_p": 0.8,
  "top_k": 20,
  "transformers_version": "4.37.0"
})";

edgellm::result<GenerationConfig> parse(const std::string& text) {
  auto json = edgellm::io::json::parse(text, "g.json");
  REQUIRE(json.has_value());
  return parse_generation_config(*json, "g.json");
}

std::string error_of(const std::string& text) {
  auto g = parse(text);
  REQUIRE_FALSE(g.has_value());
  CHECK(g.error().code == errc::format_error);
  return g.error().message;
}

}  // namespace

TEST_CASE("generation_config: a real file's sampling defaults and eos list", "[model]") {
  auto g = parse(kQwen25);
  REQUIRE(g.has_value());
  CHECK(g->source == "g.json");
  CHECK(g->do_sample == true);
  CHECK(g->temperature == 0.7f);
  CHECK(g->top_k == std::size_t{20});
  CHECK(g->top_p == 0.8f);
  CHECK_FALSE(g->min_p.has_value());
  CHECK(g->repetition_penalty == 1.05f);
  CHECK(g->eos_token_ids == std::vector<std::int32_t>{151645, 151643});
  CHECK_FALSE(g->empty());
  CHECK(describe(*g) ==
        "do_sample true, temperature 0.7, top_k 20, top_p 0.8, repetition_penalty 1.05, "
        "eos 151645,151643");
}

TEST_CASE("generation_config: unset, null and unknown keys set nothing", "[model]") {
  auto g = parse(R"({"eos_token_id": 2, "top_k": null, "max_new_tokens": 512, "foo": [1]})");
  REQUIRE(g.has_value());
  CHECK(g->eos_token_ids == std::vector<std::int32_t>{2});
  CHECK_FALSE(g->top_k.has_value());
  CHECK_FALSE(g->temperature.has_value());
  CHECK_FALSE(g->do_sample.has_value());
  CHECK(describe(*g) == "eos 2");

  auto e = parse("{}");
  REQUIRE(e.has_value());
  CHECK(e->empty());
  CHECK(describe(*e).empty());

  // min_p and do_sample false; an integral top_k written as a double.
  auto m = parse(R"({"do_sample": false, "min_p": 0.05, "top_k": 40.0, "temperature": 0})");
  REQUIRE(m.has_value());
  CHECK(m->do_sample == false);
  CHECK(m->min_p == 0.05f);
  CHECK(m->top_k == std::size_t{40});
  CHECK(m->temperature == 0.0f);
}

TEST_CASE("generation_config: wrong types and ranges name the file and the key", "[model]") {
  CHECK_THAT(error_of(R"({"temperature": "0.7"})"),
             Contains("g.json: key 'temperature': expected a number, got \"0.7\""));
  CHECK_THAT(error_of(R"({"do_sample": 1})"), Contains("g.json: key 'do_sample': expected true or false"));
  CHECK_THAT(error_of(R"({"top_k": 2.5})"), Contains("g.json: key 'top_k': expected an integer"));
  CHECK_THAT(error_of(R"({"top_k": -1})"), Contains("g.json: key 'top_k': must be in [0, "));
  CHECK_THAT(error_of(R"({"top_p": 0})"), Contains("g.json: key 'top_p': must be in (0, 1], got 0"));
  CHECK_THAT(error_of(R"({"top_p": 1.5})"), Contains("key 'top_p': must be in (0, 1]"));
  CHECK_THAT(error_of(R"({"min_p": 1})"), Contains("key 'min_p': must be in [0, 1)"));
  CHECK_THAT(error_of(R"({"temperature": -0.1})"), Contains("key 'temperature': must be in [0, inf)"));
  CHECK_THAT(error_of(R"({"repetition_penalty": 0})"),
             Contains("key 'repetition_penalty': must be in (0, inf)"));
  // Finite as a double, out of range once read as the sampler's float.
  CHECK_THAT(error_of(R"({"temperature": 1e308})"),
             Contains("g.json: key 'temperature': must be in [0, inf) as a 32-bit float, got 1e"));
  CHECK_THAT(error_of(R"({"repetition_penalty": 1e39})"),
             Contains("key 'repetition_penalty': must be in (0, inf) as a 32-bit float"));
  CHECK_THAT(error_of(R"({"min_p": 0.999999999})"),
             Contains("key 'min_p': must be in [0, 1) as a 32-bit float"));
  CHECK_THAT(error_of(R"({"eos_token_id": "2"})"),
             Contains("g.json: key 'eos_token_id': expected a token id or a list of token ids"));
  CHECK_THAT(error_of(R"({"eos_token_id": [2, "x"]})"), Contains("key 'eos_token_id'"));
  CHECK_THAT(error_of(R"({"eos_token_id": -5})"), Contains("key 'eos_token_id': token id -5"));
  CHECK_THAT(error_of("[1, 2]"), Contains("g.json: must be a JSON object"));
}

TEST_CASE("generation_config: load_generation_config reads a checkpoint directory", "[model]") {
  TempDir dir;
  // No file: no defaults, not an error.
  auto none = load_generation_config(dir.str());
  REQUIRE(none.has_value());
  CHECK(none->empty());
  CHECK(none->source.empty());

  const std::string path = dir.write("generation_config.json", kQwen25);
  auto g = load_generation_config(dir.str());
  REQUIRE(g.has_value());
  CHECK(g->source == path);
  CHECK(g->top_k == std::size_t{20});

  dir.write("generation_config.json", R"({"top_p": "high"})");
  auto bad = load_generation_config(dir.str());
  REQUIRE_FALSE(bad.has_value());
  CHECK_THAT(bad.error().message, Contains(path + ": key 'top_p': expected a number"));

  dir.write("generation_config.json", R"({"top_p": 0.9,)");
  auto broken = load_generation_config(dir.str());
  REQUIRE_FALSE(broken.has_value());
  CHECK_THAT(broken.error().message, Contains(path + ": at byte"));

  // A directory where the file should be: an error naming it, not "no defaults".
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  auto dir_there = load_generation_config(dir.str());
  REQUIRE_FALSE(dir_there.has_value());
  CHECK_THAT(dir_there.error().message, Contains(path));
}

}  // namespace test_model_generation_config
